"""Memory tasks: classic-control environments with their velocities hidden, as the RL Zoo's ``NoVel`` ids.

- ``janus/CartPoleNoVel-v1``: CartPole-v1 observing the cart's position and the pole's angle only
  (2 dims; the velocities are dropped): a policy must infer them from the observations it saw.
- ``janus/PendulumNoVel-v1``: Pendulum-v1 observing the cosine and sine of the angle only (2 dims;
  the angular velocity is dropped).

The RL Zoo's ``CartPoleNoVel-v1``/``PendulumNoVel-v1`` (``rl_zoo3.import_envs``, sb3-contrib's
``MaskVelocityWrapper``) zero those dimensions instead of dropping them: the same information, so
runs of either are comparable. Time limits, reward thresholds and rendering are the originals'.

Importing :mod:`janus.envs.vector` (every algorithm does) registers the ids, so ``janus train --env
janus/CartPoleNoVel-v1`` works; elsewhere ``import janus.envs.memory`` first. Their family is
``memory`` (:func:`janus.algorithms.presets.family_of`): the algorithms' memory presets are recurrent.

POPGym (Morad et al., 2023; the optional extra ``janus-rl[popgym]``) registers its ``popgym-`` ids
when the ``popgym`` package is imported: ``--env popgym:popgym-RepeatPreviousEasy-v0`` imports it
as any ``module:EnvId`` does, and a bare ``popgym-`` id imports it too (:func:`register_popgym`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces
from gymnasium.envs.classic_control import CartPoleEnv, PendulumEnv

from janus.errors import ConfigError

CARTPOLE_ID = "janus/CartPoleNoVel-v1"
PENDULUM_ID = "janus/PendulumNoVel-v1"
ENV_IDS = (CARTPOLE_ID, PENDULUM_ID)
POPGYM_PREFIX = "popgym-"
"""POPGym's ids (``popgym-RepeatPreviousEasy-v0`` ...), registered by ``import popgym``."""
POPGYM_INSTALL = "pip install 'janus-rl[popgym]'"


class ObservedDims(gym.ObservationWrapper):
    """Observe only dimensions ``keep`` of a flat Box observation."""

    def __init__(self, env: gym.Env, keep: Sequence[int]) -> None:
        super().__init__(env)
        box = env.observation_space
        assert isinstance(box, spaces.Box) and len(box.shape) == 1
        self.keep = np.asarray(keep, dtype=np.int64)
        self.observation_space = spaces.Box(box.low[self.keep], box.high[self.keep], dtype=box.dtype)

    def observation(self, observation: Any) -> np.ndarray:
        return np.asarray(observation)[self.keep]


def cartpole_no_velocity(**kwargs: Any) -> gym.Env:
    """CartPole observing position and angle only (``janus/CartPoleNoVel-v1``)."""
    return ObservedDims(CartPoleEnv(**kwargs), (0, 2))


def pendulum_no_velocity(**kwargs: Any) -> gym.Env:
    """Pendulum observing cos and sin of the angle only (``janus/PendulumNoVel-v1``)."""
    return ObservedDims(PendulumEnv(**kwargs), (0, 1))


if CARTPOLE_ID not in gym.registry:
    gym.register(CARTPOLE_ID, entry_point="janus.envs.memory:cartpole_no_velocity", max_episode_steps=500,
                 reward_threshold=475.0)
if PENDULUM_ID not in gym.registry:
    gym.register(PENDULUM_ID, entry_point="janus.envs.memory:pendulum_no_velocity", max_episode_steps=200)


def register_popgym() -> None:
    """Import POPGym, which registers its ``popgym-`` ids; a :class:`ConfigError` naming the extra
    that installs it when it is missing."""
    try:
        import popgym  # noqa: F401  - registers the ids
    except ImportError as exc:
        raise ConfigError(f"invalid --env: POPGym's environments (popgym-...) need the popgym package, which "
                          f"could not be imported ({exc}): {POPGYM_INSTALL}") from None
