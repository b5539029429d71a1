"""Asynchronous on-policy actor-critic: IMPALA (Espeholt et al., 2018) and APPO, with V-trace.

Workers act with whatever parameter version they last loaded and never wait for the learner;
each trajectory carries the behaviour policy's log-probabilities and the version that produced
it, and V-trace (:func:`janus.algorithms.vtrace.vtrace`) corrects for the lag. The replay is a queue
(:class:`~janus.buffer.pacing.queue_limiter.QueueLimiter`): an *item* is one round of pieces (as many
trajectories as ``num_actors x envs_per_actor``), ``queue_depth`` items deep, each served
``num_epochs`` times in ``num_minibatches`` batches; an item older than ``max_policy_lag``
versions is dropped whole and counted, never served.

* :class:`ImpalaActor` (a Worker's) steps ``envs_per_actor`` envs ``rollout_length`` times and
  sends one *trajectory per env*: a piece shaped ``[1, envs, ...]`` whose rows are whole
  trajectories ``[T, ...]`` (so the replay's shuffles move trajectories, never split one), with
  ``bootstrap_obs`` (the observation after the last step) and the ``version`` it acted with.
  A truncated step (time limit) bootstraps in the actor: its reward gains ``gamma * V(final obs)``
  under the behaviour critic and its discount is 0, as a terminated one's.
* :class:`ImpalaLearner` evaluates the current policy and critic on the batch's trajectories
  (time-major ``[T, B]``) and the bootstrap observations in one pass, computes V-trace targets
  and advantages, and takes one gradient step: IMPALA's importance-weighted policy gradient, or,
  with ``clip_coef`` set (``appo``), PPO's clipped surrogate on the V-trace advantages, with the
  ratio to the behaviour policy (as in Sample Factory's APPO).

The networks are PPO's (:class:`~janus.algorithms.ppo_agent.PPOAgent`): MLPs or a CNN torso, Discrete or Box actions.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, ClassVar

import gymnasium as gym
import numpy as np
import torch

from janus.algorithms.base import ActingPolicy, Budget, BufferSpec, FamilyPreset, register
from janus.algorithms.gym_algorithm import GymActorSide, GymAlgorithm
from janus.algorithms.optim import clip_grad_norm
from janus.algorithms.pacing import Pacing, default_error_buffer
from janus.algorithms.ppo_agent import PPOActor, PPOConfig, PPOLearner
from janus.algorithms.recurrent import check_recurrent
from janus.algorithms.recurrent_agent import RecurrentActing, RecurrentPPOActor, recurrent_policy, sequence_rows, unroll_core
from janus.algorithms.seeding import StreamSeeds, stream_seeds
from janus.algorithms.shared import UpdateResult
from janus.algorithms.tunable import TunableRange, integers, log_uniform, uniform
from janus.algorithms.vtrace import vtrace
from janus.config.schema import RunConfig
from janus.envs.reward_scaling import DISCOUNTED_RETURN
from janus.envs.vector import Episodes, next_obs_of
from janus.errors import invalid


@dataclass
class ImpalaConfig:
    """IMPALA / APPO hyperparameters (the ``appo`` defaults and preset solve CartPole-v1: docs/benchmarks.md)."""

    hidden: tuple[int, ...] = (64, 64)
    """Widths of the hidden layers of the policy network (and of the separate value network,
    unless ``critic_hidden`` sizes it); ``--net_arch``."""
    critic_hidden: tuple[int, ...] = ()
    """Widths of the value network's hidden layers (empty: as ``hidden``); ``--critic_net_arch``."""
    activation: str = "tanh"
    """Activation of the hidden layers (relu, tanh, elu, leaky_relu, gelu or silu)."""
    gamma: float = 0.99
    """Discount factor."""
    lr: float = 1e-3
    """Adam learning rate (the start value when annealed)."""
    anneal_lr: bool = True
    """Decay the learning rate linearly to 0 over the run's updates."""
    rho_bar: float = 1.0
    """V-trace: truncation of the importance weights in the value targets (rho-bar)."""
    c_bar: float = 1.0
    """V-trace: truncation of the trace-cutting weights (c-bar)."""
    clip_coef: float = 0.0
    """APPO: clip range of the ratio to the behaviour policy (0: IMPALA's policy gradient, no clip)."""
    norm_adv: bool = False
    """Normalise the V-trace advantages per batch (zero mean, unit std)."""
    ent_coef: float = 0.01
    """Entropy bonus coefficient."""
    vf_coef: float = 0.5
    """Value loss coefficient (of 0.5 x the squared error to the V-trace targets)."""
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
    max_policy_lag: int = 20
    """Parameter versions a trajectory may lag the learner's before it is dropped unserved (and counted)."""
    queue_depth: int = 2
    """Items (rounds of one piece per worker) the replay holds admitted and not yet served: how far
    the workers may run ahead of the learner before they wait for room."""
    recurrent: str = ""
    """A recurrent core between the features and the heads: ``lstm``, ``gru`` or "" (feed-forward);
    see :mod:`janus.algorithms.recurrent_agent`."""
    recurrent_size: int = 64
    """Units of the recurrent core (``recurrent``)."""


