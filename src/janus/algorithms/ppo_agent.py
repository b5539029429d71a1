"""Clipped PPO (Schulman et al., 2017) with GAE, for Discrete and Box action spaces.

* :class:`PPOActor` (runs in a Worker) samples from the policy in a vector env and returns a
  time-major piece ``[T, num_envs, ...]``: ``obs, action, logprob, value, reward, terminated,
  truncated, advantage, return``. Advantages come from :func:`janus.algorithms.returns.gae` over the piece,
  bootstrapping from ``V(next_obs[t])``: after a truncation ``next_obs`` is the final observation
  (SAME_STEP autoreset, see :mod:`janus.envs.vector`), and the end of the piece bootstraps
  from the value of the last ``next_obs``.
* :class:`PPOLearner` (runs in the Trainer) does one clipped-objective gradient step per
  minibatch; the caller iterates each rollout in ``num_minibatches`` minibatches for
  ``update_epochs`` epochs.

Box actions: a diagonal Gaussian with a state-independent log-std. The env receives the action
clipped to the space's bounds; the piece stores the unclipped sample, whose log-prob it is.

Vector observations: separate policy and value MLPs, evaluated together when acting by
:class:`~janus.algorithms.ppo_acting.FusedPolicyValue`. Image observations (:func:`janus.algorithms.networks.image_layout`):
one CNN torso shared by a linear policy head and a linear value head (the usual Atari PPO shape:
the convolutions are most of the compute, so sharing them halves it, and the value loss helps
shape the features), evaluated when acting by :class:`~janus.algorithms.ppo_acting.TorsoPolicyValue`.
With ``recurrent`` set, an LSTM/GRU core sits between the features and the heads
(:mod:`janus.algorithms.recurrent_agent`).

The runtime's view of PPO (its preset, family presets, budget) is :mod:`janus.algorithms.ppo`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from torch import nn
from torch.distributions import Categorical, Distribution, Normal

from janus.algorithms.networks import activation_class, activation_function, flat_size, make_torso, mlp, obs_dtype
from janus.algorithms.normalization import obs_norm, reward_norm
from janus.algorithms.optim import adam, clip_grad_norm
from janus.algorithms.ppo_acting import policy_value
from janus.algorithms.recurrent import RecurrentCore
from janus.algorithms.returns import gae
from janus.algorithms.seeding import StreamSeeds, as_stream_seeds
from janus.algorithms.shared import UpdateResult, check_action_space, load_snapshot, snapshot
from janus.envs.reward_scaling import DISCOUNTED_RETURN, NormalizedReward, seed_reward_statistics
from janus.envs.vector import Episodes, EpisodeTracker, make_vector_env, next_obs_of, observation_box


@dataclass
class PPOConfig:
    """PPO hyperparameters. The defaults solve CartPole-v1 (see ``benchmarks/rl_cartpole.py``)."""

    hidden: tuple[int, ...] = (64, 64)
    """Widths of the hidden layers of the policy network (and of the separate value network,
    unless ``critic_hidden`` sizes it); ``--net_arch``."""
    critic_hidden: tuple[int, ...] = ()
    """Widths of the value network's hidden layers (empty: as ``hidden``); ``--critic_net_arch``."""
    activation: str = "tanh"
    """Activation of the hidden layers (relu, tanh, elu, leaky_relu, gelu or silu)."""
    gamma: float = 0.99
    """Discount factor."""
    gae_lambda: float = 0.95
    """GAE lambda."""
    lr: float = 2.5e-4
    """Adam learning rate (the start value when annealed)."""
    anneal_lr: bool = True
    """Decay the learning rate linearly to 0 over training (see :meth:`PPOLearner.set_progress`)."""
    clip_coef: float = 0.2
    """Clip range of the probability ratio (and of the value change when ``clip_vloss``)."""
    clip_vloss: bool = True
    """Clip the value loss around the rollout's value estimates."""
    norm_adv: bool = True
    """Normalise advantages per minibatch (zero mean, unit std)."""
    ent_coef: float = 0.01
    """Entropy bonus coefficient."""
    vf_coef: float = 0.5
    """Value loss coefficient."""
    max_grad_norm: float = 0.5
    """Gradient-norm clip."""
    init_log_std: float = 0.0
    """Initial log standard deviation of the Gaussian policy (Box actions only)."""
    normalize_obs: bool = False
    """Normalise observations by running mean and std inside the network (saved with the policy;
    see :mod:`janus.algorithms.normalization`). Not for image observations."""
    normalize_reward: bool = False
    """Divide rewards by the running std of the discounted returns, in the actors' environments
    (SB3's ``VecNormalize``; see :mod:`janus.envs.reward_scaling`); reported returns stay raw."""
    recurrent: str = ""
    """A recurrent core between the features and the heads: ``lstm``, ``gru`` or "" (feed-forward);
    see :mod:`janus.algorithms.recurrent_agent`."""
    recurrent_size: int = 64
    """Units of the recurrent core (``recurrent``)."""
    seq_len: int = 0
    """Recurrent: env steps per training sequence (truncated BPTT); 0: the whole piece. Divides the piece's steps."""


