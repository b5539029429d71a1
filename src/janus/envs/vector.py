"""Gymnasium vector environments as the algorithms use them, and their episode bookkeeping.

Autoreset convention (Gymnasium >= 1.0): :func:`make_vector_env` builds a ``SyncVectorEnv`` with
``autoreset_mode=SAME_STEP``. A ``step`` that ends an episode resets that sub-env *in the same
call*: the returned observation is already the first one of the next episode, and the true last
observation is in ``info["final_obs"][i]``. So every step is a real transition (no dummy step to
skip, unlike the default ``NEXT_STEP`` mode), and :func:`next_obs_of` rebuilds ``next_obs[t]``
(the final observation at done steps) from what ``step`` returns.

``ALE/`` ids (Atari through ale-py) get the standard preprocessing of :mod:`janus.envs.atari`;
``training=True`` adds its training signals (a lost life ends the episode, clipped rewards), and
:class:`EpisodeTracker` then records the real, unclipped full-game returns from ``info``.

``vector_env`` picks where the sub-envs step: ``sync`` (in the caller's thread), ``async`` (one
subprocess each, Gymnasium's ``AsyncVectorEnv`` over shared memory), ``envpool`` (EnvPool's C++
threads, an optional extra: :mod:`janus.envs.envpool_vector`) or ``auto``
(:func:`vector_env_kind`; see docs/benchmarks.md, "Vectorised environments").

Also here: per-env episode bookkeeping (:class:`EpisodeTracker`). What an actor/learner pair
shares beyond its environments (update results, parameter snapshots, the action-space check) is in
:mod:`janus.algorithms.shared`. This module needs no torch. Importing it registers ``janus/ImageCatch-v0``
(:mod:`janus.envs.image_catch`) and the memory tasks (:mod:`janus.envs.memory`).
"""

from __future__ import annotations

import difflib
import functools
import importlib
import importlib.util
import multiprocessing
import os
from collections.abc import Mapping
from typing import Any, NamedTuple, cast

import gymnasium as gym
import numpy as np
from gymnasium import spaces

import janus.envs.image_catch  # noqa: F401 - registers janus/ImageCatch-v0 with Gymnasium
from janus.config import VECTOR_ENVS, usable_cpus
from janus.envs import atari, memory  # memory: registers janus/CartPoleNoVel-v1 and janus/PendulumNoVel-v1
from janus.envs.envpool_vector import EnvPoolVectorEnv
from janus.envs.observations import EncodedObservations, needs_encoding
from janus.envs.reward_scaling import NormalizedReward
from janus.errors import ConfigError, invalid, one_of
from janus.spawn import caller_main_is_importable, without_caller_main
from janus.user_code import described, passed_on

#: Registered ids quoted in the unknown-id error message (those that exist are shown).
EXAMPLE_ENVS = ("CartPole-v1", "Acrobot-v1", "MountainCar-v0", "MountainCarContinuous-v0", "Pendulum-v1",
                "janus/ImageCatch-v0")


