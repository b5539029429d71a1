"""What each command runs, given its request and configuration: plan the configurations, run them
(progress, live logs, stops), report and save (:func:`run_command`: ``janus train|compare|eval|tune``
and :func:`janus.train` alike)."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from janus import fileio, stopping
from janus.config import RunConfig, resolve
from janus.config.command_settings import quick
from janus.config.resources import check_resources
from janus.errors import invalid
from janus.harness import resume_commit, run_folder
from janus.harness.experiments.granularity import ProbeResult, probe, with_granularity
from janus.harness.experiments.repeats import DEFAULT_REPEATS, SMOKE_NOTE, interleaved, summarize
from janus.harness.experiments.sweeps import compare_configs, resolve_all, sweep_configs
from janus.harness.outputs import ChartImportAtGoal, command_line, placement_note, write_files, write_outputs
from janus.harness.reports.live import LiveRun
from janus.harness.reports.progress import EnvStepProgress, EvaluationLines, ProgressLine
from janus.harness.reports.train import end_reason, ended, solved_line, whole_budget
from janus.harness.train_start import check_resume, complete_results, prepare_train
from janus.result import RunResult, as_dict
from janus.runtime.run import Observer
from janus.runtime.status import RunStatus
from janus.runtime.synchronous import on_synchronous_loop, run_configuration
from janus.user_code import first_line

if TYPE_CHECKING:
    from janus.callbacks import CallbackHooks
    from janus.config.request import RunRequest


def plan(request: RunRequest, cfg: RunConfig) -> tuple[list[RunConfig], list[dict[str, str]], str]:
    """The configurations a command runs, those skipped here, and the baseline name for speedups.

    ``quick`` is already in ``cfg`` (:func:`janus.config.build.build_config`: below the settings given)."""
    skipped: list[dict[str, str]] = []
    if request.command == "compare":
        configs = compare_configs(cfg)
    elif request.command == "train":
        # --name, else the YAML's name: (a resumed run's is in its config.yaml), else "train"
        named = request.resume is not None or cfg.name != RunConfig.name
        configs = [replace(cfg, name=request.name or (cfg.name if named else "train"))]
    else:
        configs, skipped = sweep_configs(cfg, str(request.sweep))
    configs = [whole_budget(c) for c in resolve_all(configs)]
    baseline = "baseline" if request.command == "compare" else configs[0].name
    return configs, skipped, baseline


def run_command(request: RunRequest, cfg: RunConfig, hooks: CallbackHooks | None = None) -> int:
    """Run ``request`` (``cfg``: its configuration, :func:`janus.harness.configured.configured`); returns the
    exit code. ``hooks``: the callbacks of a
    ``train`` run (:func:`janus.train`), called around it and on every poll."""
    if request.command == "tune":
        from janus.harness.tune.command import run_tune

        return run_tune(request, cfg)
    if hooks is not None:
        hooks.check(cfg)  # a callback that cannot work in this run is refused before anything is written
    repeats_of(request)  # a bad --repeats is refused before anything is written
    if request.wandb:
        from janus.harness.reports.wandb_log import require_wandb

        require_wandb()  # refused before anything is written, not once the run has started
    configs, skipped, baseline = plan(request, cfg)
    for c in configs:  # this machine's bounds (workers, envs, processes, replay memory), before anything is written
        check_resources(c)
    label = request.command if request.command != "eval" else f"eval-{request.sweep}"
    if request.command == "train" and request.resume is None:
        run_folder.check_new_checkpoint_dir(configs[0].runtime.checkpoint_dir)  # one chosen in the YAML
    out_dir, lock = run_folder.open_out_dir(request, label)
    with lock:
        return _run_in(request, label, out_dir, configs, skipped, baseline, hooks)


def _run_in(request: RunRequest, label: str, out_dir: Path, configs: list[RunConfig],
            skipped: list[dict[str, str]], baseline: str, hooks: CallbackHooks | None = None) -> int:
    """Run ``configs`` into the locked folder ``out_dir``: a resumed run's config.yaml is
    written once it has committed a checkpoint, a new run's at once."""
    resumed: resume_commit.ResumeCommit | None = None
    if request.command == "train":
        prepared = [prepare_train(request, c, out_dir) for c in configs]
        configs = [c for c, _ in prepared]
        if request.resume is not None:
            committed = check_resume(out_dir, configs[0])
            if committed is not None:  # at its budget, results lost with the session that trained it
                with stopping.saving():
                    return complete_results(out_dir, configs[0], committed, command_line(label, request))
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
            return _run_configs(request, label, out_dir, configs, skipped, baseline, ready, hooks)
        except Exception:
            if request.command == "train" and resumed is None:
                ckpt = configs[0].runtime.checkpoint_dir
                if run_folder.clear_unstarted(out_dir, ckpt):
                    print(f"janus: the run failed before its first env step; removed what it had written in {out_dir}, "
                          "so the same command can run again", file=sys.stderr, flush=True)
            raise
        finally:
            if resumed is not None:
                resumed.finish()


