"""How ``janus`` stops on SIGINT, SIGTERM and SIGHUP without losing what a run produced.

:class:`StopSignals` is the CLI's handler. The first stop signal interrupts the run (a
:class:`KeyboardInterrupt`: the run stops cleanly, commits its final checkpoint and writes its
results) only where the code can be interrupted: outside :func:`saving`, or inside one of its
:func:`interruptible` windows (a run's start-up and its poll loop). Anywhere else in a
:func:`saving` block (the shutdown after the loop, the final commit, the results files and
charts) it is recorded and announced, never raised into the middle of the writing: the next
:func:`interruptible` window raises it at its entry, and a stop that no window took is
:meth:`StopSignals.late`, which decides the exit code once everything is written. A second
signal only prints a note; a third aborts without saving (:class:`Aborted`).

Only the standard library is imported here: the CLI installs the handler before anything slow.
"""

from __future__ import annotations

import contextlib
import itertools
import signal
import sys
import threading
from collections.abc import Iterator

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class Terminated(KeyboardInterrupt):
    """SIGTERM or SIGHUP: stop like Ctrl-C (clean shutdown, final checkpoint), then exit."""


class Aborted(KeyboardInterrupt):
    """A third stop signal: leave without waiting for the final checkpoint and results."""


class StopRequested(KeyboardInterrupt):
    """A callback of :func:`janus.train` asked the run to stop: it stops as for Ctrl-C (clean
    shutdown, final checkpoint, results written), with status ``stopped``."""

    outcome = "stopped"


class CallbackFailed(StopRequested):
    """A hook of a :func:`janus.train` callback raised (or returned a wrong type): the run stops as for a
    stop request (final checkpoint, results written) with status ``failed``; :func:`janus.train` then
    raises the :class:`~janus.errors.CallbackError` (held by the run's hooks)."""

    outcome = "failed"


def outcome_of(exc: KeyboardInterrupt) -> str:
    """The ``status`` of a run that ``exc`` stopped: ``stopped`` (a callback asked) or ``interrupted``."""
    return str(getattr(exc, "outcome", "interrupted"))


def reason_of(exc: KeyboardInterrupt) -> str:
    """Why ``exc`` stopped a run, for the console and results.json's ``stop_reason``."""
    if isinstance(exc, StopRequested):
        return str(exc.args[0]) if exc.args and exc.args[0] else "a callback asked to stop"
    if isinstance(exc, Terminated):
        return f"{exc.args[0] if exc.args else 'SIGTERM'} received: stopped as for Ctrl-C"
    if exc.args and str(exc.args[0]).startswith("SIG"):  # a stop signal that came as the run ended
        return f"{exc.args[0]} received"
    return "SIGINT received (Ctrl-C)"


_windows: list[bool] = []  # innermost last: True inside interruptible(), False inside saving()
_handler: StopSignals | None = None  # the handler installed in this process, if any


def _main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


def raises_now() -> bool:
    """Whether a first stop signal is raised where the main thread is now (else it is recorded)."""
    return not _windows or _windows[-1]


class StopSignals:
    """The CLI's SIGINT/SIGTERM/SIGHUP handler. The first stops the run cleanly (final checkpoint,
    results written), raised where the run can be interrupted and recorded where it is saving; a
    second, while that runs (as when Ctrl-C is pressed twice, or a group signal follows), only says
    so: it would otherwise cut the saving short and lose the run; a third aborts without saving."""

    NOTE = ("janus: stopping: writing the final checkpoint and the results (a few seconds); "
            "signal once more to abort without saving")
    SAVING_NOTE = ("janus: {name} received while files are being written: janus stops once they are "
                   "(signal twice more to abort without saving)")

    def __init__(self) -> None:
        self._numbers = itertools.count(1)
        self.count = 0  # stop signals received so far
        self.first: str | None = None  # the name of the first stop signal
        self.delivered = False  # whether the first one was raised (else it waits: see late())
        self.announced = False  # whether SAVING_NOTE said it waits

    def install(self) -> StopSignals:
        """Handle the three signals, except those this process was started ignoring: ``nohup``
        ignores SIGHUP (closing the terminal must not stop the run), a shell's background job
        SIGINT. Returns itself."""
        global _handler
        for sig in STOP_SIGNALS:
            if signal.getsignal(sig) is not signal.SIG_IGN:
                signal.signal(sig, self)
        _handler = self
        return self

    def interrupt(self) -> KeyboardInterrupt:
        """The exception the first stop signal raises: KeyboardInterrupt for SIGINT, else Terminated."""
        return KeyboardInterrupt() if self.first in (None, "SIGINT") else Terminated(self.first)

    def __call__(self, signum: int, frame: object) -> None:
        # a second signal can run this handler again before the first call has read its count (two
        # signals in quick succession: a seed run's parent-death signal and its watchdog's): each call
        # takes its own number in one step, so the first is never mistaken for the second
        count = self.count = next(self._numbers)
        name = signal.Signals(signum).name
        if count == 1:
            self.first = name
            if raises_now():
                self.delivered = True
                raise self.interrupt()
            print(self.SAVING_NOTE.format(name=name), file=sys.stderr, flush=True)
            self.announced = True
            return
        if count == 2:
            print(self.NOTE, file=sys.stderr, flush=True)
            return
        raise Aborted(name)

    def late(self) -> str | None:
        """The name of a stop signal that was recorded and never raised (it came while the run's
        files were written, after its loop had ended), else None."""
        return self.first if self.first is not None and not self.delivered else None


