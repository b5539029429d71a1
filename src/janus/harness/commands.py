"""What each CLI command runs: build the configurations, run them, report and save."""

from __future__ import annotations

import argparse
import statistics
import sys

import yaml
from dataclasses import replace
from pathlib import Path
from typing import Any

from janus import fileio
from janus.config import RunConfig
from janus.harness.experiments import compare_configs, resolve_all, sweep_configs
from janus.harness.progress import ProgressLine
from janus.harness.report import annotate, default_out_dir, format_table, write_learning_curve, write_results
from janus.runtime.run import run_runtime


def runtime_summary(rt: dict) -> str:
    """A few lines on what the runtime did: messages, parameters, restarts."""
    msgs = rt["messages"]
    parts = [f"{k}: {v['messages']} ({v['bytes'] / 1e6:.1f} MB)" for k, v in msgs.items() if isinstance(v, dict)]
    fetches = ", ".join(f"{k}={v}" for k, v in rt["param_fetches_per_node"].items())
    restarts = sum(rt["worker_restarts"].values())
    return (
        f"\nruntime ({rt['backend']}): messages " + "; ".join(parts)
        + f"\n  parameter versions published: {rt['param_versions_published']}; fetches per node: {fetches}"
        + f"\n  worker restarts: {restarts}; stalls: {rt['stalls']}"
    )


def plan(args: argparse.Namespace, cfg: RunConfig) -> tuple[list[RunConfig], list[dict[str, str]], str]:
    """The configurations a command runs, those skipped here, and the baseline name for speedups.

    ``--quick`` is already in ``cfg`` (:func:`janus.cli.config_from_args`: below the typed flags)."""
    skipped: list[dict[str, str]] = []
    if args.command == "compare":
        configs = compare_configs(cfg)
    elif args.command == "train":
        configs = [replace(cfg, name=args.name or "train")]
    else:
        configs, skipped = sweep_configs(cfg, args.sweep)
    configs = resolve_all(configs)
    baseline = "baseline" if args.command == "compare" else configs[0].name
    return configs, skipped, baseline


def run_rollout(args: argparse.Namespace) -> int:
    """``janus rollout``: greedy episodes of a saved policy."""
    from janus.harness.rollout import rollout

    cfg, returns = rollout(args.checkpoint, args.episodes, args.seed)
    mean, std = statistics.fmean(returns), statistics.pstdev(returns)
    print(f"janus rollout: {cfg.workload.algo} on {cfg.workload.env}, {len(returns)} episodes: "
          f"mean return {mean:.1f} (std {std:.1f}, min {min(returns):.1f}, max {max(returns):.1f})")
    return 0


def _print_resume_point(folder: str) -> None:
    """Say which checkpoint a resumed run starts from (run_state.json names the committed one)."""
    from janus.runtime import checkpoints

    state = checkpoints.read_run_state(folder)
    if not state:
        print(f"resuming: no committed checkpoint in {folder}; starting from scratch", flush=True)
        return
    which = "the end of the last run" if state.get("tag") == checkpoints.FINAL else f"periodic checkpoint {state.get('tag')}"
    replay = f", {state['inserted']:,} transitions in replay" if "inserted" in state else ""
    print(f"resuming from {which}: {state['trained']:,} updates, {state['env_steps']:,} env steps{replay}", flush=True)


def prepare_train(args: argparse.Namespace, cfg: RunConfig, out_dir: Path) -> RunConfig:
    """Checkpoints for RL runs go to OUT/checkpoint; the resolved config is saved as OUT/config.yaml."""
    resume = getattr(args, "resume", None) is not None
    from janus.algorithms.base import algorithm

    if algorithm(cfg.workload.algo).has_policy:
        runtime = replace(cfg.runtime, checkpoint_dir=cfg.runtime.checkpoint_dir or str(out_dir / "checkpoint"), resume=resume,
                          best_dir=str(out_dir / "best"))
        cfg = replace(cfg, runtime=runtime)
        if resume:
            _print_resume_point(str(runtime.checkpoint_dir))
    out_dir.mkdir(parents=True, exist_ok=True)
    saved = cfg.to_dict()
    # resume is per invocation; a checkpoint folder of the user's choosing is kept (absolute), the
    # default one (OUT/checkpoint) is not, so a run folder can be moved and still resumed
    chosen = cfg.runtime.checkpoint_dir
    if chosen is not None and Path(chosen).resolve() == (out_dir / "checkpoint").resolve():
        chosen = None
    saved["runtime"] = {**saved["runtime"], "checkpoint_dir": str(Path(chosen).resolve()) if chosen else None, "resume": False}
    fileio.write_text(out_dir / "config.yaml", yaml.safe_dump(saved, sort_keys=False))
    return cfg


