"""Environments given to :func:`janus.train` as Python objects: a factory or an instance.

A run names its environment by a Gymnasium id (config.yaml records it). A zero-argument callable
returning a ``gymnasium.Env`` (a *factory*) or a ``gymnasium.Env`` (an *instance*) is registered
here under a generated id, ``janus_api/<name>_<n>-v0``, with ``gymnasium.register`` in this process
only. So:

* every environment of the run is built in this process: the ``local`` backend and the ``sync``
  vector env; ``process`` and ``ray`` workers, and ``async`` sub-envs, start fresh interpreters that
  do not know the id, and are refused with a message saying how to get there (register the
  environment in a module of yours and pass ``env="your_module:YourEnv-v0"``);
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
    return env_id


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
    """``flags`` with the backend and vector env an in-process environment needs (``local``, ``sync``),
    in place of ``auto``; an explicit other choice is refused, saying why and what to do instead."""
    out = dict(flags)
    for flag, needed in (("backend", "local"), ("vector_env", "sync")):
        given = out.get(flag, "auto")
        if given not in ("auto", needed):
            raise ConfigError(f"{flag}={given!r} with an environment given as a Python object (a factory or an "
                              f"instance): its id is registered in this process only, and {given!r} builds environments "
                              f"in other processes; use {flag}={needed!r}, or register the environment with "
                              f"gymnasium.register in a module of yours and pass env='your_module:YourEnv-v0'")
        out[flag] = needed
    return out
