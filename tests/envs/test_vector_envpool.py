"""``workload.vector_env: envpool``: EnvPool's envs step Gymnasium's transitions in janus's SAME_STEP
autoreset layout, seed reproducibly, and fail with a ConfigError where they cannot be had."""

from __future__ import annotations

import importlib.util
import sys

import gymnasium as gym
import numpy as np
import pytest

from janus.config import from_dict, resolve
from janus.envs.envpool_vector import ENVPOOL_ENVS
from janus.envs.vector import EpisodeTracker, make_vector_env, next_obs_of
from janus.errors import ConfigError

needs_envpool = pytest.mark.skipif(importlib.util.find_spec("envpool") is None,
                                   reason="EnvPool is not installed (optional extra: pip install 'janus-rl[envpool]')")


def reference(env_id: str, num_envs: int, **kwargs: object) -> gym.vector.SyncVectorEnv:
    """Gymnasium's own vector env of ``env_id`` as make_vector_env builds it for ``sync``."""
    return gym.vector.SyncVectorEnv([lambda: gym.make(env_id, **kwargs) for _ in range(num_envs)],
                                    autoreset_mode=gym.vector.AutoresetMode.SAME_STEP)


def set_cartpole_states(ref: gym.vector.SyncVectorEnv, obs: np.ndarray, which: np.ndarray) -> None:
    """Put Gymnasium's sub-envs ``which`` in the states EnvPool's show (CartPole's observation is its state)."""
    for i in which:
        ref.envs[i].unwrapped.state = np.array(obs[i], dtype=np.float64)


@needs_envpool
def test_cartpole_steps_gymnasiums_transitions_with_same_step_autoreset() -> None:
    num_envs, steps = 4, 300
    envs = make_vector_env("CartPole-v1", num_envs, 0, vector_env="envpool")
    ref = reference("CartPole-v1", num_envs)
    try:
        obs, _ = envs.reset(seed=7)
        ref.reset(seed=7)
        set_cartpole_states(ref, obs, np.arange(num_envs))  # same start; EnvPool draws its own initial states
        rng = np.random.default_rng(3)
        ended_total = 0
        for _ in range(steps):
            action = rng.integers(0, 2, num_envs)
            got = envs.step(action)
            want = ref.step(action)
            obs, reward, term, trunc, info = got
            assert obs.shape == want[0].shape and obs.dtype == want[0].dtype
            np.testing.assert_array_equal(reward, want[1])
            assert reward.dtype == want[1].dtype
            np.testing.assert_array_equal(term, want[2])
            np.testing.assert_array_equal(trunc, want[3])
            ended = term | trunc
            np.testing.assert_allclose(next_obs_of(obs, term, trunc, info), next_obs_of(*want[:1], *want[2:]), atol=1e-4)
            if ended.any():
                ended_total += int(ended.sum())
                assert set(info) >= {"final_obs", "_final_obs"}
                np.testing.assert_array_equal(info["_final_obs"], want[4]["_final_obs"])
                assert all(info["final_obs"][i] is None for i in np.flatnonzero(~ended))
                assert np.all(np.abs(obs[ended]) <= 0.05)  # already the next episode's first state
                set_cartpole_states(ref, obs, np.flatnonzero(ended))
            else:
                assert "final_obs" not in info
        assert ended_total > 20  # random actions end CartPole episodes every ~20 steps
    finally:
        envs.close()
        ref.close()


@needs_envpool
def test_a_time_limit_truncates_and_resets_in_the_same_step() -> None:
    envs = make_vector_env("CartPole-v1", 2, env_kwargs={"max_episode_steps": 5}, vector_env="envpool")
    try:
        envs.reset(seed=0)
        tracker = EpisodeTracker(2)
        for t in range(10):
            obs, reward, term, trunc, info = envs.step(np.array([t % 2, (t + 1) % 2]))
            tracker.step(reward, term | trunc, info)
            assert not term.any() and trunc.all() == (t % 5 == 4) and reward.tolist() == [1.0, 1.0]
            if trunc.all():
                assert np.all(np.abs(obs) <= 0.05) and not np.allclose(info["final_obs"][0], obs[0])
        episodes = tracker.pop()
        assert episodes.lengths.tolist() == [5, 5, 5, 5] and episodes.returns.tolist() == [5.0] * 4
    finally:
        envs.close()


