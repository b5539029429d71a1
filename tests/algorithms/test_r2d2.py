"""R2D2's actor, learner, priority, acting policy and configuration checks (no runtime: test_r2d2_runs.py)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch

from janus.algorithms.base import algorithm, is_recurrent
from janus.algorithms.r2d2_agent import R2D2Actor, R2D2Config
from janus.algorithms.r2d2_learner import R2D2Learner, R2D2Policy, mixed_priority
from janus.algorithms.returns import inverse_value_rescale
from janus.config import RunConfig, from_dict, resolve
from janus.errors import ConfigError

ENV = "janus/CartPoleNoVel-v1"


def cfg_of(steps: int, **overrides: Any) -> RunConfig:
    workload = {"total_env_steps": steps, "env": ENV, **overrides.pop("workload", {})}
    return resolve(from_dict({"workload": workload, "seed": 0, **overrides}, base=from_dict(algorithm("r2d2").preset)))


def rows(piece: dict[str, np.ndarray]) -> dict[str, torch.Tensor]:
    """A piece ``[1, E, ...]`` as the replay's rows ``[E, ...]`` (a batch of E sequences)."""
    return {k: torch.as_tensor(v[0]) for k, v in piece.items()}


# ------------------------------------------------------------------------------------------ actor
def test_actor_pieces_are_one_sequence_per_env_with_its_start_state() -> None:
    cfg = R2D2Config(seq_len=6, burn_in=1, n_step=2, recurrent_size=8, hidden=(16,))
    actor = R2D2Actor(cfg, ENV, seed=3, num_envs=2, period=4)
    first, _ = actor.rollout(4)
    assert first["obs"].shape == (1, 2, 6, 2) and first["obs"].dtype == np.float32
    assert first["state"].shape == (1, 2, 16)  # lstm: h then c
    for key, dtype in (("action", np.int64), ("reward", np.float32), ("terminal", bool), ("mask", bool), ("first", bool)):
        assert first[key].shape == (1, 2, 6) and first[key].dtype == dtype, key
    np.testing.assert_array_equal(first["mask"][0], [[0, 0, 1, 1, 1, 1]] * 2)  # padded before the worker's first step
    assert first["first"][0, :, 2].all()  # which begins an episode
    state_before = actor.state.copy()
    second, _ = actor.rollout(4)
    np.testing.assert_array_equal(second["obs"][0, :, :2], first["obs"][0, :, 4:])  # overlap of seq_len - period
    # the learner's unroll from the stored state over the new steps ends where the actor's state is
    with torch.no_grad():
        _, end = actor.net.unroll(torch.as_tensor(second["obs"][0]).transpose(0, 1),
                                  torch.as_tensor(second["state"][0]), torch.as_tensor(second["first"][0]).T)
    ended = second["terminal"][0, :, -1]
    np.testing.assert_allclose(end.numpy()[~ended], actor.state[~ended], atol=1e-5)
    assert not np.array_equal(state_before, actor.state)
    actor.close()


def test_a_time_limit_bootstraps_in_the_actor_through_the_inverse_rescaling() -> None:
    """CartPole cut at 3 steps: every third step is truncated, stored as terminal, and its reward gains
    gamma * h^-1(max_a Q(final obs)) (Q = 2 everywhere here); the returns count the env's rewards only."""
    cfg = R2D2Config(gamma=0.9, seq_len=9, burn_in=0, n_step=1, dueling=False, eps_start=0.0, eps_end=0.0)
    actor = R2D2Actor(cfg, "CartPole-v1", seed=0, num_envs=2, period=9, env_kwargs={"max_episode_steps": 3})
    with torch.no_grad():
        actor.net.head.weight.zero_()
        actor.net.head.bias.fill_(2.0)
    piece, episodes = actor.rollout(9)
    terminal = np.zeros((2, 9), dtype=bool)
    terminal[:, 2::3] = True
    np.testing.assert_array_equal(piece["terminal"][0], terminal)
    bootstrap = 0.9 * inverse_value_rescale(torch.tensor(2.0)).item()
    np.testing.assert_allclose(piece["reward"][0], np.where(terminal, 1.0 + bootstrap, 1.0), rtol=1e-6)
    np.testing.assert_array_equal(piece["first"][0], np.roll(terminal, 1, axis=1))  # the step after each end
    assert list(episodes.returns) == [3.0] * 6
    actor.close()


