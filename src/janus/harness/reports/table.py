"""Reporting: turn measured runs into a table, ``results.json``, ``results.csv`` and ``chart.png``.

A *run* is a :class:`~janus.result.RunResult` (fresh from the runtime) or its dict (loaded from
``results.json``, as :meth:`~janus.result.RunResult.to_dict` wrote it)::

    {"name": str, "config": {...}, "samples_per_s": float, "env_steps_per_s": float,
     "wall_s": float, "stage_s": {"rollout", "collect", "select", "update",
     "learner_wait", "actor_blocked": seconds}, "counts": {...}}

Nothing here mutates the runs given; :func:`annotate` returns annotated copies.
"""

from __future__ import annotations

import copy
import csv
import json
import math
import os
import platform
import re
from collections.abc import Iterable
from datetime import datetime
from pathlib import Path
from typing import Any

from janus import fileio
from janus.harness.experiments.repeats import spread_notes, sps_range
from janus.harness.reports.curves import CURVE_WINDOW, learning_curve_figure, moving_mean, wrapped
from janus.result import RunResult, as_dict, env_steps_rate

WORK_STAGES = ("rollout", "collect", "select", "update")
"""Stages that do work; with perfect overlap only the slowest of them remains."""
STAGES = WORK_STAGES + ("learner_wait", "actor_blocked")
"""Every stage time a run reports (the last two are waiting, not work)."""
CSV_KNOBS = ("placement", "overlap_collect", "overlap_select", "g_collect", "g_select",
             "is_on_policy", "batch_size", "minibatch_size")
"""Config knobs copied into ``results.csv`` (empty where the run does not read one: ``batch_size``
on-policy; ``minibatch_size`` is the transitions of each learner batch of every run)."""


def _div(num: float, den: float) -> float | None:
    """``num / den``, or ``None`` when the denominator is not positive."""
    return num / den if den > 0 else None


def _f(value: Any) -> float:
    """A finite float; missing, None, NaN and infinite values count as 0."""
    try:
        value = float(value or 0.0)
    except (TypeError, ValueError):
        return 0.0
    return value if math.isfinite(value) else 0.0


def _stage(run: dict[str, Any], name: str) -> float:
    return _f((run.get("stage_s") or {}).get(name))


def ideal_bound(run: dict[str, Any]) -> dict[str, Any]:
    """Perfect-overlap analysis of one run, with R, C, S, U its rollout/collect/select/update times.

    - ``serial_s = R + C + S + U``: every stage one after another in one thread;
    - ``bound_s = max(R, C, S, U)``: with perfect overlap only the slowest stage (the
      ``bottleneck``) remains: the pipeline bound;
    - ``ideal_speedup = serial_s / bound_s``: the most overlap can give;
    - ``achieved_speedup = serial_s / wall_s``: what overlap gave in this run;
    - ``efficiency = bound_s / wall_s = achieved / ideal``: how close the run came to the bound,
      in (0, 1] when ``wall_s >= bound_s`` (above 1 only if stage clocks overlap each other).

    Ratios whose denominator is zero are ``None``. Waiting times (learner_wait, actor_blocked)
    are not work and are not part of either sum.
    """
    times = {name: _stage(run, name) for name in WORK_STAGES}
    serial = sum(times.values())
    bottleneck = max(times, key=times.__getitem__)
    bound = times[bottleneck]
    wall = _f(run.get("wall_s"))
    return {
        "serial_s": serial,
        "bound_s": bound,
        "bottleneck": bottleneck if bound > 0 else None,
        "ideal_speedup": _div(serial, bound),
        "achieved_speedup": _div(serial, wall),
        "efficiency": _div(bound, wall),
    }


