"""What the Orchestrator knows of worker failures: the errors they raised, and when a worker's
errors amount to a crash loop that restarting cannot cure.

A worker that raises (a bug in an environment, a full ``/dev/shm``) stops answering pings and is
restarted like one that was killed or hung. Restarts cure transient faults; an error that comes
back every time would otherwise turn a run into a loop of restarts that trains on whatever the
short-lived instances produced, and ends "successfully" with no word of the error. So every error
is reported (:attr:`WorkerFaults.errors`, printed by the driver, kept in results.json), and a
worker whose instances raise ``limit`` times in a row, each within ``window_s`` of its start,
fails the run with the error (like systemd's start limit). An instance that ran longer before its
error starts a new count. One that hung (went silent: no pong within the timeout; a stopped
process, a deadlock, an ``env.step`` that never returns) is a fault of the same series
(:meth:`WorkerFaults.record_unresponsive`): an environment that hangs every time stops the run after
``limit`` replacements, not after dozens of them, each leaving a hung thread behind on the local
backend. An instance replaced without an error nor a silence (crashed on purpose by the local
backend's ``kill``) ends the series. A bad setting
(:class:`~janus.errors.ConfigError`, e.g. an environment id a worker process cannot make) comes
back on every restart by definition, so it fails the run at its first occurrence.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

MAX_ERRORS_KEPT = 20  # the newest errors the summary carries (it is polled, also over Ray)


def is_setting_error(error: str) -> bool:
    """Whether a worker's error (as :func:`janus.runtime.component.error_text` reports it, in any
    process) is a :class:`~janus.errors.ConfigError`: reported by its message, as
    ``"<class name>: <message>"``."""
    from janus.errors import ConfigError

    names, todo = set(), [ConfigError]
    while todo:
        cls = todo.pop()
        names.add(cls.__name__)
        todo.extend(cls.__subclasses__())
    return error.split(":", 1)[0] in names


def last_line(text: str) -> str:
    """The exception line of a traceback (or the whole one-line message)."""
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[-1].strip() if lines else "an error without a message"


@dataclass
class WorkerFaults:
    """Worker errors and crash-loop detection (see the module docstring).

    Args:
        limit: errors in a row that fail the run (0: restart forever, even on a bad setting).
        window_s: an instance that raised within this many seconds of its start counts towards
            ``limit``; a later error counts as the first of a new series.
    """

    limit: int = 3
    window_s: float = 60.0
    errors: list[dict[str, Any]] = field(default_factory=list)  # the newest MAX_ERRORS_KEPT
    total: int = 0
    first_traceback: str | None = None
    in_a_row: dict[str, int] = field(default_factory=dict)
    unresponsive_total: int = 0  # instances replaced for not answering pings (no error to report)
    notices: list[dict[str, Any]] = field(default_factory=list)  # the newest MAX_ERRORS_KEPT of both, in order
    notices_total: int = 0

    def record(self, worker: str, error: str | None, lived_s: float, at_s: float) -> str | None:
        """A worker instance was replaced; ``error`` is its traceback or how it died (None: it hung).

        Returns the run's failure message once the worker is in a crash loop or stopped on a bad
        setting, else None."""
        if error is None:
            self.in_a_row[worker] = 0
            return None
        self.total += 1
        self.first_traceback = self.first_traceback or error
        n = self._in_series(worker, lived_s)
        verdict = None
        if self.limit and is_setting_error(error):
            verdict = f"worker {worker!r} stopped on a setting, which restarting it cannot fix:\n{error.rstrip()}"
        elif self.limit and n >= self.limit:
            verdict = (f"worker {worker!r} raised an error {n} times in a row, each within {self.window_s:g}s of "
                       f"its (re)start, so restarting it does not help; its last error:\n{error.rstrip()}")
        entry = {"worker": worker, "at_s": round(at_s, 3), "lived_s": round(lived_s, 3),
                 "error": last_line(error), "in_a_row": n, "stopped_run": verdict is not None}
        self.errors.append(entry)
        del self.errors[:-MAX_ERRORS_KEPT]
        self._notice({"kind": "error", **entry})
        return verdict

    def record_unresponsive(self, worker: str, silent_s: float, lived_s: float, at_s: float) -> str | None:
        """A worker instance that did not answer pings for ``silent_s`` (a stopped or hung process,
        an ``env.step`` that does not return) was replaced: a notice to announce, and a fault of the
        crash-loop series when it went silent within ``window_s`` of its start (``lived_s`` minus
        the silence: the time it worked). Returns the run's failure message once ``limit`` such
        faults (errors or hangs) come in a row, else None."""
        self.unresponsive_total += 1
        n = self._in_series(worker, max(0.0, lived_s - silent_s))  # the time it worked before going silent
        verdict = None
        if self.limit and n >= self.limit:
            verdict = (f"worker {worker!r} failed {n} times in a row, each within {self.window_s:g}s of its (re)start, "
                       f"the last by not answering a ping for {silent_s:.1f}s (hung: an environment step that does "
                       f"not return?), so restarting it does not help")
        self._notice({"kind": "unresponsive", "worker": worker, "at_s": round(at_s, 3), "lived_s": round(lived_s, 3),
                      "silent_s": round(silent_s, 3), "in_a_row": n, "stopped_run": verdict is not None})
        return verdict

    def _in_series(self, worker: str, worked_s: float) -> int:
        """Count a fault of ``worker``'s instance that worked ``worked_s``: the next of its series if
        within ``window_s`` of its start, else the first of a new one. Returns its place."""
        n = self.in_a_row.get(worker, 0) + 1 if worked_s <= self.window_s else 1
        self.in_a_row[worker] = n
        return n

    def _notice(self, entry: dict[str, Any]) -> None:
        self.notices.append(entry)
        del self.notices[:-MAX_ERRORS_KEPT]
        self.notices_total += 1

    def summary(self) -> dict[str, Any]:
        return {"total": self.total, "recent": list(self.errors), "first_traceback": self.first_traceback,
                "unresponsive_total": self.unresponsive_total, "notices": list(self.notices),
                "notices_total": self.notices_total}
