"""The actor end of Dual-End Staging: :class:`ActorBuffer`, a bounded FIFO of rollout pieces.

A full queue blocks the producer (backpressure) until space frees up or its timeout expires; the
collection stage takes pieces once a collection unit is staged (and the rate limiter admits it).
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable
from typing import Any

from janus.buffer.staging.bounded_queue import BoundedQueue
from janus.errors import PipelineClosedError


class ActorBuffer(BoundedQueue[Any]):
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