def annotate(runs: Iterable[RunResult | dict[str, Any]], baseline: str = "baseline") -> list[dict[str, Any]]:
    """Copies of ``runs`` with ``ideal`` (see :func:`ideal_bound`) and ``speedup_vs_baseline``.

    ``speedup_vs_baseline = samples_per_s / samples_per_s of the run named `baseline```; ``None``
    when no run has that name (or its throughput is zero).
    """
    out = [copy.deepcopy(as_dict(run)) for run in runs]
    base = next((r for r in out if r.get("name") == baseline), None)
    base_sps = _f(base.get("samples_per_s")) if base else 0.0
    for run in out:
        run["ideal"] = ideal_bound(run)
        run["speedup_vs_baseline"] = _div(_f(run.get("samples_per_s")), base_sps)
    return out


def _x(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}x"


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.0f}%"


def _rate(value: Any) -> str:
    value = _f(value)
    return f"{value:,.0f}" if value >= 100 else f"{value:.1f}"


COLUMNS = ("config", "samples/s", "env-steps/s", "wall", "rollout", "collect", "select", "update",
           "l.wait", "blocked", "speedup", "ideal", "eff")


def format_table(runs: Iterable[dict[str, Any]], baseline: str = "baseline") -> str:
    """Fixed-width plain-text table, one row per run, with a legend below. Configurations that
    ran several times (see :mod:`janus.harness.experiments.repeats`) show their median run and a ``range``
    column (min-max samples/s), and the legend says which differences are within that range."""
    rows, beyond = [], False
    annotated = annotate(runs, baseline)
    ranged = any(sps_range(r) is not None for r in annotated)
    columns: tuple[str, ...] = COLUMNS[:2] + ("range",) + COLUMNS[2:] if ranged else COLUMNS
    returns = any(r.get("final_mean_return") is not None for r in annotated)  # real training: return beside speed
    if returns:
        columns = columns + ("return",)
    for run in annotated:
        ideal = run["ideal"]
        speedup, most = run["speedup_vs_baseline"], ideal["ideal_speedup"]
        beyond = beyond or (speedup is not None and most is not None and speedup > most * 1.05)
        span = sps_range(run)
        rows.append([
            str(run.get("name", "?")), _rate(run.get("samples_per_s")),
            *(([f"{_rate(span[0])}-{_rate(span[1])}" if span else "-"]) if ranged else []),
            _rate(env_steps_rate(run)), f"{_f(run.get('wall_s')):.2f}",
            *(f"{_stage(run, s):.2f}" for s in STAGES),
            _x(run["speedup_vs_baseline"]), _x(ideal["ideal_speedup"]), _pct(ideal["efficiency"]),
            *([_return(run.get("final_mean_return"))] if returns else []),
        ])
    widths = [max([len(h)] + [len(r[i]) for r in rows]) for i, h in enumerate(columns)]

    def line(cells: list[str] | tuple[str, ...]) -> str:
        first = cells[0].ljust(widths[0])
        return "  ".join([first] + [c.rjust(w) for c, w in zip(cells[1:], widths[1:], strict=False)]).rstrip()

    rule = "-" * len(line(list(columns)))
    legend = ("samples/s: transitions the learner trained on per second; env-steps/s: transitions the actors produced\n"
              "per second (the synthetic workload's actors step a simulated env); times in s (l.wait: learner waiting\n"
              "for data, blocked: actors blocked)\n"
              f"speedup: samples/s vs '{baseline}'; ideal = serial/bound; eff = bound/wall"
              + ("; return: mean of the last 20 training episodes" if returns else ""))
    if ranged:
        counts = sorted({len(r["repeats"]["samples_per_s"]) for r in annotated if r.get("repeats")})
        legend += (f"\neach configuration ran {'/'.join(map(str, counts))} times, interleaved: the row is its median "
                   "run (by samples/s), range its min-max samples/s")
        legend += "".join("\n" + note for note in spread_notes(annotated))
    base = next((r for r in annotated if r.get("name") == baseline), None)
    if beyond and base is not None and _f(base.get("wall_s")) > 0:
        legend += "\n" + _beyond_ideal_note(baseline, base["ideal"]["serial_s"] / _f(base["wall_s"]), base)
    work = work_note(annotated)
    return "\n".join([line(columns), rule, *(line(r) for r in rows), rule, legend, *([work] if work else [])])


