"""Any Gymnasium observation space: Discrete one-hot, Dict/Tuple (multi-input torso with images),
and observation/reward normalisation saved with the policy. Real runs through ``janus.train``."""

from __future__ import annotations

from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch
from gymnasium import spaces
from obs_envs import DICT_ENV, DictCorridor

import janus
from janus.algorithms.networks import MultiInputTorso, has_images, make_torso
from janus.algorithms.normalization import RunningNorm
from janus.algorithms.ppo_agent import PPOActor, PPOConfig
from janus.envs.observations import ObservationEncoder
from janus.envs.reward_scaling import DISCOUNTED_RETURN, NormalizedReward
from janus.envs.vector import make_vector_env, next_obs_of
from janus.errors import ConfigError
from janus.policy import episode_returns


def mean_return(policy: janus.Policy, episodes: int = 20) -> float:
    return float(np.mean(episode_returns(policy, episodes, seed=123)))


# ---------------------------------------------------------------------------------------- encoding
def test_every_leaf_is_encoded_in_the_space_order() -> None:
    space = spaces.Dict({"a": spaces.Box(-2.0, 2.0, (2,)), "b": spaces.Discrete(3, start=1),
                         "c": spaces.Tuple((spaces.MultiDiscrete([2, 3]), spaces.MultiBinary(2)))})
    enc = ObservationEncoder(space)
    obs = {"a": np.array([0.5, -1.5], np.float32), "b": 3, "c": (np.array([1, 0]), np.array([0, 1], np.int8))}
    expected = [0.5, -1.5, 0, 0, 1, 0, 1, 1, 0, 0, 0, 1]
    np.testing.assert_array_equal(enc.encode_one(obs), np.array(expected, np.float32))
    assert enc.box.shape == (12,) and enc.box.low[0] == -2.0 and enc.box.high[-1] == 1.0
    batch = {"a": np.stack([obs["a"]] * 2), "b": np.array([3, 1]),
             "c": (np.stack([obs["c"][0]] * 2), np.stack([obs["c"][1]] * 2))}
    x, single = enc.encode_any(batch)
    assert not single and x.shape == (2, 12) and x[1, 2] == 1.0 and x[1, 4] == 0.0
    with pytest.raises(ConfigError, match="observation 'b'"):
        enc.encode_one({**obs, "b": np.array([1, 2])})
    with pytest.raises(ConfigError, match="has no 'a'"):
        enc.encode_one({"b": 1})


def test_a_vector_env_encodes_its_final_observations_too() -> None:
    envs = make_vector_env("FrozenLake-v1", 2, env_kwargs={"is_slippery": False})
    try:
        envs.reset(seed=0)
        for _ in range(200):  # walk left into the corner (never ends) or down into holes (ends)
            obs, _, term, trunc, info = envs.step(np.array([1, 1]))
            if (term | trunc).any():
                nxt = next_obs_of(obs, term, trunc, info)
                assert nxt.shape == (2, 16) and np.all(nxt.sum(1) == 1)
                i = int(np.flatnonzero(term | trunc)[0])
                assert nxt[i].argmax() != 0, "the final cell, not the reset one"
                break
        else:
            pytest.fail("no episode ended")
    finally:
        envs.close()


def test_the_torso_follows_the_leaves() -> None:
    image_dict = ObservationEncoder(DictCorridor("image").observation_space).box
    assert has_images(image_dict) and isinstance(make_torso(image_dict), MultiInputTorso)
    vector_dict = ObservationEncoder(DictCorridor("dict").observation_space).box
    assert not has_images(vector_dict) and make_torso(vector_dict) is None  # flattened into the MLP
    torso = make_torso(image_dict)
    assert torso is not None
    out = torso(torch.zeros(3, image_dict.shape[0]))
    assert out.shape == (3, torso.features)


