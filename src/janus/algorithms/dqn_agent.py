"""Double DQN (van Hasselt et al., 2016; ``double_q: false`` for plain DQN) with n-step returns and
optional prioritized replay.

* :class:`DQNActor` (runs in a Worker) acts epsilon-greedily in a vector env and returns pieces of
  ready-to-store n-step transitions, time-major ``[T, num_envs, ...]``:
  ``obs, action, reward (n-step discounted sum), next_obs, discount, terminated, truncated``.
  The target is ``reward + discount * Q_target(next_obs, argmax_a Q(next_obs, a))`` (plain DQN:
  ``max_a Q_target(next_obs, a)``), where
  ``discount`` is ``gamma**m`` for an ``m``-step window, or 0 when the window ended by termination.
  ``terminated``/``truncated`` say whether the window ended by termination/truncation.
* :class:`DQNLearner` (runs in the Trainer) takes replay batches and returns ``|td|`` priorities.

n-step windows cut by the end of a piece: the actor never emits them. It holds back the last
``n_step - 1`` raw steps and prepends them to the next rollout, so every emitted window holds
``n_step`` rewards or stops at an episode end — no shortened (biased) windows. The first piece of
an actor is therefore ``n_step - 1`` steps shorter than ``num_steps``; later pieces are exactly
``num_steps`` long. The last ``n_step - 1`` steps an actor collects are never emitted.

The runtime's view of DQN (its preset, family presets, budget, replay) is :mod:`janus.algorithms.dqn`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from janus.algorithms.linear_chain import LinearChain, linear_chain
from janus.algorithms.networks import MLP, activation_class, flat_size, make_torso, mlp, obs_dtype
from janus.algorithms.normalization import NormalizedInput, obs_norm, reward_norm
from janus.algorithms.optim import adam, clip_grad_norm
from janus.algorithms.returns import nstep_returns
from janus.algorithms.seeding import StreamSeeds, as_stream_seeds
from janus.algorithms.shared import ReplaySchedules, UpdateResult, check_action_space, load_snapshot, snapshot
from janus.envs.reward_scaling import DISCOUNTED_RETURN, NormalizedReward, seed_reward_statistics
from janus.envs.vector import Episodes, EpisodeTracker, make_vector_env, next_obs_of, observation_box
from janus.errors import ConfigError, invalid


@dataclass
class DQNConfig(ReplaySchedules):
    """DQN hyperparameters. The defaults solve CartPole-v1 (see ``benchmarks/rl_cartpole.py``)."""

    hidden: tuple[int, ...] = (128, 128)
    """Widths of the Q-network's hidden layers; ``--net_arch``."""
    activation: str = "relu"
    """Activation of the hidden layers (relu, tanh, elu, leaky_relu, gelu or silu)."""
    gamma: float = 0.99
    """Discount factor."""
    n_step: int = 3
    """Rewards summed per target (1 = classic one-step DQN)."""
    lr: float = 5e-4
    """Adam learning rate."""
    learning_starts: int = 1_000
    """Env steps collected before the first update."""
    train_frequency: float = 2.0
    """Env steps per gradient update (the replay ratio is ``batch_size / train_frequency``)."""
    target_update_interval: int = 250
    """Updates between target-network updates."""
    double_q: bool = True
    """Double DQN (van Hasselt et al., 2016): the online network picks the next action and the target
    network values it. False: the target network's maximum (the DQN of Mnih et al., 2015, and SB3's)."""
    tau: float = 1.0
    """Target update ``target <- tau * online + (1 - tau) * target``; 1.0 is a hard copy."""
    eps_start: float = 1.0
    """Initial exploration epsilon."""
    eps_end: float = 0.05
    """Final exploration epsilon."""
    exploration_steps: int = 10_000
    """Global env steps over which epsilon decays linearly from ``eps_start`` to ``eps_end``."""
    max_grad_norm: float = 10.0
    """Gradient-norm clip."""
    prioritized: bool = False
    """Prioritized replay: batches carry ``weight``; :meth:`DQNLearner.update` returns ``|td|``."""
    per_alpha: float = 0.6
    """Priority exponent of prioritized replay."""
    per_beta: float = 0.4
    """Importance-weight exponent of prioritized replay at the first update, annealed linearly to
    ``per_beta_final`` over the run's updates (Schaul et al., 2016)."""
    per_beta_final: float = 1.0
    """Importance-weight exponent at the run's last update (equal to ``per_beta``: no annealing)."""
    frame_stack_dedup: bool = True
    """When observations are stacks of uint8 frames ``(k, H, W)``, ``k > 1`` (Atari), the replay stores
    each frame once (``FrameStackReplay``: ~1 frame per transition instead of ``2k``); false stores
    every stack whole. Other observation spaces ignore it."""
    normalize_obs: bool = False
    """Normalise observations by running mean and std inside the network (saved with the policy;
    see :mod:`janus.algorithms.normalization`). Not for image observations."""
    normalize_reward: bool = False
    """Divide rewards by the running std of the discounted returns, in the actors' environments
    (SB3's ``VecNormalize``; see :mod:`janus.envs.reward_scaling`); reported returns stay raw."""




