"""A run's rows of training scalars: the learner's metric sums the Trainer reports with its counts,
averaged into one row at most every ``interval_s`` (and at the stop), beside the run's counts and
the workers' latest actor metrics. The Orchestrator keeps one (:attr:`Orchestrator.scalars`)."""

from __future__ import annotations

import time

from janus.runtime.messages import TrainerCounts


class TrainingScalars:
    """Rows of training scalars (a resumed run's earlier rows first) and the sums since the last row."""

    def __init__(self, interval_s: float, rows: list[dict[str, float]]) -> None:
        self.interval_s = interval_s
        self.rows = rows
        self._sums: dict[str, float] = {}
        self._updates = 0
        self.closed_at = time.monotonic()  # when the last row was closed (or the run started)

    def add(self, counts: TrainerCounts) -> None:
        """Add the metric sums of one Trainer report."""
        if counts.metric_updates:
            self._updates += int(counts.metric_updates)
            for name, value in counts.metric_sums.items():
                self._sums[name] = self._sums.get(name, 0.0) + float(value)

    @property
    def due(self) -> bool:
        """A row is due: ``interval_s`` passed since the last one."""
        return time.monotonic() - self.closed_at >= self.interval_s

    def close_row(self, head: dict[str, float], actor: dict[str, float]) -> None:
        """Append ``head`` (wall_s, env_steps, updates), the means since the last row and ``actor``
        (the actors' metrics) as a row, if any update reported since."""
        self.closed_at = time.monotonic()
        if not self._updates:
            return
        row = dict(head)
        row.update({k: v / self._updates for k, v in self._sums.items()})
        row.update(actor)
        self.rows.append(row)
        self._sums, self._updates = {}, 0
