"""SAC: the squashed-Gaussian maths, the learner's state, and learning through the runtime."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch
from torch.distributions import Normal, TanhTransform, TransformedDistribution

from janus.algorithms.base import algorithm
from janus.algorithms.sac import ActionScale, SACActor, SACConfig, SACLearner, SquashedGaussianPolicy
from janus.config import from_dict, resolve
from janus.errors import ConfigError
from janus.runtime.run import run_runtime

STEPS_PER_EPISODE = 10


class MatchTarget(gym.Env):
    """Each step shows a target t in [-1, 1]; reward -(a - 2t)^2 for an action a in [-2, 2].

    A uniformly random policy scores ~ -8/3 per step (-27 per episode), a perfect one 0: a
    continuous-control task a working SAC learns in about a thousand steps.
    """

    observation_space = gym.spaces.Box(-1.0, 1.0, (1,), np.float32)
    action_space = gym.spaces.Box(-2.0, 2.0, (1,), np.float32)

    def reset(self, *, seed: int | None = None, options: Any = None) -> tuple[np.ndarray, dict]:
        super().reset(seed=seed)
        self.t = 0
        self.target = self.np_random.uniform(-1, 1, 1).astype(np.float32)
        return self.target.copy(), {}

    def step(self, action: np.ndarray) -> tuple[np.ndarray, float, bool, bool, dict]:
        reward = -float((float(action[0]) - 2 * float(self.target[0])) ** 2)
        self.t += 1
        self.target = self.np_random.uniform(-1, 1, 1).astype(np.float32)
        return self.target.copy(), reward, False, self.t >= STEPS_PER_EPISODE, {}


ENV_ID = "JanusMatchTarget-v0"
if ENV_ID not in gym.registry:
    gym.register(ENV_ID, entry_point=MatchTarget)


def sac_cfg(steps: int, **algorithm_keys: Any) -> Any:
    return resolve(from_dict({
        "batch_size": 64, "buffer_capacity": 10_000,
        "workload": {"env": ENV_ID, "total_env_steps": steps},
        "algorithm": {"hidden": [64, 64], "learning_starts": 256, **algorithm_keys},
    }, base=from_dict(algorithm("sac").preset)))


def test_squashed_log_prob_equals_a_tanh_transformed_normal() -> None:
    torch.manual_seed(0)
    policy = SquashedGaussianPolicy(3, 2, (16, 16))
    obs = torch.randn(512, 3)
    torch.manual_seed(1)
    action, logp = policy.sample(obs)
    mean, log_std = policy(obs)
    reference = TransformedDistribution(Normal(mean, log_std.exp()), [TanhTransform(cache_size=1)])
    torch.manual_seed(1)
    ref_action = reference.rsample()
    assert torch.allclose(action, ref_action, atol=1e-6)
    expected = reference.log_prob(ref_action).sum(-1)
    finite = action.abs() < 0.999  # where tanh saturates the reference's inverse is inexact
    assert finite.all(1).sum() > 400
    assert torch.allclose(logp[finite.all(1)], expected[finite.all(1)], atol=1e-3)
    assert action.abs().max() <= 1.0


def test_action_scale_maps_the_unit_box_onto_the_env_bounds() -> None:
    scale = ActionScale(gym.spaces.Box(np.array([-2.0, 0.0], np.float32), np.array([2.0, 1.0], np.float32)))
    out = scale.to_env(np.array([[-1.0, -1.0], [1.0, 1.0], [0.0, 0.0], [5.0, -5.0]], np.float32))
    np.testing.assert_allclose(out, [[-2, 0], [2, 1], [0, 0.5], [2, 0]])


def test_actor_pieces_hold_unit_actions_and_warm_up_uniformly() -> None:
    cfg = SACConfig(learning_starts=40, hidden=(16, 16))
    actor = SACActor(cfg, "Pendulum-v1", seed=0, num_envs=2)
    warm, _ = actor.rollout(8)  # 16 env steps < 40: uniform actions
    later, _ = actor.rollout(8, global_step=100)  # from the policy
    for piece in (warm, later):
        assert piece["obs"].shape == piece["next_obs"].shape == (8, 2, 3)
        assert piece["action"].shape == (8, 2, 1) and piece["action"].dtype == np.float32
        assert np.all(np.abs(piece["action"]) <= 1.0)
        assert piece["reward"].shape == piece["terminated"].shape == (8, 2)
    assert warm["action"].std() > 0.4, "uniform in [-1, 1] has std 0.58"
    actor.close()


def test_learner_state_round_trips_and_continues_identically() -> None:
    space_o, space_a = gym.spaces.Box(-1, 1, (3,), np.float32), gym.spaces.Box(-2, 2, (1,), np.float32)
    cfg = SACConfig(hidden=(16, 16))
    a = SACLearner(cfg, space_o, space_a, seed=0)
    gen = torch.Generator().manual_seed(0)
    batch = {"obs": torch.randn(32, 3, generator=gen), "action": torch.rand(32, 1, generator=gen) * 2 - 1,
             "reward": torch.randn(32, generator=gen), "next_obs": torch.randn(32, 3, generator=gen),
             "terminated": torch.rand(32, generator=gen) < 0.1}
    for _ in range(3):
        a.update(batch)
    b = SACLearner(cfg, space_o, space_a, seed=7)
    b.load_state_dict(a.state_dict())
    assert b.alpha == a.alpha and b.updates == 3
    for name in ("policy", "critic", "target"):
        sa, sb = getattr(a, name).state_dict(), getattr(b, name).state_dict()
        assert all(torch.equal(sa[k], sb[k]) for k in sa), name
    torch.manual_seed(5)
    ma = a.update(batch).metrics
    torch.manual_seed(5)
    mb = b.update(batch).metrics
    # torch's fused Adam continues a loaded state within float rounding, not bit for bit (and a
    # weight whose gradient is ~0 can then step the other way), so: the same losses, nearly
    assert ma == pytest.approx(mb, rel=1e-3, abs=1e-5)


def test_alpha_falls_when_the_policy_is_more_random_than_its_target_entropy() -> None:
    space_o, space_a = gym.spaces.Box(-1, 1, (3,), np.float32), gym.spaces.Box(-1, 1, (2,), np.float32)
    learner = SACLearner(SACConfig(hidden=(16, 16), lr=1e-2), space_o, space_a, seed=0)
    batch = {"obs": torch.randn(64, 3), "action": torch.rand(64, 2) * 2 - 1, "reward": torch.zeros(64),
             "next_obs": torch.randn(64, 3), "terminated": torch.zeros(64, dtype=torch.bool)}
    before = learner.alpha
    for _ in range(20):
        metrics = learner.update(batch).metrics
    assert learner.alpha < before and set(metrics) >= {"q_loss", "policy_loss", "entropy", "alpha", "q_mean"}
    assert all(math.isfinite(v) for v in metrics.values())


def test_sac_refuses_a_discrete_action_space_naming_the_flag() -> None:
    with pytest.raises(ConfigError, match=r"--env.*Box.*use --algo dqn or ppo"):
        resolve(from_dict({"workload": {"env": "CartPole-v1"}}, base=from_dict(algorithm("sac").preset)))


def test_sac_learns_a_continuous_task_through_the_runtime() -> None:
    """1,500 env steps (~1,250 updates of a 64x64 network): the last 20 episodes score far above
    a random policy's -27 (measured: -2.5 to -3.9 over seeds 0-5; 2,000 steps gave -2.3 to -2.9)."""
    cfg = sac_cfg(1_500)
    run = run_runtime(cfg, timeout_s=300)
    assert run["counts"]["updates"] >= algorithm("sac").budget(cfg).total_updates
    assert run["final_mean_return"] > -8, run["final_mean_return"]


