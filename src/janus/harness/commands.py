"""What each CLI command runs: build the configurations, run them, report and save."""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from janus import fileio, stopping
from janus.config import RunConfig, available_placements, recorded, resolve
from janus.config.resources import check_resources
from janus.errors import invalid
from janus.harness import resume_checks, resume_commit, run_folder
from janus.harness.experiments.granularity import ProbeResult, probe, with_granularity
from janus.harness.experiments.repeats import DEFAULT_REPEATS, SMOKE_NOTE, interleaved, summarize
from janus.harness.experiments.sweeps import compare_configs, quick, resolve_all, sweep_configs
from janus.harness.reports.curves import write_learning_curve
from janus.harness.reports.live import LiveRun
from janus.harness.reports.progress import EnvStepProgress, EvaluationLines, ProgressLine
from janus.harness.reports.table import annotate, format_table, write_results
from janus.harness.reports.train import acts_in_env, budget_reason, ended, train_summary, whole_budget
from janus.result import RunResult, as_dict
from janus.runtime.run import Observer
from janus.runtime.status import RunStatus
from janus.runtime.synchronous import on_synchronous_loop, run_configuration
from janus.user_code import first_line

if TYPE_CHECKING:
    from janus.callbacks import CallbackHooks


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


def plan(args: argparse.Namespace, cfg: RunConfig) -> tuple[list[RunConfig], list[dict[str, str]], str]:
    """The configurations a command runs, those skipped here, and the baseline name for speedups.

    ``--quick`` is already in ``cfg`` (:func:`janus.cli.config_from_args`: below the typed flags)."""
    skipped: list[dict[str, str]] = []
    if args.command == "compare":
        configs = compare_configs(cfg)
    elif args.command == "train":
        # --name, else the YAML's name: (a resumed run's is in its config.yaml), else "train"
        named = getattr(args, "resume", None) is not None or cfg.name != RunConfig.name
        configs = [replace(cfg, name=args.name or (cfg.name if named else "train"))]
    else:
        configs, skipped = sweep_configs(cfg, args.sweep)
    configs = [whole_budget(c) for c in resolve_all(configs)]
    baseline = "baseline" if args.command == "compare" else configs[0].name
    return configs, skipped, baseline


def run_rollout(args: argparse.Namespace) -> int:
    """``janus rollout``: greedy episodes of a saved policy."""
    from janus.harness.rollout import rollout

    cfg, returns, video = rollout(args.checkpoint, args.episodes, args.seed, args.video, trust=args.trust)
    mean, std = statistics.fmean(returns), statistics.pstdev(returns)
    print(f"janus rollout: {cfg.workload.algo} on {cfg.workload.env}, {len(returns)} episode{'s' if len(returns) != 1 else ''}: "
          f"mean return {mean:.1f} (std {std:.1f}, min {min(returns):.1f}, max {max(returns):.1f})")
    if video is not None:
        cut = f" (the episode was longer: only its first {video.frames} frames)" if video.cut else ""
        print(f"wrote {video.path}: the first episode, {video.frames} frames{cut}")
    return 0


def _print_resume_point(cfg: RunConfig, record: dict[str, Any]) -> None:
    """Say which checkpoint a resumed run starts from (``record``, its run_state.json, names the
    committed one), with the counts it continues from (on-policy, a rollout not wholly trained is
    acted again)."""
    from janus.algorithms.base import algorithm
    from janus.runtime import checkpoints
    from janus.runtime.plan import resumed_counts

    state = resumed_counts(cfg, algorithm(cfg.workload.algo).pacing(cfg), record)  # {} for no commit
    if not state:
        print(f"resuming: no committed checkpoint in {cfg.runtime.checkpoint_dir}; starting from scratch", flush=True)
        return
    which = "the end of the last run" if state.get("tag") == checkpoints.FINAL else f"periodic checkpoint {state.get('tag')}"
    replay = f", {state['inserted']:,} transitions in replay" if "inserted" in state else ""
    print(f"resuming from {which}: {state['trained']:,} updates, {state['env_steps']:,} env steps{replay}", flush=True)