class FlatMLP(MLP):
    """``nn.Flatten()`` then an MLP, on observations of any dtype (cast to float32 first); its
    parameter names are those of the plain ``nn.Sequential`` earlier versions saved."""

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return super().forward(obs.float())


def q_network(cfg: DQNConfig, obs_space: gym.spaces.Box, action_space: gym.spaces.Discrete) -> nn.Module:
    """The Q-network: observation (as the env emits it) -> one value per action.

    Image observations (:func:`janus.algorithms.networks.make_torso`: a CNN, or the multi-input
    torso of a Dict/Tuple with images): the torso, then a linear head. Anything else: flattened
    into an MLP of widths ``cfg.hidden`` (activation ``cfg.activation``). ``cfg.normalize_obs``: a
    :class:`~janus.algorithms.normalization.NormalizedInput` around it (``norm``, then ``body``).
    """
    torso = make_torso(obs_space)
    if torso is not None:
        body: nn.Module = nn.Sequential(torso, nn.Linear(torso.features, int(action_space.n)))
    else:
        body = FlatMLP(nn.Flatten(), mlp(flat_size(obs_space), tuple(cfg.hidden), int(action_space.n),
                                           activation_class(cfg.activation)))
    norm, returns = obs_norm(cfg.normalize_obs, tuple(obs_space.shape)), reward_norm(cfg.normalize_reward)
    return body if norm is None and returns is None else NormalizedInput(norm, body, returns)


def q_body(net: nn.Module) -> nn.Module:
    """The Q-network behind its observation normaliser, if it has one."""
    return net.body if isinstance(net, NormalizedInput) else net


