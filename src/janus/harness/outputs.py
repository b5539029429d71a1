"""What a command prints and writes at the end of its runs: the table, the runtime's summary, the train
summary, results.json/csv and the charts (the live logs as a run goes: :mod:`janus.harness.reports.live`)."""

from __future__ import annotations

import importlib
import sys
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

from janus import timeline
from janus.config import RunConfig, available_placements
from janus.harness.reports.curves import write_learning_curve
from janus.harness.reports.table import annotate, format_table, write_results
from janus.harness.reports.train import acts_in_env, train_summary
from janus.result import as_dict

if TYPE_CHECKING:
    from janus.config.request import RunRequest
    from janus.runtime.status import RunStatus

CHART_MODULES = ("matplotlib.figure", "matplotlib.backends.backend_agg")
"""What the charts of :func:`write_files` import: ~1 s, the largest part of writing them."""


class ChartImportAtGoal:
    """An observer of a run (:data:`janus.runtime.run.Observer`) that imports :data:`CHART_MODULES`
    in a background thread once the run has reached its goal, while the backend shuts down: stopping
    worker processes is mostly waiting, so the import costs the command's tail nothing there."""

    def __init__(self) -> None:
        self.thread: threading.Thread | None = None

    def __call__(self, status: RunStatus, result_so_far: object = None) -> None:
        if status.finished and self.thread is None:
            self.thread = threading.Thread(target=_import_chart_modules, name="janus-chart-imports", daemon=True)
            self.thread.start()


def _import_chart_modules() -> None:
    for name in CHART_MODULES:
        try:
            importlib.import_module(name)
        except Exception:  # noqa: BLE001 - the charts' own import says what is wrong, where it is needed
            return


def runtime_summary(rt: dict, name: str | None = None) -> str:
    """A few lines on what the runtime did: messages, parameters, restarts (headed by the run's
    ``name`` when given: compare and eval print one summary per configuration).

    A message's MB are the arrays it carries (its payload), whether or not the backend copies
    them: ``local`` passes them by reference, ``process`` through shared memory, ``ray`` serialised.
    """
    if rt.get("loop") == "synchronous":  # janus.runtime.synchronous: no components, nothing sent
        return (f"\n{name or 'run'} ran the synchronous loop ({rt['backend']}): one thread, no components, no messages; "
                f"{rt['param_versions_published']} parameter versions handed to the actors")
    msgs = rt["messages"]
    parts = [f"{k}: {v['messages']} ({v['bytes'] / 1e6:.1f} MB payload)" for k, v in msgs.items() if isinstance(v, dict)]
    fetches = ", ".join(f"{k}={v}" for k, v in rt["param_fetches_per_node"].items())
    restarts = sum(rt["worker_restarts"].values())
    errors = rt.get("worker_errors", [])
    dropped = int(rt.get("pacing", {}).get("pieces_dropped_at_stop", 0))
    return (
        f"\nruntime{f' of {name}' if name else ''} ({rt['backend']}): messages " + "; ".join(parts)
        + f"\n  parameter versions published: {rt['param_versions_published']}; fetches per node: {fetches}"
        + f"\n  worker restarts: {restarts}; stalls: {rt['stalls']}"
        + (f"\n  actors acting {rt['actor_utilization']:.0%} of the wall, learner updating "
           f"{rt['learner_utilization']:.0%}" if "actor_utilization" in rt else "")
        + policy_lag_line(rt.get("policy_lag"))
        + (f"\n  worker errors: {rt.get('worker_errors_total', len(errors))} (the last: {errors[-1]['error'][:200]})" if errors else "")
        + (f"\n  {dropped} pieces that reached the replay at the stop could not be written (on-policy: the "
           f"rest of a rollout the run no longer trains on)" if dropped else "")
    )


def policy_lag_line(lag: dict | None) -> str:
    """An asynchronous run's policy lag and what was dropped as too stale (empty for other runs)."""
    if not lag:
        return ""
    return (f"\n  policy lag: mean {lag['mean']:.1f}, max {lag['max']:.0f} versions over {lag['batches']} batches; "
            f"dropped as too stale: {lag['items_dropped_stale']} items (replay), {lag['batches_dropped_stale']} batches (learner)")


def placement_note(configs: list[RunConfig]) -> str | None:
    """Why the janus configuration's placement is the others' (no faster one is usable here)."""
    janus_cfg = next((c for c in configs if c.name == "janus"), None)
    if janus_cfg is None or janus_cfg.janus.placement != "cpu_pageable":
        return None
    reasons = "; ".join(f"{p}: {why}" for p, why in available_placements().items() if why)
    return f"placement does not pay on this machine: janus runs on cpu_pageable like the others ({reasons})"


def command_line(label: str, request: RunRequest | None = None) -> str:
    """The command as typed (``janus train ...``; ``request.invocation`` when set: a :func:`janus.train`
    call), for results.json."""
    invocation = request.invocation if request is not None else None
    if invocation:
        return str(invocation)
    argv = sys.argv[1:] if sys.argv and Path(sys.argv[0]).name in ("janus", "main.py") else [label]
    return "janus " + " ".join(argv)


def write_files(command: str, out_dir: Path, runs: list[Any], skipped: list[dict[str, Any]], baseline: str,
                train: bool = False) -> dict[str, Path]:
    """learning_curve.png, results.csv, chart.png and results.json of ``runs``, each written
    atomically; results.json last, so once it is rewritten the other files are of the same run.
    ``train``: chart.png is the run's learning curve (return vs env steps), not its throughput."""
    out_dir.mkdir(parents=True, exist_ok=True)
    curve = write_learning_curve(out_dir / "learning_curve.png", runs)
    paths = write_results(out_dir, command, runs, skipped, baseline=baseline, learning_chart=train)
    if curve is not None:
        paths["learning_curve"] = curve
    return paths


def write_outputs(request: RunRequest, label: str, out_dir: Path, runs: list[Any], skipped: list[dict[str, Any]],
                  baseline: str) -> None:
    """The table, results.json/csv, charts and learning curve of ``runs`` (TensorBoard: :class:`LiveRun`).

    A train run leads with its return, evaluations, env-steps/s and time; its data-path table and
    runtime figures are printed with ``--verbose`` only (results.json holds them always)."""
    train = request.command == "train"
    rl = any(acts_in_env(as_dict(r)) for r in runs)  # a synthetic train run measures the data path: its table leads
    verbose = bool(request.verbose) or not train or not rl
    if verbose:
        print()
        print(format_table(annotate(runs, baseline=baseline), baseline=baseline))
    paths = write_files(command_line(label, request), out_dir, runs, skipped, baseline, train=train)
    for run in runs:
        if verbose and "runtime" in run:
            print(runtime_summary(run["runtime"], run["name"]))
        if train:
            hint = None if verbose else ("verbose=True" if request.invocation else "--verbose")
            print("\n" + train_summary(as_dict(run), hint))
        elif "final_mean_return" in run:
            print(f"\n{run['name']}: mean return of the last 20 episodes {run['final_mean_return']:.1f} "
                  f"({run['episodes']} episodes, {run['env_steps_per_s']:,.0f} env-steps/s)")
    if request.tensorboard:
        paths["tensorboard"] = out_dir / "tensorboard"
    if request.wandb:
        paths["wandb"] = out_dir / "wandb"
    print("\nwrote " + ", ".join(str(p) for p in paths.values()))
    timeline.mark("results_written")
