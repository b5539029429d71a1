"""Soft Actor-Critic (Haarnoja et al., 2018) for Box action spaces.

* :class:`SACActor` (runs in a Worker) acts with the squashed Gaussian policy in a vector env (or
  uniformly at random for the first ``learning_starts`` global env steps) and returns pieces of
  one-step transitions, time-major ``[T, num_envs, ...]``: ``obs, action, reward, next_obs,
  terminated, truncated``. Actions are stored in the policy's ``[-1, 1]`` range; the actor maps
  them affinely onto the environment's ``[low, high]`` when it steps.
* :class:`SACLearner` (runs in the Trainer): twin Q-networks with Polyak-averaged targets, a
  tanh-squashed Gaussian policy trained against the smaller of the two Q values, and an entropy
  temperature ``alpha`` tuned automatically towards ``target_entropy`` (``-action_dim`` by default).

The bootstrap is cut only at termination (``terminated``); a truncated episode (time limit)
bootstraps from its real last observation, which :func:`~janus.envs.vector.next_obs_of` keeps.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, ClassVar

import gymnasium as gym
import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from janus.algorithms.base import OWN_PRESET, FamilyPreset, register
from janus.algorithms.gym_algorithm import GlobalStepActorSide, ReplayGymAlgorithm
from janus.algorithms.networks import activation_class, activation_function, flat_size, mlp
from janus.algorithms.normalization import RunningNorm, obs_norm, reward_norm
from janus.algorithms.optim import adam
from janus.algorithms.seeding import StreamSeeds, as_stream_seeds, stream_seeds
from janus.algorithms.shared import UpdateResult, check_action_space, load_snapshot, snapshot
from janus.algorithms.tunable import TunableRange, integers, log_uniform, one_of, uniform
from janus.config.schema import RunConfig
from janus.envs.reward_scaling import DISCOUNTED_RETURN, NormalizedReward, seed_reward_statistics
from janus.envs.vector import Episodes, EpisodeTracker, make_vector_env, next_obs_of, observation_box
from janus.errors import invalid

LOG_STD_MIN, LOG_STD_MAX = -5.0, 2.0


@dataclass
class SACConfig:
    """SAC hyperparameters. The defaults follow SB3's and CleanRL's SAC (they solve Pendulum-v1)."""

    hidden: tuple[int, ...] = (256, 256)
    """Widths of the hidden layers of the policy (and of each Q-network, unless ``critic_hidden``
    sizes them); ``--net_arch``."""
    critic_hidden: tuple[int, ...] = ()
    """Widths of each Q-network's hidden layers (empty: as ``hidden``); ``--critic_net_arch``."""
    activation: str = "relu"
    """Activation of the hidden layers (relu, tanh, elu, leaky_relu, gelu or silu)."""
    gamma: float = 0.99
    """Discount factor."""
    tau: float = 0.005
    """Polyak step of the target Q-networks: ``target <- tau * online + (1 - tau) * target``."""
    lr: float = 3e-4
    """Adam learning rate of the Q-networks, the policy and the temperature."""
    learning_starts: int = 1_000
    """Env steps of uniformly random actions (and collected) before the first update."""
    train_frequency: float = 1.0
    """Env steps per gradient update (the replay ratio is ``batch_size / train_frequency``)."""
    init_alpha: float = 1.0
    """Initial entropy temperature."""
    autotune_alpha: bool = True
    """Tune ``alpha`` so the policy's entropy tracks ``target_entropy``; else keep ``init_alpha``."""
    target_entropy_scale: float = 1.0
    """``target_entropy = -target_entropy_scale * action_dim``."""
    normalize_obs: bool = False
    """Normalise observations by running mean and std inside the network (saved with the policy;
    see :mod:`janus.algorithms.normalization`). Not for image observations."""
    normalize_reward: bool = False
    """Divide rewards by the running std of the discounted returns, in the actors' environments
    (SB3's ``VecNormalize``; see :mod:`janus.envs.reward_scaling`); reported returns stay raw."""


def _check_box(space: gym.Space) -> gym.spaces.Box:
    check_action_space("sac", space, (gym.spaces.Box,))
    assert isinstance(space, gym.spaces.Box)  # checked just above
    if not (np.all(np.isfinite(space.low)) and np.all(np.isfinite(space.high))):
        raise invalid("--env action space for --algo sac", str(space), "a Box with finite low and high bounds")
    return space


