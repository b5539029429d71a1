"""--seed reproducibility: a local run with both overlaps off uses the serial scheduler."""

from __future__ import annotations

import threading

import pytest

from janus.config import JanusConfig, RunConfig, WorkloadConfig, from_dict, resolve
from janus.runtime.run import run_runtime, serial
from janus.algorithms.base import algorithm


def rl_cfg(algo: str, seed: int, steps: int) -> RunConfig:
    overrides = {"overlap_collect": 0, "overlap_select": 0, "seed": seed, "workload": {"total_env_steps": steps}}
    return resolve(from_dict(overrides, base=from_dict(algorithm(algo).preset)))


@pytest.mark.parametrize("algo,steps", [("dqn", 2000), ("ppo", 6000)])  # DQN: 1,000 steps past learning_starts
def test_same_seed_same_returns(algo: str, steps: int) -> None:
    cfg = rl_cfg(algo, 5, steps)
    assert serial(cfg)
    first, second = run_runtime(cfg, timeout_s=120), run_runtime(cfg, timeout_s=120)
    assert first["learning_curve"]["return"] == second["learning_curve"]["return"]
    assert first["learning_curve"]["env_steps"] == second["learning_curve"]["env_steps"]
    assert first["counts"]["updates"] == second["counts"]["updates"]
    other = run_runtime(rl_cfg(algo, 6, steps), timeout_s=120)
    assert other["learning_curve"]["return"] != first["learning_curve"]["return"]
    assert not [t for t in threading.enumerate() if t.name.startswith("host-")]


def test_serial_synthetic_run_conserves_transitions() -> None:
    cfg = resolve(RunConfig(
        janus=JanusConfig(overlap_collect=0, overlap_select=0, g_collect=2, g_select=2, batch_size=64, buffer_capacity=4096),
        workload=WorkloadConfig(num_actors=2, envs_per_actor=4, rollout_length=16, obs_shape=(16,), hidden_size=16,
                                iterations=8, env_step_ms=0.0),
    ))
    run = run_runtime(cfg, timeout_s=60)
    assert run["counts"]["transitions_inserted"] == run["counts"]["transitions_produced"] == 2 * 8 * 64
    assert run["counts"]["updates"] >= 8 * cfg.updates_per_iteration
