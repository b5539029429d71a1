"""A run's :class:`~janus.result.RunResult`: built from the Orchestrator's status and every
component's counters (:func:`summarize`), or from a commit record alone
(:func:`result_from_run_state`); and the learning-curve and training-scalar columns it holds.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from janus.algorithms.base import algorithm
from janus.config import RunConfig
from janus.result import RunResult, reported_config
from janus.runtime.backends.base import Backend
from janus.runtime.command_clock import seconds_since_command
from janus.runtime.plan import RunPlan, evaluation_on
from janus.runtime.status import ReplayHostCounters, RunCounters, RunStatus, TrainerCounters


def produced(reported: int, current: float, retired: int) -> int:
    """What every worker instance of this session produced (env steps, or transitions), retired
    instances included, on every backend.

    Two lower bounds, the larger wins: the Orchestrator's count of each instance's last report
    (``reported``: live on every backend: a process-backend worker's own counters reach the learner
    only when it stops, and a killed one's never), and the current instances' counters
    (``current``) plus the retired ones' as the Orchestrator last heard them (``retired``; ahead
    when a stop drained pieces after the last status)."""
    return max(int(reported), int(current) + int(retired))


def summarize(plan: RunPlan, backend: Backend, status: RunStatus, counters: RunCounters, wall: float,
              outcome: str = "finished") -> RunResult:
    """The run's :class:`RunResult`: samples/s, stage times, counts and the runtime figures.
    The counts of the run state this session resumed from start the whole run's; ``outcome``: its
    ``status`` (finished, interrupted, stopped or running)."""
    cfg, earlier = plan.cfg, plan.resumed
    workers, tm, trainer = counters.workers.values(), counters.replay, counters.trainer
    rows = plan.spec.row_steps  # the replay counts rows: a whole trajectory each for IMPALA/APPO
    transitions = produced(status.worker_transitions, sum(w.transitions for w in workers), status.retired_transitions) * rows
    trained = int(trainer.batches_trained if trainer.batches_trained is not None else status.trained)
    update_s = trainer.update_s
    rollout_s = sum(w.rollout_s for w in workers) / max(len(workers), 1)  # per worker
    limiter = plan.limiter
    inserted = int(tm.transitions_inserted) * rows
    curve = learning_curve(status.curve)
    metrics = metric_columns(status.train_metrics)
    env_steps = produced(status.worker_env_steps, sum(w.env_steps for w in workers), status.retired_env_steps)
    faults = status.worker_errors
    return RunResult(
        name=cfg.name,
        config=reported_config(cfg),
        status=outcome,
        samples_per_s=trained * cfg.minibatch_size / wall,
        env_steps_per_s=transitions / wall,
        wall_s=wall,
        stage_s={
            "rollout": rollout_s,
            "collect": tm.collect_s,
            "select": tm.select_s,
            "update": update_s,
            "learner_wait": tm.learner_wait_s,
            "actor_blocked": tm.actor_blocked_s,
        },
        counts={
            "updates": trained, "transitions_produced": int(transitions),
            # this invocation's steps: the workers' now, plus those of instances a restart replaced
            "env_steps": env_steps,
            # the whole run's, over every session of a resumed run (= the above when not resumed)
            "run_env_steps": int(earlier.get("env_steps", 0)) + env_steps,
            "run_updates": int(earlier.get("trained", 0)) + trained,
            "transitions_inserted": inserted,
            "transitions_collected": int(tm.transitions_collected) * rows,
            "collect_calls": int(tm.collect_calls),
            "select_calls": int(tm.select_calls),
            "batches_selected": int(tm.batches_selected),
        },
        runtime={
            "backend": cfg.runtime.backend,
            "learner_utilization": update_s / wall if wall > 0 else 0.0,
            "learner_wait_s": trainer.wait_s,
            # the workers' share of the wall spent acting (the rest: waiting for room, parameters, messages)
            "actor_utilization": rollout_s / wall if wall > 0 else 0.0,
            **policy_lag(trainer, tm),
            "pacing": {  # the replay's rate limiter: its settings and how long each side waited on it
                "samples_per_insert": limiter.samples_per_insert, "min_size_to_sample": limiter.min_size_to_sample,
                "error_buffer": limiter.error_buffer, "largest_insert": limiter.insert_piece,
                "sample_batch": limiter.sample_batch,
                "insert_wait_s": tm.insert_wait_s, "sample_wait_s": tm.sample_wait_s,
                "pieces_dropped_at_stop": int(tm.pieces_dropped_at_stop),
            },
            "messages": backend.stats.as_dict(),
            "param_versions_published": int(trainer.versions_published),
            "param_fetches_per_node": {n: int(fetches) for n, fetches in counters.param_fetches.items()},
            "worker_restarts": status.restarts,
            "worker_errors": faults.get("recent", []),  # the newest 20
            "worker_errors_total": int(faults.get("total", 0)),
            "workers_unresponsive": int(faults.get("unresponsive_total", 0)),  # replaced for going silent (hung)
            "workers_abandoned": list(getattr(backend, "abandoned", [])),  # hung threads left running at the end
            "evaluations_abandoned": list(status.evaluations_abandoned),  # given up at the goal (hung)
            "stalls": status.stalls,
            "priorities_dropped": int(tm.priorities_dropped + trainer.priorities_dropped),
            # only a backend spread over nodes (Ray) says where each component ran
            "nodes": backend.node_summary(),
        },
        evaluations=list(status.evaluations) if plan.evaluates else None,
        train_metrics=metrics or None,
        **curve,
        **solved_fields(cfg, status.solved, float(earlier.get("wall_s", 0.0)), plan.evaluates),
    )


def solved_fields(cfg: RunConfig, solved: Mapping[str, Any] | None, earlier_s: float = 0.0,
                  evaluates: bool = True) -> dict[str, Any]:
    """A result's ``target_return``/``solved``/``solved_at_*`` fields from the evaluation that reached the
    target (:attr:`RunStatus.solved`; None: none did). ``earlier_s``: a resumed run's earlier running time;
    a ``solved`` without ``at`` (rebuilt from a commit) has no ``solved_at_s``."""
    target = cfg.runtime.target_return
    if target is None or not evaluates:
        return {}
    if solved is None:
        return {"target_return": target, "solved": False}
    at = solved.get("at")
    return {"target_return": target, "solved": True,
            "solved_at_s": earlier_s + seconds_since_command(float(at)) if at is not None else None,
            "solved_at_env_steps": int(solved["env_steps"]), "solved_at_train_s": float(solved["train_s"])}


def solved_in(evaluations: list[dict[str, Any]], target: float | None) -> dict[str, Any] | None:
    """The first of ``evaluations`` whose mean return reaches ``target`` as :attr:`RunStatus.solved` has it
    (without ``at``: when it happened is not recorded with the evaluations), or None."""
    if target is None:
        return None
    for e in evaluations:
        if e.get("mean_return") is not None and float(e["mean_return"]) >= target:
            return {"env_steps": int(e["env_steps"]), "mean_return": float(e["mean_return"]), "train_s": float(e.get("wall_s", 0.0))}
    return None


def policy_lag(trainer: TrainerCounters, tm: ReplayHostCounters) -> dict[str, Any]:
    """An asynchronous run's policy lag (versions between the parameters that acted a batch's rows
    and those that trained on it: mean over batches, worst row) and the items dropped as too stale;
    nothing for a run whose rows carry no version."""
    batches = int(trainer.policy_lag_batches)
    if not batches:
        return {}
    return {"policy_lag": {"mean": trainer.policy_lag_sum / batches, "max": trainer.policy_lag_max,
                           "batches": batches, "items_dropped_stale": int(tm.items_dropped_stale),
                           "batches_dropped_stale": int(trainer.batches_dropped_stale)}}


RESULTS_FROM_RUN_STATE = (
    "the run's final commit (checkpoint/run_state.json): the session that trained it stopped before it wrote its "
    "results, and janus train --resume wrote them from the commit. Counts and rates are the whole run's; stage "
    "times, message counts and the other runtime figures are not recorded in a commit and are left out")


def result_from_run_state(cfg: RunConfig, state: Mapping[str, Any]) -> RunResult:
    """The finished :class:`RunResult` of a run that reached its budget, rebuilt from its commit
    record ``state`` (:func:`janus.runtime.checkpoints.read_run_state`): learning curve,
    evaluations, training scalars and counters as committed. What a commit does not record
    (stage times, messages) is left out, never made up, and ``runtime.results_from`` says so."""
    trained, steps, wall = int(state["trained"]), int(state["env_steps"]), float(state["wall_s"])
    counts = {"updates": trained, "env_steps": steps, "run_env_steps": steps, "run_updates": trained}
    if "inserted" in state:  # the replay's rows, in transitions
        counts["transitions_inserted"] = int(state["inserted"]) * algorithm(cfg.workload.algo).buffer_spec(cfg).row_steps
    return RunResult(
        name=cfg.name, config=reported_config(cfg), status="finished",
        samples_per_s=trained * cfg.minibatch_size / wall if wall > 0 else 0.0,
        env_steps_per_s=steps / wall if wall > 0 else 0.0, wall_s=wall, stage_s={}, counts=counts,
        runtime={"backend": cfg.runtime.backend, "worker_restarts": dict(state.get("restarts", {})),
                 "results_from": RESULTS_FROM_RUN_STATE},
        evaluations=[dict(e) for e in state.get("evaluations", [])] if evaluation_on(cfg, algorithm(cfg.workload.algo)) else None,
        train_metrics=metric_columns(list(state.get("train_metrics", []))) or None,
        **learning_curve([(t, s, r) for t, s, r in state.get("curve", [])]),
        **solved_fields(cfg, solved_in(list(state.get("evaluations", [])), cfg.runtime.target_return),
                        evaluates=evaluation_on(cfg, algorithm(cfg.workload.algo))),
    )


def metric_columns(rows: list[dict[str, float]]) -> dict[str, list[float | None]]:
    """The Orchestrator's rows of training scalars as columns (``None`` where a row lacks one)."""
    names: dict[str, None] = {}
    for row in rows:
        names.update(dict.fromkeys(row))
    return {name: [row.get(name) for row in rows] for name in names}


def rl_note(curve: list[tuple[float, int, float]], window: int = 20) -> str:
    """Progress text for RL runs: the mean return of the last ``window`` episodes."""
    if not curve:
        return ""
    last = [r for _, _, r in curve[-window:]]
    return f"return {sum(last) / len(last):.1f}"


def learning_curve(curve: list[tuple[float, int, float]], window: int = 20) -> dict[str, Any]:
    """Episode returns vs env steps and wall time, and the mean of the last ``window`` returns."""
    if not curve:
        return {}
    returns = [r for _, _, r in curve]
    last = returns[-window:]
    return {
        "learning_curve": {"wall_s": [t for t, _, _ in curve], "env_steps": [s for _, s, _ in curve], "return": returns},
        "episodes": len(returns),
        "final_mean_return": sum(last) / len(last),
    }