def _layer_init(layer: nn.Module, gain: float) -> None:
    if isinstance(layer, (nn.Linear, nn.Conv2d)):
        with torch.no_grad():  # drawn contiguous, copied into the weight's own layout (CNN: channels-last)
            layer.weight.copy_(nn.init.orthogonal_(torch.empty(layer.weight.shape), gain))
        if layer.bias is not None:  # janus's layers all have one
            nn.init.zeros_(layer.bias)


class PPOAgent(nn.Module):
    """Policy and value networks (orthogonal init, as in CleanRL), on observations of any dtype.

    Vector observations: separate policy and value MLPs (``actor``, ``critic``) of widths
    ``cfg.hidden`` and ``cfg.critic_hidden`` (empty: ``cfg.hidden``), activation ``cfg.activation``.
    Image observations: a shared :class:`~janus.algorithms.networks.CNNTorso`
    (``torso``; a :class:`~janus.algorithms.networks.MultiInputTorso` for a Dict/Tuple with images)
    under a linear ``actor`` head and a linear ``critic`` head. ``cfg.normalize_obs``: a
    :class:`~janus.algorithms.normalization.RunningNorm` (``obs_norm``) before either.
    """

    def __init__(self, cfg: PPOConfig, obs_space: gym.spaces.Box, action_space: gym.Space) -> None:
        super().__init__()
        check_action_space("ppo", action_space)
        self.continuous = isinstance(action_space, gym.spaces.Box)
        if isinstance(action_space, gym.spaces.Box):
            n_out = int(action_space.shape[0])
        else:
            assert isinstance(action_space, gym.spaces.Discrete)  # check_action_space: Discrete or Box
            n_out = int(action_space.n)
        self.obs_norm = obs_norm(cfg.normalize_obs, tuple(obs_space.shape))
        self.reward_norm = reward_norm(cfg.normalize_reward)  # published with the weights: the actors' reward scale
        self.torso = make_torso(obs_space)
        n_in = flat_size(obs_space) if self.torso is None else self.torso.features
        self.core = RecurrentCore(cfg.recurrent, n_in, cfg.recurrent_size) if cfg.recurrent else None
        n_in = n_in if self.core is None else self.core.hidden_size  # the heads read the core's output
        if self.torso is not None:
            for layer in self.torso.modules():
                _layer_init(layer, np.sqrt(2))
            self.critic = nn.Sequential(nn.Linear(n_in, 1))
            self.actor = nn.Sequential(nn.Linear(n_in, n_out))
        else:
            act = activation_class(cfg.activation)
            self.critic = mlp(n_in, tuple(cfg.critic_hidden) or tuple(cfg.hidden), 1, act)
            self.actor = mlp(n_in, tuple(cfg.hidden), n_out, act)
        self.activation = activation_function(cfg.activation)
        for net, head_gain in ((self.critic, 1.0), (self.actor, 0.01)):
            for layer in list(net)[:-1]:
                _layer_init(layer, np.sqrt(2))
            _layer_init(net[-1], head_gain)
        if self.continuous:
            self.log_std = nn.Parameter(torch.full((n_out,), float(cfg.init_log_std)))

    def features(self, obs: torch.Tensor) -> torch.Tensor:
        """What the heads read: the torso's features, or the flattened observation (float32),
        normalised first with ``normalize_obs``."""
        if self.obs_norm is not None:
            obs = self.obs_norm(obs)
        return obs.flatten(1).float() if self.torso is None else self.torso(obs)

    def value(self, obs: torch.Tensor) -> torch.Tensor:
        return self.critic(self.features(obs)).squeeze(-1)

    def dist(self, obs: torch.Tensor) -> Distribution:
        out = self.actor(self.features(obs))
        return Normal(out, self.log_std.exp().expand_as(out)) if self.continuous else Categorical(logits=out)

    def log_prob(self, dist: Distribution, action: torch.Tensor) -> torch.Tensor:
        logp = dist.log_prob(action)
        return logp.sum(-1) if self.continuous else logp

    def entropy(self, dist: Distribution) -> torch.Tensor:
        return dist.entropy().sum(-1) if self.continuous else dist.entropy()

    def logprob_entropy(self, obs: torch.Tensor, action: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Log-probability of ``action`` and the policy's entropy, per row (differentiable)."""
        return self._logprob_entropy(self.actor(self.features(obs)), action)

    def evaluate(self, obs: torch.Tensor, action: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(log-probability of action, entropy, value)`` per row, the features computed once."""
        h = self.features(obs)
        logprob, entropy = self._logprob_entropy(self.actor(h), action)
        return logprob, entropy, self.critic(h).squeeze(-1)

    def _logprob_entropy(self, out: torch.Tensor, action: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Discrete actions skip ``torch.distributions`` (its argument checks and lazy properties
        cost more than the maths at CartPole's sizes): ``log_softmax``, a gather, ``-sum p log p``."""
        if self.continuous:
            dist = Normal(out, self.log_std.exp().expand_as(out))
            return self.log_prob(dist, action), self.entropy(dist)
        logp = torch.log_softmax(out, -1)
        return logp.gather(1, action.long().unsqueeze(1)).squeeze(1), -(logp.exp() * logp).sum(-1)


class PPOActor:
    """Actor side: on-policy rollouts in ``num_envs`` copies of ``env_id``; see the module doc."""

    def __init__(self, cfg: PPOConfig, env_id: str, seed: int | StreamSeeds, num_envs: int = 1,
                 env_kwargs: dict[str, Any] | None = None, vector_env: str = "sync") -> None:
        self.cfg = cfg
        seeds = as_stream_seeds(seed, num_envs)
        self.envs = make_vector_env(env_id, num_envs, seeds.spaces, env_kwargs, training=True, vector_env=vector_env,
                                    reward_gamma=cfg.gamma if cfg.normalize_reward else None)
        self.num_envs = self.envs.num_envs
        space = self.envs.single_action_space
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seeds.torch_seed)
            self.agent = PPOAgent(cfg, observation_box(self.envs), space)
        if isinstance(space, gym.spaces.Box):  # self.agent.continuous
            self.low, self.high = space.low, space.high
        else:
            assert isinstance(space, gym.spaces.Discrete)  # PPOAgent checked: Discrete or Box
            self.action_start = int(space.start)
        uint8 = obs_dtype(self.envs.single_observation_space) == np.uint8
        self.obs_dtype = torch.uint8 if uint8 else torch.float32
        self.generator = torch.Generator().manual_seed(seeds.torch_seed)
        self.policy = policy_value(self.agent)
        self.obs, _ = self.envs.reset(seed=list(seeds.envs))  # type: ignore[arg-type]  # one seed per sub-env; gymnasium types int only
        self.episodes = EpisodeTracker(self.num_envs)
        self.version = -1
        self.env_steps = 0

    def load_params(self, params: dict[str, np.ndarray], version: int) -> None:
        """Copy a learner snapshot into the local policy and value networks."""
        load_snapshot(self.agent, params)
        self.policy = policy_value(self.agent)
        seed_reward_statistics(self.envs, self.agent.reward_norm)
        self.version = int(version)

    def env_action(self, action: np.ndarray) -> np.ndarray:
        """What the env receives: Box actions clipped to the bounds, Discrete ones offset by ``start``."""
        return np.clip(action, self.low, self.high) if self.agent.continuous else action + self.action_start

    @torch.no_grad()
    def rollout(self, num_steps: int) -> tuple[dict[str, np.ndarray], Episodes]:
        """Step ``num_steps`` times; return the piece (with GAE advantages) and finished episodes."""
        steps: dict[str, list[Any]] = {k: [] for k in ("obs", "action", "logprob", "value")}
        env_out: dict[str, list[np.ndarray]] = {k: [] for k in ("reward", "next_obs", "terminated", "truncated")}
        if isinstance(self.envs, NormalizedReward):  # normalize_reward: the learner's statistics need G
            env_out[DISCOUNTED_RETURN] = []
        for _ in range(num_steps):
            obs = torch.as_tensor(self.obs, dtype=self.obs_dtype)  # uint8 images stay uint8
            action, logprob, value = self.policy(obs, self.generator)
            next_obs, reward, term, trunc, info = self.envs.step(self.env_action(action.numpy()))
            for k, v in (("obs", obs), ("action", action), ("logprob", logprob), ("value", value)):
                steps[k].append(v)
            for k, a in (("reward", reward), ("next_obs", next_obs_of(next_obs, term, trunc, info)),
                         ("terminated", term), ("truncated", trunc)):
                env_out[k].append(a)
            if DISCOUNTED_RETURN in env_out:
                env_out[DISCOUNTED_RETURN].append(info[DISCOUNTED_RETURN])
            self.episodes.step(reward, term | trunc, info)
            self.obs = next_obs
        piece = {k: torch.stack(v) for k, v in steps.items()}
        piece.update({k: torch.from_numpy(np.stack(v)) for k, v in env_out.items()})
        piece["reward"] = piece["reward"].float()
        piece["next_obs"] = piece["next_obs"].to(self.obs_dtype)
        self.env_steps += num_steps * self.num_envs
        next_obs = piece.pop("next_obs")
        next_value = self.agent.value(next_obs.flatten(0, 1)).reshape(num_steps, self.num_envs)
        piece["advantage"], piece["return"] = gae(
            piece["reward"], piece["value"], next_value, piece["terminated"], piece["truncated"],
            self.cfg.gamma, self.cfg.gae_lambda,
        )
        return {k: v.numpy() for k, v in piece.items()}, self.episodes.pop()

    def close(self) -> None:
        self.envs.close()


class PPOLearner:
    """Learner side: one clipped-PPO gradient step per minibatch."""

    def __init__(self, cfg: PPOConfig, obs_space: gym.spaces.Box, action_space: gym.Space, seed: int) -> None:
        self.cfg = cfg
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            self.agent = PPOAgent(cfg, obs_space, action_space)
        self.obs_norm = self.agent.obs_norm  # GymLearnerSide feeds it the batches' observations
        self.reward_norm = self.agent.reward_norm  # ... and the actors' discounted returns
        self._params = list(self.agent.parameters())
        self.opt = adam(self._params, lr=cfg.lr, eps=1e-5)
        self.updates = 0

    def set_progress(self, fraction: float) -> None:
        """Training progress in [0, 1]; with ``anneal_lr`` the rate becomes ``lr * (1 - fraction)``."""
        if self.cfg.anneal_lr:
            for group in self.opt.param_groups:
                group["lr"] = self.cfg.lr * (1.0 - min(max(fraction, 0.0), 1.0))

    def update(self, batch: dict[str, torch.Tensor]) -> UpdateResult:
        """One gradient step on a minibatch of ``obs, action, logprob, value, advantage, return``."""
        cfg = self.cfg
        logprob, entropy, value = self.evaluate(batch)
        entropy = entropy.mean()
        log_ratio = logprob - batch["logprob"]
        ratio = log_ratio.exp()
        adv = batch["advantage"]
        if cfg.norm_adv and adv.numel() > 1:
            adv = (adv - adv.mean()) / (adv.std() + 1e-8)
        policy_loss = torch.max(-adv * ratio, -adv * ratio.clamp(1 - cfg.clip_coef, 1 + cfg.clip_coef)).mean()
        ret, old_value = batch["return"], batch["value"]
        value_loss = (value - ret) ** 2
        if cfg.clip_vloss:
            clipped = old_value + (value - old_value).clamp(-cfg.clip_coef, cfg.clip_coef)
            value_loss = torch.max(value_loss, (clipped - ret) ** 2)
        value_loss = 0.5 * value_loss.mean()
        loss = policy_loss - cfg.ent_coef * entropy + cfg.vf_coef * value_loss
        self.opt.zero_grad(set_to_none=True)
        loss.backward()
        clip_grad_norm(self._params, cfg.max_grad_norm)
        self.opt.step()
        self.updates += 1
        with torch.no_grad():
            approx_kl = ((ratio - 1) - log_ratio).mean().item()
            clipfrac = ((ratio - 1).abs() > cfg.clip_coef).float().mean().item()
        metrics = {
            "policy_loss": policy_loss.item(), "value_loss": value_loss.item(), "entropy": entropy.item(),
            "approx_kl": approx_kl, "clipfrac": clipfrac, "lr": self.opt.param_groups[0]["lr"],
        }
        return UpdateResult(None, metrics)

    def evaluate(self, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(log-probability of the batch's actions, entropy, value)`` under the current networks."""
        return self.agent.evaluate(batch["obs"], batch["action"])  # obs as stored: the agent casts

    @torch.no_grad()
    def act(self, obs: torch.Tensor, deterministic: bool = True) -> np.ndarray:
        """Actions for a batch of observations: the mode of the policy's distribution
        (``deterministic``) or a draw from it."""
        dist = self.agent.dist(obs)
        if not deterministic:
            return dist.sample().numpy()
        probs = getattr(dist, "probs", None)  # Categorical (Discrete actions); a Normal (Box) has its mean
        return (probs.argmax(-1) if probs is not None else dist.mean).numpy()

    def policy_network(self) -> nn.Module:
        """The network it acts with and publishes to the workers (:meth:`params`)."""
        return self.agent

    def params(self) -> dict[str, np.ndarray]:
        """An immutable snapshot of the policy and value networks for the actors."""
        return snapshot(self.agent)

    def state_dict(self) -> dict[str, Any]:
        return {"agent": self.agent.state_dict(), "opt": self.opt.state_dict(), "updates": self.updates}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.agent.load_state_dict(state["agent"])
        self.opt.load_state_dict(state["opt"])
        self.updates = int(state["updates"])