def registered_env_id(env_id: str) -> str:
    """The registry id of ``env_id``: ``module:EnvId`` imports ``module`` (which registers ``EnvId``).

    Raises :class:`~janus.errors.ConfigError` naming ``--env`` for a module that cannot be imported or
    an id that is not registered (with close matches).
    """
    if not isinstance(env_id, str):
        raise invalid("--env", env_id, "a Gymnasium environment id (a string)")
    name = env_id
    if ":" in env_id:
        module, _, name = env_id.partition(":")
        try:
            importlib.import_module(module)
        except ImportError as exc:
            if module == "popgym":  # an optional extra: the error names it
                memory.register_popgym()
            raise ConfigError(f"invalid --env: got {env_id!r}, but module {module!r} could not be imported "
                              f"({exc}); put its folder on PYTHONPATH") from None
        except Exception as exc:  # noqa: BLE001  the user's module raised while registering
            raise ConfigError(f"invalid --env: importing module {module!r} of {env_id!r} failed: "
                              f"{type(exc).__name__}: {exc}") from None
        except SystemExit as exc:  # sys.exit() at import: janus would end with its code, silently
            raise ConfigError(f"invalid --env: importing module {module!r} of {env_id!r} called sys.exit"
                              f"({exc.code!r}); a module named by --env must only register its environment "
                              "when imported (guard a script's own code with `if __name__ == \"__main__\":`)") from None
        except BaseException as exc:
            if passed_on(exc):  # a stop signal janus received
                raise
            raise ConfigError(f"invalid --env: importing module {module!r} of {env_id!r} failed: {described(exc)}") from None
    if atari.is_atari(name):
        atari.register_ale()  # an error saying how to install ale-py when it is missing
    if name.startswith(memory.POPGYM_PREFIX) and name not in gym.registry:
        memory.register_popgym()  # the same for POPGym's ids
    if name not in gym.registry:
        close = difflib.get_close_matches(name, list(gym.registry), n=3)
        examples = [e for e in EXAMPLE_ENVS if e in gym.registry]
        hint = f" (did you mean {', '.join(close)}?)" if close else ""
        where = f" (module {env_id.partition(':')[0]!r} did not register {name!r})" if name != env_id else ""
        spawned = ""
        if os.environ.get("JANUS_WORKER_PROCESS"):  # runtime/backends/process.py: it has only what it imported
            spawned = ("; this is a worker process of --backend process, which imports janus, the script "
                       "(without its __main__ block) and a module:EnvId's module: register the environment "
                       "there, or use --backend local")
        raise invalid("--env", env_id, f"a registered Gymnasium environment id, e.g. {', '.join(examples)}, "
                                       f"or module:EnvId{where}{hint}{spawned}")
    return name


ASYNC_CONTEXT = "forkserver"
"""How ``async`` sub-env processes start: not ``fork`` (a worker holds torch and other threads);
``forkserver`` forks each from a single-threaded server started once per process, which has
imported this module (gymnasium, numpy) and ale-py; ``spawn`` would start each from scratch
(see docs/design.md, "Vectorised environments")."""


def vector_env_kind(env_id: str, num_envs: int, vector_env: str = "auto") -> str:
    """``sync``, ``async`` or ``envpool``: ``vector_env`` itself, or what ``auto`` picks for ``env_id``.

    ``auto`` is ``async`` only for Atari games (``ALE/``: ~0.5 ms of emulation and preprocessing
    per step) with at least 2 sub-envs, on a machine with more than 2 CPUs. Measured on 2 CPUs
    (docs/benchmarks.md, "Vectorised environments"): async loses there (Pong 0.7-1.0x of sync,
    CartPole ~0.1x: its ~15 us steps cannot pay for the pipe round trip), so it is never picked
    for cheap envs, nor on 2 CPUs. ``auto`` never picks ``envpool``: an optional extra, asked for by name.
    """
    if vector_env not in VECTOR_ENVS:
        raise invalid("workload.vector_env", vector_env, one_of(VECTOR_ENVS))
    if vector_env != "auto":
        return vector_env
    name = env_id.partition(":")[2] if ":" in env_id else env_id
    return "async" if atari.is_atari(name) and num_envs >= 2 and usable_cpus() > 2 else "sync"


def make_env(env_id: str, env_kwargs: Mapping[str, Any] | None = None, training: bool = False) -> gym.Env:
    """One environment of ``env_id`` (a registered id or ``module:EnvId``): ``ALE/`` ids with the
    Atari preprocessing (``training``: with its training signals), others as ``gymnasium.make`` builds them.
    Module-level, so an ``AsyncVectorEnv`` subprocess can unpickle it (it imports ``module`` there)."""
    name = registered_env_id(env_id)
    if atari.is_atari(name):
        return atari.make_atari_env(name, env_kwargs, training)
    return gym.make(name, **dict(env_kwargs or {}))


