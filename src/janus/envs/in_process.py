"""Environments given to :func:`janus.train` as Python objects: a factory or an instance.

A run names its environment by a Gymnasium id (config.yaml records it). A zero-argument callable
returning a ``gymnasium.Env`` (a *factory*) or a ``gymnasium.Env`` (an *instance*) is registered
here under a generated id, ``janus_api/<name>_<digest>-v0``, with ``gymnasium.register`` in this
process only. The digest (:func:`factory_digest`) fingerprints the factory: its code, defaults,
closure and the globals it reads (an instance: its pickled state and its class), so two different
factories never share an id, in one session or across sessions. So:

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
* the run folder's policy loads in this process (``janus.train(...).policy``); elsewhere
  ``janus.load_policy(folder, env=factory)`` registers the factory again and refuses one whose
  digest is not the run's (:func:`loadable_env_id`); without ``env=`` it refuses to guess.
"""

from __future__ import annotations

import copy
import functools
import hashlib
import os
import pickle
import re
import types
from collections.abc import Callable
from typing import Any

import gymnasium as gym

from janus.errors import ConfigError, invalid, shown

NAMESPACE = "janus_api"
DIGEST_CHARS = 16
"""Hex characters of the factory digest in a generated id (64 bits)."""
_GENERATED = re.compile(rf"^{NAMESPACE}/(?P<name>.*?)(?:_(?P<digest>[0-9a-f]{{{DIGEST_CHARS}}}))?-v0$")
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
    env_id = f"{NAMESPACE}/{re.sub(r'[^A-Za-z0-9_]', '_', str(name)).strip('_') or 'env'}_{factory_digest(env)}-v0"
    gym.registry.pop(env_id, None)  # the same digest registered before: this object is the one to build from now
    gym.register(env_id, entry_point=entry)
    _ENTRIES[env_id] = entry
    return env_id


def loadable_env_id(run_env: str | None, env: Any = None) -> str | None:
    """The id to rebuild a saved run's environment ``run_env`` with (:func:`janus.load_policy`).

    A generated id (``janus_api/...``) is usable only where its factory is registered: in this process
    with the same digest, or ``env`` (the factory or instance, registered here) whose digest is the
    run's. Anything else is a :class:`ConfigError` saying what to pass: never a different env
    that happens to hold the id. ``env`` given for a run of a Gymnasium id is refused too.
    An id of a janus before digests (``janus_api/<name>_<n>-v0``) loads only with ``env``, taken on
    the caller's word (the network's shapes must still fit)."""
    generated = _GENERATED.match(run_env) if isinstance(run_env, str) else None
    if generated is None:
        if env is not None:
            raise ConfigError(f"invalid env: the run's environment is {shown(run_env)}, a Gymnasium id; env= is "
                              f"for a run trained on a Python factory or instance (its config.yaml names janus_api/...)")
        return run_env
    if env is None:
        if generated["digest"] and run_env in gym.registry:
            return run_env  # registered in this process by a factory of the same digest
        raise ConfigError(f"the run's environment {run_env!r} was a Python factory or instance given to janus.train, "
                          f"registered only in the process that trained it; pass the same one: "
                          f"load_policy(folder, env=factory)")
    given = register_in_process(env)
    if generated["digest"] and given != run_env:
        raise ConfigError(f"invalid env: {shown(env, 80)} is not the factory the run was trained on (its id "
                          f"{given!r}, the run's {run_env!r}: a different code, closure or state); pass the "
                          f"run's own factory")
    return given


def factory_digest(env: Any) -> str:
    """A fingerprint of a factory or an instance (:data:`DIGEST_CHARS` hex characters): equal for the
    same code and values in any session, different for a different factory (see the module doc).
    What cannot be pickled or named counts by its ``repr`` (an address: a digest of this session only)."""
    h = hashlib.sha256()
    target = env
    while isinstance(target, functools.partial):  # a partial's home is its function's module
        target = target.func
    module = getattr(target, "__module__", None) or getattr(type(target), "__module__", "")
    try:
        _feed(h, env, 0, frozenset(), str(module))
    except Exception:  # noqa: BLE001 - a value whose repr or hash raises: a digest of this object only
        return hashlib.sha256(f"{object.__repr__(env)}:{os.getpid()}".encode()).hexdigest()[:DIGEST_CHARS]
    return h.hexdigest()[:DIGEST_CHARS]