@contextlib.contextmanager
def handled() -> Iterator[StopSignals | None]:
    """:class:`StopSignals` installed for the block (:func:`janus.train` in a script's main thread),
    the handlers before it restored after; None (nothing installed) in another thread."""
    global _handler
    if not _main_thread():
        yield None
        return
    previous = {sig: signal.getsignal(sig) for sig in STOP_SIGNALS}
    outer = _handler
    try:
        yield StopSignals().install()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler if handler is not None else signal.SIG_DFL)  # None: set outside Python
        _handler = outer


@contextlib.contextmanager
def saving() -> Iterator[None]:
    """A block a first stop signal must not cut short (shutdown, commit, results files): the
    signal is recorded, announced, and raised at the next :func:`interruptible` window, if any
    (or by :func:`raise_if_stopped`).
    Signals reach the main thread only: in another thread (a run started by a script's thread)
    this changes nothing."""
    if not _main_thread():
        yield
        return
    _windows.append(False)
    try:
        yield
    finally:
        _windows.pop()


@contextlib.contextmanager
def interruptible() -> Iterator[None]:
    """A window of a :func:`saving` block where the first stop signal raises at once (a run's
    start-up and poll loop); one recorded before it is raised at its entry."""
    if not _main_thread():
        yield
        return
    _windows.append(True)
    try:
        _deliver_late()
        yield
    finally:
        _windows.pop()


def in_interruptible() -> bool:
    """Whether the main thread is inside an :func:`interruptible` window now (a run's start-up or
    poll loop), where an exception raised by a signal handler stops the run cleanly."""
    return _main_thread() and bool(_windows) and _windows[-1]


def signalled() -> bool:
    """Whether the handler installed in this process has received a stop signal (SIGINT, SIGTERM
    or SIGHUP), raised or recorded."""
    return _handler is not None and _handler.first is not None


def raise_if_stopped() -> None:
    """In an :func:`interruptible` window (or outside any block): raise the stop recorded by a
    :func:`saving` block nested in it, if any."""
    if raises_now():
        _deliver_late()


def _deliver_late() -> None:
    """Raise the stop recorded in a :func:`saving` block, if any."""
    handler = _handler
    if handler is not None and handler.late() is not None:
        handler.delivered = True
        raise handler.interrupt()


def defer(exc: KeyboardInterrupt) -> bool:
    """Take back a first stop signal raised as a run's loop ended with its goal reached: it is
    recorded as :meth:`StopSignals.late` (the run is saved as finished, the exit code says it was
    stopped). False (nothing changed) when ``exc`` was not the CLI handler's first signal."""
    handler = _handler
    # any KeyboardInterrupt once the handler raised its first: Ray turns the Terminated raised inside
    # ray.get into a plain KeyboardInterrupt
    if handler is None or not handler.delivered or not _main_thread() or isinstance(exc, Aborted):
        return False
    handler.delivered = False
    if not handler.announced:
        print(f"janus: {handler.first} received as the run reached its budget: the run is saved as finished, "
              f"then janus stops", file=sys.stderr, flush=True)
    return True
