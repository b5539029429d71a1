"""``janus.train(...)``: train from Python, as ``janus train`` does, into the same run folder.

    import janus
    run = janus.train("dqn", env="CartPole-v1", total_env_steps=50_000, out="runs/dqn",
                      callbacks=[janus.EarlyStop(mean_return=475), janus.Progress()], seed=0, lr=5e-4)
    run.policy.predict(obs)   # the trained policy (janus.load_policy of the run folder)
    run.result                # the run's RunResult, as results.json records it
    run.out                   # the run folder: config.yaml, results.json, charts, checkpoint/

Every ``janus train --flag`` is a keyword of the same name, read by the same code: the keywords
become the ``janus train`` command's arguments (:func:`train_arguments`), which
:func:`janus.cli.configured` turns into a validated configuration and
:func:`janus.harness.commands.run_command` runs into the run folder, exactly as for the command.
"""

from __future__ import annotations

import argparse
import functools
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from janus import stopping
from janus.callbacks import Callback, CallbackHooks, merged_settings
from janus.errors import ConfigError, JanusError, shown
from janus.stopping import StopRequested

if TYPE_CHECKING:
    from janus.policy import Policy
    from janus.result import RunResult

PATH_FLAGS = {"out", "config", "resume"}


@dataclass
class TrainedRun:
    """What :func:`train` returns: the run folder, its result and (loaded on first use) its policy."""

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

            self._policy = load_policy(self.out)
        return self._policy


def train(algo: str | None = None, env: str | Callable[[], Any] | Any = None, *, callbacks: Sequence[Callback] = (),
          **flags: Any) -> TrainedRun:
    """Train ``algo`` (dqn, ppo, sac, a custom ``package.module:Name``; None: by the env's action
    space) on ``env`` and write the run folder ``out`` as ``janus train`` does.

    ``env``: a Gymnasium id; or a zero-argument callable returning a ``gymnasium.Env``, or an env
    instance (copied for each environment of the run), both registered in this process
    (:mod:`janus.envs.in_process`: the local backend only). ``callbacks``: :class:`~janus.callbacks.Callback`
    objects (progress, early stop, checkpoint, evaluation). ``flags``: any ``janus train`` flag by
    its name (``total_env_steps``, ``out``, ``seed``, ``lr``, ``batch_size``, ``num_workers``, ``backend`` ...),
    validated as the command validates it. Raises :class:`~janus.errors.ConfigError` for an unknown
    keyword (naming close matches) or a bad value; a Ctrl-C stops the run, writes it and re-raises.
    """
    from janus.cli import configured, named_by_flag
    from janus.harness.commands import run_command

    if "seeds" in flags:  # one run, one TrainedRun; the command runs several and aggregates them
        raise ConfigError("janus.train: seeds= is not accepted: janus.train runs one seed (seed=); for several seeds "
                          "with an aggregate, run janus train --seeds 0 1 2 ... (janus.harness.seed_runs)")
    hooks = CallbackHooks(list(callbacks))
    flags = merged_settings(hooks.callbacks, flags)
    invocation = _invocation(algo, env, flags)
    if env is not None:
        from janus.envs.in_process import check_in_process_settings, is_in_process, register_in_process

        if is_in_process(env):
            flags = check_in_process_settings(flags)
            env = register_in_process(env)
        flags["env"] = env
    args = train_arguments(algo, flags)
    args.invocation = invocation
    try:
        cfg = configured(args)
    except JanusError as exc:  # named by the keyword given ("invalid lr"), as the command names its flag ("--lr")
        named = named_by_flag(exc, args)
        known = _train_flags()[0]
        text = re.sub(r"--(\w+)", lambda m: m.group(1) if m.group(1) in known else m.group(0), str(named))
        raise type(named)(text) from None
    with stopping.handled() as signals:  # Ctrl-C as for the command: the run stops, is written, then it is raised
        try:
            run_command(args, cfg, hooks)
        except StopRequested:
            pass  # the run is written (status stopped); the hooks hold its result
        late = signals.late() if signals is not None else None
    if late is not None:  # it came as the run ended: the run is saved as finished, the stop still reaches the caller
        raise KeyboardInterrupt(late)
    if hooks.out is None or hooks.result is None:  # resume= of a run at its budget: results written, nothing run
        raise JanusError("janus.train: nothing was trained (see the messages above); the run folder's results.json "
                         "holds its result")
    return TrainedRun(hooks.out, hooks.result, hooks.stopped_by)


@functools.lru_cache(maxsize=1)
def _train_flags() -> tuple[dict[str, str], tuple[tuple[str, Any], ...]]:
    """``janus train``'s flags: name -> argparse destination, and every destination's default."""
    from janus.cli import build_parser

    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    command = sub.choices["train"]
    names = {o[2:]: a.dest for a in command._actions for o in a.option_strings if o.startswith("--") and a.dest != "help"}
    defaults = vars(parser.parse_args(["train"]))
    return names, tuple(defaults.items())


def train_arguments(algo: str | None, flags: dict[str, Any]) -> argparse.Namespace:
    """The arguments ``janus train`` would parse from the same flags: keyword ``name`` is ``--name``.

    Values are taken as given (Python values, not text): the configuration's validation checks them.
    An unknown keyword is a :class:`ConfigError` naming close matches."""
    from janus.cli import close_flags

    names, defaults = _train_flags()
    args = argparse.Namespace(**dict(defaults))
    if algo is not None and "algo" in flags:
        raise ConfigError(f"algo given twice: {algo!r} and algo={flags['algo']!r}")
    for name, value in {**flags, **({"algo": algo} if algo is not None else {})}.items():
        if name not in names:
            close = [c.lstrip("-") for c in close_flags(f"--{name}", [f"--{n}" for n in names])]
            hint = f" (did you mean {' or '.join(close)}?)" if close else ""
            raise ConfigError(f"janus.train: unknown keyword {name!r}{hint}; accepted: the flags of janus train "
                              f"(janus train --help), as keywords")
        if name in PATH_FLAGS and value is not None:
            if not isinstance(value, (str, Path)):
                raise ConfigError(f"invalid {name}: got {shown(value)}; accepted: a path (str or pathlib.Path)")
            value = Path(value)
        setattr(args, names[name], value)
    return args


def _invocation(algo: str | None, env: Any, flags: dict[str, Any]) -> str:
    """The call as results.json records it: ``janus.train('dqn', env='CartPole-v1', ...)``."""
    parts = [repr(algo)] if algo is not None else []
    if env is not None:
        parts.append(f"env={env!r}" if isinstance(env, str) else f"env={shown(env, 80)}")
    parts += [f"{k}={shown(v, 80)}" for k, v in flags.items()]
    return f"janus.train({', '.join(parts)})"
