"""A run of a budget does exactly its work, whatever its data-path knobs: the workers produce all
their pieces and the learner trains all its batches (RunPlan.takes_every_piece)."""

from __future__ import annotations

from typing import Any

import pytest

from janus.algorithms.base import algorithm
from janus.config import JanusConfig, RunConfig, RuntimeConfig, SyntheticConfig, WorkloadConfig, from_dict, resolve
from janus.runtime.plan import plan_of
from janus.runtime.run import run_runtime


def synthetic(iterations: int, env_step_ms: float = 0.0, runtime: dict[str, Any] | None = None,
              **janus: Any) -> RunConfig:
    """2 actors x 4 envs x 16 steps per rollout; a tiny learner, far faster than the actors at 1 ms a step."""
    knobs: dict[str, Any] = {"overlap_collect": 1, "overlap_select": 1, "placement": "cpu_pageable", "batch_size": 32,
                             "buffer_capacity": 4096, "g_collect": 1, "g_select": 1, **janus}
    return resolve(RunConfig(
        janus=JanusConfig(**knobs),
        workload=WorkloadConfig(num_actors=2, envs_per_actor=4, rollout_length=16, hidden_size=8, num_layers=1,
                                iterations=iterations, updates_per_iteration=2),
        synthetic=SyntheticConfig(obs_shape=(8,), env_step_ms=env_step_ms),
        runtime=RuntimeConfig(backend="local", **(runtime or {})),
    ))


def test_an_iteration_budget_takes_every_piece_unless_the_ratio_could_not_admit_them() -> None:
    assert plan_of(synthetic(10)).takes_every_piece  # no ratio: inserts are never held back
    # a ratio the budget's batches satisfy: 2 x 32 sampled per 128 inserted, well within the drift
    assert plan_of(synthetic(10, runtime={"samples_per_insert": 0.5})).takes_every_piece
    # one that would hold the last pieces back for samples the budget never takes: ends at its updates
    greedy = synthetic(40, runtime={"samples_per_insert": 8.0, "min_inserts": 32})
    assert not plan_of(greedy).takes_every_piece
    on_policy = synthetic(10, is_on_policy=True, num_minibatches=4, g_collect=0.25, g_select=0.25)
    assert not plan_of(on_policy).takes_every_piece  # lockstep: the updates decide, one rollout each
    dqn = resolve(from_dict({"workload": {"total_env_steps": 2000}}, base=from_dict(algorithm("dqn").preset)))
    assert plan_of(dqn).takes_every_piece  # an env-step budget, as before


@pytest.mark.parametrize("overlaps", [(1, 1), (0, 1), (1, 0)], ids=["both", "select", "collect"])
def test_a_learner_faster_than_its_actors_waits_for_every_piece(overlaps: tuple[int, int]) -> None:
    """The learner trains its 2 batches a round long before the actors finish their rollouts (1 ms
    a step): the run ends only once every one is in, so it takes the whole budget's env steps."""
    cfg = synthetic(12, env_step_ms=1.0, overlap_collect=overlaps[0], overlap_select=overlaps[1])
    run = run_runtime(cfg, timeout_s=120)
    assert run["counts"]["env_steps"] == run["counts"]["transitions_produced"] == 12 * 2 * 4 * 16
    assert run["counts"]["transitions_inserted"] == 12 * 2 * 4 * 16
    assert run["counts"]["updates"] == 12 * 2