# -------------------------------------------------------------------------------- learning above random
def test_frozenlake_one_hot_learns_with_dqn(tmp_path: Path) -> None:
    run = janus.train("dqn", env="FrozenLake-v1", env_kwargs={"is_slippery": False}, total_env_steps=8_000,
                      exploration_steps=3_000, out=tmp_path / "run", seed=0, backend="local",
                      eval_interval_steps=2_000, eval_episodes=1)
    # random play reaches the goal ~1.5% of episodes. The greedy policy of the last update can still
    # loop (one Q-value off, the thread timing of the local backend decides which): the best evaluated
    # one, kept in best/, is what the run learned.
    assert max(mean_return(run.policy), mean_return(janus.load_policy(run.out / "best"))) >= 0.9
    assert run.policy.observation_space == gym.spaces.Discrete(16)
    assert int(run.policy.predict(0)) in range(4) and run.policy.predict(np.array([0, 1])).shape == (2,)


@pytest.mark.parametrize(("algo", "kind", "steps"), [("ppo", "dict", 16_384), ("ppo", "image", 16_384),
                                                     ("dqn", "tuple", 8_000)])
def test_dict_and_tuple_observations_learn_above_random(tmp_path: Path, algo: str, kind: str, steps: int) -> None:
    """Ignoring either leaf averages 0 (the goal end pays +1, the other -1): reading both gets 1."""
    run = janus.train(algo, env=lambda: DictCorridor(kind), total_env_steps=steps, out=tmp_path / "run", seed=0)
    assert mean_return(run.policy) >= 0.8
    sample = DictCorridor(kind).observation_space.sample()
    assert np.asarray(run.policy.predict(sample)).shape == ()


def test_dict_observations_on_the_process_backend(tmp_path: Path) -> None:
    run = janus.train("ppo", env=f"obs_envs:{DICT_ENV}", total_env_steps=2_048, out=tmp_path / "run", seed=0,
                      backend="process")
    assert run.result["env_steps"] >= 2_048 if isinstance(run.result, dict) else run.policy is not None
    assert run.policy.predict({"position": 3, "goal": 1}).shape == ()


# -------------------------------------------------------------------------------------- normalisation
def test_running_norm_commits_the_moments_of_everything_observed() -> None:
    norm = RunningNorm((3,))
    x = torch.tensor([[1.0, 2.0, 3.0], [3.0, 2.0, 7.0]])
    assert torch.equal(norm(x), x), "identity before the first commit"
    batches = [np.random.default_rng(n).normal(5.0, 3.0, (n, 3)) for n in (7, 1, 40, 5)]
    for b in batches[:3]:
        norm.observe(torch.as_tensor(b, dtype=torch.float32))
    assert torch.equal(norm(x), x), "observing alone changes nothing"
    norm.commit()
    norm.observe(torch.as_tensor(batches[3], dtype=torch.float32).reshape(5, 1, 3))  # any leading axes
    norm.commit()
    seen = np.concatenate(batches)
    assert float(norm.count) == len(seen) == 53
    np.testing.assert_allclose(norm.mean.numpy(), seen.mean(0), rtol=1e-5)
    np.testing.assert_allclose(norm.var.numpy(), seen.var(0), rtol=1e-4)
    assert torch.all(norm(torch.full((1, 3), 1e9)) == 10.0), "clipped"
    scalar = RunningNorm(())  # normalize_reward's discounted returns
    scalar.observe(torch.tensor([[1.0, 3.0], [5.0, 7.0]]))
    scalar.commit()
    assert float(scalar.count) == 4 and float(scalar.var) == pytest.approx(5.0)


@pytest.mark.parametrize(("algo", "backend"), [("ppo", "local"), ("sac", "local"), ("dqn", "local"), ("ppo", "process")])
def test_normalisation_statistics_round_trip_through_load_policy(tmp_path: Path, algo: str, backend: str) -> None:
    env = "CartPole-v1" if algo == "dqn" else "Pendulum-v1"
    steps = {"ppo": 4_096, "sac": 1_200, "dqn": 3_000}[algo]
    run = janus.train(algo, env=env, total_env_steps=steps, out=tmp_path / "run", seed=0, backend=backend,
                      normalize_obs=True, normalize_reward=True)
    loaded = janus.load_policy(tmp_path / "run")
    norms = [[m for m in p.acting.network.modules() if isinstance(m, RunningNorm) and m.shape != ()] for p in (run.policy, loaded)]
    assert len(norms[0]) == len(norms[1]) == 1
    trained, restored = norms[0][0], norms[1][0]
    assert float(restored.count) > 0 and float(restored.mean.abs().sum()) > 0, "statistics were learnt and saved"
    assert torch.equal(trained.mean, restored.mean) and torch.equal(trained.var, restored.var)
    returns = [[m for m in p.acting.network.modules() if isinstance(m, RunningNorm) and m.shape == ()] for p in (run.policy, loaded)]
    assert float(returns[1][0].count) > 0 and float(returns[1][0].var) != 1.0, "reward statistics learnt and saved"
    assert torch.equal(returns[0][0].var, returns[1][0].var)
    obs = np.random.default_rng(0).normal(size=(8, *loaded.observation_space.shape)).astype(np.float32)
    np.testing.assert_array_equal(loaded.predict(obs), run.policy.predict(obs))


