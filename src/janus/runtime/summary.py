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
from janus.runtime.plan import RunPlan, evaluation_on


def produced(workers: Mapping[str, Mapping[str, float]], status: Mapping[str, Any], key: str) -> int:
    """What every worker instance of this session produced (``key``: ``env_steps`` or
    ``transitions``), retired instances included, on every backend.

    Two lower bounds, the larger wins: the Orchestrator's count of each instance's last report
    (live on every backend: a process-backend worker's own counters reach the learner only when it
    stops, and a killed one's never), and the current instances' counters plus the retired ones'
    as the Orchestrator last heard them (ahead when a stop drained pieces after the last status)."""
    reported = int(status.get(f"worker_{key}", 0))
    current = int(sum(c.get(key, 0) for c in workers.values())) + int(status.get(f"retired_{key}", 0))
    return max(reported, current)


def summarize(plan: RunPlan, backend: Backend, status: dict[str, Any], counters: dict[str, dict[str, float]], wall: float,
              outcome: str = "finished") -> RunResult:
    """The run's :class:`RunResult`: samples/s, stage times, counts and the runtime figures.
    The counts of the run state this session resumed from start the whole run's; ``outcome``: its
    ``status`` (finished, interrupted, stopped or running)."""
    cfg, earlier = plan.cfg, plan.resumed
    workers = {n: c for n, c in counters.items() if n.startswith("worker-")}
    tm, trainer = counters.get("trajectory_manager", {}), counters.get("trainer", {})
    proxies = {n: c for n, c in counters.items() if n.startswith("proxy-")}
    rows = plan.spec.row_steps  # the replay counts rows: a whole trajectory each for IMPALA/APPO
    transitions = produced(workers, status, "transitions") * rows
    trained = int(trainer.get("batches_trained", status.get("trained", 0)))
    update_s = trainer.get("update_s", 0.0)
    rollout_s = sum(c.get("rollout_s", 0.0) for c in workers.values()) / max(len(workers), 1)  # per worker
    limiter = plan.limiter
    inserted = int(tm.get("transitions_inserted", 0)) * rows
    curve = learning_curve(status.get("curve", []))
    metrics = metric_columns(status.get("train_metrics", []))
    env_steps = produced(workers, status, "env_steps")
    faults = status.get("worker_errors", {})
    return RunResult(
        name=cfg.name,
        config=reported_config(cfg),
        status=outcome,
        samples_per_s=trained * cfg.minibatch_size / wall,
        env_steps_per_s=transitions / wall,
        wall_s=wall,
        stage_s={
            "rollout": rollout_s,
            "collect": tm.get("buffer.collect_s", 0.0),
            "select": tm.get("buffer.select_s", 0.0),
            "update": update_s,
            "learner_wait": tm.get("buffer.learner_wait_s", 0.0),
            "actor_blocked": tm.get("buffer.actor_blocked_s", 0.0),
        },
        counts={
            "updates": trained, "transitions_produced": int(transitions),
            # this invocation's steps: the workers' now, plus those of instances a restart replaced
            "env_steps": env_steps,
            # the whole run's, over every session of a resumed run (= the above when not resumed)
            "run_env_steps": int(earlier.get("env_steps", 0)) + env_steps,
            "run_updates": int(earlier.get("trained", 0)) + trained,
            "transitions_inserted": inserted,
            "transitions_collected": int(tm.get("buffer.transitions_collected", 0)) * rows,
            "collect_calls": int(tm.get("buffer.collect_calls", 0)),
            "select_calls": int(tm.get("buffer.select_calls", 0)),
            "batches_selected": int(tm.get("buffer.batches_selected", 0)),
        },
        runtime={
            "backend": cfg.runtime.backend,
            "learner_utilization": update_s / wall if wall > 0 else 0.0,
            "learner_wait_s": trainer.get("wait_s", 0.0),
            # the workers' share of the wall spent acting (the rest: waiting for room, parameters, messages)
            "actor_utilization": rollout_s / wall if wall > 0 else 0.0,
            **policy_lag(trainer, tm),
            "pacing": {  # the replay's rate limiter: its settings and how long each side waited on it
                "samples_per_insert": limiter.samples_per_insert, "min_size_to_sample": limiter.min_size_to_sample,
                "error_buffer": limiter.error_buffer, "largest_insert": limiter.insert_piece,
                "sample_batch": limiter.sample_batch,
                "insert_wait_s": tm.get("buffer.insert_wait_s", 0.0), "sample_wait_s": tm.get("buffer.sample_wait_s", 0.0),
                "pieces_dropped_at_stop": int(tm.get("pieces_dropped_at_stop", 0)),
            },
            "messages": backend.stats.as_dict(),
            "param_versions_published": int(trainer.get("versions_published", 0)),
            "param_fetches_per_node": {n: int(c.get("param_fetches", 0)) for n, c in proxies.items()},
            "worker_restarts": status.get("restarts", {}),
            "worker_errors": faults.get("recent", []),  # the newest 20
            "worker_errors_total": int(faults.get("total", 0)),
            "workers_unresponsive": int(faults.get("unresponsive_total", 0)),  # replaced for going silent (hung)
            "workers_abandoned": list(getattr(backend, "abandoned", [])),  # hung threads left running at the end
            "evaluations_abandoned": list(status.get("evaluations_abandoned", [])),  # given up at the goal (hung)
            "stalls": status.get("stalls", 0),
            "priorities_dropped": int(tm.get("priorities_dropped", 0) + trainer.get("priorities_dropped", 0)),
            # only a backend spread over nodes (Ray) says where each component ran
            "nodes": backend.node_summary(),
        },
        evaluations=list(status.get("evaluations", [])) if plan.evaluates else None,
        train_metrics=metrics or None,
        **curve,
    )


def policy_lag(trainer: Mapping[str, float], tm: Mapping[str, float]) -> dict[str, Any]:
    """An asynchronous run's policy lag (versions between the parameters that acted a batch's rows
    and those that trained on it: mean over batches, worst row) and the items dropped as too stale;
    nothing for a run whose rows carry no version."""
    batches = int(trainer.get("policy_lag_batches", 0))
    if not batches:
        return {}
    return {"policy_lag": {"mean": trainer.get("policy_lag_sum", 0.0) / batches, "max": trainer.get("policy_lag_max", 0.0),
                           "batches": batches, "items_dropped_stale": int(tm.get("buffer.items_dropped_stale", 0)),
                           "batches_dropped_stale": int(trainer.get("batches_dropped_stale", 0))}}


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
