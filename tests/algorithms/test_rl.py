"""Tests for the RL workloads: env checks, autoreset handling, n-step pieces, snapshots, learning."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch

gym = pytest.importorskip("gymnasium")

from janus.algorithms.base import algorithm  # noqa: E402
from janus.algorithms.dqn_agent import DQNActor, DQNConfig, DQNLearner  # noqa: E402
from janus.algorithms.ppo_agent import PPOActor, PPOConfig, PPOLearner  # noqa: E402
from janus.algorithms.returns import nstep_returns  # noqa: E402
from janus.algorithms.shared import check_action_space  # noqa: E402
from janus.config import from_dict, resolve  # noqa: E402
from janus.envs.vector import env_spaces, make_vector_env  # noqa: E402
from janus.errors import ConfigError  # noqa: E402
from janus.runtime.run import run_runtime  # noqa: E402

RANDOM = dict(eps_start=1.0, eps_end=1.0)  # DQN actor that always acts at random


def record_steps(envs) -> list[tuple]:
    """Wrap ``envs.step`` to record (action sent, step outputs) for every call."""
    calls: list[tuple] = []
    step = envs.step

    def wrapped(action):
        out = step(action)
        calls.append((np.array(action, copy=True), *out))
        return out

    envs.step = wrapped
    return calls


# ---------------------------------------------------------------------------------------- env errors
def test_unknown_env_id_names_flag_and_lists_registered_ids():
    with pytest.raises(ConfigError, match="--env") as err:
        make_vector_env("NoSuchEnv-v0", 1)
    assert "NoSuchEnv-v0" in str(err.value) and "CartPole-v1" in str(err.value)


@pytest.mark.parametrize(("env_id", "features"), [("FrozenLake-v1", 16), ("Blackjack-v1", 32 + 11 + 2)])
def test_non_box_observations_are_encoded_as_one_vector(env_id, features):
    envs = make_vector_env(env_id, 2)
    try:
        obs, _ = envs.reset(seed=0)
        assert obs.shape == (2, features) and obs.dtype == np.float32
        assert envs.single_observation_space.shape == (features,)
        assert np.all(obs.sum(1) == (1 if env_id == "FrozenLake-v1" else 3)), "one-hot per Discrete leaf"
    finally:
        envs.close()


def test_an_observation_space_janus_cannot_encode_is_a_clear_error():
    from obs_envs import TEXT_ENV

    with pytest.raises(ConfigError, match="--env.*Text.*not supported.*Box, Discrete, MultiDiscrete") as err:
        make_vector_env(TEXT_ENV, 1)
    assert TEXT_ENV in str(err.value)


def test_action_space_checks():
    obs_space, act_space = env_spaces("Pendulum-v1")
    with pytest.raises(ConfigError, match="--env action space.*dqn.*Discrete"):
        DQNActor(DQNConfig(), "Pendulum-v1", seed=0, num_envs=1)
    with pytest.raises(ConfigError, match="Discrete"):
        DQNLearner(DQNConfig(), obs_space, act_space, seed=0)
    check_action_space("ppo", act_space)
    check_action_space("ppo", gym.spaces.Discrete(3))
    with pytest.raises(ConfigError, match="--algo"):
        check_action_space("sac", act_space)
    with pytest.raises(ConfigError, match="num_envs"):
        make_vector_env("CartPole-v1", 0)
    with pytest.raises(ConfigError, match="workload.algo.*a2c.*dqn"):
        algorithm("a2c")


# ------------------------------------------------------------------------------ autoreset handling
def test_dqn_piece_never_crosses_an_episode_boundary():
    actor = DQNActor(DQNConfig(n_step=1, **RANDOM), "CartPole-v1", seed=1, num_envs=3)
    piece, episodes = actor.rollout(300)
    assert piece["obs"].shape == (300, 3, 4) and piece["action"].shape == (300, 3)
    done = piece["terminated"] | piece["truncated"]
    cont = ~done[:-1]
    np.testing.assert_array_equal(piece["next_obs"][:-1][cont], piece["obs"][1:][cont])
    # At a terminal step next_obs is the true final observation (out of CartPole's bounds), and the
    # next obs is a fresh reset (all |x| <= 0.05), not a continuation.
    final = piece["next_obs"][piece["terminated"]]
    assert len(final) > 10 and np.all((np.abs(final[:, 0]) > 2.4) | (np.abs(final[:, 2]) > 0.2095))
    reset = piece["obs"][1:][done[:-1]]
    assert np.all(np.abs(reset) <= 0.05)
    np.testing.assert_array_equal(piece["discount"], np.where(piece["terminated"], 0.0, 0.99).astype(np.float32))
    assert episodes.lengths.sum() == sum(np.flatnonzero(done[:, b]).max() + 1 for b in range(3))
    np.testing.assert_array_equal(episodes.returns, episodes.lengths)  # CartPole pays 1 per step
    actor.close()


def test_dqn_nstep_pieces_hold_back_cut_windows():
    """Pieces of an n=3 actor equal n-step targets over the whole raw stream (no shortened windows)."""
    raw_actor = DQNActor(DQNConfig(n_step=1, **RANDOM), "CartPole-v1", seed=2, num_envs=2)
    nstep_actor = DQNActor(DQNConfig(n_step=3, **RANDOM), "CartPole-v1", seed=2, num_envs=2)
    raw = [raw_actor.rollout(40)[0] for _ in range(3)]
    pieces = [nstep_actor.rollout(40)[0] for _ in range(3)]
    assert [len(p["obs"]) for p in pieces] == [38, 40, 40]
    raw = {k: np.concatenate([p[k] for p in raw]) for k in raw[0]}
    got = {k: np.concatenate([p[k] for p in pieces]) for k in pieces[0]}
    ref = nstep_returns(torch.as_tensor(raw["reward"]), torch.as_tensor(raw["terminated"]),
                        torch.as_tensor(raw["truncated"]), 0.99, 3)
    n = len(got["obs"])
    assert raw["terminated"][:n].any()  # the stream crosses episode ends
    last = ref.next_index[:n].numpy()
    np.testing.assert_array_equal(got["obs"], raw["obs"][:n])
    np.testing.assert_allclose(got["reward"], ref.reward[:n].numpy(), rtol=1e-6)
    np.testing.assert_allclose(got["discount"], ref.discount[:n].numpy(), rtol=1e-6)
    np.testing.assert_array_equal(got["next_obs"], raw["next_obs"][last, np.arange(2)])
    np.testing.assert_array_equal(got["terminated"], got["discount"] == 0)


def test_ppo_truncation_bootstraps_from_the_final_observation():
    cfg = PPOConfig(gamma=0.9, gae_lambda=0.8)
    actor = PPOActor(cfg, "Pendulum-v1", seed=0, num_envs=1)
    calls = record_steps(actor.envs)
    piece, episodes = actor.rollout(210)  # Pendulum truncates after 200 steps
    t = 199
    assert piece["truncated"][t, 0] and not piece["terminated"].any() and list(episodes.lengths) == [200]
    final = calls[t][-1]["final_obs"][0]
    assert not np.allclose(final, piece["obs"][t + 1, 0])  # obs[t+1] is the reset, not the final obs
    with torch.no_grad():
        v_final = actor.agent.value(torch.as_tensor(final[None], dtype=torch.float32)).item()
    expected = piece["reward"][t, 0] + cfg.gamma * v_final - piece["value"][t, 0]
    assert piece["advantage"][t, 0] == pytest.approx(expected, rel=1e-5, abs=1e-5)
    np.testing.assert_allclose(piece["return"], piece["advantage"] + piece["value"], rtol=1e-6)


def test_ppo_continuous_clips_actions_sent_but_stores_unclipped():
    actor = PPOActor(PPOConfig(init_log_std=1.0), "Pendulum-v1", seed=0, num_envs=2)
    calls = record_steps(actor.envs)
    piece, _ = actor.rollout(64)
    sent = np.stack([c[0] for c in calls])
    assert sent.shape == piece["action"].shape == (64, 2, 1)
    assert np.all(sent >= -2.0) and np.all(sent <= 2.0)
    assert np.any(np.abs(piece["action"]) > 2.0)  # stored: the unclipped samples
    np.testing.assert_array_equal(sent, np.clip(piece["action"], -2.0, 2.0))
    with torch.no_grad():
        dist = actor.agent.dist(torch.as_tensor(piece["obs"].reshape(-1, 3)))
        logp = actor.agent.log_prob(dist, torch.as_tensor(piece["action"].reshape(-1, 1)))
    np.testing.assert_allclose(logp.numpy(), piece["logprob"].reshape(-1), rtol=1e-5, atol=1e-5)


def flatten(piece: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Merge the ``[T, num_envs]`` leading dims of a piece into one batch dim."""
    return {k: v.reshape(-1, *v.shape[2:]) for k, v in piece.items()}