def agent_config(cfg: ImpalaConfig) -> PPOConfig:
    """The PPO config that builds the same networks, discounts and learning-rate schedule as ``cfg``."""
    return PPOConfig(hidden=cfg.hidden, critic_hidden=cfg.critic_hidden, activation=cfg.activation,
                     init_log_std=cfg.init_log_std, gamma=cfg.gamma, lr=cfg.lr, anneal_lr=cfg.anneal_lr,
                     normalize_obs=cfg.normalize_obs, normalize_reward=cfg.normalize_reward,
                     recurrent=cfg.recurrent, recurrent_size=cfg.recurrent_size)


class ImpalaActor(PPOActor):
    """Acts as PPO's actor does; sends trajectories (rows ``[T, ...]``) instead of GAE-labelled steps."""

    def __init__(self, cfg: ImpalaConfig, env_id: str, seed: int | StreamSeeds, num_envs: int = 1,
                 env_kwargs: dict[str, Any] | None = None, vector_env: str = "sync") -> None:
        super().__init__(agent_config(cfg), env_id, seed, num_envs, env_kwargs, vector_env)

    @torch.no_grad()
    def rollout(self, num_steps: int) -> tuple[dict[str, np.ndarray], Episodes]:
        obs_l, action_l, logprob_l, reward_l, done_l, returns_l = [], [], [], [], [], []
        gamma = self.cfg.gamma
        for _ in range(num_steps):
            obs = torch.as_tensor(self.obs, dtype=self.obs_dtype)
            action, logprob, _value = self.policy(obs, self.generator)
            next_obs, reward, term, trunc, info = self.envs.step(self.env_action(action.numpy()))
            env_reward = np.asarray(reward, dtype=np.float32)
            train_reward = env_reward
            cut = np.asarray(trunc) & ~np.asarray(term)
            if cut.any():  # a time limit: bootstrap from the final observation with the behaviour critic
                final = torch.as_tensor(next_obs_of(next_obs, term, trunc, info)[cut], dtype=self.obs_dtype)
                train_reward = env_reward.copy()
                train_reward[cut] += gamma * self.agent.value(final).numpy()
            obs_l.append(obs)
            action_l.append(action)
            logprob_l.append(logprob)
            reward_l.append(train_reward)
            done_l.append(np.asarray(term) | np.asarray(trunc))
            if DISCOUNTED_RETURN in info:  # normalize_reward: for the learner's statistics
                returns_l.append(info[DISCOUNTED_RETURN])
            self.episodes.step(env_reward, term | trunc, info)  # returns count what the env paid
            self.obs = next_obs
        self.env_steps += num_steps * self.num_envs

        def rows(x: torch.Tensor | np.ndarray) -> np.ndarray:  # [T, E, ...] -> [1, E, T, ...]
            a = x.numpy() if isinstance(x, torch.Tensor) else x
            return np.ascontiguousarray(np.swapaxes(a, 0, 1))[None]

        piece = {
            "obs": rows(torch.stack(obs_l)),
            "action": rows(torch.stack(action_l)),
            "logprob": rows(torch.stack(logprob_l)),
            "reward": rows(np.stack(reward_l)),
            "done": rows(np.stack(done_l).astype(np.float32)),
            "bootstrap_obs": torch.as_tensor(self.obs, dtype=self.obs_dtype).numpy()[None],
            "version": np.full((1, self.num_envs), max(self.version, 0), dtype=np.int64),
        }
        if returns_l:
            piece[DISCOUNTED_RETURN] = rows(np.stack(returns_l))
        return piece, self.episodes.pop()


