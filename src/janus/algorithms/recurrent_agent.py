"""Recurrent PPO: the actor that carries an LSTM/GRU state and the learner that unrolls it over sequences.

The network is :class:`~janus.algorithms.ppo_agent.PPOAgent` with ``recurrent`` set: features (the
flattened observation, or the CNN / multi-input torso; ``obs_norm`` first) -> one
:class:`~janus.algorithms.recurrent.RecurrentCore` -> the policy and value heads. The core is SHARED
by the policy and the value (SB3's ``enable_critic_lstm`` runs a second one for the critic): one
recurrent pass per step instead of two when acting and training, and the value loss shapes the memory
the policy reads, as the shared CNN torso does for images.

* :class:`RecurrentPPOActor` steps the envs with the core's state ``[envs, state_size]``, zeroes the
  rows of envs whose episode ended after each step, and sends a piece whose rows are *sequences* of
  ``seq_len`` steps (``[1, rows, seq_len, ...]``, as IMPALA's rows are trajectories), each with
  ``state`` (the core's state at the sequence's start) and ``first`` (1 where a step begins an
  episode). GAE bootstraps from ``V(next_obs[t])`` under the state after step t: the next step's
  value where the episode goes on, the final observation's under the state BEFORE the reset where it
  was truncated, and the end of the piece under the carried state.
* :class:`RecurrentPPOLearner` unrolls the core over each sequence of a minibatch from its stored
  start state, ``first`` resetting it (truncated BPTT over the sequence). The start state is STORED
  (what the actor had), the inner states RECOMPUTED by the unroll: in the first epoch that is exactly
  the behaviour policy's computation (as SB3-contrib's RecurrentPPO and CleanRL's ppo_lstm do); in
  later epochs the inner states follow the updated weights while the start state stays the actor's,
  stale only by the epochs' updates, and no second pass over the rollout is needed to refresh it.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from janus.algorithms.gym_algorithm import GymLearnerSide, LearnerPolicy
from janus.algorithms.ppo_acting import draw
from janus.algorithms.ppo_agent import PPOActor, PPOAgent, PPOConfig, PPOLearner
from janus.algorithms.returns import gae
from janus.algorithms.seeding import StreamSeeds
from janus.envs.reward_scaling import DISCOUNTED_RETURN, NormalizedReward
from janus.envs.vector import Episodes, next_obs_of
from janus.errors import ConfigError


def step_core(agent: PPOAgent, obs: torch.Tensor, state: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """One step of ``agent``'s core: ``(policy head output, value, next state)`` for ``obs [B, ...]``."""
    assert agent.core is not None
    h, state = agent.core.step(agent.features(obs), state)
    return agent.actor(h), agent.critic(h).squeeze(-1), state


