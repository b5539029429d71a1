"""When the collection stage runs: :class:`Collector` writes the staged pieces the rate limiter admits.

Collection writes a unit (``g_collect`` pieces off-policy; on-policy ``g_collect`` of a rollout)
only once the limiter admits it; held-back pieces stay staged, so the bounded ActorBuffer fills and
``put`` blocks: the backpressure actors feel. :class:`~janus.buffer.pipeline.JanusBuffer` calls it
inline (``overlap_collect=0``: from ``put``, ``get`` and ``flush``) or from its collector thread
(``overlap_collect=1``); what a collection does to the data is
:class:`~janus.buffer.staging.collection.CollectionOp`'s.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from janus.buffer.pacing.queue_limiter import QueueLimiter
from janus.buffer.pacing.rate_limiter import RateLimiter
from janus.buffer.stage_stats import StageStats
from janus.buffer.staging.actor_buffer import ActorBuffer
from janus.buffer.staging.collection import CollectionOp
from janus.errors import BufferInputError, ConfigError


class Collector:
    """Takes from the ActorBuffer what the rate limiter admits and runs the collection on it.

    Args:
        staged: the ActorBuffer; its items are ``(piece, version, transitions)``.
        collection: the operator that writes pieces to the experience buffer.
        limiter: the buffer's rate limiter (admits inserts; told of each written one).
        unit_pieces, unit_transitions: the collection unit, in pieces (off-policy) or in
            transitions (on-policy, with a queue limiter); the other is None.
        stats, stats_lock: the buffer's stage counters (``collect_*``) and the lock they are kept under.
    """

    def __init__(self, staged: ActorBuffer, collection: CollectionOp, limiter: RateLimiter, unit_pieces: int | None,
                 unit_transitions: int | None, stats: StageStats, stats_lock: threading.Lock) -> None:
        self.staged = staged
        self.collection = collection
        self.limiter = limiter
        self._unit_pieces = unit_pieces
        self._unit_transitions = unit_transitions
        self._stats = stats
        self._stats_lock = stats_lock
        self.lock = threading.Lock()  # one collection at a time (JanusBuffer.snapshot holds it too)
        self._unit_too_large = False  # the last unit offered could never be admitted whole (see collect_staged)

    def threshold(self) -> tuple[int | None, int | None]:
        """``(pieces, transitions)`` a collection waits for now: the unit (on-policy, at most what
        the queue's current item still takes)."""
        q = self.limiter
        if not isinstance(q, QueueLimiter):
            return self._unit_pieces, None
        assert self._unit_transitions is not None  # on-policy: set with the queue
        return None, min(self._unit_transitions, q.remaining_in_item())

    def collect_staged(self, block: bool) -> None:
        """Collect staged pieces the rate limiter admits.

        ``block=True`` (the background collector) waits for one collection unit to be staged and
        for the limiter to admit it, *outside* the collect lock and without taking the pieces (so
        ``flush`` is never locked out, and held-back pieces stay staged: backpressure), then takes
        and writes it; ``block=False`` (inline) collects every complete unit the limiter admits now.
        A unit of several pieces more than the ratio could ever admit whole (``g_collect`` pieces
        worth more than ``error_buffer``) is written a piece at a time; only a single piece that
        large is an error.
        """
        if block:
            threshold = self.threshold()
            n = self.staged.wait_unit(*threshold)
            if threshold[0] != 1 and self._never_admitted(n):
                threshold = (1, None)
                n = self.staged.wait_unit(*threshold)
            self.limiter.await_can_insert(n)
        while True:
            with self.lock:
                pieces = self.staged.take(*self.threshold(), block=False, admit=self._admit_whole)
                if not pieces and self._unit_too_large:
                    pieces = self.staged.take(1, None, block=False, admit=self._admit)
                if not pieces:
                    return
                self._write(pieces)
            if block:
                return

    def flush(self) -> None:
        """Write every staged piece the limiter admits now, below the collection unit too; pieces
        it holds back stay staged (no wait)."""
        with self.lock:
            while True:  # all staged at once; if the limiter holds that back, piece by piece
                pieces = (self.staged.take(len(self.staged) or 1, None, block=False, admit=self._admit_quiet)
                          or self.staged.take(1, None, block=False, admit=self._admit_quiet))
                if not pieces:
                    return
                self._write(pieces)

    def _admit(self, items: list[Any], n: int) -> bool:
        """Admit (reserve) a collection of staged ``items`` with the limiter, if it allows it now."""
        versions = [v for _, v, _ in items if v is not None]
        return self.limiter.try_insert(n, min(versions) if versions else None)

    def _admit_quiet(self, items: list[Any], n: int) -> bool:
        """As :meth:`_admit`, but False (not an error) for a collection the limiter could never admit."""
        return self.limiter.can_insert(n) and self._admit(items, n)

    def _admit_whole(self, items: list[Any], n: int) -> bool:
        """As :meth:`_admit`; a unit of several pieces the limiter could never admit whole is not
        admitted (and noted: the caller takes one piece instead), never an error."""
        self._unit_too_large = len(items) > 1 and self._never_admitted(n)
        return not self._unit_too_large and self._admit(items, n)

    def _never_admitted(self, n: int) -> bool:
        """Whether an insert of ``n`` transitions is more than the limiter could ever admit."""
        try:
            self.limiter.check_insert(n)
        except (BufferInputError, ConfigError):
            return True
        return False

    def _write(self, items: list[Any]) -> None:
        """Write admitted ``items`` (``(piece, version, transitions)``) and tell the limiter."""
        start = time.perf_counter()
        n = sum(size for _, _, size in items)
        self.collection([piece for piece, _, _ in items])  # a failed write fails the pipeline: never committed
        self.limiter.commit_insert(n)
        with self._stats_lock:
            self._stats.collect_s += time.perf_counter() - start
            self._stats.collect_calls += 1
            self._stats.transitions_collected += n