class ImpalaLearner(PPOLearner):
    """Learner side: one V-trace actor-critic step per batch of trajectories (PPO's networks,
    optimiser, learning-rate schedule, acting and checkpoints; its own update)."""

    def __init__(self, cfg: ImpalaConfig, obs_space: gym.spaces.Box, action_space: gym.Space, seed: int) -> None:
        super().__init__(agent_config(cfg), obs_space, action_space, seed)
        self.settings = cfg

    def update(self, batch: dict[str, torch.Tensor]) -> UpdateResult:
        """One step on ``B`` trajectories of ``T`` steps: rows ``obs [B, T, ...]``, ``action``,
        ``logprob`` (behaviour), ``reward``, ``done`` ``[B, T]``, ``bootstrap_obs [B, ...]``."""
        cfg = self.settings
        value, bootstrap_value, logprob, entropy = self.evaluate_trajectories(batch)
        behaviour = batch["logprob"].transpose(0, 1)
        discount = cfg.gamma * (1.0 - batch["done"].transpose(0, 1).float())
        targets = vtrace(behaviour, logprob.detach(), batch["reward"].transpose(0, 1).float(), value.detach(),
                         bootstrap_value.detach(), discount, rho_bar=cfg.rho_bar, c_bar=cfg.c_bar)
        adv = targets.pg_advantage
        if cfg.norm_adv and adv.numel() > 1:
            adv = (adv - adv.mean()) / (adv.std() + 1e-8)
        if cfg.clip_coef > 0:  # APPO: PPO's clipped surrogate, the ratio to the behaviour policy
            ratio = (logprob - behaviour).exp()
            clipped = ratio.clamp(1 - cfg.clip_coef, 1 + cfg.clip_coef)
            policy_loss = torch.max(-adv * ratio, -adv * clipped).mean()
        else:  # IMPALA: the importance-weighted policy gradient (rho is in the advantage)
            policy_loss = -(adv * logprob).mean()
        value_loss = 0.5 * (targets.vs - value).square().mean()
        entropy_mean = entropy.mean()
        loss = policy_loss + cfg.vf_coef * value_loss - cfg.ent_coef * entropy_mean
        self.opt.zero_grad(set_to_none=True)
        loss.backward()
        clip_grad_norm(self._params, cfg.max_grad_norm)
        self.opt.step()
        self.updates += 1
        metrics = {
            "policy_loss": policy_loss.item(), "value_loss": value_loss.item(), "entropy": entropy_mean.item(),
            "rho_mean": targets.rho.mean().item(), "lr": self.opt.param_groups[0]["lr"],
        }
        return UpdateResult(None, metrics)

    def evaluate_trajectories(self, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, ...]:
        """``(value [T, B], bootstrap value [B], log-probability [T, B], entropy [T * B])`` of the
        batch's trajectories under the current networks, in one pass."""
        agent = self.agent
        obs = batch["obs"].transpose(0, 1)  # [T, B, ...]
        steps, width = obs.shape[0], obs.shape[1]
        action = batch["action"].transpose(0, 1).flatten(0, 1)
        features = agent.features(torch.cat([obs.flatten(0, 1), batch["bootstrap_obs"]]))
        values = agent.critic(features).squeeze(-1)
        value, bootstrap_value = values[: steps * width].reshape(steps, width), values[steps * width :]
        logprob, entropy = agent._logprob_entropy(agent.actor(features[: steps * width]), action)
        return value, bootstrap_value, logprob.reshape(steps, width), entropy


