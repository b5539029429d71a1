"""Callbacks of :func:`janus.train`: hooks the run calls as it goes, and the built-in ones.

A :class:`Callback` is called from the run's poll loop (the main thread of ``janus.train``, between
two looks at the Orchestrator's status), never from a component: a hook that takes long delays the
next poll, not the actors or the learner. A hook that returns ``True`` stops the run: it stops as
for Ctrl-C (workers drained, final checkpoint committed, results written) with status ``stopped``.

Built-ins, each one small: :class:`Progress` prints the progress line instead of the run's own,
:class:`EarlyStop` stops at a mean return or after evaluations without improvement,
:class:`Checkpoint` and :class:`Evaluation` set the runtime's own checkpoint and evaluation
settings (:meth:`Callback.settings`: the ``janus train`` flags they stand for). Each line prints
once: the run prints each evaluation itself, and :class:`Progress` replaces its progress line.

Why a run stopped is printed and recorded in results.json (``stop_reason``): a callback's
:attr:`Callback.reason` (``EarlyStop: mean return 480.2 >= 475 at 31,000 env steps``), the budget
reached, Ctrl-C or SIGTERM.

A hook returns None, True (stop) or False; anything else (an array, a string) is an error naming the
hook. A hook that raises stops the run as a stop request does (final checkpoint committed, results.json,
csv and charts written), with status ``failed`` and the hook's error as ``stop_reason``; then
:func:`janus.train` raises :class:`~janus.errors.CallbackError` naming the callback and the hook, the
original exception chained. ``callbacks=`` takes a list of callbacks or a single one.
"""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

import numpy as np

from janus.config import RunConfig
from janus.errors import CallbackError, ConfigError, invalid, shown
from janus.stopping import CallbackFailed, StopRequested

if TYPE_CHECKING:
    from janus.runtime.status import RunStatus

RETURN_WINDOW = 20
"""Episodes in :attr:`ProgressStats.mean_return` (as the results' ``final_mean_return``)."""


@dataclass(frozen=True)
class RunInfo:
    """What :meth:`Callback.on_start` is told: the run folder and the resolved configuration."""

    out: Path
    config: RunConfig

    @property
    def total_env_steps(self) -> int:
        return self.config.workload.total_env_steps

    @property
    def seed(self) -> int:
        """The run's seed (with ``janus.train(seeds=[...])``: which seed's run this is)."""
        return self.config.seed


@dataclass(frozen=True)
class ProgressStats:
    """A look at a run as it goes (:meth:`Callback.on_progress`)."""

    env_steps: int
    """Env steps of the whole run (a resumed run's earlier sessions included)."""
    updates: int
    """Learner updates of this session."""
    total_env_steps: int
    episodes: int
    """Episodes finished so far."""
    mean_return: float | None
    """Mean return of the last 20 episodes (None before the first ends)."""
    elapsed_s: float
    env_steps_per_s: float
    """This session's env steps per second of its running time."""

    @property
    def fraction(self) -> float:
        """The share of the env-step budget done, 0 to 1."""
        return min(self.env_steps / self.total_env_steps, 1.0) if self.total_env_steps > 0 else 1.0


