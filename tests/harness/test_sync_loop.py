"""The synchronous loop (janus.runtime.synchronous): exact work, stage times within the wall, one
thread, and the choice between it and the runtime."""

from __future__ import annotations

import threading
from dataclasses import replace
from typing import Any

import pytest

from janus.config import JanusConfig, RunConfig, RuntimeConfig, SyntheticConfig, WorkloadConfig, resolve
from janus.errors import ConfigError
from janus.harness.reports.table import ideal_bound
from janus.runtime.plan import plan_of
from janus.runtime.synchronous import LOOP, run_configuration, run_sync_loop, runs_synchronously

WORK_STAGES = ("rollout", "collect", "select", "update")


def small(on_policy: bool = False, iterations: int = 5, **janus: Any) -> RunConfig:
    """A synthetic run of seconds: 2 actors x 4 envs x 16 steps per rollout, both overlaps off."""
    knobs: dict[str, Any] = {"overlap_collect": 0, "overlap_select": 0, "placement": "cpu_pageable", "batch_size": 32,
                             "buffer_capacity": 4096, "is_on_policy": on_policy, "num_minibatches": 4, **janus}
    return resolve(RunConfig(
        janus=JanusConfig(**knobs),
        workload=WorkloadConfig(num_actors=2, envs_per_actor=4, rollout_length=16, hidden_size=16,
                                iterations=iterations, updates_per_iteration=3, num_epochs=2),
        synthetic=SyntheticConfig(obs_shape=(16,), env_step_ms=0.1),
        runtime=RuntimeConfig(backend="local"),
    ))


def host_threads() -> set[threading.Thread]:
    return set(threading.enumerate())


def check_exact_work(run: Any, cfg: RunConfig) -> None:
    w = cfg.workload
    steps = w.iterations * w.num_actors * w.envs_per_actor * w.rollout_length
    assert run.status == "finished"
    assert run.counts["env_steps"] == run.counts["transitions_produced"] == steps
    assert run.counts["updates"] == w.iterations * cfg.updates_per_iteration
    g = round(cfg.janus.g_select * (cfg.janus.num_minibatches if cfg.janus.is_on_policy else 1))
    assert run.counts["select_calls"] == -(-run.counts["updates"] // g)  # g batches a call; the last may be ahead
    assert run.counts["transitions_inserted"] == run.counts["transitions_collected"] == steps  # nothing left staged
    assert run.samples_per_s == pytest.approx(run.counts["updates"] * cfg.minibatch_size / run.wall_s)


def check_stages_within_wall(run: Any) -> None:
    """One control flow: the four stages never overlap, so their sum is within the wall."""
    stages = [run.stage_s[s] for s in WORK_STAGES]
    assert all(t > 0 for t in stages), run.stage_s
    assert sum(stages) <= run.wall_s
    assert ideal_bound(run.to_dict())["serial_s"] <= run.wall_s


@pytest.mark.parametrize("g", [1, 4], ids=["g=1", "g=4"])
def test_off_policy_loop_does_exactly_its_work(g: int) -> None:
    """g=4: a collection unit of 4 pieces spans two rounds of 2 actors: the first round's updates
    are owed until it is written, and still every one is trained."""
    cfg = small(g_collect=g, g_select=g)
    before = host_threads()
    run = run_sync_loop(cfg)
    check_exact_work(run, cfg)
    check_stages_within_wall(run)
    assert run.counts["collect_calls"] == 5 * 2 // g + (5 * 2 % g > 0)  # the last, short unit at the end
    assert run.runtime["loop"] == LOOP and run.runtime["param_versions_published"] >= 2
    assert len(run.runtime["rollout_s_per_actor"]) == 2
    assert run.stage_s["rollout"] == pytest.approx(sum(run.runtime["rollout_s_per_actor"]))
    assert host_threads() <= before, "the loop runs in the calling thread and starts none"


def test_on_policy_loop_trains_each_rollout_num_epochs_times() -> None:
    cfg = small(on_policy=True, g_collect=0.25, g_select=0.25)
    run = run_sync_loop(cfg)
    check_exact_work(run, cfg)
    check_stages_within_wall(run)
    # each rollout is served num_epochs x num_minibatches batches of rollout / num_minibatches transitions
    assert cfg.updates_per_iteration == 2 * 4 and cfg.minibatch_size == 2 * 4 * 16 // 4
    assert run.runtime["param_versions_published"] == 1 + cfg.workload.iterations  # one version per rollout


def test_run_configuration_picks_the_loop_or_the_runtime() -> None:
    baseline, overlapped = small(iterations=3), small(iterations=3, overlap_collect=1, overlap_select=1)
    assert runs_synchronously(plan_of(baseline)) and not runs_synchronously(plan_of(overlapped))
    loop_run, runtime_run = run_configuration(baseline), run_configuration(overlapped)
    assert loop_run.runtime.get("loop") == LOOP
    assert "loop" not in runtime_run.runtime and "messages" in runtime_run.runtime
    assert loop_run.counts["env_steps"] == runtime_run.counts["env_steps"]
    assert loop_run.counts["updates"] == runtime_run.counts["updates"]


def test_algorithms_with_a_policy_stay_on_the_runtime() -> None:
    from janus.algorithms.base import algorithm
    from janus.config import from_dict

    dqn = resolve(from_dict({"overlap_collect": 0, "overlap_select": 0, "runtime": {"backend": "local"}},
                            base=from_dict(algorithm("dqn").preset)))
    assert plan_of(dqn).serial and not runs_synchronously(plan_of(dqn))
    with pytest.raises(ConfigError, match="synchronous loop.*policy"):
        run_sync_loop(dqn)


def test_an_overlapped_configuration_is_refused() -> None:
    with pytest.raises(ConfigError, match="overlap_collect 0, overlap_select 0"):
        run_sync_loop(small(overlap_collect=1))


def test_an_interrupt_carries_the_run_so_far() -> None:
    """Ctrl-C in the loop (here: raised by the progress callback) stops it with the run so far."""
    calls: list[int] = []

    def progress(done: int, total: int, note: str) -> None:
        calls.append(done)
        raise KeyboardInterrupt

    cfg = replace(small(iterations=200), workload=replace(small().workload, iterations=200),
                  synthetic=replace(small().synthetic, env_step_ms=1.0))
    before = host_threads()
    with pytest.raises(KeyboardInterrupt) as info:
        run_sync_loop(cfg, progress)
    partial = info.value.partial_result  # type: ignore[attr-defined]
    assert partial.status == "interrupted" and calls
    assert 0 < partial.counts["updates"] < 200 * cfg.updates_per_iteration
    assert partial.wall_s > 0
    assert host_threads() <= before