def serial_run(algo: str, steps: int, seed: int = 0, **overrides):
    """``algo``'s preset through the runtime's serial scheduler (both overlaps off: reproducible)."""
    workload = {"total_env_steps": steps, **overrides.pop("workload", {})}
    data = {"overlap_collect": 0, "overlap_select": 0, "seed": seed, "workload": workload, **overrides}
    return run_runtime(resolve(from_dict(data, base=from_dict(algorithm(algo).preset))), timeout_s=300)


def test_ppo_continuous_trains_on_pendulum():
    run = serial_run("ppo", 1024, num_minibatches=4,
                     workload={"env": "Pendulum-v1", "envs_per_actor": 2, "rollout_length": 128, "num_epochs": 2})
    assert run.counts["transitions_inserted"] == 1024 and run.counts["updates"] == 4 * 4 * 2
    assert run.episodes and all(np.isfinite(r) for r in run.learning_curve["return"])


# ---------------------------------------------------------------------------- snapshots and resume
def _dqn_batch(actor: DQNActor) -> dict[str, torch.Tensor]:
    return {k: torch.as_tensor(v) for k, v in flatten(actor.rollout(32)[0]).items()}


def _ppo_batch(actor: PPOActor) -> dict[str, torch.Tensor]:
    return {k: torch.as_tensor(v) for k, v in flatten(actor.rollout(32)[0]).items()}


