"""A dependency-free progress line for long runs (rewritten in place on a terminal)."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TextIO

if TYPE_CHECKING:
    from janus.runtime.status import RunStatus


class ProgressLine:
    """Shows ``label  done/total  pct  elapsed  rate`` at most every ``interval`` seconds (the
    elapsed time from construction, the rate from the first call).

    On a terminal the line is redrawn in place; elsewhere (logs, CI, a batch job) a line is printed
    every quarter of the work, and at least every ``log_interval`` seconds while the run goes, so
    logs stay short yet a long run never goes silent for a quarter of its hours.
    """

    def __init__(self, label: str, unit: str = "updates", stream: TextIO | None = None, interval: float = 0.25,
                 log_interval: float = 60.0) -> None:
        self.label = label
        self.unit = unit
        self.stream = stream or sys.stderr
        self.interval = interval
        self.log_interval = log_interval
        self.tty = self.stream.isatty()
        self.start = time.perf_counter()
        self._last = 0.0
        self._last_line = self.start  # when a log line was last written (not on a terminal)
        self._next_quarter = 0.25
        self._shown_total = False
        self.note = ""
        self.quiet = False
        """Not drawn (a ``janus.Progress`` callback prints the progress instead); events and the
        final line still are."""
        # done at the first call, and when: the rate counts from there, so neither a resumed run's
        # earlier work nor the start-up before the first report (spawning workers) lowers it
        self.first_done: int | None = None
        self.first_at: float | None = None

    def __call__(self, done: int, total: int, note: str = "") -> None:
        self.note = note
        now = time.perf_counter()
        if self.first_done is None:
            self.first_done, self.first_at = done, now
        if self.quiet:
            return
        frac = done / total if total else 1.0
        if self.tty:
            if now - self._last < self.interval and done < total:
                return
            self._last = now
            self.stream.write("\r" + self._text(done, total, now) + "   ")
        elif (frac >= self._next_quarter or (done == total and not self._shown_total)
              or (now - self._last_line >= self.log_interval and not self._shown_total)):
            while self._next_quarter <= frac:
                self._next_quarter += 0.25
            self._last_line = now
            self._shown_total = done >= total  # once at 100%: the learner may still be finishing
            self.stream.write(self._text(done, total, now) + "\n")
        self.stream.flush()

    def _text(self, done: int, total: int, now: float) -> str:
        elapsed = now - self.start  # shown: the wall clock of this configuration, start-up included
        rate = self.rate(done, now)
        pct = 100.0 * done / total if total else 100.0
        text = f"{self.label:<28} {done:>6}/{total:<6} {self.unit} {pct:5.1f}%  {elapsed:6.1f}s  {rate:8.1f} {self.unit}/s"
        return f"{text}  {self.note}" if self.note else text

    def rate(self, done: int, now: float) -> float:
        """Units per second since the first call (0 before there is a rate)."""
        running = now - (self.start if self.first_at is None else self.first_at)
        return (done - (self.first_done or 0)) / running if running > 0 else 0.0

    def event(self, text: str) -> None:
        """Write one line of its own (an evaluation), above the progress line on a terminal."""
        if self.tty:
            self.stream.write("\r" + " " * 100 + "\r")
        self.stream.write(text + "\n")
        self.stream.flush()

    def finish(self, summary: str) -> None:
        """End the progress line with a one-line summary."""
        if self.tty:
            self.stream.write("\r" + " " * 100 + "\r")
        self.stream.write(f"{self.label:<28} {summary}\n")
        self.stream.flush()


class EnvStepProgress(ProgressLine):
    """The progress line of an RL run, in env steps with their rate and the time left:
    ``train  12,288/50,000 env steps 24.6%  3,100 env-steps/s  ETA 12s  return 87.1``."""

    def __init__(self, label: str, stream: TextIO | None = None, interval: float = 0.25,
                 log_interval: float = 60.0) -> None:
        super().__init__(label, "env steps", stream, interval, log_interval)

    def _text(self, done: int, total: int, now: float) -> str:
        rate = self.rate(done, now)
        pct = 100.0 * done / total if total else 100.0
        eta = duration((total - done) / rate) if rate > 0 else "?"
        text = f"{self.label:<28} {done:>9,}/{total:<9,} env steps {pct:5.1f}%  {rate:7,.0f} env-steps/s  ETA {eta:>6}"
        return f"{text}  {self.note}" if self.note else text


def duration(seconds: float) -> str:
    """``12s``, ``3m05s``, ``2h07m``: a time left, as precise as it is worth."""
    s = max(0, round(seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{s % 3600 // 60:02d}m"


def evaluation_line(evaluation: dict[str, Any]) -> str:
    """``eval @ 20,000 env steps: mean return 431.2 ± 35.0 (10 episodes)``."""
    return (f"eval @ {int(evaluation['env_steps']):,} env steps: mean return {float(evaluation['mean_return']):.1f} "
            f"± {float(evaluation.get('std_return', 0.0)):.1f} ({int(evaluation.get('episodes', 0))} episodes)")


class EvaluationLines:
    """An observer of a run (``janus.runtime.run.Observer``) that writes one line per periodic
    evaluation as its result arrives, through ``write`` (e.g. :meth:`ProgressLine.event`).

    ``skip``: evaluations an earlier session of a resumed run already showed."""

    def __init__(self, write: Callable[[str], None], skip: int = 0) -> None:
        self.write = write
        self.shown = skip

    def __call__(self, status: RunStatus, result_so_far: object = None) -> None:
        evaluations = status.evaluations
        for evaluation in evaluations[self.shown:]:
            self.write(evaluation_line(evaluation))
        self.shown = max(self.shown, len(evaluations))