def make_vector_env(env_id: str, num_envs: int = 1, seed: int | None = None,
                    env_kwargs: Mapping[str, Any] | None = None, *, training: bool = False,
                    vector_env: str = "sync", encode_observations: bool = True,
                    reward_gamma: float | None = None) -> gym.vector.VectorEnv:
    """A vector env of ``num_envs`` copies of ``env_id`` in SAME_STEP autoreset mode.

    ``env_id`` is a registered id or ``module:EnvId`` (see :func:`registered_env_id`);
    ``env_kwargs`` go to every ``gymnasium.make``. ``training``: an actor's envs (Atari: lives end
    episodes, rewards clipped; the real ones in ``info``), not an evaluation's. ``vector_env``:
    ``sync``, ``async``, ``envpool`` or ``auto`` (:func:`vector_env_kind`); close an ``async`` one (its
    subprocesses) with ``close()``. ``seed`` seeds the action and observation spaces;
    the caller seeds the environments with the first ``envs.reset(seed=...)``: an actor gives each
    sub-env a seed of its own (:mod:`janus.algorithms.seeding`; an int ``s`` gives sub-env ``i`` the
    seed ``s + i``). ``encode_observations``: observation spaces other than a Box (Discrete,
    Dict, Tuple, ...) become one float32 vector (:mod:`janus.envs.observations`); False keeps them
    as the environment emits them (a trained policy's ``predict`` encodes them itself).
    ``reward_gamma``: rewards divided by the running std of their discounted returns
    (:mod:`janus.envs.reward_scaling`). Raises :class:`~janus.errors.ConfigError` naming ``--env``
    (or ``--env_kwargs``) for an unknown id, an environment that cannot be built (e.g. a missing
    optional dependency, a keyword it does not take) or an observation space janus cannot encode.
    """
    if isinstance(num_envs, bool) or not isinstance(num_envs, int) or num_envs < 1:
        raise invalid("num_envs", num_envs, "an int >= 1")
    kind = vector_env_kind(env_id, num_envs, vector_env)
    if kind == "envpool":
        return seeded(_wrapped(EnvPoolVectorEnv(env_id, num_envs, env_kwargs), encode_observations, reward_gamma), seed)
    registered_env_id(env_id)  # a clear error before any process starts
    kwargs = dict(env_kwargs or {})
    fns = [functools.partial(make_env, env_id, kwargs, training) for _ in range(num_envs)]
    try:
        if kind == "async":
            with without_caller_main(not caller_main_is_importable()):  # janus.spawn
                envs: gym.vector.VectorEnv = gym.vector.AsyncVectorEnv(
                    fns, shared_memory=True, context=async_context(), autoreset_mode=gym.vector.AutoresetMode.SAME_STEP)
        else:
            envs = gym.vector.SyncVectorEnv(fns, autoreset_mode=gym.vector.AutoresetMode.SAME_STEP)
    except ConfigError:
        raise
    except (gym.error.Error, ImportError) as exc:  # e.g. box2d/mujoco/jax/shimmy not installed
        raise ConfigError(f"invalid --env: got {env_id!r}, which could not be created: {exc}") from exc
    except TypeError as exc:  # a keyword the environment does not take
        if not kwargs:
            raise
        raise ConfigError(f"invalid --env_kwargs: {env_id!r} could not be created with {kwargs!r}: {exc}") from None
    try:
        envs = _wrapped(envs, encode_observations, reward_gamma)
    except ConfigError as exc:
        envs.close()
        raise ConfigError(f"invalid --env: {env_id!r}: {exc}") from None
    return seeded(envs, seed)


def _wrapped(envs: gym.vector.VectorEnv, encode_observations: bool, reward_gamma: float | None) -> gym.vector.VectorEnv:
    """``envs`` with its observations encoded (not a Box) and its rewards scaled (``reward_gamma``)."""
    if encode_observations and needs_encoding(envs.single_observation_space):
        envs = EncodedObservations(envs)
    if reward_gamma is not None:
        envs = NormalizedReward(envs, reward_gamma)
    return envs


def seeded(envs: gym.vector.VectorEnv, seed: int | None) -> gym.vector.VectorEnv:
    """``envs`` with its action and observation spaces seeded by ``seed`` (when not None)."""
    if seed is not None:
        envs.action_space.seed(seed)
        envs.observation_space.seed(seed)
    return envs


def async_context() -> str:
    """The start method of ``async`` sub-env processes (:data:`ASYNC_CONTEXT`). A daemonic process
    cannot have children: say so rather than fail deep inside multiprocessing."""
    if multiprocessing.current_process().daemon:
        raise ConfigError(f"workload.vector_env=async: this process ({multiprocessing.current_process().name}) is a "
                          f"daemonic multiprocessing process, which cannot start the sub-env processes; "
                          f"use workload.vector_env: sync here")
    if ASYNC_CONTEXT == "forkserver":  # the server imports these once; each sub-env forks with them loaded
        preload = ["janus.envs.vector"] + (["ale_py"] if importlib.util.find_spec("ale_py") else [])
        multiprocessing.get_context("forkserver").set_forkserver_preload(preload)  # no effect once it runs
    return ASYNC_CONTEXT


