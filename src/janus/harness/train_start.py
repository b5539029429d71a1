"""The start of a ``janus train`` run in its folder: its checkpoint folders and config.yaml's text, and
for a resumed run the checks of :mod:`janus.harness.resume_checks` in order (and the results of a run at
its budget that its session did not write)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from janus import timeline
from janus.config import RunConfig, recorded
from janus.harness import resume_checks, run_folder
from janus.harness.outputs import write_files
from janus.harness.reports.train import budget_reason, train_summary

if TYPE_CHECKING:
    from janus.config.request import RunRequest


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


def prepare_train(request: RunRequest, cfg: RunConfig, out_dir: Path) -> tuple[RunConfig, str]:
    """Checkpoints for RL runs go to OUT/checkpoint; returns the config to run and the text of
    OUT/config.yaml (the resolved config, as :func:`janus.config.recorded` records it), which
    :func:`run_command` writes."""
    timeline.mark("run_folder")
    resume = request.resume is not None
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
    resume_checks.check_target(out_dir, cfg, state)
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
