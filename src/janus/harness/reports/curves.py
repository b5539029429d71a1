"""learning_curve.png: episode returns, their moving mean and the periodic evaluations of RL runs,
against env steps and against wall time."""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

from janus import fileio

CURVE_WINDOW = 20
"""Episodes in the moving mean of the learning curve (and of ``final_mean_return``)."""


def wrapped(title: str, width: int) -> str:
    """``title`` broken into lines of at most ``width`` characters (a long command is wrapped, not clipped)."""
    return "\n".join(textwrap.wrap(title, width, break_long_words=True, break_on_hyphens=False)) or title


def write_learning_curve(path: str | Path, runs: list[dict[str, Any]]) -> Path | None:
    """Episode return vs env steps and vs wall time for runs that have a learning curve.

    Each episode is a faint dot at the env step (wall time) it finished; the line is the mean of
    the last :data:`CURVE_WINDOW` episodes; periodic evaluations are markers with a ±1 std band.
    Returns ``None`` (nothing written) without curves.
    """
    fig = learning_curve_figure(runs)
    if fig is None:
        return None
    path = Path(path)
    fileio.save_figure(fig, path, dpi=110)  # atomic, never through a symlink
    return path


def learning_curve_figure(runs: list[dict[str, Any]], by_wall_time: bool = True) -> Any:
    """The matplotlib Figure of :func:`write_learning_curve` (None without curves); without
    ``by_wall_time``, the return-vs-env-steps panel alone (a train run's chart.png)."""
    curves = [r for r in runs if r.get("learning_curve")]
    if not curves:
        return None
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(12, 5.2) if by_wall_time else (7.5, 5.2))
    FigureCanvasAgg(fig)
    by_steps = fig.add_subplot(1, 2 if by_wall_time else 1, 1)
    by_time = fig.add_subplot(1, 2, 2) if by_wall_time else None
    for k, run in enumerate(curves):
        c, color = run["learning_curve"], f"C{k % 10}"
        workload = run["config"]["workload"]
        label = f"{run['name']} ({workload['algo']} {workload.get('env', '')})"
        smooth = moving_mean(c["return"], CURVE_WINDOW)
        for ax, x in ((by_steps, c["env_steps"]), (by_time, c["wall_s"])):
            if ax is None:
                continue
            ax.scatter(x, c["return"], s=6, alpha=0.25, color=color, linewidths=0,
                       label="each episode" if k == 0 else None)
            ax.plot(x, smooth, color=color, label=f"{label}: mean of last {CURVE_WINDOW}")
        _plot_evaluations(by_steps, by_time, run.get("evaluations") or [], color, label)
    by_steps.set(xlabel="environment steps", ylabel="episode return",
                 title=f"return vs env steps (line: {CURVE_WINDOW}-episode moving mean)")
    if by_time is not None:
        by_time.set(xlabel="wall time (s)", ylabel="episode return",
                    title=f"return vs wall time (line: {CURVE_WINDOW}-episode moving mean)")
    for ax in (by_steps, by_time) if by_time is not None else (by_steps,):
        ax.grid(alpha=0.3)
        # below the axes: a legend inside sat on the curve wherever "best" put it
        ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.14), ncol=2, frameon=False)
    fig.tight_layout()
    return fig


def _plot_evaluations(by_steps: Any, by_time: Any, evaluations: list[dict[str, Any]], color: str, label: str) -> None:
    """Evaluation mean returns as markers joined by a dashed line, with a ±1 std band."""
    if not evaluations:
        return
    mean = [float(e["mean_return"]) for e in evaluations]
    std = [float(e.get("std_return", 0.0)) for e in evaluations]
    low, high = [m - s for m, s in zip(mean, std, strict=True)], [m + s for m, s in zip(mean, std, strict=True)]
    axes: list[tuple[Any, list[float]]] = [(by_steps, [float(e["env_steps"]) for e in evaluations])]
    if by_time is not None and all("wall_s" in e for e in evaluations):
        axes.append((by_time, [float(e["wall_s"]) for e in evaluations]))
    for ax, x in axes:
        ax.fill_between(x, low, high, color=color, alpha=0.15, linewidth=0)
        ax.plot(x, mean, color=color, marker="o", markersize=5, linestyle="--", linewidth=1,
                label=f"{label}: evaluation mean ± std")


def moving_mean(values: list[float], window: int) -> list[float]:
    """The mean of the last ``window`` values at each index (fewer at the start)."""
    out, total = [], 0.0
    for i, v in enumerate(values):
        total += v
        if i >= window:
            total -= values[i - window]
        out.append(total / min(i + 1, window))
    return out
