"""The aggregate of a ``janus train --seeds`` run: OUT/aggregate.json, OUT/aggregate.png and a table.

Read from each seed's results.json; the statistics are :mod:`janus.harness.seeds.statistics`'.
"""

from __future__ import annotations

import json
import signal
from pathlib import Path
from typing import Any

import numpy as np

from janus import fileio
from janus.harness.reports.table import CURVE_WINDOW
from janus.harness.seeds import statistics as stats
from janus.result import env_steps_rate


def ended_as(code: int | None) -> str:
    """How a seed's process ended, by its exit code (None: it never ran)."""
    if code is None:
        return "not run"
    if code < 0:
        try:
            return f"killed ({signal.Signals(-code).name})"
        except ValueError:
            return f"killed (signal {-code})"
    return "finished" if code == 0 else f"failed (exit code {code})"


def per_seed_record(seed: int, folder: Path, code: int | None) -> dict[str, Any]:
    """One seed's entry of aggregate.json, from its results.json and ``code``, its process's exit
    code. Whatever the seed did it has one: without a readable results.json its status says how its
    process ended; a results.json still ``running`` (its process killed before the final write) keeps
    what it had measured, with the status of the process's end."""
    record: dict[str, Any] = {"seed": seed, "out": str(folder)}
    path = folder / "results.json"
    try:
        run = json.loads(path.read_text(encoding="utf-8"))["runs"][0]
        curve = run.get("learning_curve") or {}
        measured = {"final_return": run.get("final_mean_return"), "env_steps_per_s": env_steps_rate(run),
                    "episodes": run.get("episodes"),
                    "curve": {"env_steps": list(curve.get("env_steps", [])), "return": list(curve.get("return", []))},
                    **{k: run.get(k) for k in SOLVED_KEYS if run.get("target_return") is not None}}
        status = str(run.get("status", "finished"))
    except FileNotFoundError:
        return {**record, "status": ended_as(code)}
    except (OSError, ValueError, TypeError, KeyError, IndexError, AttributeError) as exc:
        return {**record, "status": f"{ended_as(code)}; its results.json cannot be read ({type(exc).__name__})"}
    if status == "running" and code is not None:  # it never wrote its end
        status = ended_as(code) if code != 0 else "failed (exit code 0 before its results were final)"
    return {**record, "status": status, **measured}


SOLVED_KEYS = ("target_return", "solved", "solved_at_s", "solved_at_env_steps")
"""What a seed's record keeps of a run with ``target_return``."""


def time_to_solve(records: list[dict[str, Any]]) -> dict[str, Any] | None:
    """Over the seeds of a run with ``target_return``: how many solved it, and the median and
    interquartile range of the seconds from each one's command start (and the env steps) to its target;
    None without a target."""
    targets = [r for r in records if r.get("target_return") is not None]
    if not targets:
        return None
    solved = [r for r in targets if r.get("solved")]
    seconds = [float(r["solved_at_s"]) for r in solved if r.get("solved_at_s") is not None]
    steps = [int(r["solved_at_env_steps"]) for r in solved]
    return {"target_return": targets[0]["target_return"], "solved": len(solved), "seeds": len(targets),
            "seconds_q25_median_q75": _quartiles(seconds), "env_steps_q25_median_q75": _quartiles(steps),
            "note": "seconds from each seed's command start (its process's) to the evaluation that reached the target"}


def _quartiles(values: list[float] | list[int]) -> list[float] | None:
    return [float(q) for q in np.percentile(values, [25, 50, 75])] if values else None


def curves_of(records: list[dict[str, Any]]) -> dict[str, Any] | None:
    """Each seed's moving mean of the last :data:`CURVE_WINDOW` episodes on a common env-step grid,
    with their mean and IQM at each point; None when fewer than two seeds have a curve."""
    with_curve = [r for r in records if r.get("curve", {}).get("env_steps")]
    if len(with_curve) < 2:
        return None
    pairs = [(r["curve"]["env_steps"], stats.moving_mean(r["curve"]["return"], CURVE_WINDOW)) for r in with_curve]
    try:
        grid, on_grid = stats.curves_on_grid(pairs)
    except ValueError:  # no env-step range in common (a seed stopped before another's first episode)
        return None
    return {"env_steps": grid.tolist(), "window": CURVE_WINDOW,
            "per_seed": {str(r["seed"]): row.tolist() for r, row in zip(with_curve, on_grid, strict=True)},
            "mean": on_grid.mean(axis=0).tolist(), "iqm": stats.iqm_per_column(on_grid).tolist()}


