"""The algorithm seam: the registry, and what each registered algorithm gives the runtime."""

from __future__ import annotations

from dataclasses import replace

import pytest

from janus.algorithms import base
from janus.algorithms.base import algorithm, names, register
from janus.config import RunConfig, WorkloadConfig, from_dict, resolve, validate
from janus.errors import ConfigError
from janus.runtime.plan import RunPlan


def preset(name: str, **overrides) -> RunConfig:
    return resolve(from_dict(overrides, base=from_dict(algorithm(name).preset)))


def test_registry_names_and_unknown_names() -> None:
    assert {"synthetic", "dqn", "ppo"} <= set(names())
    with pytest.raises(ConfigError, match=r"workload.algo.*'a2c'.*dqn.*ppo.*synthetic"):
        algorithm("a2c")
    with pytest.raises(ConfigError, match="workload.algo"):
        algorithm(["dqn"])  # type: ignore[arg-type]  # a YAML list is an error, not a crash


@pytest.mark.parametrize("name", ["dqn", "ppo"])
def test_each_rl_algorithm_gives_a_runnable_plan(name: str) -> None:
    cfg = preset(name, workload={"total_env_steps": 8192})
    algo = algorithm(name)
    spec, budget, pacing = algo.buffer_spec(cfg), algo.budget(cfg), algo.pacing(cfg)
    assert spec.on_policy == cfg.janus.is_on_policy == pacing.lockstep == (name == "ppo")
    assert spec.checkpoint_learner and spec.checkpoint_replay == (name == "dqn")
    assert budget.total_updates > 0 and pacing.publish_every > 0 and pacing.piece_steps > 0
    limiter = RunPlan.of(cfg).limiter  # the pacing passes the limiter's deadlock check
    assert limiter.limits_inserts == (name == "dqn")
    assert limiter.insert_piece == cfg.workload.envs_per_actor * pacing.piece_steps
    if name == "dqn":  # the replay ratio (the data path's batch_size, DQNConfig's train_frequency), learning_starts
        a = algo.config(cfg)
        assert limiter.samples_per_insert == cfg.janus.batch_size / a.train_frequency
        assert limiter.min_size_to_sample == a.learning_starts
    else:  # whole rollouts of every worker, every one trained num_epochs x M times
        assert budget.total_updates == budget.iterations * cfg.workload.num_epochs * cfg.janus.num_minibatches
    with_dir = replace(cfg, runtime=replace(cfg.runtime, checkpoint_dir="/tmp/x"))
    assert RunPlan.of(with_dir).checkpointed == (("trainer", "trajectory_manager") if name == "dqn" else ("trainer",))


def test_prioritized_replay_is_the_buffer_spec_of_dqn() -> None:
    spec = algorithm("dqn").buffer_spec(preset("dqn", algorithm={"prioritized": True, "per_alpha": 0.5}))
    assert spec.sampler == "prioritized" and spec.sampler_kwargs == {"alpha": 0.5, "beta": 0.4}


def test_runtime_rates_override_the_algorithm_ratio() -> None:
    cfg = preset("dqn", runtime={"samples_per_insert": 8.0, "min_inserts": 300})
    limiter = RunPlan.of(cfg).limiter
    assert (limiter.samples_per_insert, limiter.min_size_to_sample) == (8.0, 300)


def test_synthetic_is_on_or_off_policy_as_configured() -> None:
    off = resolve(RunConfig(workload=WorkloadConfig(iterations=5)))
    on = resolve(from_dict({"is_on_policy": True, "g_collect": 0.5, "g_select": 0.5, "workload": {"iterations": 5}}))
    synthetic = algorithm("synthetic")
    assert not synthetic.buffer_spec(off).on_policy and synthetic.buffer_spec(on).on_policy
    assert synthetic.pacing(on).pieces_per_rollout == 2 and synthetic.pacing(on).max_pieces == 10
    assert synthetic.budget(off).total_updates == 5 * off.workload.updates_per_iteration
    assert RunPlan.of(replace(off, runtime=replace(off.runtime, checkpoint_dir="/tmp/x"))).checkpointed == ()


def test_on_policy_pieces_tile_the_rollout_at_any_k_over_m() -> None:
    """g_collect = 3/4 of a 128-step rollout: pieces of 32 steps (four per rollout, collected three
    at a time), never two of 96 that overshoot it."""
    cfg = preset("ppo", g_collect=0.75, g_select=0.75)
    pacing = algorithm("ppo").pacing(cfg)
    assert (pacing.piece_steps, pacing.pieces_per_rollout) == (32, 4)
    assert pacing.piece_steps * pacing.pieces_per_rollout == cfg.workload.rollout_length


@pytest.mark.slow  # a short PPO run; the pacing above is the fast check
def test_ppo_runs_at_three_quarters_granularity() -> None:
    from janus.runtime.run import run_runtime

    cfg = preset("ppo", g_collect=0.75, g_select=0.75, workload={"total_env_steps": 2048}, runtime={"backend": "local"})
    run = run_runtime(cfg, timeout_s=120)
    assert run["counts"]["env_steps"] == 2048 and run["counts"]["updates"] == algorithm("ppo").budget(cfg).total_updates


def test_a_newly_registered_algorithm_is_accepted_by_the_config() -> None:
    class Toy(type(algorithm("synthetic"))):  # type: ignore[misc]
        name = "toy"

    register(Toy())
    try:
        assert validate(from_dict({"workload": {"algo": "toy"}})).workload.algo == "toy"
        assert "toy" in names()
    finally:
        base._REGISTRY.pop("toy")
    with pytest.raises(ConfigError, match="workload.algo"):
        validate(from_dict({"workload": {"algo": "toy"}}))
