"""A FIFO bounded by a total size and closeable with an error: what both staging ends are built on.

Closed with an error, every blocked or later call raises that error (with its original traceback),
so a failure in a background thread never turns into a silent hang.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Generic, TypeVar

from janus.errors import PipelineClosedError, StagingTimeout

T = TypeVar("T")


class BoundedQueue(Generic[T]):
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