def _work(run: dict[str, Any]) -> tuple[int, int] | None:
    """``(env steps, updates)`` of ``run`` (None for a result that does not count env steps)."""
    counts = run.get("counts") or {}
    if "env_steps" not in counts or "updates" not in counts:
        return None
    return int(counts["env_steps"]), int(counts["updates"])


def work_note(runs: Iterable[dict[str, Any]]) -> str:
    """The work each run did (env steps, learner updates): one line where every run did the same,
    else a loud note naming each run's, since rates of unequal work do not compare."""
    work = [(str(r.get("name", "?")), _work(r)) for r in runs]
    counted = [(name, w) for name, w in work if w is not None]
    if not counted:
        return ""
    if len({w for _, w in counted}) == 1 and len(counted) == len(work):
        steps, updates = counted[0][1]
        every = "every configuration" if len(counted) > 1 else "the run"
        return f"work: {every} took {steps:,} env steps and trained {updates:,} updates"
    each = "; ".join(f"{name} {w[0]:,} env steps, {w[1]:,} updates" if w else f"{name} not counted" for name, w in work)
    return f"WARNING: the configurations did NOT do the same work, so their rates do not compare: {each}"


def _return(value: Any) -> str:
    return "-" if value is None else f"{_f(value):.1f}"


def _beyond_ideal_note(baseline: str, staged: float, base: dict[str, Any] | None = None) -> str:
    """Why a speedup can beat its ideal, from the share ``staged`` of the baseline's wall spent in
    its four stages: below 1, time outside them (hand-offs); above 1, the baseline overlapped them.
    A baseline on the synchronous loop (``base``'s ``runtime.loop``) with several actors: they take
    turns there (its rollout stage is their sum) and roll out side by side in the others."""
    actors = int(((base or {}).get("config") or {}).get("workload", {}).get("num_actors", 1) or 1)
    if (base or {}).get("runtime", {}).get("loop") == "synchronous" and actors > 1 and staged >= 0.9:
        return (f"a speedup above its ideal: '{baseline}' ran the synchronous loop, its {actors} actors taking turns "
                "(rollout: their sum); elsewhere they roll out side by side, which a speedup counts and ideal "
                "(each run's own stage times, rollout: the actors' mean) does not")
    if staged < 1.0:
        return (f"a speedup above its ideal: '{baseline}' spent {1.0 - staged:.0%} of its wall outside the four "
                "stages (hand-offs between them); ideal counts stage time only")
    return (f"a speedup above its ideal: '{baseline}' overlapped its stages (their times add up to {staged:.0%} of "
            "its wall), so a speedup against it is not bounded by ideal, which counts each run's own stage time")


def collect_meta() -> dict[str, Any]:
    """Machine, Python, torch and janus versions, for ``results.json``."""
    import numpy
    import torch

    import janus

    cuda = torch.cuda.is_available()
    return {
        "host": platform.node(), "platform": platform.platform(),
        "python": platform.python_version(), "cpu_count": os.cpu_count(),
        "torch": torch.__version__, "numpy": numpy.__version__,
        "janus": getattr(janus, "__version__", "unknown"), "cuda_available": cuda,
        "gpu": torch.cuda.get_device_name(0) if cuda else None,
    }


def _jsonable(value: Any) -> Any:
    """Plain JSON values: tuples to lists, numpy/torch scalars to numbers, NaN/inf to None."""
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, (bool, int, str)) or value is None:
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if hasattr(value, "item"):
        return _jsonable(value.item())
    return str(value)


CSV_RETURNS = ("algo", "env", "env_steps", "episodes", "final_mean_return", "best_mean_return", "best_return")
"""RL columns of ``results.csv`` (empty for runs that act in no environment: the synthetic workload): the env steps of the whole run, the
mean return of the last 20 episodes, the best such 20-episode mean and the best single return."""
CSV_HEADER = ("name", "status", *CSV_KNOBS, *CSV_RETURNS, "samples_per_s", "env_steps_per_s", "wall_s",
              *(f"{s}_s" for s in STAGES), "speedup_vs_baseline", "ideal_speedup", "efficiency")
