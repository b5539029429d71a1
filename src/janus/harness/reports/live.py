"""A run's logs while it trains: :class:`LiveRun`, the observer ``janus`` commands give the runtime.

* TensorBoard (``--tensorboard``) and W&B (``--wandb``, the same scalars): every ``tensorboard_interval_s`` (2 s) the episodes finished,
  the rows of training scalars closed and the evaluations done since the last write are appended to the run's event file
  and flushed, so TensorBoard shows the run as it goes; :meth:`LiveRun.finish` adds the rest and
  the run's totals.
* Results files: every ``results_interval_s`` the run so far is handed to ``save`` (the command
  writes results.json/csv and the curves atomically), so a run folder always holds the run up to
  at most that long ago, even after a crash or a kill.

The tags are those of :mod:`janus.harness.reports.tensorboard`.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from janus.harness.reports.tensorboard import (
    EventWriter,
    ScalarWriter,
    write_episodes,
    write_evaluations,
    write_run_totals,
    write_train_metrics,
)
from janus.result import RunResult, as_dict
from janus.runtime.status import RunStatus


def _columns(curve: list[tuple[float, int, float]]) -> dict[str, list[float]]:
    return {"wall_s": [t for t, _, _ in curve], "env_steps": [s for _, s, _ in curve], "return": [r for _, _, r in curve]}


class LiveRun:
    """Writes TensorBoard scalars and the results files of one run while it trains.

    Args:
        save: writes the results files of a run so far (None: no periodic results).
        results_interval_s: seconds between calls of ``save``.
        tensorboard_dir: where the event file goes (None: no TensorBoard).
        skip_episodes: episodes of the learning curve already logged by an earlier session (resume).
        skip_evaluations: periodic evaluations already logged by an earlier session (resume).
        skip_rows: rows of training scalars already logged by an earlier session (resume).
        tensorboard_interval_s: seconds between appends to the event file (and W&B logs).
        ready: nothing is written while it returns False (a resumed run before its first commit).
        wandb: opens the W&B writer (:class:`janus.harness.reports.wandb_log.WandbWriter`) at the first write (None: no W&B).
    """

    def __init__(self, save: Callable[[RunResult], None] | None, results_interval_s: float = 30.0,
                 tensorboard_dir: str | Path | None = None, skip_episodes: int = 0,
                 tensorboard_interval_s: float = 2.0, skip_evaluations: int = 0,
                 ready: Callable[[], bool] | None = None, skip_rows: int = 0,
                 wandb: Callable[[], ScalarWriter] | None = None) -> None:
        self.save = save
        self.ready = ready
        self.results_interval_s = results_interval_s
        self.tensorboard_interval_s = tensorboard_interval_s
        self.writers: list[ScalarWriter] = []  # opened at the first write (nothing is created before)
        self.closed = False
        self.tensorboard_dir = Path(tensorboard_dir) if tensorboard_dir is not None else None
        tensorboard = self.tensorboard_dir
        self.openers: list[Callable[[], ScalarWriter]] = [
            *([lambda: EventWriter(tensorboard)] if tensorboard is not None else []), *([wandb] if wandb else [])]
        self.episodes_written = skip_episodes
        self.rows_written = skip_rows
        self.evaluations_written = skip_evaluations
        self.run_start: float | None = None  # epoch seconds at the run's (resumed) clock zero
        self.saved_at: float | None = None
        self.logged_at = 0.0
        self.saves = 0

    def __call__(self, status: RunStatus, result_so_far: Callable[[], RunResult]) -> None:
        """Observe one poll of the run (``janus.runtime.run.Observer``)."""
        now = time.monotonic()
        if self.run_start is None:
            self.run_start = time.time() - float(status.elapsed_s)
            self.saved_at = now
        if self.ready is not None and not self.ready():
            return  # a resumed run touches its folder only once it has committed (it catches up then)
        if self.openers and now - self.logged_at >= self.tensorboard_interval_s:
            self.logged_at = now
            self._log(_columns(status.curve), _rows_as_columns(status.train_metrics), status.evaluations)
        if self.save is not None and self.saved_at is not None and now - self.saved_at >= self.results_interval_s:
            self.saved_at = now
            try:
                self.save(result_so_far())
                self.saves += 1
            except Exception as exc:  # noqa: BLE001 - the run goes on; the next period tries again
                print(f"janus: could not write the results so far ({type(exc).__name__}: {exc}); "
                      f"trying again in {self.results_interval_s:g}s", file=sys.stderr, flush=True)

    def _log(self, curve: dict[str, list[float]], metrics: dict[str, list[Any]], evaluations: list[dict[str, Any]]) -> None:
        if not self.writers:
            if self.closed or not self.openers:
                return
            for open_writer in self.openers:
                self.writers.append(open_writer())
        start = self.run_start if self.run_start is not None else time.time()
        episodes, rows, evals = self.episodes_written, self.rows_written, self.evaluations_written
        for writer in self.writers:  # each gets the same scalars from the same place
            episodes = write_episodes(writer, curve, self.episodes_written, start)
            rows = write_train_metrics(writer, metrics, self.rows_written, start)
            evals = write_evaluations(writer, evaluations, self.evaluations_written, start)
            writer.flush()
        self.episodes_written, self.rows_written, self.evaluations_written = episodes, rows, evals

    def finish(self, run: RunResult | dict[str, Any]) -> None:
        """Log what the last polls did not see and the run's totals (its end, or an interrupt), then close."""
        if self.openers and not self.closed:
            run = as_dict(run)
            if self.run_start is None:
                self.run_start = time.time() - float(run.get("wall_s", 0.0))
            self._log(run.get("learning_curve") or {}, run.get("train_metrics") or {}, run.get("evaluations") or [])
            for writer in self.writers:
                write_run_totals(writer, run, time.time())
        self.close()

    def close(self) -> None:
        """Close the event file and finish the W&B run (what was flushed stays readable)."""
        self.closed = True
        writers, self.writers = self.writers, []
        for writer in writers:
            writer.close()


def _rows_as_columns(rows: list[dict[str, float]]) -> dict[str, list[Any]]:
    from janus.runtime.summary import metric_columns

    return metric_columns(rows)