@needs_envpool
def test_seeds_give_reproducible_and_distinct_streams() -> None:
    envs = make_vector_env("Acrobot-v1", 3, vector_env="envpool")
    try:
        first = envs.reset(seed=11)[0]
        again = envs.reset(seed=[11, 12, 13])[0]  # an int s seeds sub-env i with s + i
        other = envs.reset(seed=2**32 - 1)[0]  # janus's 32-bit stream seeds fit EnvPool's int32 range
    finally:
        envs.close()
    np.testing.assert_array_equal(first, again)
    assert not np.allclose(first[0], first[1]) and not np.allclose(first, other)


@needs_envpool
def test_pendulum_box_actions_match_gymnasium() -> None:
    envs = make_vector_env("Pendulum-v1", 2, 0, vector_env="envpool")
    ref = reference("Pendulum-v1", 2)
    try:
        obs, _ = envs.reset(seed=5)
        ref.reset(seed=5)
        for i in range(2):  # Pendulum's state is (theta, theta dot); its observation (cos, sin, theta dot)
            ref.envs[i].unwrapped.state = np.array([np.arctan2(obs[i, 1], obs[i, 0]), obs[i, 2]], dtype=np.float64)
        assert envs.single_action_space == ref.single_action_space and envs.action_space.shape == (2, 1)
        for t in range(200):
            action = np.array([[1.5], [-0.5 + t / 200]], dtype=np.float32)
            obs, reward, term, trunc, info = envs.step(action)
            want = ref.step(action)
            np.testing.assert_allclose(reward, want[1], rtol=1e-4, atol=1e-4)
            np.testing.assert_array_equal(trunc, want[3])
        assert trunc.all() and "final_obs" in info  # the 200-step limit, as Gymnasium's
    finally:
        envs.close()
        ref.close()


@needs_envpool
def test_a_ppo_actor_collects_rollouts_from_envpool() -> None:
    from janus.algorithms.ppo_agent import PPOActor, PPOConfig

    actor = PPOActor(PPOConfig(), "CartPole-v1", seed=0, num_envs=4, vector_env="envpool")
    try:
        piece, episodes = actor.rollout(64)
    finally:
        actor.close()
    assert piece["reward"].shape == (64, 4) and piece["terminated"].any()
    assert len(episodes.returns) == int((piece["terminated"] | piece["truncated"]).sum())


def test_an_id_envpool_does_not_offer_is_a_config_error_naming_those_it_does() -> None:
    with pytest.raises(ConfigError, match="vector_env=envpool: got 'janus/ImageCatch-v0'.*'CartPole-v1'"):
        make_vector_env("janus/ImageCatch-v0", 2, vector_env="envpool")
    assert "CartPole-v1" in ENVPOOL_ENVS


def test_missing_envpool_is_a_config_error_saying_how_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "envpool", None)  # `import envpool` now raises ImportError
    with pytest.raises(ConfigError, match=r"EnvPool is not installed.*janus-rl\[envpool\]"):
        make_vector_env("CartPole-v1", 2, vector_env="envpool")


@needs_envpool
def test_an_env_kwarg_envpool_lacks_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="invalid --env_kwargs.*'gravity'"):
        make_vector_env("CartPole-v1", 2, env_kwargs={"gravity": 3.0}, vector_env="envpool")


def test_the_config_accepts_vector_env_envpool() -> None:
    cfg = resolve(from_dict({"workload": {"env": "CartPole-v1", "vector_env": "envpool"}}))
    assert cfg.workload.vector_env == "envpool"
