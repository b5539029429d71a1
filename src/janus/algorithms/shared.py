"""What every Gymnasium actor/learner pair shares, apart from its environments (:mod:`janus.envs`):
the result of a learner update, parameter snapshots as numpy arrays (what the Trainer publishes and
the workers load), the check of an environment's action space against an algorithm, and the
schedules the replay Q-learners' configs share (:class:`ReplaySchedules`).
"""

from __future__ import annotations

from typing import Any, NamedTuple

import gymnasium as gym
import numpy as np
import torch
from gymnasium import spaces
from torch import nn

from janus.errors import invalid, one_of


class ReplaySchedules:
    """The schedules of a replay Q-learner's config (DQN's, R2D2's): epsilon over env steps and the
    prioritized replay's importance exponent over updates, read from the config's own fields."""

    eps_start: float
    eps_end: float
    exploration_steps: int
    per_beta: float
    per_beta_final: float

    def epsilon(self, global_step: int) -> float:
        """Linear schedule from ``eps_start`` to ``eps_end`` over ``exploration_steps`` env steps."""
        frac = min(1.0, global_step / max(1, self.exploration_steps))
        return self.eps_start + frac * (self.eps_end - self.eps_start)

    def importance_beta(self, progress: float) -> float:
        """Prioritized replay's importance exponent at ``progress`` (updates done / the run's
        updates): linear from ``per_beta`` to ``per_beta_final``."""
        return self.per_beta + min(1.0, max(0.0, progress)) * (self.per_beta_final - self.per_beta)


class UpdateResult(NamedTuple):
    """What one learner update reports."""

    priorities: torch.Tensor | None  #: new priority per batch item (DQN with prioritized replay), else None
    metrics: dict[str, float]  #: scalar diagnostics (losses, KL, mean Q, ...)


ACTION_SPACES: dict[str, tuple[type, ...]] = {"dqn": (spaces.Discrete,), "ppo": (spaces.Discrete, spaces.Box)}
"""Action spaces each Gymnasium algorithm supports."""


def check_action_space(algo: str, space: gym.Space, accepted: tuple[type, ...] | None = None) -> None:
    """Raise :class:`~janus.errors.ConfigError` unless ``space`` is one of ``accepted`` (default: ``algo``'s entry
    in :data:`ACTION_SPACES`; DQN: Discrete; PPO: Discrete or Box)."""
    if accepted is None:
        if algo not in ACTION_SPACES:
            raise invalid("--algo", algo, one_of(tuple(ACTION_SPACES)))
        accepted = ACTION_SPACES[algo]
    names = " or ".join(a.__name__ for a in accepted)
    if not isinstance(space, accepted):
        raise invalid(f"--env action space for --algo {algo}", str(space), f"a {names} action space")
    if isinstance(space, spaces.Box) and len(space.shape) != 1:
        raise invalid(f"--env action space for --algo {algo}", str(space), "a 1-D Box action space")


def snapshot(module: nn.Module) -> dict[str, np.ndarray]:
    """An immutable copy of ``module``'s parameters and buffers: fresh, read-only numpy arrays."""
    out = {}
    for name, t in module.state_dict().items():
        arr = t.detach().cpu().numpy().copy()
        arr.flags.writeable = False
        out[name] = arr
    return out


def load_snapshot(module: nn.Module, params: dict[str, Any]) -> None:
    """Copy a :func:`snapshot` (numpy arrays, or tensors as saved in ``best/policy.pt``) into
    ``module`` (strict: the names and shapes must match)."""
    module.load_state_dict({k: v.clone() if isinstance(v, torch.Tensor) else torch.tensor(v) for k, v in params.items()})