def prepare_train(args: argparse.Namespace, cfg: RunConfig, out_dir: Path) -> tuple[RunConfig, str]:
    """Checkpoints for RL runs go to OUT/checkpoint; returns the config to run and the text of
    OUT/config.yaml (the resolved config, as :func:`janus.config.recorded` records it), which
    :func:`run_command` writes."""
    resume = getattr(args, "resume", None) is not None
    from janus.algorithms.base import algorithm

    if algorithm(cfg.workload.algo).has_policy:  # the run folder's own subfolders: never links out of it
        default_ckpt = None if cfg.runtime.checkpoint_dir else run_folder.inside(out_dir, "checkpoint", "checkpoint")
        runtime = replace(cfg.runtime, checkpoint_dir=cfg.runtime.checkpoint_dir or str(default_ckpt), resume=resume,
                          best_dir=str(run_folder.inside(out_dir, "best", "best")))
        cfg = replace(cfg, runtime=runtime)
    # resolved, every hyperparameter, nothing the run does not read nor what janus train sets per
    # invocation (resume, RUN_DIR/best); a checkpoint folder of the user's choosing is kept
    # (absolute), the default one (OUT/checkpoint) is not, so a run folder can be moved and still resumed
    saved = recorded(cfg)
    chosen = cfg.runtime.checkpoint_dir
    saved["runtime"].pop("checkpoint_dir", None)
    if chosen is not None and Path(chosen).resolve() != (out_dir / "checkpoint").resolve():
        saved["runtime"]["checkpoint_dir"] = str(Path(chosen).resolve())
    return cfg, yaml.safe_dump(saved, sort_keys=False)


def check_resume(out_dir: Path, cfg: RunConfig) -> dict[str, Any] | None:
    """``--resume``: refuse, before anything is written, a run that keeps no checkpoint, a change
    the checkpoint does not allow or a budget already reached (the stored config against ``cfg``,
    the config planned now). A run at its budget whose results are missing or not those of its
    final commit (stopped or killed while it wrote them) is not refused: returns its commit
    record, from which :func:`complete_results` writes them; None otherwise."""
    from janus.algorithms.base import algorithm
    from janus.runtime import checkpoints

    algo = algorithm(cfg.workload.algo)
    stored = resume_checks.stored_config(out_dir)
    resume_checks.check_resumable(out_dir, stored)
    checkpoint_dir = str(cfg.runtime.checkpoint_dir)
    state = checkpoints.read_run_state(checkpoint_dir)
    resume_checks.check_changes(out_dir, stored, cfg)  # as planned: resolved, --quick
    at_budget = bool(state) and int(state["trained"]) >= algo.budget(cfg).total_updates
    if at_budget and resume_checks.results_missing(out_dir, state) is not None:
        checkpoints.verify_committed(checkpoint_dir, state)  # results only from a commit whose files are whole
        return state
    resume_checks.check_budget(out_dir, cfg, state, algo.budget(cfg).total_updates, "--total_env_steps")
    resume_checks.check_checkpoint_kept(out_dir, checkpoint_dir, state)
    checkpoints.verify_committed(checkpoint_dir, state)  # a corrupt file is refused first
    _print_resume_point(cfg, state)
    return None


def complete_results(out_dir: Path, cfg: RunConfig, state: dict[str, Any], command: str = "janus train") -> int:
    """Write the results of a run that reached its budget (commit record ``state``) but whose
    results are missing or stale; nothing is trained and config.yaml is not changed."""
    from janus.runtime.summary import result_from_run_state

    why = resume_checks.results_missing(out_dir, state)
    print(f"janus train: the run is already at its budget ({int(state['env_steps']):,} env steps, "
          f"{int(state['trained']):,} updates, final checkpoint committed) but {why}: the session that trained "
          f"it stopped before writing its results; writing them from {Path(str(cfg.runtime.checkpoint_dir)) / 'run_state.json'} "
          f"(nothing is trained)", flush=True)
    run = result_from_run_state(cfg, state)
    run.stop_reason = budget_reason(run.to_dict())
    paths = write_files(command, out_dir, [run], [], run.name, train=True)
    print("\n" + train_summary(run.to_dict()), flush=True)
    print("wrote " + ", ".join(str(p) for p in paths.values()), flush=True)
    return 0