def test_reward_normalisation_reports_raw_returns_and_a_resumed_actor_starts_from_the_saved_statistics() -> None:
    fresh = PPOActor(PPOConfig(normalize_reward=True), "CartPole-v1", seed=0, num_envs=2)
    resumed = PPOActor(PPOConfig(normalize_reward=True), "CartPole-v1", seed=0, num_envs=2)
    try:
        stats = resumed.agent.reward_norm
        assert stats is not None
        stats.observe(torch.full((10,), 3.0))
        stats.observe(torch.full((10,), -1.0))  # mean 1, variance 4: a factor of about 1/2
        stats.commit()
        resumed.load_params({k: v.clone() for k, v in resumed.agent.state_dict().items()}, 1)
        fresh.load_params({k: v.clone() for k, v in fresh.agent.state_dict().items()}, 0)  # a new run's version 0
        first, episodes = resumed.rollout(200)
        new, _ = fresh.rollout(200)
    finally:
        fresh.close()
        resumed.close()
    assert 0.45 < first["reward"][0, 0] < 0.55, "from the saved estimate"
    assert new["reward"][0, 0] == 10.0, "a fresh estimate of one return: the clip"
    assert first[DISCOUNTED_RETURN].shape == first["reward"].shape and first[DISCOUNTED_RETURN].max() > 1.0
    assert not np.allclose(first["reward"], 1.0)
    np.testing.assert_array_equal(episodes.returns, episodes.lengths.astype(float))  # reported raw: +1 a step


def test_normalized_reward_divides_by_the_std_of_discounted_returns() -> None:
    envs = NormalizedReward(make_vector_env("CartPole-v1", 1), gamma=0.5)
    returns: list[float] = []
    try:
        envs.reset(seed=0)
        for step in range(5):
            _, reward, term, trunc, info = envs.step(np.array([0]))
            assert not (term[0] or trunc[0]), f"CartPole ended at step {step}"
            returns.append((returns[-1] * 0.5 if returns else 0.0) + 1.0)
            assert info[DISCOUNTED_RETURN][0] == pytest.approx(returns[-1]) and info["raw_reward"][0] == 1.0
            assert reward[0] == pytest.approx(min(10.0, 1.0 / np.sqrt(np.var(returns) + 1e-8)), rel=1e-5)  # clipped at 10
    finally:
        envs.close()


def test_normalize_obs_is_refused_for_images(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="normalize_obs.*vector observations"):
        janus.train("ppo", env="janus/ImageCatch-v0", total_env_steps=1_000, out=tmp_path / "run", normalize_obs=True)


def test_a_resumed_run_continues_its_normalisation_statistics(tmp_path: Path) -> None:
    """The statistics are the learner's state: a resume goes on from them, not from the identity."""
    out = tmp_path / "run"

    def counts() -> list[float]:
        net = janus.load_policy(out).acting.network
        return sorted(float(m.count) for m in net.modules() if isinstance(m, RunningNorm))

    janus.train("ppo", env="Pendulum-v1", total_env_steps=2_048, out=out, seed=0, backend="local",
                normalize_obs=True, normalize_reward=True)
    first = counts()
    assert len(first) == 2 and min(first) > 0
    janus.train(resume=out, total_env_steps=4_096)
    second = counts()
    assert all(b >= 1.5 * a for a, b in zip(first, second, strict=True)), (first, second)  # twice the data seen, not restarted
