"""The learner end of Dual-End Staging: :class:`LearnerBuffer`, a bounded FIFO of selected bundles.

Selection puts bundles (lists of batches on the learner device); ``get()`` hands the learner one
batch at a time.
"""

from __future__ import annotations

from collections import deque
from typing import Any

from janus.buffer.staging.bounded_queue import BoundedQueue


class LearnerBuffer(BoundedQueue[list]):
    """Consumer-side staging: bundles of ready batches, bounded in bundles."""

    def __init__(self, max_bundles: int) -> None:
        super().__init__(max_bundles, "LearnerBuffer")
        self._current: deque[Any] = deque()

    def ready(self) -> int:
        """Batches that ``get`` can return without waiting."""
        with self._cond:
            return len(self._current) + sum(len(b) for b, _ in self._items)

    def get(self, timeout: float | None = None) -> tuple[Any, float]:
        """Return ``(batch, seconds waited)``; blocks until a batch is staged."""
        with self._cond:
            if self._error is not None:
                raise self._error
            if self._current:
                return self._current.popleft(), 0.0
            waited = self._wait(lambda: bool(self._items), timeout, "get a batch")
            bundle, _ = self._items.popleft()
            self._size -= 1
            self._cond.notify_all()
            self._current.extend(bundle)
            return self._current.popleft(), waited
