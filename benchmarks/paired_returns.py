"""Returns of two sides over the same seeds, with their spread and a paired test: rl_peers.py's output.

Reads the ``rows`` of one or more ``benchmarks/rl_peers.py --json`` files and compares two sides
per metric (``final_return``: the mean of the last 20 training episodes; ``eval_return``: 10 greedy
episodes after training), seed by seed. A side is a library (``janus``, ``sb3``) or ``FILE:LIB``
(the rows of one file only: janus before and after a change, both from their own files). Printed
per side: mean, median, interquartile range and a bootstrap 95% interval of the mean; per pair:
the mean paired difference, its bootstrap interval, and the two-sided p of an exact sign-flip
(permutation) test of "the per-seed differences are symmetric around 0". numpy only.

    .venv/bin/python benchmarks/paired_returns.py runs/ppo_gap.json                       # janus vs sb3
    .venv/bin/python benchmarks/paired_returns.py runs/before.json runs/after.json \\
        --sides runs/after.json:janus runs/before.json:janus                              # after vs before
"""

from __future__ import annotations

import argparse
import json
from typing import Any

import numpy as np

METRICS = ("eval_return", "final_return")
RESAMPLES = 10_000


def load_rows(paths: list[str]) -> list[dict[str, Any]]:
    """Every row of the files, each tagged with the file it came from (``source``)."""
    rows = []
    for path in paths:
        with open(path) as f:
            rows += [{**row, "source": path} for row in json.load(f)["rows"]]
    return rows


def side_values(rows: list[dict[str, Any]], side: str, algo: str, metric: str) -> dict[int, float]:
    """``{seed: value}`` of one side: ``LIB`` or ``FILE:LIB``; a seed twice on a side is an error."""
    source, _, lib = side.rpartition(":")
    out: dict[int, float] = {}
    for row in rows:
        if row["lib"] == lib and row["algo"] == algo and (not source or row["source"] == source):
            if row["seed"] in out:
                raise SystemExit(f"seed {row['seed']} appears twice for side {side!r}: name the file (FILE:LIB)")
            out[row["seed"]] = float(row[metric])
    return out


def bootstrap_mean_ci(x: np.ndarray, rng: np.random.Generator, level: float = 0.95) -> tuple[float, float]:
    """Percentile bootstrap interval of the mean of ``x``."""
    means = rng.choice(x, size=(RESAMPLES, len(x)), replace=True).mean(axis=1)
    return float(np.quantile(means, (1 - level) / 2)), float(np.quantile(means, (1 + level) / 2))


def sign_flip_p(diff: np.ndarray) -> float:
    """Two-sided p of the exact paired permutation test: every sign pattern of the differences
    (2**n of them; n <= 24), the fraction whose |sum| is at least the observed one."""
    n = len(diff)
    if n > 24:
        raise SystemExit(f"the exact sign-flip test enumerates 2**n patterns: n={n} is too many")
    observed, extreme = abs(diff.sum()), 0
    bits = np.arange(n)
    for start in range(0, 2**n, 2**16):  # patterns in chunks: 2**16 x n at a time
        patterns = np.arange(start, min(start + 2**16, 2**n))[:, None] >> bits & 1
        sums = (1 - 2 * patterns) @ diff
        extreme += int(np.count_nonzero(np.abs(sums) >= observed - 1e-9))
    return extreme / 2**n


def describe(x: np.ndarray, rng: np.random.Generator) -> str:
    q1, median, q3 = np.quantile(x, (0.25, 0.5, 0.75))
    low, high = bootstrap_mean_ci(x, rng)
    return f"mean {x.mean():6.1f} [{low:6.1f}, {high:6.1f}]  median {median:6.1f}  IQR {q1:6.1f}-{q3:6.1f}"


def compare(rows: list[dict[str, Any]], a: str, b: str, algo: str, seed: int) -> dict[str, Any]:
    """Print and return, per metric, both sides' figures and the paired ``a - b`` difference."""
    out: dict[str, Any] = {}
    for metric in METRICS:
        va, vb = side_values(rows, a, algo, metric), side_values(rows, b, algo, metric)
        seeds = sorted(set(va) & set(vb))
        if not seeds:
            raise SystemExit(f"no seed has both {a!r} and {b!r} for {algo}")
        xa, xb = np.array([va[s] for s in seeds]), np.array([vb[s] for s in seeds])
        rng = np.random.default_rng(seed)
        diff = xa - xb
        low, high = bootstrap_mean_ci(diff, rng)
        p = sign_flip_p(diff)
        print(f"{algo} {metric} over {len(seeds)} seeds {seeds}")
        print(f"  {a:>28s}: {describe(xa, rng)}")
        print(f"  {b:>28s}: {describe(xb, rng)}")
        print(f"  {'paired difference':>28s}: mean {diff.mean():+6.1f} [{low:+6.1f}, {high:+6.1f}]  "
              f"wins {int((diff > 0).sum())}, ties {int((diff == 0).sum())}, losses {int((diff < 0).sum())}  "
              f"sign-flip p = {p:.3f}")
        out[metric] = {"seeds": seeds, a: xa.tolist(), b: xb.tolist(), "mean_diff": float(diff.mean()),
                       "diff_ci95": [low, high], "p_sign_flip": p}
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="+", help="rl_peers.py --json outputs")
    parser.add_argument("--sides", nargs=2, default=["janus", "sb3"], metavar=("A", "B"),
                        help="the two sides, LIB or FILE:LIB (default: janus sb3); differences are A - B")
    parser.add_argument("--algo", default="ppo")
    parser.add_argument("--seed", type=int, default=0, help="of the bootstrap's resampling")
    args = parser.parse_args()
    compare(load_rows(args.files), *args.sides, algo=args.algo, seed=args.seed)


if __name__ == "__main__":
    main()
