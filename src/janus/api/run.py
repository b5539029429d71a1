"""The one run of :func:`janus.train`: its keywords as ``janus train``'s arguments, validated as the
command validates them, run into the run folder by the command's code, returned as a :class:`TrainedRun`.

Shared by :mod:`janus.api.train` (one seed) and :mod:`janus.api.seeds` (a run per seed).
"""

from __future__ import annotations

import argparse
import copy
import functools
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np

from janus import stopping
from janus.callbacks import Callback, CallbackHooks, merged_settings
from janus.errors import CallbackError, ConfigError, JanusError, shown
from janus.stopping import StopRequested

T = TypeVar("T")

if TYPE_CHECKING:
    from janus.config import RunConfig
    from janus.policy import Policy
    from janus.result import RunResult

PATH_FLAGS = {"out", "config", "resume"}
"""Keywords whose value is a path."""
CHECKED_ELSEWHERE = {"algo", "seeds"}
"""Keywords their own code checks: algo (a name or package.module:Name: the registry) and seeds
(:mod:`janus.api.seeds`)."""


@dataclass
class TrainedRun:
    """What :func:`janus.train` returns for one seed: the run folder, its result and (loaded on first use) its policy."""

    out: Path
    """The run folder, with the files ``janus train`` writes."""
    result: RunResult
    """The run's result (``status`` finished, or stopped when a callback stopped it)."""
    stopped_by: Callback | None = None
    """The callback that stopped the run early, if one did."""
    _policy: Policy | None = field(default=None, repr=False)

    @property
    def status(self) -> str:
        return self.result.status

    @property
    def policy(self) -> Policy:
        """The trained policy (:func:`janus.load_policy` of :attr:`out`: the last checkpoint)."""
        if self._policy is None:
            from janus.policy import load_policy

            self._policy = load_policy(self.out, trust=True)  # the run this process trained: its own modules
        return self._policy


def prepared(algo: str | None, env: Any, callbacks: Sequence[Callback] | Callback | None,
             flags: dict[str, Any]) -> tuple[CallbackHooks, argparse.Namespace]:
    """The callbacks' hooks and the ``janus train`` arguments of a call (an env object registered
    in this process, its settings checked); ``callbacks``: a list of them or a single one."""
    hooks = CallbackHooks(callbacks)
    flags = merged_settings(hooks.callbacks, flags)
    invocation = invocation_of(algo, env, flags)
    if env is not None:
        from janus.envs.in_process import check_in_process_settings, is_in_process, register_in_process, shipment

        if is_in_process(env):
            flags = check_in_process_settings(flags)
            env = register_in_process(env)
            if flags["backend"] == "process":  # its worker processes get it pickled: a clear error now if it cannot be
                shipment(env)
        flags["env"] = env
    args = train_arguments(algo, flags)
    args.invocation = invocation
    return hooks, args


def configured_from(args: argparse.Namespace) -> RunConfig:
    """The validated configuration of the arguments, as ``janus train`` builds it."""
    from janus.cli import configured

    return configured(args)


def keyword_errors(check: Callable[[argparse.Namespace], T]) -> Callable[[argparse.Namespace], T]:
    """``check`` with its errors naming keywords (``invalid lr``) where the command names flags (``--lr``)."""
    def named_as_keywords(args: argparse.Namespace) -> T:
        from janus.cli import named_by_flag

        try:
            return check(args)
        except JanusError as exc:
            raise reworded(named_by_flag(exc, args)) from None

    return named_as_keywords


def reworded(exc: JanusError) -> JanusError:
    """``exc`` (same type and attributes) with its message in keywords (:func:`as_keywords`)."""
    text = str(exc)
    new = as_keywords(text)
    if new == text:
        return exc
    copied = copy.copy(exc)
    copied.args = (new,)
    return copied