@pytest.mark.parametrize("env", ["janus/ImageCatch-v0", "obs_envs:janus-test/DictCorridor-v0"], ids=["image", "dict"])
def test_any_observation_space_goes_through_actor_and_learner(env: str) -> None:
    """Images get the CNN torso (stored as the env emits them: uint8 pixels), a Dict of Discrete leaves
    its encoded vector (janus.envs.observations) and the MLP: both stored in sequences and trained on."""
    cfg = R2D2Config(seq_len=6, burn_in=2, n_step=1, recurrent_size=8)
    actor = R2D2Actor(cfg, env, seed=0, num_envs=2, period=6)
    obs_space = actor.envs.single_observation_space
    piece, _ = actor.rollout(6)
    assert piece["obs"].shape == (1, 2, 6, *obs_space.shape) and piece["obs"].dtype == obs_space.dtype
    learner = R2D2Learner(cfg, obs_space, actor.envs.single_action_space, seed=0)
    result = learner.update(rows(piece))
    assert np.isfinite(result.metrics["loss"]) and result.metrics["trained_steps"] > 0
    actor.close()


# ---------------------------------------------------------------------------------------- learner
def test_mixed_priority_by_hand() -> None:
    td = torch.tensor([[1.0, 4.0, 0.0], [3.0, 2.0, 0.0], [9.0, 2.0, 0.0]])  # [T=3, B=3]
    valid = torch.tensor([[1, 1, 0], [1, 1, 0], [0, 1, 0]], dtype=torch.bool)
    got = mixed_priority(td, valid, 0.9)
    # seq 0: max 3, mean 2 (step 2 invalid); seq 1: max 4, mean 8/3; seq 2: no valid step
    torch.testing.assert_close(got, torch.tensor([0.9 * 3 + 0.1 * 2, 0.9 * 4 + 0.1 * 8 / 3, 0.0]))


def test_learner_trains_the_steps_with_a_target_and_returns_a_priority_per_sequence() -> None:
    cfg = R2D2Config(seq_len=8, burn_in=2, n_step=2, recurrent="gru", recurrent_size=8, hidden=(16,))
    actor = R2D2Actor(cfg, ENV, seed=1, num_envs=4, period=8)
    learner = R2D2Learner(cfg, actor.envs.single_observation_space, actor.envs.single_action_space, seed=1)
    batch = rows(actor.rollout(8)[0])
    batch["terminal"] = torch.zeros_like(batch["terminal"])  # by hand: no terminal, every row real
    batch["first"][:, 1:] = False
    batch["weight"] = torch.ones(4)
    before = {k: v.clone() for k, v in learner.q.state_dict().items()}
    result = learner.update(batch)
    # 8 steps - 2 burn-in = 6 trained; the last 2 have their bootstrap past the sequence: 4 per row
    assert result.metrics["trained_steps"] == 4 * 4
    assert result.priorities is not None and result.priorities.shape == (4,) and bool((result.priorities > 0).all())
    assert all(np.isfinite(v) for v in result.metrics.values())
    assert any(not torch.equal(before[k], v) for k, v in learner.q.state_dict().items())
    batch["terminal"][:, 5] = True  # a terminal: steps 4 and 5 get targets without bootstrap (step 6 and 7 still none)
    assert learner.update(batch).metrics["trained_steps"] == 4 * 4
    batch["terminal"][:, 5], batch["terminal"][:, 7] = False, True  # steps 6 (window 6-7) and 7 now have one
    assert learner.update(batch).metrics["trained_steps"] == 6 * 4
    batch["mask"][:, :5] = False  # padding up to step 4: only steps 5.. (of 2..7) count
    assert learner.update(batch).metrics["trained_steps"] == 3 * 4
    actor.close()


def test_target_network_follows_every_target_update_interval() -> None:
    cfg = R2D2Config(seq_len=6, burn_in=0, n_step=1, recurrent_size=8, hidden=(8,), target_update_interval=2)
    actor = R2D2Actor(cfg, ENV, seed=2, num_envs=2, period=6)
    learner = R2D2Learner(cfg, actor.envs.single_observation_space, actor.envs.single_action_space, seed=2)
    batch = rows(actor.rollout(6)[0])
    learner.update(batch)
    assert not all(torch.equal(a, b) for a, b in zip(learner.q.parameters(), learner.target.parameters(), strict=True))
    learner.update(batch)
    assert all(torch.equal(a, b) for a, b in zip(learner.q.parameters(), learner.target.parameters(), strict=True))
    state = learner.state_dict()
    fresh = R2D2Learner(cfg, actor.envs.single_observation_space, actor.envs.single_action_space, seed=9)
    fresh.load_state_dict(state)
    assert fresh.updates == 2 and all(torch.equal(a, b) for a, b in zip(fresh.q.parameters(), learner.q.parameters(), strict=True))
    actor.close()