def run_command(args: argparse.Namespace, cfg: RunConfig) -> int:
    """Run a parsed ``janus`` command; returns the exit code."""
    configs, skipped, baseline = plan(args, cfg)
    label = args.command if args.command != "eval" else f"eval-{args.sweep}"
    out_dir = Path(args.out) if args.out else default_out_dir(label)
    if getattr(args, "resume", None) is not None:
        out_dir = Path(args.resume)
    if args.command == "train":
        if getattr(args, "tensorboard", False):
            from janus.harness.tensorboard import check_tensorboard

            check_tensorboard()  # before any work: a missing package is a clear error, not a late crash
        configs = [prepare_train(args, c, out_dir) for c in configs]
    mode = "on-policy" if configs[0].janus.is_on_policy else "off-policy"
    print(f"janus {label}: {len(configs)} configuration(s), {mode}, output in {out_dir}", flush=True)
    for s in skipped:
        print(f"  skipped {s['name']}: {s['reason']}", flush=True)
    runs = []
    for i, c in enumerate(configs, 1):
        j = c.janus
        print(
            f"[{i}/{len(configs)}] {c.name}: placement={j.placement} (resolved), actor_device={j.actor_device}, "
            f"learner_device={j.learner_device}, overlap_collect={j.overlap_collect}, "
            f"overlap_select={j.overlap_select}, g_collect={j.g_collect:g}, g_select={j.g_select:g}",
            flush=True,
        )
        progress = ProgressLine(f"  {c.name}")
        print(f"  runtime: backend={c.runtime.backend}, workers={c.workload.num_actors}, "
              f"workers_per_node={c.runtime.workers_per_node or c.workload.num_actors}", flush=True)
        try:
            run = run_runtime(c, progress)
        except KeyboardInterrupt as exc:  # Ctrl-C / SIGTERM: write what ran so far, then stop
            partial = getattr(exc, "partial_result", None)
            if partial is not None:
                progress.finish(f"interrupted after {partial['wall_s']:.2f}s; writing the run so far")
                write_outputs(args, label, out_dir, [*runs, partial], skipped, baseline)
            raise
        progress.finish(f"{run['samples_per_s']:,.0f} samples/s in {run['wall_s']:.2f}s")
        runs.append(run)
    write_outputs(args, label, out_dir, runs, skipped, baseline)
    return 0


def write_outputs(args: argparse.Namespace, label: str, out_dir: Path, runs: list[Any], skipped: list[dict[str, Any]],
                  baseline: str) -> None:
    """The table, results.json/csv, charts, learning curve and TensorBoard scalars of ``runs``."""
    annotated = annotate(runs, baseline=baseline)
    print()
    print(format_table(annotated, baseline=baseline))
    argv = sys.argv[1:] if sys.argv and Path(sys.argv[0]).name in ("janus", "main.py") else [label]
    command_line = "janus " + " ".join(argv)
    paths = write_results(out_dir, command_line, runs, skipped, baseline=baseline)
    for run in runs:
        if "runtime" in run:
            print(runtime_summary(run["runtime"]))
        if "final_mean_return" in run:
            print(f"\n{run['name']}: mean return of the last 20 episodes {run['final_mean_return']:.1f} "
                  f"({run['episodes']} episodes, {run['actor_steps_per_s']:,.0f} env-steps/s)")
    curve = write_learning_curve(out_dir / "learning_curve.png", runs)
    if curve is not None:
        paths["learning_curve"] = curve
    if getattr(args, "tensorboard", False):
        from janus.harness.tensorboard import write_scalars

        for run in runs:
            paths[f"tensorboard:{run['name']}"] = write_scalars(out_dir / "tensorboard", run)
    print("\nwrote " + ", ".join(str(p) for p in paths.values()))