def _put(h: Any, tag: str, data: bytes) -> None:
    h.update(tag.encode() + len(data).to_bytes(8, "little") + data)


def _feed(h: Any, obj: Any, depth: int, seen: frozenset[int], home: str) -> None:
    """Feed ``obj`` to the hash ``h``: values by value, code by its bytes, constants and names;
    functions and classes of the factory's own module (``home``) with what they use, others by name."""
    if obj is None or isinstance(obj, (bool, int, float, complex, str, bytes)):
        _put(h, type(obj).__name__, repr(obj).encode())
        return
    if depth > 8 or id(obj) in seen:
        _put(h, "cut", type(obj).__qualname__.encode())
        return
    seen, depth = seen | {id(obj)}, depth + 1
    if isinstance(obj, (tuple, list)):
        _put(h, type(obj).__name__, str(len(obj)).encode())
        for item in obj:
            _feed(h, item, depth, seen, home)
    elif isinstance(obj, dict):
        _put(h, "dict", str(len(obj)).encode())
        for key in sorted(obj, key=repr):
            _feed(h, key, depth, seen, home)
            _feed(h, obj[key], depth, seen, home)
    elif isinstance(obj, types.CodeType):
        _put(h, "code", obj.co_code)
        _put(h, "names", repr((obj.co_names, obj.co_varnames, obj.co_freevars, obj.co_argcount)).encode())
        for const in obj.co_consts:
            _feed(h, const, depth, seen, home)
    elif isinstance(obj, types.ModuleType):
        _put(h, "module", obj.__name__.encode())
    elif isinstance(obj, (types.FunctionType, type)) and getattr(obj, "__module__", None) != home:
        _put(h, "named", f"{obj.__module__}.{obj.__qualname__}".encode())  # another module's: by its name
    elif isinstance(obj, types.FunctionType):
        _put(h, "function", f"{obj.__module__}.{obj.__qualname__}".encode())
        for part in (obj.__code__, obj.__defaults__, obj.__kwdefaults__):
            _feed(h, part, depth, seen, home)
        for cell in obj.__closure__ or ():
            try:
                _feed(h, cell.cell_contents, depth, seen, home)
            except ValueError:  # an empty cell
                _put(h, "empty", b"")
        used = {n: obj.__globals__[n] for n in sorted(_global_names(obj.__code__)) if n in obj.__globals__}
        _feed(h, used, depth, seen, home)
    elif isinstance(obj, type):
        _put(h, "class", f"{obj.__module__}.{obj.__qualname__}".encode())
        _feed(h, obj.__bases__, depth, seen, home)
        _feed(h, {k: v for k, v in vars(obj).items() if not k.startswith("__") or k in ("__init__", "__call__")},
              depth, seen, home)
    elif isinstance(obj, (staticmethod, classmethod)):
        _feed(h, obj.__func__, depth, seen, home)
    elif isinstance(obj, types.MethodType):
        _feed(h, (obj.__func__, obj.__self__), depth, seen, home)
    elif isinstance(obj, functools.partial):
        _feed(h, (obj.func, obj.args, obj.keywords), depth, seen, home)
    else:  # an instance: its class, and its state by value where it pickles
        _feed(h, type(obj), depth, seen, home)
        try:
            _put(h, "pickle", pickle.dumps(obj, protocol=4))
        except Exception:  # noqa: BLE001 - whatever cannot be pickled counts by its repr
            _put(h, "repr", repr(obj).encode())


def _global_names(code: types.CodeType) -> set[str]:
    """The global names ``code`` and the code nested in it read."""
    names = set(code.co_names)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names |= _global_names(const)
    return names


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
