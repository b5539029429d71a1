"""The Orchestrator's status and the components' counters as typed snapshots: they carry every key
the status dict carried, convert back to it, and a result built from them records the same
results.json keys and values, read from the same counters, as when they were dicts."""

from __future__ import annotations

import dataclasses
import json
from types import SimpleNamespace
from typing import Any

from janus.config import JanusConfig, RunConfig, RuntimeConfig, SyntheticConfig, WorkloadConfig, resolve
from janus.runtime.backends.local import LocalBackend
from janus.runtime.messages import CountsMsg, EvaluationReport, PieceCounts, ReplayCounts, TrainerCounts
from janus.runtime.orchestrator import Orchestrator
from janus.runtime.plan import RunPlan
from janus.runtime.stalls import Rates
from janus.runtime.status import RunCounters, RunStatus, run_state
from janus.runtime.summary import summarize

STATUS_KEYS = [  # the Orchestrator's summary() dict, plus the "finished" every backend added to it
    "inserted", "trained", "pieces_inserted", "restarts", "failure", "stalls", "worker_errors", "curve", "env_steps",
    "elapsed_s", "evaluations", "retired_env_steps", "retired_transitions", "worker_env_steps", "worker_transitions",
    "train_metrics", "evaluations_abandoned", "finished",
    "solved"]  # issue 48: the evaluation that reached runtime.target_return


def orchestrator() -> Orchestrator:
    roles = {"trajectory_manager": "trajectory_manager", "trainer": "trainer", "evaluator": "evaluator",
             "proxy-0": "proxy", "worker-0": "worker", "worker-1": "worker"}
    return Orchestrator("orchestrator", roles, Rates(1, 0.0, 1.0), 100, metrics_interval_s=0.0, eval_interval_steps=100)


def fed(orch: Orchestrator) -> Orchestrator:
    """``orch`` after one report of each kind of sender."""
    orch.receive(CountsMsg("trajectory_manager", ReplayCounts(96, pieces=3, batches_dropped=0)))
    orch.receive(CountsMsg("worker-0", PieceCounts(0, env_steps=64, transitions=64, episode_returns=[1.0, 3.0],
                                                   actor_metrics={"actor.epsilon": 0.5})))
    orch.receive(CountsMsg("worker-1", PieceCounts(0, env_steps=32, transitions=32)))
    orch.receive(CountsMsg("trainer", TrainerCounts(7, batches_dropped=0, metric_updates=2, metric_sums={"loss": 3.0})))
    orch.receive(CountsMsg("evaluator", EvaluationReport(env_steps=96, version=2, mean_return=4.5, std_return=0.5,
                                                         episodes=4)))
    return orch


def test_the_status_has_every_key_the_status_dict_had_and_converts_back_to_it() -> None:
    status = fed(orchestrator()).status()
    assert [f.name for f in dataclasses.fields(RunStatus)] == STATUS_KEYS
    as_dict = status.to_dict()
    assert list(as_dict) == STATUS_KEYS and RunStatus(**as_dict) == status
    assert (as_dict["inserted"], as_dict["trained"], as_dict["pieces_inserted"], as_dict["env_steps"]) == (96, 7, 3, 96)
    assert as_dict["worker_env_steps"] == 96 and as_dict["worker_transitions"] == 96 and as_dict["finished"] is False
    assert [r for _, _, r in as_dict["curve"]] == [1.0, 3.0]
    (evaluation,) = as_dict["evaluations"]  # the Evaluator's report, keys in the order they were recorded
    assert list(evaluation) == ["env_steps", "version", "mean_return", "std_return", "episodes", "wall_s"]
    assert (evaluation["env_steps"], evaluation["mean_return"], evaluation["episodes"]) == (96, 4.5, 4)
    (row,) = as_dict["train_metrics"]
    assert row["loss"] == 1.5 and row["epsilon"] == 0.5 and row["updates"] == 7
    json.dumps(as_dict)  # plain values only


def test_the_first_evaluation_at_the_target_solves_the_run_and_stops_it() -> None:
    roles = {"trajectory_manager": "trajectory_manager", "trainer": "trainer", "evaluator": "evaluator",
             "worker-0": "worker"}
    orch = Orchestrator("orchestrator", roles, Rates(1, 0.0, 1.0), 100, metrics_interval_s=0.0, eval_interval_steps=100,
                        target_return=4.0)
    sent: list[tuple[str, object]] = []
    orch.bind(SimpleNamespace(send=lambda dest, msg: sent.append((dest, msg))))  # type: ignore[arg-type]
    for steps, ret in ((100, 3.9), (200, 4.5), (300, 9.0)):
        orch.receive(CountsMsg("evaluator", EvaluationReport(env_steps=steps, version=1, mean_return=ret, std_return=0.0,
                                                             episodes=4)))
    status = orch.status()
    assert status.finished and status.solved is not None
    assert (status.solved["env_steps"], status.solved["mean_return"]) == (200, 4.5)  # the first, not a later one
    assert status.solved["train_s"] == status.evaluations[1]["wall_s"]
    assert [(dest, type(msg).__name__, msg.reason) for dest, msg in sent] == [("worker-0", "StopMsg", "target return reached")]
    untargeted = fed(orchestrator()).status()
    assert untargeted.solved is None and not untargeted.finished


def test_the_commit_record_takes_the_same_keys_from_the_status() -> None:
    orch = fed(orchestrator())
    state = run_state(orch.status())
    assert list(state) == ["trained", "env_steps", "curve", "wall_s", "restarts", "evaluations", "train_metrics"]
    assert (state["trained"], state["env_steps"], state["wall_s"] >= 0) == (7, 96, True)
    assert orch.run_state().keys() == state.keys()


