"""Environments given to :func:`janus.train` as Python objects: a factory or an instance.

A run names its environment by a Gymnasium id (config.yaml records it). A zero-argument callable
returning a ``gymnasium.Env`` (a *factory*) or a ``gymnasium.Env`` (an *instance*) is registered
here under a generated id, ``janus_api/<name>_<n>-v0``, with ``gymnasium.register`` in this process
only. So:

* the run's environments are built in this process (the ``local`` backend, the default) or in the
  ``process`` backend's worker processes, which get the registration shipped with them: the entry
  point pickled by :mod:`cloudpickle` (a module-level factory by reference, a lambda or a closure
  by value; see :func:`shipment`). There a hung ``env.step`` can be cut: the worker's process is
  killed and replaced, where a thread can only be abandoned. ``ray`` workers and ``async`` sub-envs
  are refused with a message saying how to get there (register the environment in a module of
  yours and pass ``env="your_module:YourEnv-v0"``). ``auto`` stays ``local``: a factory is the
  caller's code and may share state with it (a closure that records what it built), which a copy
  in another process would not;
* an instance is never stepped itself: each environment of the run (one per actor copy, those of
  evaluation, the one that tells the spaces) is a ``copy.deepcopy`` of it, tried once here;
* the run folder's policy loads in this process (``janus.train(...).policy``); another process must
  register the same id before ``janus.load_policy`` can rebuild its environment.
"""

from __future__ import annotations

import copy
import itertools
import re
from collections.abc import Callable
from typing import Any

import gymnasium as gym

from janus.errors import ConfigError, invalid, shown

NAMESPACE = "janus_api"
_ids = itertools.count()
_ENTRIES: dict[str, Callable[..., gym.Env]] = {}
"""The ids :func:`register_in_process` registered, and their entry points (for :func:`shipment`)."""
SHIPPED_BACKENDS = ("local", "process")
"""Backends an environment object can run on (``process``: its registration is shipped, see :func:`shipment`)."""


def is_in_process(env: Any) -> bool:
    """Whether ``env`` is a Python object (a factory or an instance) rather than an id string."""
    return env is not None and not isinstance(env, str)


def register_in_process(env: Any) -> str:
    """The generated Gymnasium id of a factory or an instance, registered in this process."""
    if isinstance(env, gym.Env):
        try:
            copy.deepcopy(env)
        except Exception as exc:  # noqa: BLE001 - whatever the env holds that cannot be copied
            raise ConfigError(f"invalid env: the instance {shown(env)} cannot be copied ({type(exc).__name__}: {exc}); "
                              f"each of the run's environments is a copy of it: pass a factory instead "
                              f"(a zero-argument callable returning a new gymnasium.Env)") from None
        entry: Callable[..., gym.Env] = _Copies(env)
        name = type(env.unwrapped).__name__
    elif callable(env):
        entry = _Built(env)
        name = getattr(env, "__name__", type(env).__name__)
    else:
        raise invalid("env", env, "a Gymnasium id (a str), a zero-argument callable returning a gymnasium.Env, "
                                  "or a gymnasium.Env instance")
    env_id = f"{NAMESPACE}/{re.sub(r'[^A-Za-z0-9_]', '_', name).strip('_') or 'env'}_{next(_ids)}-v0"
    gym.register(env_id, entry_point=entry)
    _ENTRIES[env_id] = entry
    return env_id


def shipment(env_id: str) -> bytes | None:
    """The registration of ``env_id`` for a worker process (:func:`register_shipped` there): its id
    and entry point pickled with :mod:`cloudpickle`, or None for an id not made by
    :func:`register_in_process` (a Gymnasium id, ``module:Id``: the worker imports what it needs).
    Raises :class:`~janus.errors.ConfigError` when the factory (or instance) cannot be pickled."""
    entry = _ENTRIES.get(env_id)
    if entry is None:
        return None
    import cloudpickle

    try:
        return cloudpickle.dumps((env_id, entry))
    except Exception as exc:  # noqa: BLE001 - whatever the factory holds (a lock, an open file, a socket)
        what = entry.factory if isinstance(entry, _Built) else entry.env if isinstance(entry, _Copies) else entry
        raise ConfigError(f"invalid env: {shown(what)} cannot be sent to the worker processes of backend='process' "
                          f"(cloudpickle: {type(exc).__name__}: {exc}); use backend='local', or a factory that "
                          f"builds what it holds inside the call") from None


def register_shipped(blob: bytes) -> str:
    """Register in this (worker) process an environment :func:`shipment` pickled; returns its id."""
    import cloudpickle

    env_id, entry = cloudpickle.loads(blob)
    if env_id not in gym.registry:
        gym.register(env_id, entry_point=entry)
    _ENTRIES[env_id] = entry
    return str(env_id)


class _Copies:
    """The entry point of an instance: a fresh deep copy each time (``env_kwargs`` are refused)."""

    def __init__(self, env: gym.Env) -> None:
        self.env = env

    def __call__(self, **kwargs: Any) -> gym.Env:
        if kwargs:
            raise ConfigError(f"invalid env_kwargs: {shown(kwargs)} for an environment given as an instance; "
                              f"pass a factory that takes them, or build the instance with them")
        return copy.deepcopy(self.env)


class _Built:
    """The entry point of a factory: what it returns, checked to be a ``gymnasium.Env``."""

    def __init__(self, factory: Callable[..., Any]) -> None:
        self.factory = factory

    def __call__(self, **kwargs: Any) -> gym.Env:
        env = self.factory(**kwargs)
        if not isinstance(env, gym.Env):
            raise ConfigError(f"invalid env: the factory {shown(self.factory)} returned {shown(env)}; "
                              f"accepted: a gymnasium.Env")
        return env


def check_in_process_settings(flags: dict[str, Any]) -> dict[str, Any]:
    """``flags`` with the backend and vector env an in-process environment needs: ``local`` or
    ``process`` (``auto``: ``local``), and ``sync``; another explicit choice is refused, saying why and
    what to do instead."""
    out = dict(flags)
    for flag, allowed in (("backend", SHIPPED_BACKENDS), ("vector_env", ("sync",))):
        given = out.get(flag, "auto")
        if given not in ("auto", *allowed):
            use = " or ".join(repr(a) for a in allowed)
            raise ConfigError(f"{flag}={given!r} with an environment given as a Python object (a factory or an "
                              f"instance): its id is registered in this process only (and shipped to the worker "
                              f"processes of backend='process'), and {given!r} builds environments in other processes; "
                              f"use {flag}={use}, or register the environment with gymnasium.register in a module of "
                              f"yours and pass env='your_module:YourEnv-v0'")
        out[flag] = allowed[0] if given == "auto" else given
    return out
