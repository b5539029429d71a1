"""When the selection stage runs, and what it costs: :class:`Selector` stages one bundle of batches.

:class:`~janus.buffer.pipeline.JanusBuffer` calls it inline from the learner's ``get``
(``overlap_select=0``) or from its selector thread (``overlap_select=1``). What a selection does to
the data is :class:`~janus.buffer.staging.selection.SelectionOp`'s; what it may read, the rate
limiter's.
"""

from __future__ import annotations

import threading
import time

from janus.buffer.pacing.rate_limiter import RateLimiter
from janus.buffer.stage_stats import StageStats
from janus.buffer.staging.learner_buffer import LearnerBuffer
from janus.buffer.staging.selection import SelectionOp


class Selector:
    """Runs the selection operator once per call and stages its bundle in the LearnerBuffer, timed.

    Args:
        selection: the operator that picks, gathers and moves the batches.
        learner_buffer: where the bundle is staged for the learner's ``get``.
        limiter: the buffer's rate limiter (its sample wait is not counted as selection time).
        stats, stats_lock: the buffer's stage counters (``select_*``) and the lock they are kept under.
    """

    def __init__(self, selection: SelectionOp, learner_buffer: LearnerBuffer, limiter: RateLimiter,
                 stats: StageStats, stats_lock: threading.Lock) -> None:
        self.selection = selection
        self.learner_buffer = learner_buffer
        self.limiter = limiter
        self._stats = stats
        self._stats_lock = stats_lock

    def select_once(self, inline: bool, deadline: float | None = None) -> None:
        """Select one bundle (waiting for the limiter's grant until ``deadline``) and stage it.

        Its time less the grant's wait is spread over its batches, counted in ``select_s`` when the
        learner takes them; ``inline`` (the learner's own call) counts the wait as the learner's."""
        start = time.perf_counter()
        wait_before = self.limiter.sample_wait_s
        bundle = self.selection(deadline)
        waited = self.limiter.sample_wait_s - wait_before
        spent = time.perf_counter() - start - waited
        for pending in bundle:  # counted in select_s when the learner takes the batch
            pending.select_s = spent / max(len(bundle), 1)
        with self._stats_lock:
            self._stats.select_ahead_s += spent
            self._stats.select_calls += 1
            self._stats.batches_selected += len(bundle)
            if inline:
                self._stats.learner_wait_s += waited
        self.learner_buffer.put(bundle)
