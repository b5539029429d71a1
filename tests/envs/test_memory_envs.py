"""janus/CartPoleNoVel-v1 and janus/PendulumNoVel-v1 as the algorithms see them: vector envs, their
spaces and seeding, observations that hold no velocity, and a short training run on each."""

from __future__ import annotations

import json
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest

import janus
from janus.envs.memory import CARTPOLE_ID, PENDULUM_ID
from janus.envs.vector import make_vector_env


@pytest.mark.parametrize("env_id, actions", [(CARTPOLE_ID, gym.spaces.Discrete(2)),
                                             (PENDULUM_ID, gym.spaces.Box(-2.0, 2.0, (1,), np.float32))])
def test_vector_envs_of_the_memory_tasks_observe_two_float32_dims(env_id: str, actions: gym.Space) -> None:
    envs = make_vector_env(env_id, num_envs=3, seed=0)
    try:
        assert envs.single_observation_space.shape == (2,) and envs.single_observation_space.dtype == np.float32
        assert envs.single_action_space == actions
        obs, _ = envs.reset(seed=[0, 1, 2])
        assert obs.shape == (3, 2) and obs.dtype == np.float32
        obs, reward, *_ = envs.step(envs.action_space.sample())
        assert obs.shape == (3, 2) and reward.shape == (3,)
    finally:
        envs.close()


@pytest.mark.parametrize("env_id", [CARTPOLE_ID, PENDULUM_ID])
def test_the_memory_tasks_are_seeded(env_id: str) -> None:
    def episode(seed: int) -> np.ndarray:
        env = gym.make(env_id)
        env.action_space.seed(seed)
        obs, _ = env.reset(seed=seed)
        seen = [obs]
        for _ in range(15):
            obs, _, term, trunc, _ = env.step(env.action_space.sample())
            seen.append(obs)
            if term or trunc:
                break
        return np.stack(seen)

    np.testing.assert_array_equal(episode(5), episode(5))
    assert not np.array_equal(episode(5), episode(6))


def test_cartpole_observes_position_and_angle_but_no_velocity() -> None:
    """From the same position and angle with other velocities, the next observations are the new
    position and angle only: the velocities are dropped, so only memory can recover them."""
    slow, fast = gym.make(CARTPOLE_ID), gym.make(CARTPOLE_ID)
    slow.reset(seed=0)
    fast.reset(seed=0)
    slow.unwrapped.state = np.array([0.1, 0.0, 0.05, 0.0])
    fast.unwrapped.state = np.array([0.1, 1.5, 0.05, -1.0])
    a, *_ = slow.step(1)
    b, *_ = fast.step(1)
    assert a.shape == b.shape == (2,) and not np.allclose(a, b)  # the hidden velocities moved them apart
    np.testing.assert_allclose(a, slow.unwrapped.state[[0, 2]], atol=1e-6)
    np.testing.assert_allclose(b, fast.unwrapped.state[[0, 2]], atol=1e-6)


def test_pendulum_observations_are_the_same_whatever_the_angular_velocity() -> None:
    slow, fast = gym.make(PENDULUM_ID), gym.make(PENDULUM_ID)
    slow.reset(seed=0)
    fast.reset(seed=0)
    slow.unwrapped.state = np.array([0.5, 0.0])
    fast.unwrapped.state = np.array([0.5, 4.0])
    a, *_ = slow.step(np.zeros(1, np.float32))
    b, *_ = fast.step(np.zeros(1, np.float32))
    theta_a, theta_b = slow.unwrapped.state[0], fast.unwrapped.state[0]
    np.testing.assert_allclose(a, [np.cos(theta_a), np.sin(theta_a)], atol=1e-6)
    np.testing.assert_allclose(b, [np.cos(theta_b), np.sin(theta_b)], atol=1e-6)
    assert not np.allclose(a, b)  # the same angle before the step: only the hidden velocity differed


@pytest.mark.parametrize("algo, env_id", [("ppo", CARTPOLE_ID), ("dqn", CARTPOLE_ID), ("ppo", PENDULUM_ID)])
def test_a_short_run_on_a_memory_task(algo: str, env_id: str, tmp_path: Path) -> None:
    steps = 2_048  # ppo's memory preset: 8 envs, so each env ends a 200-step Pendulum episode within it
    run = janus.train(algo, env=env_id, total_env_steps=steps, out=tmp_path / "run", seed=0, backend="local")
    assert run.status == "finished"
    saved = json.loads((run.out / "results.json").read_text())["runs"][0]
    assert saved["counts"]["env_steps"] >= steps and saved["counts"]["updates"] > 0
    assert saved["episodes"] > 0 and np.isfinite(saved["final_mean_return"])
    assert run.policy.recurrent == (algo == "ppo")  # the memory family's ppo preset is recurrent; dqn has none
    obs, _ = gym.make(env_id).reset(seed=0)
    if run.policy.recurrent:
        action, state = run.policy.predict(obs[None], run.policy.initial_state(1))
        assert state.shape == run.policy.initial_state(1).shape and np.asarray(action).shape[0] == 1
        action = np.asarray(action)[0]
    else:
        action = np.asarray(run.policy.predict(obs))
    assert action.shape == gym.make(env_id).action_space.shape