"""The columns of ``results.csv``, in order."""


def return_summary(run: dict[str, Any]) -> dict[str, Any]:
    """The RL columns of ``results.csv`` (see :data:`CSV_RETURNS`); ``None`` where a run has no curve."""
    workload = (run.get("config") or {}).get("workload") or {}
    curve = run.get("learning_curve") or {}
    returns = list(curve.get("return") or [])
    acts_in_env = "env" in workload  # config.yaml records workload.env for runs that act in an environment only
    return {
        "algo": workload.get("algo"), "env": workload.get("env"),
        "env_steps": _run_env_steps(run, curve) if acts_in_env else None,
        "episodes": run.get("episodes"), "final_mean_return": run.get("final_mean_return"),
        "best_mean_return": max(moving_mean(returns, CURVE_WINDOW)) if returns else None,
        "best_return": max(returns) if returns else None,
    }


def _run_env_steps(run: dict[str, Any], curve: dict[str, Any]) -> int | None:
    """Env steps of the whole run (every session of a resumed one); results written before
    ``counts.run_env_steps`` existed: the step of the last finished episode."""
    counts = run.get("counts") or {}
    if "run_env_steps" in counts:
        return counts["run_env_steps"]
    return curve["env_steps"][-1] if curve.get("env_steps") else None


def _csv_row(run: dict[str, Any]) -> dict[str, Any]:
    cfg = run.get("config") or {}
    row: dict[str, Any] = {"name": run.get("name"), "status": run.get("status"), **{k: cfg.get(k) for k in CSV_KNOBS},
                           **return_summary(run)}
    row.update(samples_per_s=run.get("samples_per_s"), env_steps_per_s=env_steps_rate(run), wall_s=run.get("wall_s"))
    row.update({f"{s}_s": _stage(run, s) for s in STAGES})
    row.update(speedup_vs_baseline=run["speedup_vs_baseline"],
               ideal_speedup=run["ideal"]["ideal_speedup"], efficiency=run["ideal"]["efficiency"])
    return {k: "" if v is None else v for k, v in row.items()}


def write_chart(path: Path, command: str, runs: list[dict[str, Any]]) -> Path:
    """Left: samples/s per run with the speedup on each bar; right: stage times per run."""
    fileio.save_figure(chart_figure(command, runs), path, dpi=110)  # atomic, never through a symlink
    return path