class RecurrentImpalaActor(RecurrentPPOActor):
    """:class:`ImpalaActor`'s trajectories from a recurrent core: each row also carries ``state`` (the
    core's state at its start) and ``first`` ``[T]`` (1 where a step begins an episode)."""

    def __init__(self, cfg: ImpalaConfig, env_id: str, seed: int | StreamSeeds, num_envs: int = 1,
                 env_kwargs: dict[str, Any] | None = None, vector_env: str = "sync") -> None:
        super().__init__(agent_config(cfg), env_id, seed, num_envs, env_kwargs, vector_env)

    @torch.no_grad()
    def rollout(self, num_steps: int) -> tuple[dict[str, np.ndarray], Episodes]:
        steps, starts = self.act_steps(num_steps, num_steps)
        done = steps["terminated"] | steps["truncated"]
        cut = steps["truncated"] & ~steps["terminated"]  # a time limit: bootstrapped here, as ImpalaActor does
        reward = steps["reward"] + torch.where(cut, self.cfg.gamma * steps["cut_value"], 0.0)
        rows = {"obs": steps["obs"], "action": steps["action"], "logprob": steps["logprob"], "reward": reward,
                "done": done.float(), "first": steps["first"]}
        if DISCOUNTED_RETURN in steps:
            rows[DISCOUNTED_RETURN] = steps[DISCOUNTED_RETURN]
        piece = {k: sequence_rows(v.numpy(), num_steps) for k, v in rows.items()}
        piece["state"] = starts.numpy()  # [1, E, S]: the state at each trajectory's start
        piece["bootstrap_obs"] = torch.as_tensor(self.obs, dtype=self.obs_dtype).numpy()[None]
        piece["version"] = np.full((1, self.num_envs), max(self.version, 0), dtype=np.int64)
        return piece, self.episodes.pop()


class RecurrentImpalaLearner(RecurrentActing, ImpalaLearner):
    """:class:`ImpalaLearner` on a recurrent core: each trajectory unrolled from its stored start state,
    ``first`` resetting it, and its bootstrap observation evaluated as one step more, under the state
    after the last step (reset where the episode ended there), in the same pass."""

    def evaluate_trajectories(self, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, ...]:
        agent = self.agent
        obs = batch["obs"].transpose(0, 1)  # [T, B, ...]
        steps, width = obs.shape[0], obs.shape[1]
        first = batch["first"].transpose(0, 1)
        ended = batch["done"][:, -1:].transpose(0, 1)  # the bootstrap step begins an episode where the last one ended
        seq = torch.cat([obs, batch["bootstrap_obs"].to(obs.dtype).unsqueeze(0)])
        out, values = unroll_core(agent, seq, batch["state"], torch.cat([first, ended]))
        action = batch["action"].transpose(0, 1).flatten(0, 1)
        logprob, entropy = agent._logprob_entropy(out[:steps].flatten(0, 1), action)
        return values[:steps], values[steps], logprob.reshape(steps, width), entropy