def seconds(name: str, value: Any) -> float:
    """``value`` as a finite number of seconds >= 0; a :class:`ConfigError` naming ``name`` otherwise."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        raise invalid(name, value, "a finite number of seconds >= 0")
    return float(value)


class Callback:
    """Hooks of one run; override those you need. Returning ``True`` from a hook stops the run.

    ``progress_every_s``: seconds between calls of :meth:`on_progress` (every poll when 0).
    """

    progress_every_s: float = 2.0
    reason: str = ""
    """Why this callback stopped the run, once it did (results.json's ``stop_reason`` says it after
    the callback's name; "" for "asked to stop")."""

    def settings(self) -> dict[str, Any]:
        """``janus train`` flags (as keywords) this callback needs, e.g. ``{"eval_interval_steps": 5000}``."""
        return {}

    def check(self, config: RunConfig) -> None:
        """Raise :class:`~janus.errors.ConfigError` if this callback cannot work in a run of
        ``config`` (the resolved configuration, before anything is written)."""

    def on_start(self, run: RunInfo) -> bool | None:
        """The run folder is open and the configuration resolved; the components start next."""
        return None

    def on_progress(self, stats: ProgressStats) -> bool | None:
        """The run so far, every :attr:`progress_every_s` seconds."""
        return None

    def on_evaluation(self, evaluation: dict[str, Any]) -> bool | None:
        """A periodic evaluation finished (``env_steps``, ``mean_return``, ``std_return`` ..., as results.json records it)."""
        return None

    def on_end(self, result: Any) -> None:
        """The run ended (finished, stopped or interrupted) and its results are written; ``result``
        is its :class:`~janus.result.RunResult`."""


class Progress(Callback):
    """Prints a line every ``every_s`` seconds: env steps, share done, mean return, rate and ETA.

    It replaces the run's own progress line (which would say the same): give it to print the
    progress at your own pace or to your own ``stream`` (a log file, a notebook cell)."""

    replaces_progress_line = True

    def __init__(self, every_s: float = 5.0, stream: TextIO | None = None) -> None:
        self.progress_every_s = seconds("Progress(every_s)", every_s)
        if stream is not None and not callable(getattr(stream, "write", None)):
            raise invalid("Progress(stream)", stream, "a text stream with write() (a file, sys.stderr, io.StringIO) or None")
        self.stream = stream

    def on_progress(self, stats: ProgressStats) -> None:
        left = stats.total_env_steps - stats.env_steps
        eta = f"ETA {left / stats.env_steps_per_s:.0f}s" if stats.env_steps_per_s > 0 and left > 0 else ""
        ret = f"return {stats.mean_return:.1f}" if stats.mean_return is not None else "no episode yet"
        print(f"janus: {stats.env_steps:,}/{stats.total_env_steps:,} env steps ({stats.fraction:.0%}), {ret}, "
              f"{stats.env_steps_per_s:,.0f} env-steps/s {eta}".rstrip(), file=self.stream or sys.stdout, flush=True)


class EarlyStop(Callback):
    """Stops the run once the mean return of the last 20 training episodes reaches ``mean_return``
    (looked at every ``every_s`` seconds), or once ``patience`` periodic evaluations in a row have
    not beaten the best evaluation's mean return so far. ``patience`` counts evaluations, so the run
    must evaluate (``eval_interval_steps=``, or a :class:`Evaluation` callback): one that never
    does is refused before it starts."""

    def __init__(self, mean_return: float | None = None, patience: int | None = None, every_s: float = 0.5) -> None:
        if mean_return is None and patience is None:
            raise ConfigError("EarlyStop: give mean_return (stop when reached), patience (stop after that many "
                              "evaluations without improvement) or both")
        if mean_return is not None and (isinstance(mean_return, bool) or not isinstance(mean_return, (int, float))
                                        or not math.isfinite(mean_return)):
            raise invalid("EarlyStop(mean_return)", mean_return, "a finite number")
        if patience is not None and (isinstance(patience, bool) or not isinstance(patience, int) or patience < 1):
            raise invalid("EarlyStop(patience)", patience, "an integer >= 1 (evaluations without improvement)")
        self.mean_return = mean_return
        self.patience = patience
        self.progress_every_s = seconds("EarlyStop(every_s)", every_s)
        self.best: float | None = None
        """The best evaluation's mean return so far."""
        self.stale = 0
        """Evaluations since the best one."""
        self.reason = ""

    def check(self, config: RunConfig) -> None:
        if self.patience is not None and not config.runtime.eval_interval_steps:
            raise ConfigError(f"EarlyStop(patience={self.patience}) counts evaluations, and this run never evaluates: "
                              f"give eval_interval_steps=... (or janus.Evaluation(every_env_steps=...)) too")

    def on_start(self, run: RunInfo) -> None:
        """A new run (the next seed's, with ``seeds=``) starts from no best return."""
        self.best, self.stale, self.reason = None, 0, ""

    def on_progress(self, stats: ProgressStats) -> bool:
        ret = stats.mean_return
        if self.mean_return is not None and ret is not None and ret >= self.mean_return:
            self.reason = f"mean return {ret:.1f} >= {self.mean_return:g} at {stats.env_steps:,} env steps"
            return True
        return False

    def on_evaluation(self, evaluation: dict[str, Any]) -> bool:
        ret = evaluation.get("mean_return")
        if self.patience is None or not isinstance(ret, (int, float)):
            return False
        if self.best is None or ret > self.best:
            self.best, self.stale = float(ret), 0
            return False
        self.stale += 1
        if self.stale >= self.patience:
            self.reason = (f"no evaluation beat the best mean return {self.best:.1f} in {self.stale} evaluations "
                           f"(the last at {int(evaluation.get('env_steps', 0)):,} env steps)")
            return True
        return False


class Checkpoint(Callback):
    """Checkpoints the run every ``every_s`` seconds (the runtime's ``checkpoint_interval_s``) into
    RUN_DIR/checkpoint, from which ``janus train --resume RUN_DIR`` continues."""

    def __init__(self, every_s: float) -> None:
        self.every_s = every_s  # validated with the flag it sets

    def settings(self) -> dict[str, Any]:
        return {"checkpoint_interval_s": self.every_s}


class Evaluation(Callback):
    """Evaluates the policy every ``every_env_steps`` env steps on ``episodes`` greedy episodes (the
    runtime's Evaluator: results.json's ``evaluations``, the best policy in RUN_DIR/best). The run
    prints each evaluation's line itself (once); :meth:`Callback.on_evaluation` hands each to code."""

    def __init__(self, every_env_steps: int, episodes: int = 10) -> None:
        self.every_env_steps = every_env_steps  # validated with the flags they set
        self.episodes = episodes

    def settings(self) -> dict[str, Any]:
        return {"eval_interval_steps": self.every_env_steps, "eval_episodes": self.episodes}


def merged_settings(callbacks: Sequence[Callback], given: dict[str, Any]) -> dict[str, Any]:
    """The flags the callbacks set, added to ``given``; two different values for one flag are an error naming both."""
    out = dict(given)
    for cb in callbacks:
        for flag, value in cb.settings().items():
            if flag in out and out[flag] != value:
                raise ConfigError(f"{type(cb).__name__} sets {flag}={value!r}, but {flag}={out[flag]!r} is given too; "
                                  f"give one of them")
            out[flag] = value
    return out


class CallbackHooks:
    """Calls the callbacks of one run: an observer of the runtime (``janus.runtime.run.Observer``)
    plus :meth:`start` and :meth:`end` around the run. A hook that returns True raises
    :class:`~janus.stopping.StopRequested` in the poll loop, which stops the run cleanly."""

    def __init__(self, callbacks: Sequence[Callback] | Callback | None) -> None:
        self.callbacks = callback_list(callbacks)
        self.last_progress = [-math.inf] * len(self.callbacks)
        self.evaluations_seen = 0
        self.total_env_steps = 0
        self.out: Path | None = None
        self.result: Any = None
        """The run's :class:`~janus.result.RunResult` once it ended."""
        self.stopped_by: Callback | None = None
        self.failure: CallbackError | None = None
        """The error of the hook that failed the run, if one did (raised by :func:`janus.train` once the run is saved)."""
        self._stop = False
        self._started_at = 0.0
        self._steps_at_start: int | None = None

    def _called(self, cb: Callback, hook: str, *args: Any, answers: bool = True) -> bool:
        """``cb.hook(*args)``: whether it asks to stop. A hook that raises, or (``answers``: one whose
        answer is read) returns anything but None, True or False, is a :class:`CallbackError` naming
        the callback and the hook."""
        where = f"callback {type(cb).__name__}.{hook}"
        try:
            answer = getattr(cb, hook)(*args)
        except (Exception, SystemExit) as exc:
            text = str(exc) if len(str(exc)) <= 300 else str(exc)[:280] + " ..."
            raise CallbackError(f"{where} raised {type(exc).__name__}: {text}") from exc
        if not answers or answer is None or isinstance(answer, (bool, np.bool_)):
            return bool(answer)
        raise CallbackError(f"{where} returned {shown(answer, 80)} (a {type(answer).__name__}); a hook returns "
                            f"None or False (go on) or True (stop the run)")

    def _ask(self, cb: Callback, answer: bool | None) -> None:
        if answer and not self._stop:
            self._stop, self.stopped_by = True, cb

    @property
    def replaces_progress_line(self) -> bool:
        """A callback prints the progress instead of the run's own line (:class:`Progress`)."""
        return any(getattr(cb, "replaces_progress_line", False) for cb in self.callbacks)

    def check(self, cfg: RunConfig) -> None:
        """:meth:`Callback.check` of each, before anything is written."""
        for cb in self.callbacks:
            cb.check(cfg)

    @property
    def stop_reason(self) -> str:
        """Why the callbacks stopped the run: ``EarlyStop: mean return 480.2 >= 475 at 31,000 env steps``."""
        cb = self.stopped_by
        if cb is None:
            return ""
        why = str(getattr(cb, "reason", "") or "")
        return f"{type(cb).__name__}: {why}" if why else f"{type(cb).__name__} asked to stop"

    def start(self, out: Path, cfg: RunConfig) -> None:
        """Before the run: :meth:`Callback.on_start` of each."""
        self.out, self.total_env_steps = out, cfg.workload.total_env_steps
        info = RunInfo(out, cfg)
        for cb in self.callbacks:
            self._ask(cb, self._called(cb, "on_start", info))

    def __call__(self, status: RunStatus, result_so_far: Callable[[], Any]) -> None:
        """One poll of the run: progress and new evaluations to the callbacks; stop if one asked."""
        now = time.monotonic()
        steps = int(status.env_steps)
        if self._steps_at_start is None:
            self._started_at, self._steps_at_start = now - float(status.elapsed_s), steps
        try:
            self._poll(status, steps, now)
        except CallbackError as exc:  # stop the run as for a stop request: committed and written, status failed
            self.failure = exc
            raise CallbackFailed(str(exc)) from exc
        if self._stop:
            raise StopRequested(self.stop_reason)

    def _poll(self, status: RunStatus, steps: int, now: float) -> None:
        stats: ProgressStats | None = None
        for i, cb in enumerate(self.callbacks):
            if now - self.last_progress[i] >= cb.progress_every_s:
                self.last_progress[i] = now
                stats = stats or self._stats(status, steps, now)
                self._ask(cb, self._called(cb, "on_progress", stats))
        for evaluation in status.evaluations[self.evaluations_seen:]:
            self.evaluations_seen += 1
            for cb in self.callbacks:
                self._ask(cb, self._called(cb, "on_evaluation", dict(evaluation)))

    def _stats(self, status: RunStatus, steps: int, now: float) -> ProgressStats:
        curve = status.curve
        last = [r for _, _, r in curve[-RETURN_WINDOW:]]
        running = now - self._started_at
        return ProgressStats(
            env_steps=steps, updates=int(status.trained), total_env_steps=self.total_env_steps,
            episodes=len(curve), mean_return=sum(last) / len(last) if last else None, elapsed_s=running,
            env_steps_per_s=(steps - (self._steps_at_start or 0)) / running if running > 0 else 0.0)

    def end(self, result: Any) -> None:
        """After the run's results are written: :meth:`Callback.on_end` of each."""
        self.result = result
        for cb in self.callbacks:
            try:
                self._called(cb, "on_end", result, answers=False)  # its return value means nothing
            except CallbackError as exc:
                if self.failure is None:
                    self.failure = exc
                    raise
                print(f"janus: {exc}", file=sys.stderr, flush=True)  # a second failure: the first is raised


def callback_list(callbacks: Sequence[Callback] | Callback | None) -> list[Callback]:
    """``callbacks=`` as a list: a list or tuple of callbacks, a single one (``callbacks=janus.Progress()``)
    or None; anything else, or an item that is not a :class:`Callback` (or whose ``progress_every_s``
    is not a number of seconds), is a :class:`ConfigError`, before anything starts."""
    accepted = "a janus.Callback or a list of them (e.g. [janus.EarlyStop(mean_return=475), janus.Progress()])"
    if callbacks is None:
        return []
    if isinstance(callbacks, Callback):
        callbacks = [callbacks]
    try:
        if isinstance(callbacks, (str, bytes, dict)):
            raise TypeError
        items = list(callbacks)
    except TypeError:
        raise invalid("callbacks", callbacks, accepted) from None
    for cb in items:
        if not isinstance(cb, Callback):
            raise invalid("callbacks", cb, f"instances of janus.Callback: {accepted}")
        seconds(f"{type(cb).__name__}.progress_every_s", cb.progress_every_s)
    return items