class SquashedGaussianPolicy(nn.Module):
    """Observation -> tanh-squashed Gaussian over ``[-1, 1]^action_dim``."""

    def __init__(self, obs_dim: int, action_dim: int, hidden: tuple[int, ...], norm: RunningNorm | None = None,
                 returns: RunningNorm | None = None, activation: str = "relu") -> None:
        super().__init__()
        self.activation = activation_function(activation)
        self.obs_norm = norm  # normalize_obs: the critics read the observations through it too
        self.reward_norm = returns  # normalize_reward: published with the weights, the actors' reward scale
        self.torso = mlp(obs_dim, hidden[:-1], hidden[-1], activation_class(activation))
        self.mean = nn.Linear(hidden[-1], action_dim)
        self.log_std = nn.Linear(hidden[-1], action_dim)

    def forward(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if self.obs_norm is not None:
            obs = self.obs_norm(obs)
        h = self.activation(self.torso(obs.flatten(1)))
        log_std = self.log_std(h).clamp(LOG_STD_MIN, LOG_STD_MAX)
        return self.mean(h), log_std

    def sample(self, obs: torch.Tensor, generator: torch.Generator | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """A reparameterised action in ``[-1, 1]`` and its log-probability (tanh-corrected); the
        noise comes from ``generator`` (a CPU one) when given, else from torch's global one."""
        mean, log_std = self(obs)
        std = log_std.exp()
        noise = torch.randn(mean.shape, generator=generator, dtype=mean.dtype) if generator is not None \
            else torch.randn_like(mean)
        u = mean + std * noise.to(mean.device)
        action = torch.tanh(u)
        gauss = (-0.5 * ((u - mean) / std).square() - log_std - 0.5 * math.log(2 * math.pi)).sum(-1)
        # log |d tanh(u)/du| = log(1 - tanh(u)^2), in the numerically stable form
        correction = (2 * (math.log(2) - u - F.softplus(-2 * u))).sum(-1)
        return action, gauss - correction

    def deterministic(self, obs: torch.Tensor) -> torch.Tensor:
        """The mean action, squashed into ``[-1, 1]``."""
        return torch.tanh(self(obs)[0])


class TwinQ(nn.Module):
    """Two independent Q-networks over ``(obs, action)``."""

    def __init__(self, obs_dim: int, action_dim: int, hidden: tuple[int, ...], activation: str = "relu") -> None:
        super().__init__()
        self.q1 = mlp(obs_dim + action_dim, hidden, 1, activation_class(activation))
        self.q2 = mlp(obs_dim + action_dim, hidden, 1, activation_class(activation))

    def forward(self, obs: torch.Tensor, action: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        x = torch.cat([obs.flatten(1), action], 1)
        return self.q1(x).squeeze(1), self.q2(x).squeeze(1)


def critic_widths(cfg: SACConfig) -> tuple[int, ...]:
    """Widths of each Q-network's hidden layers: ``critic_hidden``, else ``hidden``."""
    return tuple(cfg.critic_hidden) or tuple(cfg.hidden)


def policy_network(cfg: SACConfig, obs_space: gym.spaces.Box, action_space: gym.spaces.Box) -> SquashedGaussianPolicy:
    return SquashedGaussianPolicy(flat_size(obs_space), int(action_space.shape[0]), tuple(cfg.hidden),
                                  obs_norm(cfg.normalize_obs, tuple(obs_space.shape)), reward_norm(cfg.normalize_reward),
                                  cfg.activation)


class ActionScale:
    """Affine map between the policy's ``[-1, 1]`` and the environment's ``[low, high]``."""

    def __init__(self, space: gym.spaces.Box) -> None:
        self.low = space.low.astype(np.float32)
        self.half = ((space.high - space.low) / 2).astype(np.float32)

    def to_env(self, action: np.ndarray) -> np.ndarray:
        return self.low + (np.clip(action, -1.0, 1.0) + 1.0) * self.half


class SACActor:
    """Actor side: stochastic policy rollouts in ``num_envs`` copies of ``env_id``; see the module doc."""

    def __init__(self, cfg: SACConfig, env_id: str, seed: int | StreamSeeds, num_envs: int = 1,
                 env_kwargs: dict[str, Any] | None = None, vector_env: str = "sync") -> None:
        self.cfg = cfg
        seeds = as_stream_seeds(seed, num_envs)
        self.envs = make_vector_env(env_id, num_envs, seeds.spaces, env_kwargs, training=True, vector_env=vector_env,
                                    reward_gamma=cfg.gamma if cfg.normalize_reward else None)
        space = _check_box(self.envs.single_action_space)
        self.num_envs = self.envs.num_envs
        self.action_dim = int(space.shape[0])
        self.scale = ActionScale(space)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seeds.torch_seed)
            self.policy = policy_network(cfg, observation_box(self.envs), space)
        self.generator = torch.Generator().manual_seed(seeds.torch_seed)
        self.rng = seeds.numpy()
        self.obs, _ = self.envs.reset(seed=list(seeds.envs))  # type: ignore[arg-type]  # one seed per sub-env; gymnasium types int only
        self.episodes = EpisodeTracker(self.num_envs)
        self.version = -1
        self.env_steps = 0

    def load_params(self, params: dict[str, np.ndarray], version: int) -> None:
        """Copy a learner snapshot of the policy into the local network."""
        load_snapshot(self.policy, params)
        seed_reward_statistics(self.envs, self.policy.reward_norm)
        self.version = int(version)

    @torch.no_grad()
    def act(self, obs: np.ndarray, random: bool) -> np.ndarray:
        """Actions in ``[-1, 1]``: uniform while ``random``, else drawn from the policy."""
        if random:
            return self.rng.uniform(-1.0, 1.0, (self.num_envs, self.action_dim)).astype(np.float32)
        mean, log_std = self.policy(torch.as_tensor(obs, dtype=torch.float32))
        noise = torch.randn(mean.shape, generator=self.generator)
        return torch.tanh(mean + log_std.exp() * noise).numpy()

    def rollout(self, num_steps: int, global_step: int | None = None) -> tuple[dict[str, np.ndarray], Episodes]:
        """Step ``num_steps`` times; return a piece of transitions and the finished episodes.

        ``global_step`` (env steps over all actors, default: this actor's own count) decides when
        the random warm-up of ``learning_starts`` steps ends.
        """
        step0 = self.env_steps if global_step is None else int(global_step)
        out: dict[str, list[np.ndarray]] = {k: [] for k in ("obs", "action", "reward", "next_obs", "terminated", "truncated")}
        if isinstance(self.envs, NormalizedReward):  # normalize_reward: the learner's statistics need G
            out[DISCOUNTED_RETURN] = []
        for t in range(num_steps):
            action = self.act(self.obs, random=step0 + t * self.num_envs < self.cfg.learning_starts)
            obs, reward, term, trunc, info = self.envs.step(self.scale.to_env(action))
            out["obs"].append(np.asarray(self.obs, dtype=np.float32))
            out["action"].append(action)
            out["reward"].append(np.asarray(reward, dtype=np.float32))
            out["next_obs"].append(next_obs_of(obs, term, trunc, info).astype(np.float32))
            out["terminated"].append(term)
            out["truncated"].append(trunc)
            if DISCOUNTED_RETURN in out:
                out[DISCOUNTED_RETURN].append(info[DISCOUNTED_RETURN])
            self.episodes.step(reward, term | trunc, info)
            self.obs = obs
        self.env_steps += num_steps * self.num_envs
        return {k: np.stack(v) for k, v in out.items()}, self.episodes.pop()

    def close(self) -> None:
        self.envs.close()


class SACLearner:
    """Learner side: one SAC step per batch (critics, then policy, then temperature, then targets)."""

    def __init__(self, cfg: SACConfig, obs_space: gym.spaces.Box, action_space: gym.Space, seed: int) -> None:
        space = _check_box(action_space)
        self.cfg = cfg
        obs_dim, action_dim = flat_size(obs_space), int(space.shape[0])
        self.scale = ActionScale(space)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            self.policy = policy_network(cfg, obs_space, space)
            self.critic = TwinQ(obs_dim, action_dim, critic_widths(cfg), cfg.activation)
        self.obs_norm = self.policy.obs_norm  # GymLearnerSide feeds it the batches' observations
        self.reward_norm = self.policy.reward_norm  # ... and the actors' discounted returns
        self.target = TwinQ(obs_dim, action_dim, critic_widths(cfg), cfg.activation)
        self.target.load_state_dict(self.critic.state_dict())
        self.target.requires_grad_(False)
        self._critic_params: list[torch.Tensor] = list(self.critic.parameters())
        self._target_params: list[torch.Tensor] = list(self.target.parameters())
        self.critic_opt = adam(self._critic_params, lr=cfg.lr)
        self.policy_opt = adam(self.policy.parameters(), lr=cfg.lr)
        self.log_alpha = torch.tensor(math.log(cfg.init_alpha), requires_grad=True)
        self.alpha_opt = adam([self.log_alpha], lr=cfg.lr)
        self.target_entropy = -cfg.target_entropy_scale * action_dim
        # the policy's noise in updates: seeded here, so a seeded serial run is reproducible
        self.generator = torch.Generator().manual_seed(seed)
        self.updates = 0

    @property
    def alpha(self) -> float:
        return float(self.log_alpha.detach().exp())

    def update(self, batch: dict[str, torch.Tensor]) -> UpdateResult:
        """One gradient step of the critics, the policy and (autotuned) the temperature."""
        obs, next_obs = batch["obs"].float(), batch["next_obs"].float()
        action, reward = batch["action"].float(), batch["reward"].float()
        alpha = self.log_alpha.detach().exp()
        # the policy normalises its own input; the critics read the same normalised observations
        critic_obs, critic_next = (obs, next_obs) if self.obs_norm is None else (self.obs_norm(obs), self.obs_norm(next_obs))
        with torch.no_grad():
            next_action, next_logp = self.policy.sample(next_obs, self.generator)
            t1, t2 = self.target(critic_next, next_action)
            keep = 1.0 - batch["terminated"].float()
            target = reward + self.cfg.gamma * keep * (torch.min(t1, t2) - alpha * next_logp)
        q1, q2 = self.critic(critic_obs, action)
        q_loss = F.mse_loss(q1, target) + F.mse_loss(q2, target)
        self.critic_opt.zero_grad(set_to_none=True)
        q_loss.backward()
        self.critic_opt.step()

        new_action, logp = self.policy.sample(obs, self.generator)
        self.critic.requires_grad_(False)  # the policy's loss moves the policy only
        p1, p2 = self.critic(critic_obs, new_action)
        self.critic.requires_grad_(True)
        policy_loss = (alpha * logp - torch.min(p1, p2)).mean()
        self.policy_opt.zero_grad(set_to_none=True)
        policy_loss.backward()
        self.policy_opt.step()

        if self.cfg.autotune_alpha:
            alpha_loss = -(self.log_alpha * (logp.detach() + self.target_entropy)).mean()
            self.alpha_opt.zero_grad(set_to_none=True)
            alpha_loss.backward()
            self.alpha_opt.step()
        with torch.no_grad():
            torch._foreach_lerp_(self._target_params, self._critic_params, self.cfg.tau)
        self.updates += 1
        metrics = {"q_loss": q_loss.item(), "policy_loss": policy_loss.item(), "q_mean": q1.mean().item(),
                   "entropy": -logp.mean().item(), "alpha": float(alpha)}
        return UpdateResult(None, metrics)

    @torch.no_grad()
    def act(self, obs: Any, deterministic: bool = True) -> np.ndarray:
        """Actions for a batch of observations, in the environment's ``[low, high]``: the squashed
        mean (``deterministic``) or a draw from the policy."""
        x = torch.as_tensor(obs, dtype=torch.float32)
        unit = self.policy.deterministic(x) if deterministic else self.policy.sample(x)[0]
        return self.scale.to_env(unit.numpy())

    def policy_network(self) -> nn.Module:
        """The network it acts with and publishes to the workers (:meth:`params`)."""
        return self.policy

    def params(self) -> dict[str, np.ndarray]:
        """An immutable snapshot of the policy for the actors."""
        return snapshot(self.policy)

    def state_dict(self) -> dict[str, Any]:
        return {"policy": self.policy.state_dict(), "critic": self.critic.state_dict(), "target": self.target.state_dict(),
                "log_alpha": self.log_alpha.detach().clone(), "critic_opt": self.critic_opt.state_dict(),
                "policy_opt": self.policy_opt.state_dict(), "alpha_opt": self.alpha_opt.state_dict(), "updates": self.updates,
                "rng": self.generator.get_state()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.policy.load_state_dict(state["policy"])
        self.critic.load_state_dict(state["critic"])
        self.target.load_state_dict(state["target"])
        with torch.no_grad():
            self.log_alpha.copy_(state["log_alpha"])
        self.critic_opt.load_state_dict(state["critic_opt"])
        self.policy_opt.load_state_dict(state["policy_opt"])
        self.alpha_opt.load_state_dict(state["alpha_opt"])
        self.updates = int(state["updates"])
        if "rng" in state:  # checkpoints written before the learner had its own generator have none
            self.generator.set_state(state["rng"])


# ---- the runtime's view of SAC (see janus.algorithms.base) ----------------------------------------
class SAC(ReplayGymAlgorithm):
    """Off-policy replay with the ratio ``batch_size / train_frequency`` after ``learning_starts``."""

    name = "sac"
    config_class = SACConfig
    action_spaces = (gym.spaces.Box,)
    action_space_hint = "; use --algo dqn or ppo for discrete actions"
    image_observations = False  # MLPs only: validate() names dqn/ppo for image observations
    quick_env_steps = 2048
    # Defaults that solve Pendulum-v1 (see docs/benchmarks.md); a user's config and flags override them.
    preset: ClassVar[dict[str, Any]] = {
        "batch_size": 256, "buffer_capacity": 100_000, "overlap_collect": 1,
        "overlap_select": 1, "g_collect": 1, "g_select": 1,
        "workload": {"algo": "sac", "env": "Pendulum-v1", "num_actors": 1, "envs_per_actor": 1, "rollout_length": 8,
                     "total_env_steps": 20_000, "hidden_size": 256, "num_layers": 2},  # the networks (SACConfig.hidden)
    }
    # Overlays by environment family, layered over `preset` by the env id or --preset: rl-baselines3-zoo
    # hyperparams/sac.yml, commit 00128b5d, its names mapped onto janus's as janus.algorithms.presets says.
    family_presets: ClassVar[dict[str, FamilyPreset]] = {
        # Atari has discrete actions only: sac refuses them; no overlay.
        "classic_control": OWN_PRESET,
        # sac.yml `LunarLanderContinuous-v2`: n_timesteps 5e5, batch_size 256, learning_rate lin_7.3e-4 (janus:
        # constant), buffer_size 1e6, gamma 0.99, tau 0.01, train_freq 1, gradient_steps 1, learning_starts 1e4,
        # net_arch [400, 300].
        "box2d": FamilyPreset({
            "batch_size": 256, "buffer_capacity": 1_000_000,
            "workload": {"envs_per_actor": 1, "total_env_steps": 500_000},
            "algorithm": {"lr": 7.3e-4, "gamma": 0.99, "tau": 0.01, "train_frequency": 1.0, "learning_starts": 10_000,
                          "hidden": [400, 300]},
        }, "RL Zoo sac.yml, LunarLanderContinuous-v2"),
        # sac.yml `HalfCheetah-v3: &mujoco-defaults` (Ant, Hopper, Walker2d, Humanoid, Swimmer): n_timesteps 1e6,
        # learning_starts 1e4, the rest SB3's SAC defaults: buffer_size 1e6, batch_size 256, learning_rate 3e-4,
        # tau 0.005, gamma 0.99, train_freq 1, gradient_steps 1, net [256, 256].
        "mujoco": FamilyPreset({
            "batch_size": 256, "buffer_capacity": 1_000_000,
            "workload": {"envs_per_actor": 1, "total_env_steps": 1_000_000},
            "algorithm": {"learning_starts": 10_000, "lr": 3e-4, "tau": 0.005, "gamma": 0.99, "train_frequency": 1.0},
        }, "RL Zoo sac.yml, HalfCheetah-v3 (mujoco-defaults)"),
    }

    # What `janus tune --objective time_to_solve` searches (with the data-path knobs): the RL Zoo's SAC
    # ranges (rl_zoo3/hyperparams_opt.py) around the preset.
    tunable_ranges: ClassVar[dict[str, TunableRange]] = {
        "algorithm.lr": log_uniform(1e-4, 3e-3), "batch_size": one_of(64, 128, 256, 512),
        "algorithm.gamma": uniform(0.95, 0.999), "algorithm.tau": log_uniform(1e-3, 5e-2),
        "algorithm.learning_starts": integers(100, 10_000, log=True), "algorithm.train_frequency": one_of(0.5, 1.0, 2.0),
    }

    def check_actions(self, action_space: Any) -> None:
        """A Box with finite bounds (the squashed policy maps ``[-1, 1]`` onto them), refused in
        ``validate`` before any work."""
        _check_box(action_space)

    def actor(self, cfg: RunConfig, index: int, initial_env_steps: int = 0, instance: int = 0, session: int = 0) -> GlobalStepActorSide:
        w = cfg.workload
        seeds = stream_seeds(cfg.seed, index, w.envs_per_actor, instance=instance, session=session)
        actor = SACActor(self.config(cfg), w.env, seeds, w.envs_per_actor, w.env_kwargs, vector_env=w.vector_env)
        return GlobalStepActorSide(actor, self.pacing(cfg).piece_steps, w.num_actors, initial_env_steps)

    def make_learner(self, config: SACConfig, obs_space: Any, action_space: Any, seed: int) -> SACLearner:
        return SACLearner(config, obs_space, action_space, seed)


register(SAC())