# ---- the runtime's view (see janus.algorithms.base) ------------------------------------------------
MEMORY_PRESET: dict[str, Any] = {
    "num_minibatches": 1, "g_select": 1,
    "workload": {"envs_per_actor": 8, "rollout_length": 32, "num_epochs": 3, "total_env_steps": 200_000},
    "algorithm": {"recurrent": "lstm", "recurrent_size": 64, "hidden": [64], "activation": "relu",
                  "lr": 1e-3, "gamma": 0.98, "ent_coef": 0.0, "normalize_obs": True, "normalize_reward": True},
}
"""The memory family's overlay: appo's, tuned on janus/CartPoleNoVel-v1 (see :class:`APPO`); impala
takes the same (recurrent, so a memory task is not trained by a network that cannot remember)."""


class Impala(GymAlgorithm):
    """Asynchronous on-policy: workers never wait for the learner; V-trace corrects the lag."""

    name = "impala"
    on_policy = True
    config_class = ImpalaConfig
    action_spaces = (gym.spaces.Discrete, gym.spaces.Box)
    quick_env_steps = 4096
    preset: ClassVar[dict[str, Any]] = {
        # The defaults solve CartPole-v1 in 200k env steps (5 seeds; docs/benchmarks.md): items of 16
        # trajectories of 32 steps, each trained 2 epochs (APPO: 4) of 2 minibatches. One piece staged
        # at most (pieces waiting there age; queue_depth is the knob for how far workers run ahead).
        "num_minibatches": 2, "buffer_capacity": 100_000, "overlap_collect": 1, "overlap_select": 1,
        "g_collect": 1, "g_select": 1, "actor_buffer_size": 1, "prefetch": 1,
        "runtime": {"backend": "process"},
        "workload": {"algo": "impala", "hidden_size": 64, "num_layers": 2, "num_actors": 1, "envs_per_actor": 16,
                     "rollout_length": 32, "num_epochs": 2, "total_env_steps": 200_000},
    }
    # What `janus tune --objective time_to_solve` searches (with the data-path knobs): the RL Zoo's A2C/PPO
    # ranges (rl_zoo3/hyperparams_opt.py); not num_minibatches, which must divide the workers' trajectories.
    tunable_ranges: ClassVar[dict[str, TunableRange]] = {
        "algorithm.lr": log_uniform(1e-4, 3e-3), "workload.num_epochs": integers(1, 8),
        "algorithm.gamma": uniform(0.95, 0.999), "algorithm.ent_coef": uniform(0.0, 0.05),
        "algorithm.vf_coef": uniform(0.25, 1.0),
    }

    family_presets: ClassVar[dict[str, FamilyPreset]] = {
        "memory": FamilyPreset(MEMORY_PRESET, "janus, appo's memory values (tuned for appo on janus/CartPoleNoVel-v1)"),
    }

    def validate(self, cfg: RunConfig) -> None:
        super().validate(cfg)
        a, w = self.config(cfg), cfg.workload
        if a.rho_bar <= 0 or a.c_bar <= 0:
            raise invalid("algorithm.rho_bar/c_bar", (a.rho_bar, a.c_bar), "numbers > 0 (V-trace truncation levels)")
        if a.clip_coef >= 1:
            raise invalid("algorithm.clip_coef", a.clip_coef, "a number in [0, 1) (0: IMPALA, no clip)")
        if a.queue_depth < 1:
            raise invalid("algorithm.queue_depth", a.queue_depth, "an integer >= 1")
        check_recurrent("algorithm.recurrent", a.recurrent, a.recurrent_size)
        trajectories = w.num_actors * w.envs_per_actor
        if trajectories % cfg.janus.num_minibatches:
            raise invalid("num_minibatches", cfg.janus.num_minibatches,
                          f"a divisor of the trajectories per item, num_actors*envs_per_actor={trajectories} "
                          f"(--algo {self.name} batches whole trajectories)")

    def buffer_spec(self, cfg: RunConfig) -> BufferSpec:
        a = self.config(cfg)
        return BufferSpec(on_policy=True, checkpoint_learner=True, queue_depth=a.queue_depth,
                          max_staleness=a.max_policy_lag, row_steps=cfg.workload.rollout_length)

    def budget(self, cfg: RunConfig) -> Budget:
        """``total_env_steps`` in whole items (rounds of one trajectory per env of every worker):
        each worker acts that many pieces and no more, and each item is trained ``num_epochs x
        num_minibatches`` times, or dropped whole as too stale (its batches are then counted as
        dropped, not trained: the run still ends once every item is trained or dropped)."""
        items = max(1, math.ceil(cfg.workload.total_env_steps / cfg.rollout_transitions))
        return Budget(items * cfg.updates_per_iteration, items, env_steps=items * cfg.rollout_transitions)

    def publish_every(self, cfg: RunConfig) -> int:
        """One version per item trained (``num_epochs x num_minibatches`` updates), as Sample
        Factory counts policy versions per training batch: the lag is then in items, the unit the
        queue holds, whatever the epochs and minibatches."""
        return cfg.updates_per_iteration

    def pacing(self, cfg: RunConfig) -> Pacing:
        w = cfg.workload
        piece = w.envs_per_actor  # rows (trajectories) per piece
        return Pacing(samples_per_insert=0.0, min_size_to_sample=cfg.minibatch_size,
                      error_buffer=default_error_buffer(0.0, piece, w.num_actors, cfg.minibatch_size),
                      publish_every=self.publish_every(cfg), piece_steps=w.rollout_length, pieces_per_rollout=1,
                      max_pieces=self.budget(cfg).iterations, lockstep=False)

    def actor(self, cfg: RunConfig, index: int, initial_env_steps: int = 0, instance: int = 0, session: int = 0) -> GymActorSide:
        w = cfg.workload
        seeds = stream_seeds(cfg.seed, index, w.envs_per_actor, instance=instance, session=session)
        config = self.config(cfg)
        kind = RecurrentImpalaActor if config.recurrent else ImpalaActor
        actor = kind(config, w.env, seeds, w.envs_per_actor, w.env_kwargs, vector_env=w.vector_env)
        return GymActorSide(actor, w.rollout_length, initial_env_steps)

    def make_learner(self, config: ImpalaConfig, obs_space: Any, action_space: Any, seed: int) -> ImpalaLearner:
        return (RecurrentImpalaLearner if config.recurrent else ImpalaLearner)(config, obs_space, action_space, seed)

    def policy(self, cfg: RunConfig, learner: Any) -> ActingPolicy:
        return recurrent_policy(learner) if self.config(cfg).recurrent else super().policy(cfg, learner)


