"""janus's memory tasks: registered on import of janus.envs.vector, velocities hidden, the originals' limits."""

from __future__ import annotations

import gymnasium as gym
import numpy as np

import janus.envs.vector  # noqa: F401 - registers the ids
from janus.algorithms.presets import family_of
from janus.envs.memory import CARTPOLE_ID, PENDULUM_ID


def test_cartpole_without_velocities_observes_position_and_angle_of_the_same_dynamics() -> None:
    hidden, full = gym.make(CARTPOLE_ID), gym.make("CartPole-v1")
    assert hidden.observation_space.shape == (2,) and hidden.spec is not None
    assert hidden.spec.max_episode_steps == 500 and hidden.spec.reward_threshold == 475.0
    obs, _ = hidden.reset(seed=3)
    ref, _ = full.reset(seed=3)
    np.testing.assert_array_equal(obs, ref[[0, 2]])
    for action in [0, 1, 1, 0, 1]:
        obs, reward, term, trunc, _ = hidden.step(action)
        ref, ref_reward, ref_term, ref_trunc, _ = full.step(action)
        np.testing.assert_array_equal(obs, ref[[0, 2]])
        assert (reward, term, trunc) == (ref_reward, ref_term, ref_trunc)
        assert obs in hidden.observation_space


def test_pendulum_without_angular_velocity_observes_cos_and_sin() -> None:
    env = gym.make(PENDULUM_ID)
    obs, _ = env.reset(seed=0)
    assert obs.shape == (2,) and np.isclose(obs[0] ** 2 + obs[1] ** 2, 1.0, atol=1e-5)
    assert env.spec is not None and env.spec.max_episode_steps == 200


def test_the_memory_tasks_are_the_memory_family() -> None:
    assert family_of(CARTPOLE_ID) == family_of(PENDULUM_ID) == "memory"
    assert family_of("CartPoleNoVel-v1") == "memory"  # the RL Zoo's id, not registered here
    assert family_of("popgym-RepeatPreviousEasy-v0") == family_of("popgym:popgym-RepeatPreviousEasy-v0") == "memory"
    assert family_of("CartPole-v1") == "classic_control"
