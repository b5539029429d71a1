"""From a request to a finished command with an exit code (:func:`run_request`): a stop signal or an
error becomes one line and a code.

The command line (:mod:`janus.cli`) and a seed's process of ``janus train --seeds``
(:mod:`janus.harness.seeds.child`) run requests here; :func:`janus.train` raises what the command prints.
"""

from __future__ import annotations

import atexit
import os
import sys
import threading
import traceback
from collections.abc import Callable
from typing import NoReturn

from janus import timeline
from janus.config import RunConfig
from janus.config.build import in_callers_words
from janus.config.request import RunRequest
from janus.errors import JanusError
from janus.stopping import Aborted, StopSignals, Terminated

DEBUG_ENV = "JANUS_DEBUG"
"""Set to 1: an error's traceback is printed above its one line (``janus train --verbose`` too)."""


def stopped_by(exc: KeyboardInterrupt) -> str:
    """The signal behind an interrupt: SIGINT for Ctrl-C, else the one :class:`Terminated` names."""
    return exc.args[0] if isinstance(exc, (Terminated, Aborted)) and exc.args else "SIGINT"


def exit_code(signal_name: str) -> int:
    """The exit code of a command stopped by ``signal_name``: 130 for SIGINT, else 143."""
    return 130 if signal_name == "SIGINT" else 143


def wants_traceback(verbose: bool) -> bool:
    """Whether the error's traceback is printed: ``verbose`` or ``JANUS_DEBUG=1``."""
    return verbose or os.environ.get(DEBUG_ENV, "") not in ("", "0")


def exit_code_of(command: str, work: Callable[[], int], signals: StopSignals | None, verbose: bool = False,
                 words: Callable[[JanusError], JanusError] = lambda exc: exc) -> int:
    """Run ``work`` (the command ``janus <command>``) under the stop-signal handler ``signals``
    (installed by the caller; None in another thread); returns its exit code. A :class:`JanusError`
    is one line (``words``: in the caller's words) and exit code 2; any other error too, naming it as
    unexpected; a stop signal exits 130 or 143."""
    try:
        code = _errors_as_lines(command, work, verbose, words)
    except KeyboardInterrupt as exc:
        by = stopped_by(exc)
        if by == "SIGINT" and signals is not None and signals.first is not None:
            by = signals.first  # the signal itself: Ray turns a Terminated raised inside ray.get into a KeyboardInterrupt
        what = "aborted without saving" if isinstance(exc, Aborted) else "interrupted"
        print(f"janus {command}: {what}{'' if by == 'SIGINT' else f' by {by}'}", file=sys.stderr)
        return exit_code(by)
    late = signals.late() if signals is not None else None
    if late is None or code != 0:
        return code
    what = ("the run had reached its budget: its results (status finished) and its final checkpoint are written"
            if command == "train" else "every configuration had finished: the results (status finished) are written")
    print(f"janus {command}: {late} came as the run ended; {what}; exit code {exit_code(late)} as for any "
          f"{late}", file=sys.stderr)
    return exit_code(late)


def _errors_as_lines(command: str, work: Callable[[], int], verbose: bool,
                     words: Callable[[JanusError], JanusError]) -> int:
    """``work()``; a :class:`JanusError` is printed and exits 2."""
    try:
        return work()
    except JanusError as exc:
        if exc.__cause__ is not None and wants_traceback(verbose):  # the user's code behind it (an --algo module ...)
            traceback.print_exception(exc.__cause__)
        print(f"janus {command}: error: {words(exc)}", file=sys.stderr)
        return 2
    except Exception as exc:  # noqa: BLE001 - the user's code (an algorithm's learner, an env) or a bug: one line
        if wants_traceback(verbose):
            traceback.print_exception(exc)
        from janus.user_code import described

        print(f"janus {command}: error: {described(exc)} (an unexpected error; its traceback: "
              f"{'' if command != 'train' else '--verbose or '}{DEBUG_ENV}=1)", file=sys.stderr)
        return 2


def run_request(request: RunRequest, signals: StopSignals | None, cfg: RunConfig | None = None) -> int:
    """Run ``request`` as ``janus`` runs a command, returning its exit code (:func:`exit_code_of`). A seed's
    run of ``janus train --seeds`` starts here with its request and its checked configuration ``cfg``
    (:mod:`janus.harness.seeds.child`); without ``cfg`` it is made from the request."""
    def work() -> int:
        timeline.mark("command")
        from janus.harness.commands import run_command

        if request.seeds is not None:  # janus train --seeds: a run per seed, then their aggregate
            from janus.harness.seeds.runs import run_seeds

            return run_seeds(request)
        from janus.harness.configured import configured

        checked = configured(request) if cfg is None else cfg
        timeline.mark("configured")
        return run_command(request, checked)

    return exit_code_of(request.command, work, signals, request.verbose, lambda exc: in_callers_words(exc, request))


def exit_now(code: int) -> NoReturn:
    """End the ``janus`` command's process with ``code``: the exit functions run (``atexit``:
    multiprocessing's children, Ray, logging) and the output is flushed, as at any exit, but the
    interpreter's teardown of its modules is skipped: with torch, Numba and matplotlib loaded it
    takes 1-2 s after the last result is written, for nothing a finished command needs. While a
    thread other than the main one that the interpreter would wait for still runs, it exits as usual."""
    main = threading.main_thread()
    if any(t is not main and not t.daemon and t.is_alive() for t in threading.enumerate()):
        sys.exit(code)
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed pipe (janus train | head): nothing more can be said
            pass
    os._exit(code)
