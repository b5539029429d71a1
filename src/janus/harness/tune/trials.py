"""A trial of ``janus tune``: one run of a configuration, bounded by a deadline (:func:`deadline`)
at which it stops cleanly and is measured on what it did (:func:`run_trial`), on a backend whose
worker processes fork from a server that imported torch and janus once (:func:`trial_backend`)."""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import signal
import threading
from collections.abc import Callable, Iterator
from typing import Any

from janus import stopping
from janus.config import RunConfig
from janus.runtime.backends.base import Backend
from janus.runtime.run import run_runtime
from janus.runtime.synchronous import on_synchronous_loop, run_sync_loop


class TrialDeadline(stopping.StopRequested):
    """A tune trial reached its deadline: it stops as a callback's stop does (clean shutdown), and
    is measured on what it did."""


class TrialTimedOut(RuntimeError):
    """A tune trial reached its deadline before its run started (start-up took all its time)."""


@contextlib.contextmanager
def deadline(seconds: float) -> Iterator[list[TrialDeadline]]:
    """Raise :class:`TrialDeadline` in the main thread after ``seconds``, inside a run's start-up
    or poll loop (:func:`janus.stopping.interruptible`, where it stops the run cleanly), else
    retry every 0.1 s until the block ends (never into the tune's own code). Yields the list of
    what it raised. In another thread (no signals there) nothing is bounded."""
    raised: list[TrialDeadline] = []
    if threading.current_thread() is not threading.main_thread() or seconds == float("inf"):
        yield raised
        return

    def alarm(signum: int, frame: object) -> None:
        if stopping.in_interruptible():
            raised.append(TrialDeadline())
            raise raised[-1]
        signal.setitimer(signal.ITIMER_REAL, 0.1)  # saving, or between runs: try again

    previous = signal.signal(signal.SIGALRM, alarm)
    signal.setitimer(signal.ITIMER_REAL, max(seconds, 0.01))
    try:
        yield raised
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


FORKSERVER_PRELOAD = ["torch", "gymnasium", "janus.runtime.worker", "janus.runtime.backends.process", "janus.envs"]
"""What the tune's fork server imports once, so that a process trial's workers start without
importing them again (``spawn`` imports torch in every worker of every trial)."""


def trial_backend(cfg: RunConfig) -> Backend | None:
    """The backend a tune trial of ``cfg`` (resolved) runs on: for ``process``, workers forked from
    a server that imported torch and janus once for the whole tune (measured on the 2-core VM:
    0.4-0.9 s a trial's start-up instead of 4-8 s); None (the run's own) otherwise, or where
    ``forkserver`` does not exist (Windows). A worker's steady state is the same either way."""
    if cfg.runtime.backend != "process" or "forkserver" not in mp.get_all_start_methods():
        return None
    from janus.runtime.backends.process import ProcessBackend

    mp.set_forkserver_preload(FORKSERVER_PRELOAD)
    backend = ProcessBackend(cfg)
    backend.ctx = mp.get_context("forkserver")  # type: ignore[assignment]  # the same Process and Pipe
    return backend


RATES = ("samples_per_s", "env_steps_per_s")
"""The throughputs a trial hands back, by the names a run's result may give them."""


def is_deadline(exc: KeyboardInterrupt, raised: list[TrialDeadline]) -> bool:
    """Whether ``exc`` is the trial's deadline, not a stop signal (Ctrl-C, SIGTERM: those stop the tune).
    Ray turns an exception raised inside ray.get into a plain KeyboardInterrupt: one after the
    deadline fired, with no stop signal received, is the deadline."""
    if stopping.signalled() or not raised:
        return False
    return exc is raised[-1] or type(exc) is KeyboardInterrupt


def run_within(allowed_s: float, start_run: Callable[[], Any],
               stops: tuple[type[stopping.StopRequested], ...] = ()) -> tuple[Any, str | None]:
    """``start_run()`` (a run), stopped at ``allowed_s`` seconds: its result and how it ended early
    (``cut`` at the deadline, ``stopped`` by one of ``stops`` raised in its poll loop, None: it did
    not), a run stopped early being measured on what it did. A stop signal (Ctrl-C, SIGTERM) is
    raised on, never taken for the deadline; a run that did not start in time is :class:`TrialTimedOut`."""
    with deadline(allowed_s) as raised:
        try:
            return start_run(), None
        except stops as exc:
            result = getattr(exc, "partial_result", None)
            if result is None:
                raise
            return result, "stopped"
        except KeyboardInterrupt as exc:
            if not is_deadline(exc, raised):
                raise
            result = getattr(exc, "partial_result", None)
            if result is None:
                raise TrialTimedOut(f"did not start within its {allowed_s:.1f}s") from None
            return result, "cut"


def run_trial(cfg: RunConfig, allowed_s: float) -> dict[str, Any]:
    """One tune trial, stopped at ``allowed_s`` seconds and then measured on what it did
    (``cut``: True). A stop signal (Ctrl-C, SIGTERM) is raised on, never taken for the deadline."""
    result, early = run_within(allowed_s, lambda: run_sync_loop(cfg) if on_synchronous_loop(cfg)
                               else run_runtime(cfg, backend=trial_backend(cfg)))
    cut = early == "cut"
    rates = {key: result.get(key) for key in RATES if result.get(key) is not None}  # whichever the result names
    return {**rates, "wall_s": result["wall_s"], "final_mean_return": result.get("final_mean_return"), "cut": cut}
