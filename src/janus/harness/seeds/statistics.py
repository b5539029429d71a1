"""Aggregate statistics of a multi-seed run (``janus train --seeds``), as pure functions.

The seeds are the samples. Following rliable (Agarwal et al., 2021, "Deep RL at the Edge of the
Statistical Precipice"): the interquartile mean (IQM, the mean of the middle 50% of the runs) is
reported beside the mean and median, each with a percentile-bootstrap 95% confidence interval.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

BOOTSTRAP_RESAMPLES = 2000
BOOTSTRAP_SEED = 0
"""A fixed RNG seed: the same runs give the same confidence intervals."""
CONFIDENCE = 0.95
GRID_POINTS = 100
Values = Sequence[float] | np.ndarray


def iqm(values: Values) -> float:
    """The interquartile mean: the mean of what is left once a quarter is cut from each end of the
    sorted values (``int(n / 4)`` each side, as ``scipy.stats.trim_mean(x, 0.25)``, which rliable uses)."""
    x = np.sort(np.asarray(values, dtype=float))
    if x.size == 0:
        raise ValueError("iqm of no values: give at least one")
    cut = int(0.25 * x.size)
    return float(x[cut:x.size - cut].mean())


STATISTICS: dict[str, Callable[[np.ndarray], float]] = {
    "mean": lambda x: float(np.mean(x)),
    "median": lambda x: float(np.median(x)),
    "iqm": iqm,
}
"""The aggregate statistics of the final return, by the name aggregate.json gives them."""


def bootstrap_ci(values: Values, statistic: Callable[[np.ndarray], float],
                 resamples: int = BOOTSTRAP_RESAMPLES, confidence: float = CONFIDENCE,
                 seed: int = BOOTSTRAP_SEED) -> tuple[float, float]:
    """The percentile-bootstrap ``confidence`` interval of ``statistic`` over ``values``: the values
    are resampled with replacement ``resamples`` times (a fixed ``seed``) and the interval is the
    middle ``confidence`` of the statistic over the resamples. One value: the interval is that value."""
    x = np.asarray(values, dtype=float)
    if x.size == 0:
        raise ValueError("bootstrap_ci of no values: give at least one")
    if not 0 < confidence < 1:
        raise ValueError(f"invalid confidence: got {confidence!r}; accepted: a number between 0 and 1")
    rng = np.random.default_rng(seed)
    picks = x[rng.integers(0, x.size, size=(resamples, x.size))]
    estimates = np.array([statistic(row) for row in picks])
    tail = (1 - confidence) / 2 * 100
    low, high = np.percentile(estimates, [tail, 100 - tail])
    return float(low), float(high)


def aggregate(values: Values, resamples: int = BOOTSTRAP_RESAMPLES) -> dict[str, dict[str, Any]]:
    """Each statistic of :data:`STATISTICS` over ``values``: ``{"estimate": ..., "ci95": [low, high]}``."""
    x = np.asarray(values, dtype=float)
    return {name: {"estimate": stat(x), "ci95": list(bootstrap_ci(x, stat, resamples))} for name, stat in STATISTICS.items()}


MIN_SEEDS_FOR_CI = 5
"""Below this many seeds a bootstrap CI is printed with a warning: it cannot say much beyond the values themselves."""
CI_METHOD = ("percentile bootstrap: the seeds' final returns resampled with replacement {resamples:,} times "
             "(fixed RNG seed {seed}); the 95% CI is the middle 95% of the statistic over the resamples")


def caveats(values: Values, aggregated: dict[str, dict[str, Any]]) -> list[str]:
    """What the statistics of :func:`aggregate` over ``values`` cannot show, in plain words: fewer
    than :data:`MIN_SEEDS_FOR_CI` seeds, an IQM that trims nothing (fewer than 4 seeds: it is the
    mean) and a "95% CI" that is only the values' [min, max]."""
    x = np.asarray(values, dtype=float)
    n, notes = int(x.size), list[str]()
    if n == 0:
        return notes
    if n < MIN_SEEDS_FOR_CI:
        notes.append(f"WARNING: {n} seed{'s' if n != 1 else ''}: below {MIN_SEEDS_FOR_CI} seeds these 95% CIs are not "
                     f"meaningful (a bootstrap over {n} value{'s' if n != 1 else ''} cannot reach past them); "
                     f"run {MIN_SEEDS_FOR_CI} or more seeds to compare")
    if int(0.25 * n) == 0 and n > 1:
        notes.append(f"IQM = mean: with {n} seeds the interquartile mean trims int({n}/4) = 0 values from each end, "
                     f"so it is the mean over {n} values")
    low, high = float(x.min()), float(x.max())
    same = [name for name, s in aggregated.items()
            if n > 1 and np.isclose(s["ci95"][0], low) and np.isclose(s["ci95"][1], high)]
    if same:
        notes.append(f"the 95% CI of the {', '.join(same)} is just [min, max] of the {n} seeds' returns "
                     f"([{low:.1f}, {high:.1f}]): too few seeds for the bootstrap to narrow it")
    return notes


def moving_mean(values: Values, window: int) -> np.ndarray:
    """The mean of the last ``window`` values at each index (fewer at the start)."""
    x = np.asarray(values, dtype=float)
    sums = np.cumsum(x)
    sums[window:] = sums[window:] - sums[:-window]
    return sums / np.minimum(np.arange(1, x.size + 1), window)


def curves_on_grid(curves: Sequence[tuple[Values, Values]],
                   points: int = GRID_POINTS) -> tuple[np.ndarray, np.ndarray]:
    """Curves ``(env_steps, values)`` of different seeds, each interpolated linearly onto one common
    env-step grid: ``points`` steps evenly spaced over the range every curve covers (from the
    latest first point to the earliest last one, so no curve is extrapolated).

    Returns ``(grid, on_grid)``, ``on_grid`` one row per curve. A curve with no points, or curves
    with no common range, are a :class:`ValueError`."""
    if not curves or any(len(steps) == 0 or len(steps) != len(values) for steps, values in curves):
        raise ValueError("curves_on_grid: every curve needs one value per env step, and at least one point")
    start = max(float(steps[0]) for steps, _ in curves)
    stop = min(float(steps[-1]) for steps, _ in curves)
    if stop < start:
        raise ValueError(f"curves_on_grid: the curves share no env-step range (latest start {start:g}, "
                          f"earliest end {stop:g})")
    grid = np.linspace(start, stop, points if stop > start else 1)
    rows = [np.interp(grid, np.asarray(steps, dtype=float), np.asarray(values, dtype=float)) for steps, values in curves]
    return grid, np.vstack(rows)


def iqm_per_column(on_grid: np.ndarray) -> np.ndarray:
    """The IQM across seeds (rows) at each grid point (column)."""
    return np.array([iqm(on_grid[:, j]) for j in range(on_grid.shape[1])])