def tiny() -> RunConfig:
    return resolve(RunConfig(
        janus=JanusConfig(overlap_collect=1, overlap_select=1, g_collect=2, g_select=2, batch_size=64, buffer_capacity=5000),
        workload=WorkloadConfig(num_actors=2, envs_per_actor=4, rollout_length=16, hidden_size=8, iterations=4, updates_per_iteration=2),
        synthetic=SyntheticConfig(obs_shape=(8,)),
        runtime=RuntimeConfig(),
    ))


COUNTERS: dict[str, dict[str, float]] = {  # each figure a result reports, a distinct value each
    "trajectory_manager": {
        "transitions_inserted": 101, "pieces_dropped_at_stop": 2, "priorities_dropped": 3,
        "buffer.transitions_collected": 97, "buffer.collect_calls": 11, "buffer.select_calls": 12,
        "buffer.batches_selected": 13, "buffer.items_dropped_stale": 4, "buffer.collect_s": 0.25, "buffer.select_s": 0.5,
        "buffer.learner_wait_s": 0.75, "buffer.actor_blocked_s": 1.25, "buffer.insert_wait_s": 1.5,
        "buffer.sample_wait_s": 1.75, "msgs_in.InsertTransitionMsg": 9},
    "trainer": {"batches_trained": 8, "update_s": 2.0, "wait_s": 0.125, "versions_published": 5,
                "priorities_dropped": 1, "batches_dropped_stale": 2, "policy_lag_batches": 4, "policy_lag_sum": 6.0,
                "policy_lag_max": 3.0},
    "worker-0": {"env_steps": 60, "transitions": 60, "rollout_s": 1.0},
    "worker-1": {"env_steps": 40, "transitions": 40, "rollout_s": 3.0},
    "proxy-0": {"param_fetches": 6},
    "orchestrator": {"checkpoints_committed": 1},
}


def test_a_result_from_typed_counters_records_the_same_keys_and_values() -> None:
    plan = RunPlan.of(tiny())
    status = RunStatus(trained=8, env_steps=100, worker_env_steps=90, worker_transitions=90, retired_env_steps=5,
                       retired_transitions=5, restarts={"worker-1": 1}, stalls=2, evaluations_abandoned=[64],
                       worker_errors={"recent": [{"worker": "worker-1"}], "total": 1, "unresponsive_total": 0})
    run = summarize(plan, LocalBackend(), status, RunCounters.of(COUNTERS), wall=4.0).to_dict()
    assert run["stage_s"] == {"rollout": 2.0, "collect": 0.25, "select": 0.5, "update": 2.0, "learner_wait": 0.75,
                              "actor_blocked": 1.25}
    assert run["counts"] == {"updates": 8, "transitions_produced": 105, "env_steps": 105, "run_env_steps": 105,
                             "run_updates": 8, "transitions_inserted": 101, "transitions_collected": 97, "collect_calls": 11,
                             "select_calls": 12, "batches_selected": 13}
    runtime: dict[str, Any] = run["runtime"]
    assert list(runtime) == [
        "backend", "learner_utilization", "learner_wait_s", "actor_utilization", "policy_lag", "pacing", "messages",
        "param_versions_published", "param_fetches_per_node", "worker_restarts", "worker_errors", "worker_errors_total",
        "workers_unresponsive", "workers_abandoned", "evaluations_abandoned", "stalls", "priorities_dropped", "nodes"]
    assert runtime["learner_utilization"] == 0.5 and runtime["learner_wait_s"] == 0.125 and runtime["actor_utilization"] == 0.5
    assert runtime["policy_lag"] == {"mean": 1.5, "max": 3.0, "batches": 4, "items_dropped_stale": 4, "batches_dropped_stale": 2}
    pacing = runtime["pacing"]
    assert (pacing["insert_wait_s"], pacing["sample_wait_s"], pacing["pieces_dropped_at_stop"]) == (1.5, 1.75, 2)
    assert runtime["param_versions_published"] == 5 and runtime["param_fetches_per_node"] == {"proxy-0": 6}
    assert runtime["worker_restarts"] == {"worker-1": 1} and runtime["worker_errors"] == [{"worker": "worker-1"}]
    assert (runtime["worker_errors_total"], runtime["workers_unresponsive"], runtime["stalls"]) == (1, 0, 2)
    assert runtime["evaluations_abandoned"] == [64] and runtime["priorities_dropped"] == 4
    assert run["samples_per_s"] == 8 * plan.cfg.minibatch_size / 4.0 and run["env_steps_per_s"] == 105 / 4.0


def test_counters_that_were_never_reported_take_the_defaults_the_dicts_gave() -> None:
    """No counter at all (a run that failed before anything reported): zeros, and the Orchestrator's
    count of batches trained stands in for the Trainer's."""
    plan = RunPlan.of(tiny())
    run = summarize(plan, LocalBackend(), RunStatus(trained=3), RunCounters.of({}), wall=1.0).to_dict()
    assert run["counts"]["updates"] == 3 and run["counts"]["transitions_inserted"] == 0
    assert run["stage_s"] == {"rollout": 0.0, "collect": 0.0, "select": 0.0, "update": 0.0, "learner_wait": 0.0,
                              "actor_blocked": 0.0}
    assert "policy_lag" not in run["runtime"] and run["runtime"]["param_fetches_per_node"] == {}