class APPO(Impala):
    """IMPALA's data path with PPO's clipped surrogate on the V-trace advantages (Sample Factory's APPO)."""

    name = "appo"
    preset: ClassVar[dict[str, Any]] = {**Impala.preset, "workload": {**Impala.preset["workload"], "algo": "appo", "num_epochs": 4}}
    variant_defaults: ClassVar[dict[str, Any]] = {"clip_coef": 0.2, "norm_adv": True}
    # janus's values for janus/CartPoleNoVel-v1 (docs/benchmarks.md): recurrent PPO's memory preset where
    # the two share a meaning (lstm 64, pi/vf [64], relu, gamma 0.98, lr 1e-3, normalize), items of 8
    # trajectories of 32 steps, each trained 3 epochs in one batch (3: solved at 40-60k env steps on seeds
    # 0-2, ~3x recurrent PPO's env-steps/s; 5 and 10 epochs solved too, slower per step, no sooner).
    family_presets: ClassVar[dict[str, FamilyPreset]] = {
        "memory": FamilyPreset(MEMORY_PRESET, "janus, tuned on janus/CartPoleNoVel-v1"),
    }
    tunable_ranges: ClassVar[dict[str, TunableRange]] = {**Impala.tunable_ranges, "algorithm.clip_coef": uniform(0.1, 0.3)}


register(Impala())
register(APPO())