def _pair(algo: str, seed: int = 0):
    if algo == "dqn":
        cfg = DQNConfig(n_step=2, target_update_interval=2, prioritized=True)
        actor = DQNActor(cfg, "CartPole-v1", seed, num_envs=2)
        learner = DQNLearner(cfg, actor.envs.single_observation_space, actor.envs.single_action_space, seed)
        return actor, learner, _dqn_batch(actor)
    cfg = PPOConfig()
    actor = PPOActor(cfg, "CartPole-v1", seed, num_envs=2)
    learner = PPOLearner(cfg, actor.envs.single_observation_space, actor.envs.single_action_space, seed)
    return actor, learner, _ppo_batch(actor)


@pytest.mark.parametrize("algo", ["dqn", "ppo"])
def test_params_are_immutable_snapshots(algo):
    actor, learner, batch = _pair(algo)
    params = learner.params()
    saved = {k: v.copy() for k, v in params.items()}
    assert all(not v.flags.writeable for v in params.values())
    actor.load_params(params, version=0)
    for _ in range(5):
        result = learner.update(batch)
    for k in saved:
        np.testing.assert_array_equal(params[k], saved[k])
    assert any(not np.array_equal(v, saved[k]) for k, v in learner.params().items())
    with torch.no_grad():  # the actor's copy is independent of the snapshot too
        next(iter(actor.net.parameters() if algo == "dqn" else actor.agent.parameters())).add_(1.0)
    for k in saved:
        np.testing.assert_array_equal(params[k], saved[k])
    if algo == "dqn":
        assert result.priorities is not None and result.priorities.shape == (len(batch["obs"]),)
        assert torch.all(result.priorities >= 0)
    else:
        assert result.priorities is None and {"approx_kl", "clipfrac", "entropy"} <= set(result.metrics)