def run_command(args: argparse.Namespace, cfg: RunConfig, hooks: CallbackHooks | None = None) -> int:
    """Run a parsed ``janus`` command; returns the exit code. ``hooks``: the callbacks of a
    ``train`` run (:func:`janus.train`), called around it and on every poll."""
    if args.command == "tune":
        from janus.harness.tune.command import run_tune

        return run_tune(args, cfg)
    if hooks is not None:
        hooks.check(cfg)  # a callback that cannot work in this run is refused before anything is written
    repeats_of(args)  # a bad --repeats is refused before anything is written
    if getattr(args, "wandb", False):
        from janus.harness.reports.wandb_log import require_wandb

        require_wandb()  # refused before anything is written, not once the run has started
    configs, skipped, baseline = plan(args, cfg)
    for c in configs:  # this machine's bounds (workers, envs, processes, replay memory), before anything is written
        check_resources(c)
    label = args.command if args.command != "eval" else f"eval-{args.sweep}"
    if args.command == "train" and getattr(args, "resume", None) is None:
        run_folder.check_new_checkpoint_dir(configs[0].runtime.checkpoint_dir)  # one chosen in the YAML
    out_dir, lock = run_folder.open_out_dir(args, label)
    with lock:
        return _run_in(args, label, out_dir, configs, skipped, baseline, hooks)


def _run_in(args: argparse.Namespace, label: str, out_dir: Path, configs: list[RunConfig],
            skipped: list[dict[str, str]], baseline: str, hooks: CallbackHooks | None = None) -> int:
    """Run ``configs`` into the locked folder ``out_dir``: a resumed run's config.yaml is
    written once it has committed a checkpoint, a new run's at once."""
    resumed: resume_commit.ResumeCommit | None = None
    if args.command == "train":
        prepared = [prepare_train(args, c, out_dir) for c in configs]
        configs = [c for c, _ in prepared]
        if getattr(args, "resume", None) is not None:
            committed = check_resume(out_dir, configs[0])
            if committed is not None:  # at its budget, results lost with the session that trained it
                with stopping.saving():
                    return complete_results(out_dir, configs[0], committed, command_line(label, args))
            ckpt = configs[0].runtime.checkpoint_dir
            best = configs[0].runtime.best_dir
            resumed = resume_commit.ResumeCommit(out_dir / "config.yaml", prepared[0][1], Path(ckpt) if ckpt else None,
                                                 Path(best) / "policy.pt" if best else None)
            resumed.start()
        else:
            from janus.runtime.plan import plan_of

            for c in configs:  # a run refused here leaves no config.yaml, so its --out can be used again
                plan_of(c).check_progress_possible()
            fileio.write_text(out_dir / "config.yaml", prepared[0][1])
    # a stop signal interrupts only a run's start-up and loop (janus.stopping): one that comes while
    # results, charts or the resumed run's config.yaml are written is recorded and acted on after
    with stopping.saving():
        try:
            # a resumed run's live logs and results wait for its first commit, like its config.yaml
            ready = (lambda: resumed.written) if resumed is not None else None
            return _run_configs(args, label, out_dir, configs, skipped, baseline, ready, hooks)
        except Exception:
            if args.command == "train" and resumed is None:
                ckpt = configs[0].runtime.checkpoint_dir
                if run_folder.clear_unstarted(out_dir, ckpt):
                    print(f"janus: the run failed before its first env step; removed what it had written in {out_dir}, "
                          "so the same command can run again", file=sys.stderr, flush=True)
            raise
        finally:
            if resumed is not None:
                resumed.finish()