def _run_configs(request: RunRequest, label: str, out_dir: Path, configs: list[RunConfig],
                 skipped: list[dict[str, str]], baseline: str, ready: Callable[[], bool] | None = None,
                 hooks: CallbackHooks | None = None) -> int:
    """Run each configuration (``repeats`` times, interleaved, for compare and eval; progress,
    interrupts) and write the results: a repeated configuration as its median run."""
    mode = "on-policy" if configs[0].janus.is_on_policy else "off-policy"
    repeats = repeats_of(request)
    times = f", each {repeats} times interleaved" if repeats > 1 else ""
    print(f"janus {label}: {len(configs)} configuration(s), {mode}{times}, output in {out_dir}", flush=True)
    if request.quick and request.command != "train":
        print(f"  {SMOKE_NOTE}", flush=True)
    for s in skipped:
        print(f"  skipped {s['name']}: {s['reason']}", flush=True)
    probed = None
    if request.command != "train":  # --quick too: its figures are printed, and first use would go to the first
        warm_up(configs[0])
        if not request.quick:  # a smoke test measures nothing
            configs, probed = measured_granularity(request, configs)
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
        live = live_run(request, label, out_dir, c, runs, skipped, baseline, ready)  # None: compare, eval
        try:
            run = run_configuration(c, progress, observers(live, hooks, evaluation_lines(c, progress), ChartImportAtGoal()))
        except KeyboardInterrupt as exc:  # Ctrl-C / SIGTERM, a callback's stop: write what ran so far, then stop
            partial = _close_cut_short(exc, stopping.reason_of(exc), stopping.outcome_of(exc), progress, live)
            so_far = [*runs, partial] if partial is not None else runs  # stopped as it started: the earlier ones
            if so_far and not isinstance(exc, stopping.Aborted):
                write_outputs(request, label, out_dir, summarize(so_far), skipped, baseline)
                if hooks is not None and partial is not None:
                    hooks.end(partial)
            raise
        except Exception as exc:  # the run failed; one that committed its final checkpoint is written with it
            partial = _close_cut_short(exc, first_line(exc), "failed", progress, live)
            written = False
            if partial is not None:
                try:
                    write_outputs(request, label, out_dir, summarize([*runs, partial]), skipped, baseline)
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
        ended(run, end_reason(as_dict(run)), total_s)
        done = (f"{int(run['counts'].get('run_env_steps', 0)):,} env steps, {run['env_steps_per_s']:,.0f} env-steps/s"
                if request.command == "train" and run.get("learning_curve") is not None else f"{run['samples_per_s']:,.0f} samples/s")
        progress.finish(f"{done} in {run['wall_s']:.2f}s of running ({total_s:.1f}s with start-up and shutdown)")
        solved = solved_line(as_dict(run))
        if solved is not None:
            print(f"janus: {c.name}: {solved}", flush=True)
        runs.append(run)
    summary = summarize(runs)
    if probed is not None:
        for row in summary:
            if row["name"] == "janus":
                row["granularity_probe"] = {
                    "samples_per_s": {str(g): v for g, v in probed.samples_per_s.items()},
                    "without_overlap": {str(g): v for g, v in probed.without_overlap.items()},
                    "chosen": probed.chosen, "overlap": probed.overlap, "iterations": probed.iterations}
    write_outputs(request, label, out_dir, summary, skipped, baseline)
    if hooks is not None and runs:
        hooks.end(runs[-1])
    if probed is not None:
        note = probed.note()
        print("\n" + probed.describe() + (f"\n{note}" if note else ""), flush=True)
    placement = placement_note(configs) if request.command == "compare" else None
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