def test_a_sac_run_folder_loads_as_a_policy_and_rolls_out(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """janus train --algo sac, then janus.load_policy and janus rollout on its folder.

    The commands run in this process (``janus.cli.main``, as test_resume.py's do): two subprocesses
    cost ~5 s of interpreter and torch start-up; the CLI as a process is tested in tests/test_cli_flags.py."""
    import janus
    from janus.cli import main

    out = tmp_path / "sac"
    assert main(["train", "--algo", "sac", "--total_env_steps", "512", "--learning_starts", "256", "--hidden_size", "32",
                 "--out", str(out)]) == 0
    policy = janus.load_policy(out)
    obs = np.stack([np.array([1.0, 0.0, 0.5], np.float32)] * 5)
    actions = policy.predict(obs)
    assert actions.shape == (5, 1) and np.all(np.abs(actions) <= 2.0)  # Pendulum's torque bounds
    assert np.array_equal(actions, policy.predict(obs)), "deterministic: the squashed mean"
    assert policy.predict(obs[0], deterministic=False).shape == (1,)
    capsys.readouterr()
    code = main(["rollout", "--checkpoint", str(out), "--episodes", "1"])
    rollout = capsys.readouterr()
    assert code == 0 and "sac on Pendulum-v1" in rollout.out, rollout.out + rollout.err


class _UnboundedActions(gym.Env):
    """A Box action space without bounds: nothing for a squashed policy to map onto."""

    observation_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
    action_space = gym.spaces.Box(-np.inf, np.inf, (1,), np.float32)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return np.zeros(2, np.float32), {}

    def step(self, action):
        return np.zeros(2, np.float32), 0.0, False, False, {}


gym.register("JanusTestUnboundedActions-v0", entry_point=_UnboundedActions)


def test_an_unbounded_action_space_is_a_config_error_before_any_work(tmp_path, capsys) -> None:
    from janus.cli import main

    out = tmp_path / "run"
    assert main(["train", "--algo", "sac", "--env", "test_sac:JanusTestUnboundedActions-v0", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "finite low and high bounds" in err and "JanusTestUnboundedActions-v0" in err
    assert not out.exists()  # refused before the run folder was made