def as_keywords(text: str) -> str:
    """A message that names ``janus train`` flags, in :func:`janus.train`'s words: ``--out 'x'`` is
    ``out='x'``, an on/off flag ``--force`` is ``force=True``, any other ``--name`` is ``name``, and a
    configuration key with a keyword of its name (``workload.total_env_steps``) is that keyword."""
    known = train_flags()[0]
    switches = switch_flags()

    def keyword(m: re.Match[str]) -> str:
        name, value = m.group(1), m.group(2)
        if name not in known:
            return m.group(0)
        if value:
            return f"{name}={value.strip()}"
        return f"{name}=True" if name in switches else name

    text = re.sub(r"--(\w+)( '[^']*'| \"[^\"]*\")?", keyword, text)
    # a configuration key (workload.total_env_steps, runtime.min_inserts) is the keyword of the same name
    return re.sub(r"\b(?:workload|runtime|algorithm|janus)\.(\w+)\b",
                  lambda m: m.group(1) if m.group(1) in known else m.group(0), text)


def run_one(args: argparse.Namespace, cfg: RunConfig, hooks: CallbackHooks) -> TrainedRun:
    """Run one configured run into its folder; a stop signal as for the command (the run stops,
    is written, then it is raised)."""
    from janus.harness.commands import run_command

    with stopping.handled() as signals:
        try:
            run_command(args, cfg, hooks)
        except StopRequested:
            pass  # the run is written (status stopped, or failed by a callback); the hooks hold its result
        except CallbackError:
            raise  # names the callback and its hook, the user's exception chained
        except JanusError as exc:  # the run folder's and the runtime's errors, in the caller's words
            raise reworded(exc) from None
        late = signals.late() if signals is not None else None
    if hooks.failure is not None:  # a hook raised: the run is saved (status failed), the error reaches the caller
        raise hooks.failure
    if late is not None:  # it came as the run ended: the run is saved as finished, the stop still reaches the caller
        raise KeyboardInterrupt(late)
    if hooks.out is None or hooks.result is None:  # resume= of a run at its budget: results written, nothing run
        raise JanusError("janus.train: nothing was trained (see the messages above); the run folder's results.json "
                         "holds its result")
    return TrainedRun(hooks.out, hooks.result, hooks.stopped_by)


@functools.lru_cache(maxsize=1)
def _train_parser() -> tuple[argparse.ArgumentParser, argparse.ArgumentParser]:
    """The CLI's parser and its ``janus train`` subcommand, built once (what the helpers below read)."""
    from janus.cli import build_parser

    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return parser, sub.choices["train"]


@functools.lru_cache(maxsize=1)
def train_flags() -> tuple[dict[str, str], tuple[tuple[str, Any], ...]]:
    """``janus train``'s flags: name -> argparse destination, and every destination's default."""
    parser, _ = _train_parser()
    names = {name: a.dest for name, a in train_actions().items() if a.dest != "help"}
    defaults = vars(parser.parse_args(["train"]))
    return names, tuple(defaults.items())


@functools.lru_cache(maxsize=1)
def switch_flags() -> frozenset[str]:
    """``janus train``'s on/off flags (``--force``, ``--quick`` ...): keywords that take True or False."""
    return frozenset(name for name, a in train_actions().items() if isinstance(a, argparse._StoreTrueAction))


def train_arguments(algo: str | None, flags: dict[str, Any]) -> argparse.Namespace:
    """The arguments ``janus train`` would parse from the same flags: keyword ``name`` is ``--name``.

    Values are taken as given (Python values, not text): the configuration's validation checks them.
    Stable-Baselines3's names are keywords too (:mod:`janus.config.sb3`: ``learning_rate``, ``n_envs``,
    ``policy_kwargs`` ...). An unknown keyword is a :class:`ConfigError` naming close matches (janus's
    flags only)."""
    from janus.cli import close_flags
    from janus.config.sb3 import is_alias

    names, defaults = train_flags()
    args = argparse.Namespace(**dict(defaults))
    if algo is not None and "algo" in flags:
        raise ConfigError(f"algo given twice: {algo!r} and algo={flags['algo']!r}")
    if isinstance(algo, str):
        from janus.algorithms.base import canonical_name

        algo = canonical_name(algo)  # "PPO" is ppo; a custom package.module:Name keeps its case
    for name, value in {**flags, **({"algo": algo} if algo is not None else {})}.items():
        if name not in names:
            close = [c.lstrip("-") for c in close_flags(f"--{name}", [f"--{n}" for n in names if not is_alias(names[n])])]
            hint = f" (did you mean {' or '.join(close)}?)" if close else ""
            raise ConfigError(f"janus.train: unknown keyword {name!r}{hint}; accepted: the flags of janus train "
                              f"(janus train --help), as keywords")
        if name in PATH_FLAGS and value is not None:
            if not isinstance(value, (str, Path)) or (isinstance(value, str) and not value.strip()):
                # Path("") is the current folder: out="" wrote the run there
                raise ConfigError(f"invalid {name}: got {shown(value)}; accepted: a path (str or pathlib.Path), not empty")
            value = Path(value)
        elif name not in CHECKED_ELSEWHERE:
            value = typed_keyword(name, train_actions()[name], value)
        setattr(args, names[name], value)
    return args