@pytest.mark.parametrize("algo", ["dqn", "ppo"])
def test_state_dict_resume_continues_identically(algo):
    _, a, batch = _pair(algo, seed=0)
    _, b, _ = _pair(algo, seed=1)
    for _ in range(3):
        a.update(batch)
    b.load_state_dict(copy.deepcopy(a.state_dict()))
    assert b.updates == a.updates == 3
    for _ in range(3):
        ra, rb = a.update(batch), b.update(batch)
    assert ra.metrics == rb.metrics
    for (k, va), vb in zip(a.params().items(), b.params().values()):
        np.testing.assert_array_equal(va, vb, err_msg=k)


# ------------------------------------------------------------------------ determinism and learning
def test_ppo_learns_cartpole_quickly():
    run = serial_run("ppo", PPO_STEPS, algorithm=PPO_FAST)
    assert run.final_mean_return > PPO_MIN, run.final_mean_return


@pytest.mark.slow  # ~11 s; DQN learning is checked by default through the runtime (test_rl_runtime.py)
def test_dqn_learns_cartpole_quickly():
    run = serial_run("dqn", DQN_STEPS, algorithm=DQN_FAST)
    assert run.final_mean_return > DQN_MIN, run.final_mean_return


# Calibrated over seeds 0-4 (mean return of the last 20 episodes; random play scores ~22):
# PPO 25k steps: 147-376 in 4-6 s; DQN 12k steps: 198-246 in 8-16 s.
PPO_STEPS, PPO_FAST, PPO_MIN = 25_000, {"lr": 1e-3}, 100.0
DQN_STEPS, DQN_FAST, DQN_MIN = 12_000, {"exploration_steps": 5_000, "learning_starts": 500}, 100.0


@pytest.mark.parametrize("env_id", ["CartPole-v1", "Pendulum-v1"])
def test_fused_policy_value_matches_the_agent(env_id: str) -> None:
    """The acting fast path computes what the agent's modules and torch.distributions compute."""
    from torch.distributions import Categorical

    from janus.algorithms.ppo_acting import FusedPolicyValue

    actor = PPOActor(PPOConfig(init_log_std=-0.3), env_id, seed=0, num_envs=2)
    obs = torch.randn(4096, actor.envs.single_observation_space.shape[0])
    action, logprob, value = FusedPolicyValue(actor.agent)(obs, torch.Generator().manual_seed(0))
    with torch.no_grad():
        dist = actor.agent.dist(obs)
        assert torch.allclose(value, actor.agent.value(obs), atol=1e-5)
        assert torch.allclose(logprob, actor.agent.log_prob(dist, action), atol=1e-5)
        learner_logprob, entropy = actor.agent.logprob_entropy(obs, action)
        assert torch.allclose(learner_logprob, logprob, atol=1e-5)
        assert torch.allclose(entropy, actor.agent.entropy(dist), atol=1e-5)
    if env_id == "CartPole-v1":  # sampled actions follow the policy: frequencies vs probabilities
        probs = Categorical(logits=torch.tensor([0.3, -0.4])).probs
        fused = FusedPolicyValue(actor.agent)
        fused.layers = [(torch.zeros(obs.shape[1], 3), torch.tensor([0.3, -0.4, 0.0]))]  # logits straight from the bias
        sampled, _, _ = fused(torch.zeros(20_000, obs.shape[1]), torch.Generator().manual_seed(1))
        freq = torch.bincount(sampled, minlength=2).float() / 20_000
        assert torch.allclose(freq, probs, atol=0.015), (freq, probs)