def _run_configs(args: argparse.Namespace, label: str, out_dir: Path, configs: list[RunConfig],
                 skipped: list[dict[str, str]], baseline: str, ready: Callable[[], bool] | None = None,
                 hooks: CallbackHooks | None = None) -> int:
    """Run each configuration (``repeats`` times, interleaved, for compare and eval; progress,
    interrupts) and write the results: a repeated configuration as its median run."""
    mode = "on-policy" if configs[0].janus.is_on_policy else "off-policy"
    repeats = repeats_of(args)
    times = f", each {repeats} times interleaved" if repeats > 1 else ""
    print(f"janus {label}: {len(configs)} configuration(s), {mode}{times}, output in {out_dir}", flush=True)
    if args.quick and args.command != "train":
        print(f"  {SMOKE_NOTE}", flush=True)
    for s in skipped:
        print(f"  skipped {s['name']}: {s['reason']}", flush=True)
    probed = None
    if args.command != "train":  # --quick too: its figures are printed, and first use would go to the first
        warm_up(configs[0])
        if not args.quick:  # a smoke test measures nothing
            configs, probed = measured_granularity(args, configs)
    runs: list[RunResult] = []
    order = interleaved(configs, repeats)
    for i, (round_, c) in enumerate(order, 1):
        j = c.janus
        if round_ == 0:
            print(
                f"[{i}/{len(order)}] {c.name}: placement={j.placement} (resolved), actor_device={j.actor_device}, "
                f"learner_device={j.learner_device}, overlap_collect={j.overlap_collect}, "
                f"overlap_select={j.overlap_select}, g_collect={j.g_collect:g}, g_select={j.g_select:g}",
                flush=True,
            )
            if on_synchronous_loop(c):
                print(f"  synchronous loop: one thread, no runtime; {c.workload.num_actors} actors take turns", flush=True)
            else:
                print(f"  runtime: backend={c.runtime.backend}, workers={c.workload.num_actors}, "
                      f"workers_per_node={c.runtime.workers_per_node or c.workload.num_actors}", flush=True)
        else:
            print(f"[{i}/{len(order)}] {c.name}, round {round_ + 1} of {repeats}", flush=True)
        progress = progress_line(c, quiet=hooks is not None and hooks.replaces_progress_line)
        if hooks is not None:  # a hook that raises here fails the run before anything runs or is opened
            hooks.start(out_dir, c)
        live = live_run(args, label, out_dir, c, runs, skipped, baseline, ready)  # None: compare, eval
        try:
            run = run_configuration(c, progress, observers(live, hooks, evaluation_lines(c, progress)))
        except KeyboardInterrupt as exc:  # Ctrl-C / SIGTERM, a callback's stop: write what ran so far, then stop
            partial = _close_cut_short(exc, stopping.reason_of(exc), stopping.outcome_of(exc), progress, live)
            so_far = [*runs, partial] if partial is not None else runs  # stopped as it started: the earlier ones
            if so_far and not isinstance(exc, stopping.Aborted):
                write_outputs(args, label, out_dir, summarize(so_far), skipped, baseline)
                if hooks is not None and partial is not None:
                    hooks.end(partial)
            raise
        except Exception as exc:  # the run failed; one that committed its final checkpoint is written with it
            partial = _close_cut_short(exc, first_line(exc), "failed", progress, live)
            written = False
            if partial is not None:
                try:
                    write_outputs(args, label, out_dir, summarize([*runs, partial]), skipped, baseline)
                    written = True
                except OSError as err:  # a full disk: the run's own error is the one raised
                    print(f"janus: could not write the failed run's results ({err.strerror or err})", file=sys.stderr)
            if not written:
                _say_failed(out_dir, exc)
            raise
        except BaseException as exc:
            if live is not None:
                live.close()  # a failed run keeps the event file as last flushed
            _say_failed(out_dir, exc)
            raise
        if live is not None:
            live.finish(run)
        total_s = time.perf_counter() - progress.start  # the progress line's clock: start-up and shutdown too
        ended(run, budget_reason(as_dict(run)), total_s)
        done = (f"{int(run['counts'].get('run_env_steps', 0)):,} env steps, {run['env_steps_per_s']:,.0f} env-steps/s"
                if args.command == "train" and run.get("learning_curve") is not None else f"{run['samples_per_s']:,.0f} samples/s")
        progress.finish(f"{done} in {run['wall_s']:.2f}s of running ({total_s:.1f}s with start-up and shutdown)")
        runs.append(run)
    summary = summarize(runs)
    if probed is not None:
        for row in summary:
            if row["name"] == "janus":
                row["granularity_probe"] = {
                    "samples_per_s": {str(g): v for g, v in probed.samples_per_s.items()},
                    "without_overlap": {str(g): v for g, v in probed.without_overlap.items()},
                    "chosen": probed.chosen, "overlap": probed.overlap, "iterations": probed.iterations}
    write_outputs(args, label, out_dir, summary, skipped, baseline)
    if hooks is not None and runs:
        hooks.end(runs[-1])
    if probed is not None:
        note = probed.note()
        print("\n" + probed.describe() + (f"\n{note}" if note else ""), flush=True)
    placement = placement_note(configs) if args.command == "compare" else None
    if placement:
        print(placement, flush=True)
    return 0


def _close_cut_short(exc: BaseException, reason: str, outcome: str, progress: ProgressLine,
                     live: LiveRun | None) -> Any:
    """A run that ended early (stopped, or failed after its final commit): the run so far that rides
    on ``exc`` (None if none) is recorded as ended for ``reason`` and handed to the live logs, which
    are closed either way. Returns that run so far."""
    partial = getattr(exc, "partial_result", None)
    if partial is not None:
        ended(partial, reason, time.perf_counter() - progress.start)
        progress.finish(f"{outcome} after {partial['wall_s']:.2f}s; writing the run so far")
        if live is not None:
            live.finish(partial)
    if live is not None:
        live.close()
    return partial


