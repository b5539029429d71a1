"""R2D2's learner (Kapturowski et al., 2019) and the policy evaluation acts with.

:class:`R2D2Learner` trains on batches of stored sequences (rows ``[seq_len, ...]`` of
``obs, action, reward, terminal, mask, first`` and the ``state`` at the first step):

1. **Burn-in**: the online and the target networks unroll the first ``burn_in`` steps from the
   stored state, without gradient, to a state fit for the current parameters.
2. Both unroll the rest (the *trained* steps); the online one with gradient. The state is zeroed
   where ``first`` begins an episode: sequences run on across episode ends.
3. **Double-Q n-step targets with value rescaling**: ``h(sum_k gamma^k r_{t+k} + gamma^n
   h^-1(Q_target(s_{t+n}, argmax_a Q(s_{t+n}, a))))``, stopping at a terminal step (a truncated one
   was bootstrapped by the actor and stored as terminal). A step whose target would need a state
   past the sequence, and a padding step (``mask`` 0), has no target: the loss is masked there.
4. The loss, ``0.5 td^2`` over the steps with a target, each sequence weighted by its importance
   weight (prioritized replay) and the batch averaged over its steps with targets.
5. **Priorities per sequence**: ``eta max_t |td_t| + (1 - eta) mean_t |td_t|`` over those steps
   (eta 0.9), handed back to the prioritized sampler (0 for a sequence without one).

The target network is a copy of the online one every ``target_update_interval`` updates.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import gymnasium as gym
import numpy as np
import torch

from janus.algorithms.optim import adam, clip_grad_norm
from janus.algorithms.r2d2_agent import R2D2Config, RecurrentQNetwork
from janus.algorithms.returns import RESCALE_EPS, sequence_nstep_targets, value_rescale
from janus.algorithms.shared import UpdateResult, check_action_space, load_snapshot, snapshot
from janus.errors import ConfigError


def mixed_priority(td_abs: torch.Tensor, valid: torch.Tensor, eta: float) -> torch.Tensor:
    """R2D2's priority of each sequence: ``eta * max + (1 - eta) * mean`` of ``|td|`` over its valid
    steps (``td_abs``, ``valid``: ``[T, B]``); 0 for a sequence without a valid step."""
    masked = torch.where(valid, td_abs, torch.zeros_like(td_abs))
    count = valid.sum(0)
    mean = masked.sum(0) / count.clamp(min=1)
    return eta * masked.max(0).values + (1.0 - eta) * mean


class R2D2Learner:
    """Learner side: burn-in, double-Q n-step targets with value rescaling, the mixed priority (see the module doc)."""

    def __init__(self, cfg: R2D2Config, obs_space: gym.spaces.Box, action_space: gym.Space, seed: int) -> None:
        check_action_space("r2d2", action_space, (gym.spaces.Discrete,))
        assert isinstance(action_space, gym.spaces.Discrete)  # what check_action_space accepted
        self.cfg = cfg
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            self.q = RecurrentQNetwork(cfg, obs_space, action_space)
        self.target = RecurrentQNetwork(cfg, obs_space, action_space)
        self.target.load_state_dict(self.q.state_dict())
        self.target.requires_grad_(False)
        self._params = list(self.q.parameters())
        self.opt = adam(self._params, lr=cfg.lr)
        self.updates = 0
        self.progress = 0.0

    def set_progress(self, progress: float) -> None:
        """The fraction of the run's updates done (the importance exponent reported follows it)."""
        self.progress = float(progress)

    def update(self, batch: Mapping[str, torch.Tensor]) -> UpdateResult:
        """One gradient step on ``B`` sequences: rows ``obs [B, T, ...]``, ``action``, ``reward``,
        ``terminal``, ``mask``, ``first`` ``[B, T]``, ``state [B, S]`` (and ``weight [B]`` when prioritized)."""
        cfg, burn = self.cfg, self.cfg.burn_in
        obs = batch["obs"].transpose(0, 1)  # [T, B, ...]
        first = batch["first"].transpose(0, 1).bool()
        state = batch["state"].float()
        with torch.no_grad():  # the target network burns in and runs on in one unroll (it takes no gradient)
            online_state = self.q.unroll(obs[:burn], state, first[:burn])[1] if burn else state
            target_q = self.target.unroll(obs, state, first)[0][burn:]
        q_all, _ = self.q.unroll(obs[burn:], online_state, first[burn:])  # [T - burn, B, actions]
        action = batch["action"].transpose(0, 1)[burn:].long().unsqueeze(-1)
        q = q_all.gather(-1, action).squeeze(-1)
        with torch.no_grad():
            best = q_all.argmax(-1, keepdim=True)  # double Q: the online network picks, the target values
            bootstrap = cfg.q_values(target_q.gather(-1, best).squeeze(-1))
            reward = batch["reward"].transpose(0, 1)[burn:].float()
            terminal = batch["terminal"].transpose(0, 1)[burn:].bool()
            returns, valid = sequence_nstep_targets(reward, terminal, bootstrap, cfg.gamma, cfg.n_step)
            target = value_rescale(returns, RESCALE_EPS) if cfg.value_rescaling else returns
            valid &= batch["mask"].transpose(0, 1)[burn:].bool()
        td = q - target
        weight = batch["weight"].float().unsqueeze(0) if "weight" in batch else 1.0
        trained = valid.sum()
        loss = (0.5 * td.square() * weight * valid).sum() / trained.clamp(min=1)
        self.opt.zero_grad(set_to_none=True)
        loss.backward()
        grad_norm = clip_grad_norm(self._params, cfg.max_grad_norm)
        self.opt.step()
        self.updates += 1
        if self.updates % cfg.target_update_interval == 0:
            self.target.load_state_dict(self.q.state_dict())
        td_abs = td.detach().abs()
        loss_value, q_mean, norm, steps = torch.stack(
            [loss.detach(), q.detach()[valid].mean() if bool(trained) else q.new_zeros(()), grad_norm,
             trained.float()]).tolist()
        metrics = {"loss": loss_value, "q_mean": q_mean, "grad_norm": norm, "trained_steps": steps,
                   "lr": self.opt.param_groups[0]["lr"]}
        priorities = mixed_priority(td_abs, valid, cfg.priority_eta) if cfg.prioritized else None
        if priorities is not None:
            metrics["priority_mean"] = priorities.mean().item()
            metrics["per_beta"] = cfg.importance_beta(self.progress)
        return UpdateResult(priorities, metrics)

    def policy_network(self) -> RecurrentQNetwork:
        """The network it acts with and publishes to the workers (:meth:`params`)."""
        return self.q

    def params(self) -> dict[str, np.ndarray]:
        """An immutable snapshot of the online network for the actors."""
        return snapshot(self.q)

    def state_dict(self) -> dict[str, Any]:
        return {"q": self.q.state_dict(), "target": self.target.state_dict(), "opt": self.opt.state_dict(),
                "updates": self.updates}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.q.load_state_dict(state["q"])
        self.target.load_state_dict(state["target"])
        self.opt.load_state_dict(state["opt"])
        self.updates = int(state["updates"])


