"""Staging at both ends of the data path.

* :class:`ActorBuffer` — producer side: a bounded FIFO of rollout pieces. A full queue blocks the
  producer (backpressure) until space frees up or its timeout expires.
* :class:`LearnerBuffer` — consumer side: a bounded FIFO of selected bundles (lists of batches);
  ``get()`` hands the learner one batch at a time.

Both can be closed with an error: every blocked or later call then raises that error (with its
original traceback), so a failure in a background thread never turns into a silent hang.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any, Generic, TypeVar

from janus.errors import JanusError, PipelineClosedError

T = TypeVar("T")


class StagingTimeout(JanusError, TimeoutError):
    """A blocking staging call did not complete within its timeout."""


class _BoundedQueue(Generic[T]):
    """A FIFO bounded by a total ``size`` (items weigh what the caller says), closeable with an error."""

    def __init__(self, max_size: int, name: str) -> None:
        self.max_size = max_size
        self.name = name
        self._items: deque[tuple[T, int]] = deque()
        self._size = 0
        self._cond = threading.Condition()
        self._closed = False
        self._error: BaseException | None = None

    def _raise_if_failed(self) -> None:
        if self._error is not None:
            raise self._error
        if self._closed:
            raise PipelineClosedError(f"{self.name} is closed")

    def _wait(self, ready: Callable[[], bool], timeout: float | None, what: str) -> float:
        """Wait until ``ready()`` (under the lock); return seconds waited. Raises on close/timeout."""
        if ready():
            return 0.0
        start = time.perf_counter()
        deadline = None if timeout is None else start + timeout
        while not ready():
            if self._error is not None or self._closed:
                self._raise_if_failed()
            remaining = None if deadline is None else deadline - time.perf_counter()
            if remaining is not None and remaining <= 0:
                raise StagingTimeout(f"{self.name}: timed out after {timeout:.3g}s waiting to {what}")
            self._cond.wait(remaining)
        return time.perf_counter() - start

    def put(self, item: T, size: int = 1, timeout: float | None = None) -> float:
        """Append ``item``; block while the queue is full. Returns the seconds spent blocked.

        An item larger than the whole bound is accepted into an empty queue, so it cannot deadlock.
        """
        with self._cond:
            self._raise_if_failed()
            blocked = self._wait(
                lambda: self._size == 0 or self._size + size <= self.max_size, timeout, "put (queue full)"
            )
            self._raise_if_failed()
            self._items.append((item, size))
            self._size += size
            self._cond.notify_all()
            return blocked

    def close(self, error: BaseException | None = None) -> None:
        """Refuse further puts; wake every waiter. With ``error``, waiters and later calls raise it."""
        with self._cond:
            self._closed = True
            if error is not None and self._error is None:
                self._error = error
            self._cond.notify_all()

    @property
    def closed(self) -> bool:
        return self._closed

    def __len__(self) -> int:
        return len(self._items)

    @property
    def size(self) -> int:
        return self._size


class ActorBuffer(_BoundedQueue[Any]):
    """Producer-side staging of rollout pieces, bounded in pieces (backpressure when full).

    ``min_transitions``: a put never blocks while fewer transitions than this are staged. Set it to
    the collector's transition threshold, so a piece bound smaller than the pieces one collection
    needs cannot deadlock (the collector waiting for transitions, the actors for room).
    """

    def __init__(self, max_pieces: int, min_transitions: int = 0) -> None:
        super().__init__(max_pieces, "ActorBuffer")
        self.min_transitions = min_transitions
        self._transitions = 0

    def put(self, item: Any, size: int = 1, timeout: float | None = None) -> float:
        """Stage one rollout piece of ``size`` transitions; blocks while ``max_pieces`` are queued
        (and at least ``min_transitions`` transitions)."""
        with self._cond:
            self._raise_if_failed()
            blocked = self._wait(self.has_room, timeout, "put (queue full)")
            self._raise_if_failed()
            self._items.append((item, size))
            self._transitions += size
            self._cond.notify_all()
            return blocked

    def has_room(self) -> bool:
        """Whether a put would not block now (lock held or not: a hint that may change at once)."""
        return len(self._items) < self.max_size or self._transitions < self.min_transitions

    def wait_room(self, timeout: float) -> bool:
        """Wait at most ``timeout`` seconds for a put not to block; False if it still would (no
        exception: a caller that polls for room pays no raise per poll). Raises if closed."""
        with self._cond:
            deadline = time.perf_counter() + timeout
            while not self.has_room():
                self._raise_if_failed()
                remaining = deadline - time.perf_counter()
                if remaining <= 0:
                    return False
                self._cond.wait(remaining)
            return True

    @property
    def transitions(self) -> int:
        """Transitions currently staged."""
        return self._transitions

    def take(self, pieces: int | None, transitions: int | None, block: bool = True, timeout: float | None = None,
             admit: Callable[[list[Any], int], bool] | None = None) -> list[Any]:
        """Remove pieces once ``pieces`` pieces or ``transitions`` transitions are staged.

        Non-blocking (``block=False``) returns ``[]`` when the threshold is not met. After a plain
        close (no error) the remaining pieces are drained, even below the threshold, so nothing
        staged is ever lost; an empty closed queue raises :class:`PipelineClosedError`.
        ``admit`` (non-blocking takes only): called with the pieces and transitions a take would
        remove; when it says False nothing is removed and ``[]`` is returned (the rate limiter holds
        them back). It runs under this queue's lock, so what it admits is what is removed.
        """
        with self._cond:
            if admit is not None:
                assert not block, "admit is for non-blocking takes"
                count, total = self._would_pop(pieces, transitions)
                if not count or not admit([item for item, _ in itertools.islice(self._items, count)], total):
                    return []
                return self._pop(count, None)
            return self._take(pieces, transitions, block, timeout)

    def _take(self, pieces: int | None, transitions: int | None, block: bool, timeout: float | None) -> list[Any]:

        def enough() -> bool:
            if pieces is not None:
                return len(self._items) >= pieces
            return self._transitions >= (transitions or 1)

        with self._cond:
            if self._error is not None:
                raise self._error
            if not enough():
                if not block:
                    return []
                if self._closed and self._items:
                    return self._pop(len(self._items), None)
                try:
                    self._wait(lambda: enough() or self._closed, timeout, "take rollouts")
                except PipelineClosedError:
                    pass
                if self._error is not None:
                    raise self._error
                if not enough():
                    if self._items:
                        return self._pop(len(self._items), None)
                    raise PipelineClosedError("ActorBuffer is closed and empty")
            return self._pop(pieces, transitions)

    def wait_unit(self, pieces: int | None, transitions: int | None, timeout: float | None = None) -> int:
        """Wait until a take of this threshold would remove pieces, and return the transitions it
        would remove (removing nothing). After a plain close the remainder counts as a unit; closed
        and empty raises :class:`PipelineClosedError`, closed with an error raises that error."""
        with self._cond:
            try:
                self._wait(lambda: self._closed or self._would_pop(pieces, transitions)[0] > 0, timeout, "take rollouts")
            except PipelineClosedError:
                pass
            if self._error is not None:
                raise self._error
            count, total = self._would_pop(pieces, transitions)
            if not count:
                raise PipelineClosedError("ActorBuffer is closed and empty")
            return total

    def _would_pop(self, pieces: int | None, transitions: int | None) -> tuple[int, int]:
        """``(pieces, transitions)`` a non-blocking take would remove now; ``(0, 0)`` below the threshold."""
        if self._error is not None:
            raise self._error
        enough = len(self._items) >= pieces if pieces is not None else self._transitions >= (transitions or 1)
        if not enough:  # after a plain close the rest drains below the threshold
            return (len(self._items), self._transitions) if self._closed else (0, 0)
        count = got = 0
        for _, size in self._items:
            if (count >= pieces) if pieces is not None else (got >= (transitions or 1)):
                break
            count += 1
            got += size
        return count, got

    def _pop(self, pieces: int | None, transitions: int | None) -> list[Any]:
        out: list[Any] = []
        got = 0
        while self._items and (len(out) < pieces if pieces is not None else got < (transitions or 1)):
            item, size = self._items.popleft()
            out.append(item)
            got += size
            self._transitions -= size
        self._cond.notify_all()
        return out


class LearnerBuffer(_BoundedQueue[list]):
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
