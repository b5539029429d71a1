"""``workload.vector_env: envpool``: EnvPool's C++ thread pool behind janus's vector-env interface.

EnvPool (an optional extra: ``pip install 'janus-rl[envpool]'``) steps a batch of environments in
C++ threads, without Python per sub-env and without subprocesses. This adapter makes one look like
the ``SyncVectorEnv`` that :func:`janus.envs.vector.make_vector_env` builds, so the actors need no
change:

- **Autoreset.** EnvPool resets in NEXT_STEP mode (the step after an episode's end is a dummy reset
  step with reward 0). janus's convention is SAME_STEP (:mod:`janus.envs.vector`): the adapter
  resets the ended sub-envs at once (EnvPool's partial ``reset(env_ids)``), returns their first new
  observation in ``obs`` and the true last one in ``info["final_obs"]`` (an object array with a
  ``_final_obs`` mask, as Gymnasium lays it out), so :func:`~janus.envs.vector.next_obs_of` works as is.
- **Seeding.** EnvPool fixes its seeds when the pool is built; ``reset(seed=...)`` rebuilds the pool
  with one seed per sub-env (``s`` gives sub-env ``i`` the seed ``s + i``, a list gives each its own),
  reduced into EnvPool's int32 range. The streams differ from Gymnasium's for the same seed: the
  dynamics are the same, the random initial states are not.
- **Which ids.** The classic-control ids whose EnvPool version has Gymnasium's dynamics
  (:data:`ENVPOOL_ENVS`). ``ALE/`` games are not offered: janus's Atari preprocessing and its
  training signals (:mod:`janus.envs.atari`: real rewards and game ends in ``info``) are not EnvPool's.
"""

from __future__ import annotations

import contextlib
import importlib
import warnings
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.vector.utils import batch_space

from janus.errors import ConfigError, one_of

#: Gymnasium ids this adapter offers: EnvPool has each under the same id, with the same dynamics,
#: rewards, termination and time limit.
ENVPOOL_ENVS = ("CartPole-v1", "Acrobot-v1", "MountainCar-v0", "MountainCarContinuous-v0", "Pendulum-v1")
INT32_SEEDS = 2**31 - 1  # EnvPool asserts -INT_MAX <= seed < INT_MAX


def import_envpool() -> Any:
    """The ``envpool`` module, or a ConfigError saying how to install it."""
    try:
        return importlib.import_module("envpool")
    except ImportError as exc:
        raise ConfigError(f"workload.vector_env=envpool: EnvPool is not installed ({exc}); install the optional "
                          "extra (pip install 'janus-rl[envpool]', EnvPool >= 1.2.5 has wheels for Python >= 3.11 "
                          "and numpy 2) or use vector_env sync, async or auto") from None


def check_envpool_env(env_id: str) -> str:
    """``env_id`` if EnvPool can step it here, else a ConfigError naming the ids it can."""
    if env_id not in ENVPOOL_ENVS:
        raise ConfigError(f"invalid --env for workload.vector_env=envpool: got {env_id!r}; accepted: "
                          f"{one_of(ENVPOOL_ENVS)} (other ids: vector_env sync, async or auto)")
    return env_id


@contextlib.contextmanager
def quiet_boxes() -> Iterator[None]:
    """Silence Gymnasium's warning that EnvPool's float64 Box bounds became float32: noise, not news."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*precision lowered by casting to float32", category=UserWarning)
        yield


def envpool_seeds(seed: int | Sequence[int], num_envs: int) -> list[int]:
    """One int32 seed per sub-env: ``seed + i`` for an int, the list's own for a list."""
    seeds = [int(seed) + i for i in range(num_envs)] if isinstance(seed, (int, np.integer)) else [int(s) for s in seed]
    if len(seeds) != num_envs:
        raise ConfigError(f"invalid reset seed: got {len(seeds)} seeds; accepted: one per sub-env ({num_envs})")
    return [s % INT32_SEEDS for s in seeds]


class EnvPoolVectorEnv(gym.vector.VectorEnv):
    """``num_envs`` copies of ``env_id`` stepped by EnvPool, with janus's SAME_STEP autoreset.

    ``env_kwargs`` go to ``envpool.make`` (e.g. ``max_episode_steps``, which ``gym.make`` takes too).
    """

    metadata: dict[str, Any] = {"autoreset_mode": gym.vector.AutoresetMode.SAME_STEP}  # noqa: RUF012  (read-only)

    def __init__(self, env_id: str, num_envs: int, env_kwargs: Mapping[str, Any] | None = None) -> None:
        self.env_id = check_envpool_env(env_id)
        self._envpool = import_envpool()
        self.num_envs = num_envs
        self._kwargs = dict(env_kwargs or {})
        self._pool = self._build(envpool_seeds(0, num_envs))
        self.single_observation_space = self._pool.observation_space  # EnvPool's spaces are one sub-env's
        self.single_action_space = self._pool.action_space
        self.observation_space = batch_space(self.single_observation_space, num_envs)
        self.action_space = batch_space(self.single_action_space, num_envs)

    def _build(self, seeds: list[int]) -> Any:
        try:
            with quiet_boxes():
                pool = self._envpool.make(self.env_id, env_type="gymnasium", num_envs=self.num_envs,
                                          batch_size=self.num_envs, env_seed=seeds, **self._kwargs)
                pool.observation_space, pool.action_space  # noqa: B018  built here (lazily, they warn)
                return pool
        except TypeError as exc:  # a keyword EnvPool's config does not have
            raise ConfigError(f"invalid --env_kwargs: EnvPool's {self.env_id!r} could not be created with "
                              f"{self._kwargs!r}: {exc}") from None

    def reset(self, *, seed: int | list[int] | None = None,  # list: one seed per sub-env
              options: dict[str, Any] | None = None) -> tuple[np.ndarray, dict[str, Any]]:
        """First observations of every sub-env; a ``seed`` rebuilds the pool seeded with it."""
        if options:
            raise ConfigError(f"invalid reset options for vector_env envpool: got {options!r}; accepted: none")
        if seed is not None:
            self._pool.close()
            self._pool = self._build(envpool_seeds(seed, self.num_envs))
        obs, _ = self._pool.reset()
        return obs, {}

    def step(self, actions: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        """One step of every sub-env; the ended ones reset in the same call (SAME_STEP)."""
        obs, reward, terminated, truncated, _ = self._pool.step(np.asarray(actions))
        info: dict[str, Any] = {}
        ended = terminated | truncated
        if ended.any():
            ids = np.flatnonzero(ended)
            final_obs = np.full(self.num_envs, None, dtype=object)
            for i in ids:
                final_obs[i] = np.array(obs[i], copy=True)
            first, _ = self._pool.reset(ids.astype(np.int32))
            obs = np.array(obs, copy=True)
            obs[ids] = first
            info = {"final_obs": final_obs, "_final_obs": ended.copy(),
                    "final_info": {}, "_final_info": ended.copy()}
        return obs, reward.astype(np.float64), terminated, truncated, info

    def close_extras(self, **kwargs: Any) -> None:
        self._pool.close()