def observation_box(envs: gym.vector.VectorEnv) -> spaces.Box:
    """A sub-env's observation space, as the algorithms take it: a Box (vectors or images, or the
    :class:`~janus.envs.observations.EncodedBox` of any other space)."""
    return cast(spaces.Box, envs.single_observation_space)


def env_spaces(env_id: str, env_kwargs: Mapping[str, Any] | None = None) -> tuple[spaces.Box, gym.Space]:
    """``(observation_space, action_space)`` of one ``env_id`` sub-env (for a learner's networks)."""
    envs = make_vector_env(env_id, 1, env_kwargs=env_kwargs)
    try:
        return observation_box(envs), envs.single_action_space
    finally:
        envs.close()


def is_frame_stack(space: gym.Space) -> bool:
    """Whether observations are stacks of ``k > 1`` uint8 images, shape ``(k, H, W)`` (e.g. Atari
    after ``FrameStackObservation``): what a frame-stack replay stores once per frame."""
    return isinstance(space, spaces.Box) and space.dtype == np.uint8 and len(space.shape) == 3 and space.shape[0] > 1


def next_obs_of(obs: np.ndarray, terminated: np.ndarray, truncated: np.ndarray, info: dict[str, Any]) -> np.ndarray:
    """``next_obs`` of a SAME_STEP ``step``: ``obs``, except the final observation where an episode ended."""
    next_obs = np.array(obs, copy=True)
    for i in np.flatnonzero(terminated | truncated):
        next_obs[i] = info["final_obs"][i]
    return next_obs


class Episodes(NamedTuple):
    """Episodes that finished during one rollout (in the order they finished)."""

    returns: np.ndarray  #: float64 undiscounted return of each episode
    lengths: np.ndarray  #: int64 number of steps of each episode


def game_signals(info: Mapping[str, Any], num_envs: int) -> tuple[np.ndarray, np.ndarray] | None:
    """``(raw reward, game over)`` per sub-env of one SAME_STEP ``step`` whose envs report them in
    ``info`` (Atari training envs, :class:`~janus.envs.atari.EpisodicLife`), else None.

    A sub-env that ended an episode this step carries its step's info in ``info["final_info"]``
    (its top-level entries are then the reset's); the others carry it at the top level.
    """
    final = info.get("final_info", {})
    if "raw_reward" not in info and "raw_reward" not in final:
        return None
    raw, over = np.zeros(num_envs, dtype=np.float64), np.zeros(num_envs, dtype=bool)
    for part in (info, final):
        if "raw_reward" in part:
            have = np.asarray(part["_raw_reward"], dtype=bool)
            raw[have] = np.asarray(part["raw_reward"])[have]
            over[have] = np.asarray(part["game_over"])[have]
    return raw, over


class EpisodeTracker:
    """Running return and length per sub-env; collects the episodes that finish.

    Given a step's ``info`` with real rewards and game ends (:func:`game_signals`: Atari training,
    where a lost life ends the episode and rewards are clipped), it counts those instead: the
    returns it records are whole games, unclipped.
    """

    def __init__(self, num_envs: int) -> None:
        self.ret = np.zeros(num_envs, dtype=np.float64)
        self.len = np.zeros(num_envs, dtype=np.int64)
        self._returns: list[float] = []
        self._lengths: list[int] = []

    def step(self, reward: np.ndarray, done: np.ndarray, info: Mapping[str, Any] | None = None) -> None:
        signals = None if info is None else game_signals(info, len(self.ret))
        if signals is not None:
            reward, done = signals
        self.ret += reward
        self.len += 1
        for i in np.flatnonzero(done):
            self._returns.append(float(self.ret[i]))
            self._lengths.append(int(self.len[i]))
            self.ret[i], self.len[i] = 0.0, 0

    def pop(self) -> Episodes:
        """The episodes finished since the last ``pop``."""
        out = Episodes(np.array(self._returns, dtype=np.float64), np.array(self._lengths, dtype=np.int64))
        self._returns, self._lengths = [], []
        return out