@functools.lru_cache(maxsize=1)
def train_actions() -> dict[str, argparse.Action]:
    """``janus train``'s flags: name -> the argparse action that reads it (its type, its nargs)."""
    _, command = _train_parser()
    return {o[2:]: a for a in command._actions for o in a.option_strings if o.startswith("--")}


def typed_keyword(name: str, action: argparse.Action, value: Any) -> Any:
    """A keyword's value checked against the type its flag parses to, as strictly as the flag: an
    on/off flag takes a bool (numpy's too), never ``"no"`` or 1; an int flag an int (not a bool, nor
    a float); a float flag a real number (not a bool); a text flag a str; a JSON flag a mapping.
    numpy scalars become Python ones. Values of the configuration are validated further by it
    (ranges, choices); None is "not given". Raises :class:`ConfigError` naming the keyword."""
    from janus.cli import _bool, _mapping, _number

    if value is None:
        return None
    if isinstance(value, np.generic):  # numpy's bool_, int64, float32 ...: the Python value
        value = value.item()
    kind = action.type
    if isinstance(action, (argparse._StoreTrueAction, argparse._StoreFalseAction)) or kind is _bool:
        if not isinstance(value, bool):
            raise _wrong_type(name, value, "True or False (a bool)")
        return value
    if action.dest.startswith("sb3__"):
        return value  # Stable-Baselines3's names: janus.config.sb3 checks them, naming janus's equivalent
    if action.nargs in ("+", "*"):
        if isinstance(value, (list, tuple)):
            try:
                return type(value)(typed_keyword(name, _Element(kind), v) for v in value)
            except ConfigError as exc:
                accepted = str(exc).rpartition("accepted: ")[2]
                raise ConfigError(f"invalid {name}: got {shown(value)}; accepted: a list, each item {accepted}") from None
        return value  # e.g. net_arch as SB3's dict: the configuration checks it
    if kind is int and (isinstance(value, bool) or not isinstance(value, int)):
        raise _wrong_type(name, value, "an int")
    if kind is float and (isinstance(value, bool) or not isinstance(value, (int, float))):
        raise _wrong_type(name, value, "a number (int or float)")
    if kind is _number and (isinstance(value, bool) or not isinstance(value, (int, float, str))):
        raise _wrong_type(name, value, f"a number (or the text --{name} takes)")
    if (kind is None or kind is str) and not isinstance(value, str):
        raise _wrong_type(name, value, "a str")
    if kind is _mapping and not isinstance(value, Mapping):
        raise _wrong_type(name, value, "a dict")
    return value


class _Element(argparse.Action):
    """The action of one item of a list flag (``--net_arch 64 64``): the list flag's type."""

    def __init__(self, kind: Any) -> None:
        super().__init__(option_strings=[], dest="", type=kind)


def _wrong_type(name: str, value: Any, accepted: str) -> ConfigError:
    return ConfigError(f"invalid {name}: got {shown(value)} ({type(value).__name__}); accepted: {accepted}")


def invocation_of(algo: str | None, env: Any, flags: dict[str, Any]) -> str:
    """The call as results.json records it: ``janus.train('dqn', env='CartPole-v1', ...)``."""
    parts = [repr(algo)] if algo is not None else []
    if env is not None:
        parts.append(f"env={env!r}" if isinstance(env, str) else f"env={shown(env, 80)}")
    parts += [f"{k}={shown(v, 80)}" for k, v in flags.items()]
    return f"janus.train({', '.join(parts)})"