class DQNActor:
    """Actor side: epsilon-greedy rollouts in ``num_envs`` copies of ``env_id``; see the module doc."""

    stream_base: int | None = None
    """Set (to ``worker index * num_envs``) when the replay stores frames once: pieces then carry
    ``stream``, the id of the env each row comes from (``stream_base + env``)."""

    def __init__(self, cfg: DQNConfig, env_id: str, seed: int | StreamSeeds, num_envs: int = 1,
                 env_kwargs: dict[str, Any] | None = None, vector_env: str = "sync") -> None:
        self.cfg = cfg
        seeds = as_stream_seeds(seed, num_envs)
        if isinstance(cfg.n_step, bool) or not isinstance(cfg.n_step, int) or cfg.n_step < 1:
            raise invalid("n_step", cfg.n_step, "an int >= 1")
        self.envs = make_vector_env(env_id, num_envs, seeds.spaces, env_kwargs, training=True, vector_env=vector_env,
                                    reward_gamma=cfg.gamma if cfg.normalize_reward else None)
        action_space, obs_space = self.envs.single_action_space, observation_box(self.envs)
        check_action_space("dqn", action_space)
        assert isinstance(action_space, gym.spaces.Discrete)  # what check_action_space accepts for dqn
        self.num_envs = self.envs.num_envs
        self.num_actions = int(action_space.n)
        self.action_start = int(action_space.start)
        self.obs_dtype = obs_dtype(obs_space)  # uint8 images stay uint8
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seeds.torch_seed)
            self.net = q_network(cfg, obs_space, action_space)
        self.rng = seeds.numpy()
        self.obs, _ = self.envs.reset(seed=list(seeds.envs))  # type: ignore[arg-type]  # one seed per sub-env; gymnasium types int only
        self.episodes = EpisodeTracker(self.num_envs)
        self.version = -1
        self.env_steps = 0  # env steps taken by this actor (sum over sub-envs)
        self._tail: dict[str, np.ndarray] | None = None  # last n_step - 1 raw steps, held back

    def load_params(self, params: dict[str, np.ndarray], version: int) -> None:
        """Copy a learner snapshot into the local Q-network."""
        load_snapshot(self.net, params)
        if isinstance(self.net, NormalizedInput):
            seed_reward_statistics(self.envs, self.net.reward_norm)
        self.version = int(version)

    @torch.no_grad()
    def act(self, obs: np.ndarray, epsilon: float) -> np.ndarray:
        """Epsilon-greedy actions (the RNG draws are the same whatever epsilon is). The Q-network
        sees only the observations of envs that act greedily: none while ``epsilon`` is 1 (the
        random warm-up costs no forward pass, which matters for a CNN)."""
        explore = self.rng.random(self.num_envs) < epsilon
        action = self.rng.integers(0, self.num_actions, self.num_envs)
        greedy = ~explore
        if greedy.any():
            action[greedy] = self.net(torch.as_tensor(obs[greedy], dtype=torch.float32)).argmax(1).numpy()
        return action

    def rollout(self, num_steps: int, global_step: int | None = None) -> tuple[dict[str, np.ndarray], Episodes]:
        """Step ``num_steps`` times; return a piece of n-step transitions and the finished episodes.

        ``global_step`` (env steps over all actors, default: this actor's own count) drives epsilon.
        """
        if isinstance(num_steps, bool) or not isinstance(num_steps, int) or num_steps < self.cfg.n_step:
            raise invalid("num_steps", num_steps, f"an int >= n_step ({self.cfg.n_step})", ConfigError)
        step0 = self.env_steps if global_step is None else int(global_step)
        raw: dict[str, list[np.ndarray]] = {k: [] for k in ("obs", "action", "reward", "next_obs", "terminated", "truncated")}
        if isinstance(self.envs, NormalizedReward):  # normalize_reward: the learner's statistics need G
            raw[DISCOUNTED_RETURN] = []
        for t in range(num_steps):
            action = self.act(self.obs, self.cfg.epsilon(step0 + t * self.num_envs))
            obs, reward, term, trunc, info = self.envs.step(action + self.action_start)
            raw["obs"].append(self.obs)
            raw["action"].append(action)
            raw["reward"].append(reward)
            raw["next_obs"].append(next_obs_of(obs, term, trunc, info))
            raw["terminated"].append(term)
            raw["truncated"].append(trunc)
            if DISCOUNTED_RETURN in raw:
                raw[DISCOUNTED_RETURN].append(info[DISCOUNTED_RETURN])
            self.episodes.step(reward, term | trunc, info)
            self.obs = obs
        self.env_steps += num_steps * self.num_envs
        steps = {k: np.stack(v) for k, v in raw.items()}
        if self._tail is not None:
            steps = {k: np.concatenate([self._tail[k], v]) for k, v in steps.items()}
        piece = self._nstep(steps)
        if self.stream_base is not None:
            piece["stream"] = np.broadcast_to(self.stream_base + np.arange(self.num_envs), piece["reward"].shape).astype(np.int64)
        return piece, self.episodes.pop()

    def _nstep(self, steps: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """n-step transitions for every window that fits in ``steps``; hold back the rest."""
        n = self.cfg.n_step
        emit = len(steps["reward"]) - (n - 1)  # windows starting here hold n steps or end earlier
        self._tail = {k: v[emit:] for k, v in steps.items()} if n > 1 else None
        res = nstep_returns(
            torch.as_tensor(steps["reward"], dtype=torch.float32),
            torch.as_tensor(steps["terminated"]),
            torch.as_tensor(steps["truncated"]),
            self.cfg.gamma,
            n,
        )
        assert bool(res.complete[:emit].all())
        last = res.next_index[:emit].numpy()  # time index of each window's last step
        env = np.arange(self.num_envs)[None, :]
        terminated = steps["terminated"][last, env]
        returns = {DISCOUNTED_RETURN: steps[DISCOUNTED_RETURN][:emit]} if DISCOUNTED_RETURN in steps else {}
        return {
            **returns,
            "obs": steps["obs"][:emit].astype(self.obs_dtype),
            "action": steps["action"][:emit].astype(np.int64),
            "reward": res.reward[:emit].numpy(),
            "next_obs": steps["next_obs"][last, env].astype(self.obs_dtype),
            "discount": res.discount[:emit].numpy(),
            "terminated": terminated,
            "truncated": steps["truncated"][last, env] & ~terminated,
        }

    def close(self) -> None:
        self.envs.close()


class DQNLearner:
    """Learner side: double-DQN updates with a target network, Huber loss, Adam and grad clipping."""

    def __init__(self, cfg: DQNConfig, obs_space: gym.spaces.Box, action_space: gym.Space, seed: int) -> None:
        check_action_space("dqn", action_space)
        assert isinstance(action_space, gym.spaces.Discrete)  # what check_action_space accepts for dqn
        self.cfg = cfg
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            self.q = q_network(cfg, obs_space, action_space)
        # normalize_obs: the online network's normaliser feeds both networks (the target gets the
        # current statistics, as SB3 normalises sampled observations); the target is a body only
        self.obs_norm = self.q.norm if isinstance(self.q, NormalizedInput) else None
        self.reward_norm = self.q.reward_norm if isinstance(self.q, NormalizedInput) else None
        self.body = q_body(self.q)
        self.target = q_body(q_network(cfg, obs_space, action_space))
        self.target.load_state_dict(self.body.state_dict())
        self.target.requires_grad_(False)
        self._params: list[torch.Tensor] = list(self.body.parameters())
        self.opt = adam(self._params, lr=cfg.lr)
        self.updates = 0
        self.progress = 0.0  # updates done / the run's updates (set_progress): the PER beta reported
        # an MLP Q-network is differentiated by hand (the same gradients, half the ops: see
        # janus.algorithms.linear_chain); a CNN, or a network with hooks, keeps autograd
        self._chains = (linear_chain(self.body), linear_chain(self.target))

    def update(self, batch: dict[str, torch.Tensor]) -> UpdateResult:
        """One gradient step on a replay batch (uses ``batch["weight"]`` when present)."""
        if self.obs_norm is not None:
            batch = {**batch, "obs": self.obs_norm(batch["obs"]), "next_obs": self.obs_norm(batch["next_obs"])}
        online, target_net = self._chains
        if online is not None and target_net is not None and online.usable() and target_net.usable(backward=False):
            loss, q, td, grad_norm = self._loss_and_grads_by_hand(batch, online, target_net)
        else:
            loss, q, td, grad_norm = self._loss_and_grads(batch)
        self.opt.step()
        self.updates += 1
        if self.updates % self.cfg.target_update_interval == 0:
            with torch.no_grad():
                torch._foreach_lerp_(list(self.target.parameters()), self._params, self.cfg.tau)  # exactly p when tau == 1
        loss_value, q_mean, norm = torch.stack([loss.detach(), q.detach().mean(), grad_norm]).tolist()
        metrics = {"loss": loss_value, "q_mean": q_mean, "grad_norm": norm, "lr": self.opt.param_groups[0]["lr"]}
        priorities = td.detach().abs() if self.cfg.prioritized else None
        if priorities is not None:
            metrics["td_abs_mean"] = priorities.mean().item()
            metrics["per_beta"] = self.cfg.importance_beta(self.progress)  # the exponent this batch was weighted with
        return UpdateResult(priorities, metrics)

    def set_progress(self, progress: float) -> None:
        """The fraction of the run's updates done (the PER beta of the next batch follows it)."""
        self.progress = float(progress)

    def _td_target(self, batch: dict[str, torch.Tensor], next_q_online: torch.Tensor | None,
                   next_q_target: torch.Tensor) -> torch.Tensor:
        """``reward + discount * Q'(next)``: double DQN (the online network picks the next action, the
        target network values it) or, with ``double_q`` false, the target network's maximum."""
        if self.cfg.double_q:
            assert next_q_online is not None
            next_q = next_q_target.gather(1, next_q_online.argmax(1, keepdim=True)).squeeze(1)
        else:
            next_q = next_q_target.max(1).values
        return batch["reward"].float() + batch["discount"].float() * next_q

    def _loss(self, q: torch.Tensor, target: torch.Tensor, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        loss = F.smooth_l1_loss(q, target, reduction="none")
        return (loss * batch["weight"].float()).mean() if "weight" in batch else loss.mean()

    def _loss_and_grads(self, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, ...]:
        """Autograd: the loss, Q(s, a), the TD errors and the clipped gradients' norm."""
        obs, next_obs = batch["obs"], batch["next_obs"]  # as stored (uint8 images): the network casts
        q = self.body(obs).gather(1, batch["action"].long().unsqueeze(1)).squeeze(1)
        with torch.no_grad():
            target = self._td_target(batch, self.body(next_obs) if self.cfg.double_q else None, self.target(next_obs))
        loss = self._loss(q, target, batch)
        self.opt.zero_grad(set_to_none=True)
        loss.backward()
        return loss, q, q - target, clip_grad_norm(self._params, self.cfg.max_grad_norm)

    @torch.no_grad()
    def _loss_and_grads_by_hand(self, batch: dict[str, torch.Tensor], online: LinearChain,
                                target_net: LinearChain) -> tuple[torch.Tensor, ...]:
        """What :meth:`_loss_and_grads` computes, for MLP Q-networks, in half the ops: the online
        network runs once over ``obs`` and ``next_obs`` together (double DQN); the Huber loss's derivative is
        ``clamp(td, -1, 1)`` (times the weight) over the batch size, which the chosen actions'
        column of the ``obs`` half receives and :meth:`LinearChain.backward` takes down."""
        obs = batch["obs"]
        if self.cfg.double_q:  # the online network over obs and next_obs in one pass, two halves
            both, saved = online.forward(torch.cat([obs, batch["next_obs"]]), keep=True)
            out, next_q_online = both[: len(obs)], both[len(obs):]
        else:
            (out, saved), next_q_online = online.forward(obs, keep=True), None
        action = batch["action"].long().unsqueeze(1)
        q = out.gather(1, action).squeeze(1)
        target = self._td_target(batch, next_q_online, target_net.forward(batch["next_obs"])[0])
        td = q - target
        loss = self._loss(q, target, batch)
        scale = batch["weight"].float() * (1.0 / len(q)) if "weight" in batch else 1.0 / len(q)  # d mean / d item
        grad_q = td.clamp(-1.0, 1.0) * scale
        grads = online.backward(saved, torch.zeros_like(out).scatter_(1, action, grad_q.unsqueeze(1)))
        for p, g in zip(self._params, grads, strict=False):
            p.grad = g
        return loss, q, td, clip_grad_norm(self._params, self.cfg.max_grad_norm)

    @torch.no_grad()
    def act(self, obs: torch.Tensor, deterministic: bool = True) -> np.ndarray:
        """Greedy actions (argmax Q) for a batch of observations (DQN acts greedily either way)."""
        return self.q(obs).argmax(1).numpy()

    def policy_network(self) -> nn.Module:
        """The network it acts with and publishes to the workers (:meth:`params`)."""
        return self.q

    def params(self) -> dict[str, np.ndarray]:
        """An immutable snapshot of the online Q-network for the actors."""
        return snapshot(self.q)

    def state_dict(self) -> dict[str, Any]:
        return {"q": self.q.state_dict(), "target": self.target.state_dict(), "opt": self.opt.state_dict(), "updates": self.updates}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.q.load_state_dict(state["q"])
        self.target.load_state_dict(state["target"])
        self.opt.load_state_dict(state["opt"])
        self.updates = int(state["updates"])
