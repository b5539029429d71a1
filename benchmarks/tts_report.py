"""The time-to-solve suite's table and plot, from one or more of its JSON files (partial runs combine).

Per (task, system): median seconds to threshold over the seeds that solved, its IQR, the solved
fraction within the cap, and the median env steps at the solve. Unsolved seeds count in the
fraction only (their time is "more than the cap").
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path
from typing import Any

from tts_tasks import SYSTEMS, TASKS


def load_runs(paths: list[Path]) -> list[dict[str, Any]]:
    """Every run record in ``paths`` (the suite's JSON files), in order."""
    runs: list[dict[str, Any]] = []
    for path in paths:
        data = json.loads(path.read_text())
        runs.extend(data.get("runs", []))
    return runs


def quartiles(values: list[float]) -> tuple[float, float, float]:
    """(q1, median, q3); one value: that value three times."""
    if len(values) == 1:
        return values[0], values[0], values[0]
    q1, q2, q3 = statistics.quantiles(values, n=4, method="inclusive")
    return q1, q2, q3


def _order(runs: list[dict[str, Any]]) -> list[tuple[str, str]]:
    tasks = [t for t in TASKS if any(r["task"] == t for r in runs)]
    tasks += sorted({r["task"] for r in runs} - set(tasks))
    systems = [s for s in SYSTEMS if any(r["system"] == s for r in runs)]
    return [(t, s) for t in tasks for s in systems if any(r["task"] == t and r["system"] == s for r in runs)]


def table(runs: list[dict[str, Any]]) -> str:
    """The markdown table: one row per (task, system) that has runs."""
    lines = ["| task | system | median s to threshold | IQR (s) | solved | median env steps at solve |",
             "| --- | --- | ---: | ---: | ---: | ---: |"]
    for task, system in _order(runs):
        cell = [r for r in runs if r["task"] == task and r["system"] == system]
        solved = [r for r in cell if r["solved"] and r["time_s"] is not None]
        fraction = f"{len(solved)}/{len(cell)}"
        if not solved:
            lines.append(f"| {task} | {system} | - | - | {fraction} | - |")
            continue
        q1, median, q3 = quartiles(sorted(r["time_s"] for r in solved))
        steps = [r["env_steps"] for r in solved if r["env_steps"] is not None]
        median_steps = f"{statistics.median(steps):,.0f}" if steps else "-"
        lines.append(f"| {task} | {system} | {median:.1f} | {q1:.1f}-{q3:.1f} | {fraction} | {median_steps} |")
    return "\n".join(lines)


def plot(runs: list[dict[str, Any]], path: Path) -> None:
    """Seconds to threshold per task and system, one dot per solved seed (x: unsolved), log scale."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cells = _order(runs)
    tasks = list(dict.fromkeys(t for t, _ in cells))
    systems = list(dict.fromkeys(s for _, s in cells))
    fig, axes = plt.subplots(1, len(tasks), figsize=(max(3.2 * len(tasks), 5.5), 3.8), squeeze=False)
    for ax, task in zip(axes[0], tasks):
        for i, system in enumerate(systems):
            cell = [r for r in runs if r["task"] == task and r["system"] == system]
            times = [r["time_s"] for r in cell if r["solved"] and r["time_s"] is not None]
            misses = [r["wall_s"] for r in cell if not r["solved"]]
            ax.scatter([i] * len(times), times, s=18, color=f"C{i}")
            ax.scatter([i] * len(misses), misses, s=24, marker="x", color="grey")
            if times:
                ax.hlines(statistics.median(times), i - 0.3, i + 0.3, color=f"C{i}")
        ax.set_yscale("log")
        ax.set_xticks(range(len(systems)), systems, rotation=30)
        ax.set_title(task, fontsize=9)
        ax.grid(axis="y", which="both", alpha=0.3)
    axes[0][0].set_ylabel("seconds, command to threshold")
    fig.suptitle("Time to solve: a dot per seed, the line its median, x unsolved (at its end)", fontsize=9)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