def write_aggregate(out_dir: Path, folders: dict[int, Path], codes: dict[int, int | None],
                    meta: dict[str, Any]) -> tuple[str, list[Path], bool]:
    """Write OUT/aggregate.json (and .png where there are curves) of the seeds' runs in ``folders``
    (``codes``: each one's exit code, None if it never ran). Returns the table to print, the paths
    written and whether any seed did not finish."""
    records = [per_seed_record(seed, folder, codes.get(seed)) for seed, folder in folders.items()]
    finals = [r["final_return"] for r in records if r.get("final_return") is not None]
    final = stats.aggregate(finals) if finals else None
    data: dict[str, Any] = {
        **meta, "seeds": list(folders),
        "final_return": final,
        "final_return_note": f"mean return of each seed's last {CURVE_WINDOW} episodes (its final_mean_return)",
        "final_return_caveats": stats.caveats(finals, final) if final else [],
        "bootstrap": {"method": "percentile", "resamples": stats.BOOTSTRAP_RESAMPLES, "seed": stats.BOOTSTRAP_SEED,
                      "confidence": stats.CONFIDENCE, "samples": len(finals), "iqm": "mean of the middle 50% (rliable)",
                      "description": stats.CI_METHOD.format(resamples=stats.BOOTSTRAP_RESAMPLES,
                                                            seed=stats.BOOTSTRAP_SEED),
                      "meaningful": len(finals) >= stats.MIN_SEEDS_FOR_CI},
        "per_seed": records,
        "curves": curves_of(records),
        "time_to_solve": time_to_solve(records),
    }
    fileio.write_text(out_dir / "aggregate.json", json.dumps(data, indent=1) + "\n")  # first: the plot may fail
    paths = [out_dir / "aggregate.json"]
    if data["curves"] is not None:
        write_plot(out_dir / "aggregate.png", data)
        paths.append(out_dir / "aggregate.png")
    failed = any(r["status"] != "finished" for r in records)
    return format_table(data), paths, failed


def write_plot(path: Path, data: dict[str, Any]) -> None:
    """Every seed's curve (thin) and the mean and IQM curves on the common grid; the legend beside the axes."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    curves = data["curves"]
    fig = Figure(figsize=(9, 4.4))
    FigureCanvasAgg(fig)
    ax = fig.add_subplot(1, 1, 1)
    for k, (seed, row) in enumerate(curves["per_seed"].items()):
        ax.plot(curves["env_steps"], row, lw=0.8, alpha=0.6, color=f"C{k % 10}", label=f"seed {seed}")
    ax.plot(curves["env_steps"], curves["mean"], lw=2.4, color="black", label="mean")
    ax.plot(curves["env_steps"], curves["iqm"], lw=2.0, color="crimson", ls="--", label="IQM")
    final = data["final_return"]
    title = f"{len(curves['per_seed'])} seeds: episode return ({curves['window']}-episode moving mean)"
    if final is not None:
        iqm = final["iqm"]
        title += f"\nfinal IQM {iqm['estimate']:.1f} [95% CI {iqm['ci95'][0]:.1f}, {iqm['ci95'][1]:.1f}]"
        if not data["bootstrap"]["meaningful"]:
            title += f" (under {stats.MIN_SEEDS_FOR_CI} seeds: not meaningful)"
    ax.set(xlabel="environment steps", ylabel="episode return", title=title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0)
    fig.tight_layout()
    fileio.save_figure(fig, path, dpi=110)


def format_table(data: dict[str, Any]) -> str:
    """Per-seed final return and env-steps/s, then mean, median and IQM with their 95% CIs."""
    lines = [f"{'seed':>8}  {'final return':>14}  {'env-steps/s':>11}  {'episodes':>8}  status"]
    for r in data["per_seed"]:
        final = f"{r['final_return']:.1f}" if r.get("final_return") is not None else "-"
        rate = f"{r['env_steps_per_s']:,.0f}" if r.get("env_steps_per_s") is not None else "-"
        lines.append(f"{r['seed']:>8}  {final:>14}  {rate:>11}  {r.get('episodes') or '-':>8}  {r['status']}")
    if data["final_return"] is not None:
        n = data["bootstrap"]["samples"]
        lines.append(f"final return over {n} seed{'s' if n != 1 else ''} (95% CI, percentile bootstrap, "
                     f"{data['bootstrap']['resamples']:,} resamples):")
        for name, s in data["final_return"].items():
            lines.append(f"{name:>8}  {s['estimate']:>14.1f}  [{s['ci95'][0]:.1f}, {s['ci95'][1]:.1f}]")
        lines.extend(data.get("final_return_caveats") or [])
    tts = data.get("time_to_solve")
    if tts:
        line = f"target return {tts['target_return']:g}: solved by {tts['solved']} of {tts['seeds']} seeds"
        if tts["seconds_q25_median_q75"]:
            q1, med, q3 = tts["seconds_q25_median_q75"]
            line += f"; median {med:.1f} s after the command (IQR {q1:.1f}-{q3:.1f})"
        if tts["env_steps_q25_median_q75"]:
            line += f", {tts['env_steps_q25_median_q75'][1]:,.0f} env steps"
        lines.append(line)
    return "\n".join(lines)