def chart_figure(command: str, runs: list[dict[str, Any]]) -> Any:
    """The matplotlib Figure of :func:`write_chart`. A single run has no speedup to show: its bar
    carries its samples/s instead of a "1.00x" against itself."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(13, 5.2))
    FigureCanvasAgg(fig)
    left, right = fig.subplots(1, 2, gridspec_kw={"width_ratios": [1, 1.5]})
    names = [str(r.get("name", "?")) for r in runs]
    xs = list(range(len(runs)))
    sps = [_f(r.get("samples_per_s")) for r in runs]
    # a repeated configuration's bar is its median run; its error bar spans its min-max (the table's range)
    spans = [sps_range(r) or (v, v) for r, v in zip(runs, sps, strict=True)]
    ranged = any(sps_range(r) is not None for r in runs)
    bars = left.bar(xs, sps, color="tab:blue", capsize=5 if ranged else 0,
                    yerr=[[v - lo for v, (lo, _) in zip(sps, spans, strict=True)],
                          [hi - v for v, (_, hi) in zip(sps, spans, strict=True)]] if ranged else None)
    alone = len(runs) == 1
    for bar, run, (_, top) in zip(bars, runs, spans, strict=False):
        text = f"{_f(run.get('samples_per_s')):,.0f}/s" if alone else _x(run["speedup_vs_baseline"])
        left.annotate(text, (bar.get_x() + bar.get_width() / 2, max(bar.get_height(), top)),
                      ha="center", va="bottom", fontsize=9, xytext=(0, 2), textcoords="offset points")
    title = "learner throughput" if alone else "learner throughput (speedup vs baseline)"
    left.set_title(title + ("\nbar: median run; error bar: min-max of the repeats" if ranged else ""))
    left.set_ylabel("samples / s")
    left.set_ylim(0, max(sps + [hi for _, hi in spans] + [1.0]) * 1.15)

    width = 0.8 / len(STAGES)
    colors = ("tab:green", "tab:orange", "tab:purple", "tab:red", "tab:gray", "tab:brown")
    for k, (stage, color) in enumerate(zip(STAGES, colors, strict=False)):
        offs = [x - 0.4 + (k + 0.5) * width for x in xs]
        right.bar(offs, [_stage(r, stage) for r in runs], width, label=stage, color=color,
                  hatch="//" if stage not in WORK_STAGES else None)
    for x, run in zip(xs, runs, strict=False):
        right.hlines(_f(run.get("wall_s")), x - 0.45, x + 0.45, colors="black",
                     linestyles="--", label="wall" if x == 0 else None)
    right.set_title("stage times per run (hatched: waiting; dashed: wall time)")
    right.set_ylabel("seconds")
    if runs:
        right.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    for ax in (left, right):
        ax.set_xticks(xs)
        ax.set_xticklabels(names, rotation=25, ha="right", fontsize=9)
        ax.grid(axis="y", alpha=0.3)
        if not runs:
            ax.text(0.5, 0.5, "no runs", ha="center", va="center", transform=ax.transAxes)
    fig.suptitle(wrapped(command, 130), fontsize=13)  # 13 in at 13 pt: ~130 characters a line
    fig.tight_layout()
    return fig


def write_results(out_dir: str | Path, command: str, runs: Iterable[dict[str, Any]],
                  skipped: list[dict[str, Any]] | None = None,
                  meta: dict[str, Any] | None = None, baseline: str = "baseline",
                  learning_chart: bool = False) -> dict[str, Path]:
    """Write ``results.csv``, ``chart.png`` and, last, ``results.json`` into ``out_dir`` (created).

    ``meta`` is merged over :func:`collect_meta`. Returns ``{"json", "csv", "chart"}`` paths.
    ``learning_chart`` (a train run): chart.png is the return vs env steps, evaluations marked,
    where the runs have a learning curve (else, and for compare and eval, the throughput chart).
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    runs = annotate(runs, baseline)
    paths = {"json": out / "results.json", "csv": out / "results.csv", "chart": out / "chart.png"}
    doc = {
        "command": command,
        "created": datetime.now().astimezone().isoformat(timespec="seconds"),
        "meta": {**collect_meta(), **(meta or {})},
        "runs": runs,
        "skipped": [{"name": s.get("name"), "reason": s.get("reason")} for s in skipped or []],
    }
    rows = [_csv_row(r) for r in runs]
    with fileio.atomic_open(paths["csv"], "w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=CSV_HEADER)
        writer.writeheader()
        writer.writerows(rows)
    curve = learning_curve_figure(runs, by_wall_time=False) if learning_chart else None
    if curve is not None:
        fileio.save_figure(curve, paths["chart"], dpi=110)
    else:
        write_chart(paths["chart"], command, runs)
    fileio.write_text(paths["json"], json.dumps(_jsonable(doc), indent=2) + "\n")  # last: the others are there
    return paths


def default_out_dir(command: str, root: str | Path = "runs") -> Path:
    """``<root>/<command>-<YYYYmmdd-HHMMSS>``, with ``-2``, ``-3``... if it already exists.

    The directory is not created.
    """
    slug = re.sub(r"[^A-Za-z0-9_.-]+", "-", command).strip("-") or "run"
    base = Path(root) / f"{slug}-{datetime.now():%Y%m%d-%H%M%S}"
    path, n = base, 2
    while path.exists():
        path, n = base.with_name(f"{base.name}-{n}"), n + 1
    return path