# ------------------------------------------------------------------------------------------ policy
def test_policy_is_recurrent_and_acts_as_the_actor_greedily() -> None:
    cfg = cfg_of(1000)
    algo = algorithm("r2d2")
    learner = algo.learner(cfg)
    policy = algo.policy(cfg, learner)
    assert isinstance(policy, R2D2Policy) and is_recurrent(policy) and policy.state_size == 2 * 64
    obs = np.zeros((3, 2), dtype=np.float32)
    action, state = policy.act_with_state(obs, np.zeros((3, policy.state_size), dtype=np.float32), True)
    assert action.shape == (3,) and state.shape == (3, policy.state_size) and state.dtype == np.float32
    assert np.abs(state).sum() > 0  # the state moved
    policy.load_params(learner.learner.params())
    with pytest.raises(ConfigError, match="act_with_state"):
        policy.act(obs, True)


# ------------------------------------------------------------------------------------------ config
@pytest.mark.parametrize("overrides,match", [
    ({"algorithm": {"recurrent": ""}}, "recurrent"),
    ({"algorithm": {"recurrent": "rnn"}}, "recurrent"),
    ({"algorithm": {"seq_len": 8}}, "rollout_length"),  # the preset's rollout_length 10 > 8
    ({"algorithm": {"burn_in": 15, "n_step": 5}}, "burn_in \\+ n_step"),
    ({"algorithm": {"priority_eta": 1.5}}, "priority_eta"),
    ({"algorithm": {"recurrent_size": 0}}, "recurrent_size"),
    ({"algorithm": {"per_alpha": -1.0}}, "per_alpha"),
    ({"env": "Pendulum-v1"}, "Discrete"),
    ({"buffer_capacity": 50}, "buffer_capacity.*counts sequences"),
])
def test_bad_settings_are_refused_before_any_work(overrides: dict, match: str) -> None:
    if "env" in overrides:
        overrides = {"workload": {"env": overrides.pop("env")}}
    with pytest.raises(ConfigError, match=match):
        cfg_of(4096, **overrides)


def test_burn_in_zero_is_accepted_and_the_replay_counts_sequences() -> None:
    cfg = cfg_of(4096, algorithm={"burn_in": 0})
    algo = algorithm("r2d2")
    spec, pacing, budget = algo.buffer_spec(cfg), algo.pacing(cfg), algo.budget(cfg)
    assert spec.row_steps == 10 and spec.sampler == "prioritized" and spec.sampler_kwargs == {"alpha": 0.9, "beta": 0.6}
    assert spec.checkpoint_replay and spec.checkpoint_learner
    # learning_starts 1000 env steps = 100 sequences; 32 sequences per update, one update per 8 env steps
    assert pacing.min_size_to_sample == 100 and pacing.samples_per_insert == 32 * 10 / 8
    assert budget.total_updates == (4096 - 1000) // 8 and budget.env_steps == 52 * 80


def test_a_memory_task_gets_r2d2s_memory_preset(capsys: pytest.CaptureFixture[str]) -> None:
    from janus.algorithms.presets import preset_for
    from janus.cli import configured, parse_args
    from janus.config import recorded

    cfg = configured(parse_args(["train", "--algo", "r2d2", "--env", ENV]))
    assert "janus: preset: r2d2/memory (janus defaults, tuned on janus/CartPoleNoVel-v1)" in capsys.readouterr().out
    assert recorded(cfg)["workload"]["preset"] == "memory" and cfg.workload.algo == "r2d2"
    assert (cfg.janus.batch_size, cfg.workload.rollout_length, cfg.workload.envs_per_actor) == (32, 10, 8)
    assert preset_for("r2d2", "popgym:popgym-RepeatPreviousEasy-v0", "auto").family == "memory"
    assert preset_for("r2d2", "ALE/Pong-v5", "auto").family == "none"  # no Atari preset of its own