def _say_failed(out_dir: Path, exc: BaseException) -> None:
    """A failed run's periodic results say ``failed`` (with why), never ``running`` (:mod:`~janus.harness.run_ending`)."""
    from janus.harness.run_ending import mark_failed, reason_of_failure

    try:
        with stopping.saving():
            mark_failed(out_dir, reason_of_failure(exc))
    except OSError as err:  # the disk may still be full: the run's own error is the one raised
        print(f"janus: could not mark {out_dir / 'results.json'} failed ({err.strerror or err})", file=sys.stderr)


def placement_note(configs: list[RunConfig]) -> str | None:
    """Why the janus configuration's placement is the others' (no faster one is usable here)."""
    janus_cfg = next((c for c in configs if c.name == "janus"), None)
    if janus_cfg is None or janus_cfg.janus.placement != "cpu_pageable":
        return None
    reasons = "; ".join(f"{p}: {why}" for p, why in available_placements().items() if why)
    return f"placement does not pay on this machine: janus runs on cpu_pageable like the others ({reasons})"


def measured_granularity(args: argparse.Namespace, configs: list[RunConfig]) -> tuple[list[RunConfig], ProbeResult | None]:
    """compare without ``--g_*`` flags: the janus configuration's granularity by a short probe
    (:mod:`janus.harness.experiments.granularity`); the granularity configuration uses it too when it is
    above 1 (else it keeps its own, so it still shows the knob alone)."""
    if args.command != "compare" or getattr(args, "g_collect", None) is not None or getattr(args, "g_select", None) is not None:
        return configs, None
    janus_cfg = next(c for c in configs if c.name == "janus")
    print("  measuring the janus configuration's granularity (short runs, not recorded):", flush=True)
    result = probe(janus_cfg, lambda c: run_configuration(c, None, None), progress=lambda line: print(f"    {line}", flush=True))
    print(f"  {result.describe()}", flush=True)
    chosen = [with_granularity(c, result.chosen, result.overlap) if c.name == "janus"
              else with_granularity(c, result.chosen) if c.name == "granularity" and result.chosen != 1 else c
              for c in configs]
    return resolve_all(chosen), result


def repeats_of(args: argparse.Namespace) -> int:
    """How many times each configuration runs: ``--repeats``, else 3 (1 for train and --quick)."""
    if args.command == "train":
        return 1
    given = getattr(args, "repeats", None)
    if given is not None:
        if isinstance(given, bool) or not isinstance(given, int) or given < 1:
            raise invalid("--repeats", given, "an integer >= 1")
        return given
    return 1 if args.quick else DEFAULT_REPEATS


def warm_up(cfg: RunConfig) -> None:
    """One tiny run of ``cfg`` before any measured one (``--quick`` included), not recorded: the
    first run of a process pays for compiling or loading the replay kernels for its buffer's
    layout (seconds when they compile, inside the timed run: the runtime's own warm-up loads only
    a one-field buffer's), torch's kernels and first allocations, which would go to whichever
    configuration ran first (a --quick compare showed 6.88x where warm runs give 1.48x)."""
    print("  warm-up: one tiny run of the first configuration (not measured; kernels and first-use costs)", flush=True)
    run_configuration(resolve(quick(cfg)), None, None)


def live_run(args: argparse.Namespace, label: str, out_dir: Path, cfg: RunConfig, runs: list[Any],
             skipped: list[dict[str, Any]], baseline: str, ready: Callable[[], bool] | None = None) -> LiveRun | None:
    """The live logs of one ``janus train`` run (TensorBoard, periodic results files); compare and
    eval measure throughput and get none (a periodic chart would cost the run it measures)."""
    if args.command != "train":
        return None
    from janus.runtime.plan import plan_of

    def save(so_far: Any) -> None:
        write_files(command_line(label, args), out_dir, [*runs, so_far], skipped, baseline, train=True)

    tensorboard = run_folder.inside(out_dir, "tensorboard", "--tensorboard") if getattr(args, "tensorboard", False) else None
    if getattr(args, "wandb", False):
        run_folder.inside(out_dir, "wandb", "--wandb")
    earlier = plan_of(cfg).resumed  # a resumed run's earlier sessions were logged back then
    return LiveRun(save, cfg.runtime.results_interval_s, tensorboard, skip_episodes=len(earlier.get("curve", [])),
                   skip_evaluations=len(earlier.get("evaluations", [])), ready=ready,
                   skip_rows=len(earlier.get("train_metrics", [])), wandb=wandb_opener(args, out_dir, cfg))


