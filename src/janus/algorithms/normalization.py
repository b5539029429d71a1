"""Observation normalisation inside the network (``algorithm.normalize_obs``).

:class:`RunningNorm` is the first layer of the network a learner publishes: ``(x - mean) /
sqrt(var + eps)``, clipped to ``[-clip, clip]``, with ``mean``, ``var`` and ``count`` as buffers.
So the statistics travel with the parameters: every worker acts with the ones the learner trains
with, checkpoints and ``best/policy.pt`` hold them, and :func:`janus.load_policy` restores them
with the weights (nothing to save beside the policy, unlike SB3's ``VecNormalize``).

The learner folds in the raw observations of the batches it trains on (:meth:`RunningNorm.observe`;
the buffer stores observations raw, as SB3's replay buffer does) and the pending statistics join
the running ones when it publishes a new version (:meth:`RunningNorm.commit`): every version's
actors and the learner's updates until the next version see the same normalisation, so PPO's
first probability ratio of a rollout is exactly 1. Until the first publish it is the identity.

``normalize_reward`` keeps its statistics the same way: a ``RunningNorm(())`` of the discounted
returns the actors report with every step (``discounted_return``, see
:mod:`janus.envs.reward_scaling`), published with the network, so a checkpoint and a saved policy
carry it. The actors scale by their own per-step estimate; a resumed run's start from this one.
"""

from __future__ import annotations

import torch
from torch import nn

from janus.envs.reward_scaling import merged_moments
from janus.errors import TrainingDiverged


class RunningNorm(nn.Module):
    """Normalises observations of ``shape`` by running statistics (see the module doc), kept in
    float64 (checkpoints hold them so; float32 ones of older checkpoints load into them)."""

    mean: torch.Tensor
    var: torch.Tensor
    count: torch.Tensor

    def __init__(self, shape: tuple[int, ...], clip: float = 10.0, eps: float = 1e-8,
                 what: str = "normalize_obs: the observations'") -> None:
        """``what``: whose statistics these are, as an error names them."""
        super().__init__()
        self.what = what
        self.shape, self.clip, self.eps = tuple(shape), float(clip), float(eps)
        # float64: the variance of observations near 1e20 (their squares) overflows float32 to inf,
        # which would silently zero the feature; a checkpoint's float32 statistics load into these
        self.register_buffer("mean", torch.zeros(self.shape, dtype=torch.float64))
        self.register_buffer("var", torch.ones(self.shape, dtype=torch.float64))
        self.register_buffer("count", torch.zeros((), dtype=torch.float64))
        self._pending: list[torch.Tensor] = []

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``x`` normalised (in float64: a finite observation gives a finite value, then clipped to
        ``[-clip, clip]``; an infinity clips too, NaN stays NaN), as float32."""
        scale = torch.rsqrt(self.var.to(torch.float64) + self.eps)
        return ((x.to(torch.float64) - self.mean.to(torch.float64)) * scale).clamp(-self.clip, self.clip).float()

    @torch.no_grad()
    def observe(self, obs: torch.Tensor) -> None:
        """Remember a batch of raw observations (any leading axes) for the next :meth:`commit`."""
        x = obs.detach().reshape(-1, *self.shape).to(torch.float64)
        self._pending.append(torch.stack([x.new_full(self.shape, float(len(x))), x.sum(0), x.square().sum(0)]))

    @torch.no_grad()
    def commit(self) -> None:
        """Fold the observed batches into the running statistics (Chan et al.'s parallel update)."""
        if not self._pending:
            return
        n, total, squares = torch.stack(self._pending).sum(0)
        self._pending = []
        batch_mean = total / n
        batch_var = (squares / n - batch_mean.square()).clamp_min(0.0)
        new_count, mean, var = merged_moments(self.count.to(torch.float64), self.mean.to(torch.float64),
                                              self.var.to(torch.float64), n, batch_mean, batch_var)
        if not (torch.isfinite(mean).all() and torch.isfinite(var).all()):
            raise TrainingDiverged(
                f"{self.what} running mean or variance is no longer finite (a value was NaN or infinite, or past "
                f"1e154): normalising by it would make them NaN or 0; scale the environment, or train without "
                f"{self.what.partition(':')[0]}")
        self.mean.copy_(mean)
        self.var.copy_(var)
        self.count.copy_(new_count[(0,) * len(self.shape)] if self.shape else new_count)


class NormalizedInput(nn.Module):
    """``body(norm(x))``: a network whose input a :class:`RunningNorm` normalises first (when
    ``norm`` is given), carrying the reward statistics (``reward_norm``) it publishes with it."""

    def __init__(self, norm: RunningNorm | None, body: nn.Module, reward_norm: RunningNorm | None = None) -> None:
        super().__init__()
        self.norm = norm
        self.body = body
        self.reward_norm = reward_norm

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.body(x if self.norm is None else self.norm(x))


def obs_norm(enabled: bool, shape: tuple[int, ...]) -> RunningNorm | None:
    """A :class:`RunningNorm` for observations of ``shape`` when ``enabled``, else None."""
    return RunningNorm(shape) if enabled else None


def reward_norm(enabled: bool) -> RunningNorm | None:
    """The discounted-return statistics of ``normalize_reward`` when ``enabled``, else None."""
    return RunningNorm((), what="normalize_reward: the discounted returns'") if enabled else None