def unroll_core(agent: PPOAgent, obs: torch.Tensor, state: torch.Tensor,
                first: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(policy head output [T, B, n], value [T, B])`` over sequences ``obs [T, B, ...]`` from
    ``state [B, S]``, ``first [T, B]`` resetting it (:meth:`~janus.algorithms.recurrent.RecurrentCore.unroll`)."""
    assert agent.core is not None
    steps, width = obs.shape[0], obs.shape[1]
    x = agent.features(obs.flatten(0, 1)).reshape(steps, width, -1)
    h, _ = agent.core.unroll(x, state, first)
    return agent.actor(h), agent.critic(h).squeeze(-1)


def sequence_rows(x: np.ndarray, seq_len: int) -> np.ndarray:
    """A time-major ``[T, E, ...]`` array as rows of sequences ``[1, (T / seq_len) * E, seq_len, ...]``
    (row ``i * E + e``: env ``e``'s ``i``-th sequence)."""
    steps, envs = x.shape[0], x.shape[1]
    rows = x.reshape(steps // seq_len, seq_len, envs, *x.shape[2:]).swapaxes(1, 2)
    return np.ascontiguousarray(rows).reshape(1, (steps // seq_len) * envs, seq_len, *x.shape[2:])


class RecurrentPPOActor(PPOActor):
    """PPO's actor with a recurrent core: pieces of sequences with their start states; see the module doc."""

    def __init__(self, cfg: PPOConfig, env_id: str, seed: int | StreamSeeds, num_envs: int = 1,
                 env_kwargs: dict[str, Any] | None = None, vector_env: str = "sync") -> None:
        super().__init__(cfg, env_id, seed, num_envs, env_kwargs, vector_env)
        assert self.agent.core is not None, "RecurrentPPOActor: a config with `recurrent` set"
        self.state = self.agent.core.initial_state(self.num_envs)
        self.first = torch.ones(self.num_envs)  # every env begins an episode at its first step

    def act_steps(self, num_steps: int, seq_len: int) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
        """Step ``num_steps`` times: the time-major record ``[T, E]`` (``obs, action, logprob, value,
        reward`` (the env's), ``terminated, truncated, first, cut_value`` (the value of a truncated
        step's final observation under the state before the reset, else 0)) and the states at the
        start of every ``seq_len`` steps ``[T / seq_len, E, S]``."""
        agent, core = self.agent, self.agent.core
        assert core is not None
        log_std = agent.log_std.detach() if agent.continuous else None
        keys = ("obs", "action", "logprob", "value", "reward", "terminated", "truncated", "first", "cut_value")
        record: dict[str, list[Any]] = {k: [] for k in keys}
        if isinstance(self.envs, NormalizedReward):  # normalize_reward: the learner's statistics need G
            record[DISCOUNTED_RETURN] = []
        starts = []
        for t in range(num_steps):
            if t % seq_len == 0:
                starts.append(self.state)
            obs = torch.as_tensor(self.obs, dtype=self.obs_dtype)
            out, value, state = step_core(agent, obs, self.state)
            action, logprob, value = draw(out, value, log_std, self.generator)
            next_obs, reward, term, trunc, info = self.envs.step(self.env_action(action.numpy()))
            term, trunc = np.asarray(term), np.asarray(trunc)
            cut_value = torch.zeros(self.num_envs)
            cut = trunc & ~term
            if cut.any():  # a time limit: V(final obs) under the state the episode ended with
                final = torch.as_tensor(next_obs_of(next_obs, term, trunc, info)[cut], dtype=self.obs_dtype)
                cut_value[torch.from_numpy(cut)] = step_core(agent, final, state[torch.from_numpy(cut)])[1]
            for k, v in (("obs", obs), ("action", action), ("logprob", logprob), ("value", value),
                         ("reward", torch.as_tensor(reward, dtype=torch.float32)), ("terminated", torch.from_numpy(term)),
                         ("truncated", torch.from_numpy(trunc)), ("first", self.first), ("cut_value", cut_value)):
                record[k].append(v)
            if DISCOUNTED_RETURN in record:
                record[DISCOUNTED_RETURN].append(torch.as_tensor(info[DISCOUNTED_RETURN]))
            done = term | trunc
            self.episodes.step(reward, done, info)
            self.state = core.reset(state, torch.from_numpy(done)) if done.any() else state
            self.first = torch.from_numpy(done).float()
            self.obs = next_obs
        self.env_steps += num_steps * self.num_envs
        return {k: torch.stack(v) for k, v in record.items()}, torch.stack(starts)

    @torch.no_grad()
    def rollout(self, num_steps: int) -> tuple[dict[str, np.ndarray], Episodes]:
        """Step ``num_steps`` times; the piece of sequences (with GAE advantages) and finished episodes."""
        seq_len = self.cfg.seq_len or num_steps
        if num_steps % seq_len:
            raise ConfigError(f"invalid algorithm.seq_len: got {seq_len}; accepted: a divisor of the piece's {num_steps} steps")
        steps, starts = self.act_steps(num_steps, seq_len)
        last_value = step_core(self.agent, torch.as_tensor(self.obs, dtype=self.obs_dtype), self.state)[1]
        next_value = torch.cat([steps["value"][1:], last_value[None]])  # V(next_obs[t]) where the episode goes on
        cut = steps["truncated"] & ~steps["terminated"]
        next_value = torch.where(cut, steps.pop("cut_value"), next_value)
        steps["advantage"], steps["return"] = gae(steps["reward"], steps["value"], next_value, steps["terminated"],
                                                  steps["truncated"], self.cfg.gamma, self.cfg.gae_lambda)
        piece = {k: sequence_rows(v.numpy(), seq_len) for k, v in steps.items()}
        piece["state"] = starts.reshape(1, -1, starts.shape[-1]).numpy()
        return piece, self.episodes.pop()


class RecurrentActing:
    """Acting with the core's state, for a learner whose ``agent`` has a recurrent core."""

    agent: PPOAgent

    @property
    def state_size(self) -> int:
        """Floats of recurrent state per env."""
        assert self.agent.core is not None
        return self.agent.core.state_size

    @torch.no_grad()
    def act_with_state(self, obs: torch.Tensor, state: torch.Tensor,
                       deterministic: bool = True) -> tuple[np.ndarray, torch.Tensor]:
        """Actions (the mode, or a draw) and the next state for observations ``[B, ...]`` and states ``[B, S]``."""
        out, _, state = step_core(self.agent, obs, state)
        if self.agent.continuous:
            action = out if deterministic else out + self.agent.log_std.exp() * torch.randn_like(out)
        else:
            action = out.argmax(-1) if deterministic else torch.distributions.Categorical(logits=out).sample()
        return action.numpy(), state

    def act(self, obs: torch.Tensor, deterministic: bool = True) -> np.ndarray:
        raise ConfigError("a recurrent policy acts with its state: act_with_state(obs, state, deterministic) "
                          "(janus.load_policy(...).predict(obs, state, episode_start))")


class RecurrentPPOLearner(RecurrentActing, PPOLearner):
    """PPO's learner over minibatches of whole sequences (rows ``[B, seq_len, ...]`` with ``state [B, S]``
    and ``first [B, seq_len]``): the clipped-objective step of :class:`PPOLearner` on the unrolled core."""

    def evaluate(self, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(log-probability, entropy, value)``, each ``[B, seq_len]`` as the batch's rows."""
        obs = batch["obs"].transpose(0, 1)  # [L, B, ...]
        steps, width = obs.shape[0], obs.shape[1]
        out, value = unroll_core(self.agent, obs, batch["state"], batch["first"].transpose(0, 1))
        action = batch["action"].transpose(0, 1).flatten(0, 1)
        logprob, entropy = self.agent._logprob_entropy(out.flatten(0, 1), action)
        return logprob.reshape(steps, width).t(), entropy.reshape(steps, width).t(), value.t()


class RecurrentLearnerPolicy(LearnerPolicy):
    """The :class:`~janus.algorithms.base.RecurrentActingPolicy` of a recurrent learner (:class:`RecurrentActing`);
    its plain ``act`` reaches the learner's, which refuses (it acts with its state)."""

    def __init__(self, learner: Any) -> None:
        super().__init__(learner)
        self.state_size: int = learner.state_size

    def act_with_state(self, obs: np.ndarray, state: np.ndarray, deterministic: bool) -> tuple[np.ndarray, np.ndarray]:
        action, next_state = self.learner.act_with_state(torch.as_tensor(obs, dtype=torch.float32),
                                                         torch.as_tensor(state, dtype=torch.float32), deterministic)
        return action, next_state.numpy()


def recurrent_policy(learner: Any) -> RecurrentLearnerPolicy:
    """The acting policy of a recurrent learner side (a :class:`GymLearnerSide`'s learner, or the bare learner)."""
    return RecurrentLearnerPolicy(learner.learner if isinstance(learner, GymLearnerSide) else learner)
