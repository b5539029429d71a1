"""The run plan alone derives the replay's limiter settings and its collection unit, and the
JanusBuffer a run builds takes them as derived (nothing re-derives them from ``g_collect``)."""

from __future__ import annotations

from typing import Any

import pytest

from janus.algorithms.base import algorithm
from janus.buffer.pacing.collection import CollectionUnit, piece_steps
from janus.config import JanusConfig, RunConfig, RuntimeConfig, SyntheticConfig, WorkloadConfig, from_dict, resolve
from janus.errors import ConfigError
from janus.runtime import wiring
from janus.runtime.plan import BufferLimits, plan_of


def synthetic(**janus: Any) -> RunConfig:
    knobs: dict[str, Any] = {"overlap_collect": 0, "overlap_select": 0, "placement": "cpu_pageable", "batch_size": 32,
                             "buffer_capacity": 4096, **janus}
    return resolve(RunConfig(
        janus=JanusConfig(**knobs),
        workload=WorkloadConfig(num_actors=2, envs_per_actor=4, rollout_length=16, hidden_size=8, num_layers=1,
                                iterations=4, updates_per_iteration=2),
        synthetic=SyntheticConfig(obs_shape=(8,)),
        runtime=RuntimeConfig(backend="local"),
    ))


def test_off_policy_the_unit_is_g_collect_pieces_and_the_limits_are_the_algorithms_ratio() -> None:
    dqn = resolve(from_dict({"g_collect": 2, "workload": {"total_env_steps": 2000}}, base=from_dict(algorithm("dqn").preset)))
    plan = plan_of(dqn)
    assert plan.collection == CollectionUnit(pieces=2) and plan.rollout_size is None
    p = plan.pacing
    assert plan.buffer_limits == BufferLimits(min_size=p.min_size_to_sample, samples_per_insert=p.samples_per_insert,
                                              error_buffer=p.error_buffer)
    buffer = wiring.make_buffer(plan)
    try:
        assert (buffer._collect_pieces, buffer._collect_transitions, buffer.min_size) == (2, None, p.min_size_to_sample)
        assert buffer.rate_limiter.ratio.samples_per_insert == p.samples_per_insert
    finally:
        buffer.close()


@pytest.mark.parametrize("g_collect, pieces, transitions", [(1.0, 1, 128), (0.25, 4, 32), (0.75, 4, 96)])
def test_on_policy_the_unit_is_k_over_m_of_the_rollout_in_pieces_that_tile_it(g_collect: float, pieces: int,
                                                                             transitions: int) -> None:
    cfg = synthetic(is_on_policy=True, num_minibatches=4, g_collect=g_collect, g_select=0.25)
    plan = plan_of(cfg)
    assert plan.rollout_size == 2 * 4 * 16
    assert plan.collection == CollectionUnit(transitions=transitions)
    assert plan.pacing.pieces_per_rollout == pieces and plan.pacing.piece_steps == piece_steps(16, g_collect)
    assert plan.buffer_limits == BufferLimits()  # a lockstep queue of one rollout
    buffer = wiring.make_buffer(plan)
    try:
        assert (buffer._collect_pieces, buffer._collect_transitions) == (None, transitions)
    finally:
        buffer.close()


def test_a_buffer_takes_the_unit_it_is_given_and_refuses_one_of_the_other_mode() -> None:
    from janus.buffer.pipeline import JanusBuffer

    config = JanusConfig(batch_size=4, buffer_capacity=64, g_collect=4)
    with JanusBuffer(config, seed=0) as own, JanusBuffer(config, seed=0, collection=CollectionUnit(pieces=2)) as given:
        assert own._collect_pieces == 4 and given._collect_pieces == 2  # standalone: from its own g_collect
    with pytest.raises(ConfigError, match="invalid collection"):
        JanusBuffer(config, seed=0, collection=CollectionUnit(transitions=8))