def wandb_opener(args: argparse.Namespace, out_dir: Path, cfg: RunConfig) -> Callable[[], Any] | None:
    """What opens the W&B run of ``--wandb`` (project ``--wandb_project``, the resolved config), under ``out_dir``."""
    if not getattr(args, "wandb", False):
        return None
    from janus.harness.reports.wandb_log import WandbWriter
    from janus.result import reported_config

    project = getattr(args, "wandb_project", None) or "janus"
    return lambda: WandbWriter(out_dir, project, f"{out_dir.name}/{cfg.name}", reported_config(cfg))


def progress_line(cfg: RunConfig, quiet: bool = False) -> ProgressLine:
    """The progress line of one configuration: an RL run's in env steps, the synthetic workload's in
    updates (``quiet``: not drawn, a :class:`janus.Progress` callback prints it instead; its
    evaluation and final lines still are)."""
    from janus.algorithms.base import algorithm

    label = f"  {cfg.name}"
    line = EnvStepProgress(label) if algorithm(cfg.workload.algo).has_policy else ProgressLine(label)
    line.quiet = quiet
    return line


def evaluation_lines(cfg: RunConfig, progress: ProgressLine) -> EvaluationLines | None:
    """One console line per periodic evaluation of ``cfg`` (None where it does not evaluate; a
    resumed run's earlier evaluations are not shown again)."""
    if not cfg.runtime.eval_interval_steps:
        return None
    from janus.runtime.plan import plan_of

    plan = plan_of(cfg)
    if not plan.evaluates:
        return None
    return EvaluationLines(progress.event, skip=len(plan.resumed.get("evaluations", [])))


def observers(*each: Observer | None) -> Observer | None:
    """One observer of a run that calls each given one in turn (None when none is given)."""
    given = [o for o in each if o is not None]
    if len(given) <= 1:
        return given[0] if given else None

    def observe(status: RunStatus, result_so_far: Callable[[], RunResult]) -> None:
        for observer in given:
            observer(status, result_so_far)

    return observe


def command_line(label: str, args: argparse.Namespace | None = None) -> str:
    """The command as typed (``janus train ...``; ``args.invocation`` when set: a :func:`janus.train`
    call), for results.json."""
    invocation = getattr(args, "invocation", None)
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


def write_outputs(args: argparse.Namespace, label: str, out_dir: Path, runs: list[Any], skipped: list[dict[str, Any]],
                  baseline: str) -> None:
    """The table, results.json/csv, charts and learning curve of ``runs`` (TensorBoard: :class:`LiveRun`).

    A train run leads with its return, evaluations, env-steps/s and time; its data-path table and
    runtime figures are printed with ``--verbose`` only (results.json holds them always)."""
    train = getattr(args, "command", label) == "train"
    rl = any(acts_in_env(as_dict(r)) for r in runs)  # a synthetic train run measures the data path: its table leads
    verbose = bool(getattr(args, "verbose", False)) or not train or not rl
    if verbose:
        print()
        print(format_table(annotate(runs, baseline=baseline), baseline=baseline))
    paths = write_files(command_line(label, args), out_dir, runs, skipped, baseline, train=train)
    for run in runs:
        if verbose and "runtime" in run:
            print(runtime_summary(run["runtime"], run["name"]))
        if train:
            hint = None if verbose else ("verbose=True" if getattr(args, "invocation", None) else "--verbose")
            print("\n" + train_summary(as_dict(run), hint))
        elif "final_mean_return" in run:
            print(f"\n{run['name']}: mean return of the last 20 episodes {run['final_mean_return']:.1f} "
                  f"({run['episodes']} episodes, {run['env_steps_per_s']:,.0f} env-steps/s)")
    if getattr(args, "tensorboard", False):
        paths["tensorboard"] = out_dir / "tensorboard"
    if getattr(args, "wandb", False):
        paths["wandb"] = out_dir / "wandb"
    print("\nwrote " + ", ".join(str(p) for p in paths.values()))