class R2D2Policy:
    """The :class:`~janus.algorithms.base.RecurrentActingPolicy` of R2D2: greedy actions of the
    learner's online network, carrying the recurrent state the caller holds."""

    def __init__(self, learner: R2D2Learner) -> None:
        self.network = learner.policy_network()
        self.network.eval()
        self.state_size: int = self.network.state_size

    def act(self, obs: np.ndarray, deterministic: bool) -> np.ndarray:
        """Refused: a recurrent policy acts on an observation and a state (:meth:`act_with_state`)."""
        raise ConfigError("an r2d2 policy is recurrent: it acts with act_with_state(obs, state, deterministic), "
                          f"carrying a state of {self.state_size} floats per env (zeros at an episode's start)")

    @torch.no_grad()
    def act_with_state(self, obs: np.ndarray, state: np.ndarray, deterministic: bool) -> tuple[np.ndarray, np.ndarray]:
        """Greedy actions (argmax Q; R2D2 acts greedily either way) and the next states, numpy."""
        q, next_state = self.network.step(torch.as_tensor(obs), torch.as_tensor(state, dtype=torch.float32))
        return q.argmax(1).numpy(), next_state.numpy()

    def load_params(self, params: Mapping[str, Any]) -> None:
        load_snapshot(self.network, dict(params))