def measured_granularity(request: RunRequest, configs: list[RunConfig]) -> tuple[list[RunConfig], ProbeResult | None]:
    """compare without ``--g_*`` flags: the janus configuration's granularity by a short probe
    (:mod:`janus.harness.experiments.granularity`); the granularity configuration uses it too when it is
    above 1 (else it keeps its own, so it still shows the knob alone)."""
    if request.command != "compare" or request.settings.get("g_collect") is not None or request.settings.get("g_select") is not None:
        return configs, None
    janus_cfg = next(c for c in configs if c.name == "janus")
    print("  measuring the janus configuration's granularity (short runs, not recorded):", flush=True)
    result = probe(janus_cfg, lambda c: run_configuration(c, None, None), progress=lambda line: print(f"    {line}", flush=True))
    print(f"  {result.describe()}", flush=True)
    chosen = [with_granularity(c, result.chosen, result.overlap) if c.name == "janus"
              else with_granularity(c, result.chosen) if c.name == "granularity" and result.chosen != 1 else c
              for c in configs]
    return resolve_all(chosen), result


def repeats_of(request: RunRequest) -> int:
    """How many times each configuration runs: ``--repeats``, else 3 (1 for train and --quick)."""
    if request.command == "train":
        return 1
    given = request.repeats
    if given is not None:
        if isinstance(given, bool) or not isinstance(given, int) or given < 1:
            raise invalid("--repeats", given, "an integer >= 1")
        return given
    return 1 if request.quick else DEFAULT_REPEATS


def warm_up(cfg: RunConfig) -> None:
    """One tiny run of ``cfg`` before any measured one (``--quick`` included), not recorded: the
    first run of a process pays for compiling or loading the replay kernels for its buffer's
    layout (seconds when they compile, inside the timed run: the runtime's own warm-up loads only
    a one-field buffer's), torch's kernels and first allocations, which would go to whichever
    configuration ran first (a --quick compare showed 6.88x where warm runs give 1.48x)."""
    print("  warm-up: one tiny run of the first configuration (not measured; kernels and first-use costs)", flush=True)
    run_configuration(resolve(quick(cfg)), None, None)


def live_run(request: RunRequest, label: str, out_dir: Path, cfg: RunConfig, runs: list[Any],
             skipped: list[dict[str, Any]], baseline: str, ready: Callable[[], bool] | None = None) -> LiveRun | None:
    """The live logs of one ``janus train`` run (TensorBoard, periodic results files); compare and
    eval measure throughput and get none (a periodic chart would cost the run it measures)."""
    if request.command != "train":
        return None
    from janus.runtime.plan import plan_of

    def save(so_far: Any) -> None:
        write_files(command_line(label, request), out_dir, [*runs, so_far], skipped, baseline, train=True)

    tensorboard = run_folder.inside(out_dir, "tensorboard", request.naming("tensorboard")) if request.tensorboard else None
    if request.wandb:
        run_folder.inside(out_dir, "wandb", request.naming("wandb"))
    earlier = plan_of(cfg).resumed  # a resumed run's earlier sessions were logged back then
    return LiveRun(save, cfg.runtime.results_interval_s, tensorboard, skip_episodes=len(earlier.get("curve", [])),
                   skip_evaluations=len(earlier.get("evaluations", [])), ready=ready,
                   skip_rows=len(earlier.get("train_metrics", [])), wandb=wandb_opener(request, out_dir, cfg))


def wandb_opener(request: RunRequest, out_dir: Path, cfg: RunConfig) -> Callable[[], Any] | None:
    """What opens the W&B run of ``--wandb`` (project ``--wandb_project``, the resolved config), under ``out_dir``."""
    if not request.wandb:
        return None
    from janus.harness.reports.wandb_log import WandbWriter
    from janus.result import reported_config

    project = request.wandb_project or "janus"
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


