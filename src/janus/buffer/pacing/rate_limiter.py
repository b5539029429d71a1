"""The replay's rate limiter: the one object that decides when an insert may be written and when a
sample may be drawn (learned from Reverb's ``RateLimiter``, which its ``Table`` holds).

Two modes, one family (:class:`RateLimiter`, here: the locking, the deadline-bounded waits, close
and the wait counters that both share):

* :class:`~janus.buffer.pacing.ratio_limiter.RatioLimiter` (off-policy): a minimum size and a
  two-sided sample/insert ratio (:mod:`janus.buffer.pacing.ratio_limiter`).
* :class:`~janus.buffer.pacing.queue_limiter.QueueLimiter` (on-policy, asynchronous algorithms): FIFO items,
  each served a set number of times, a capacity in items, staleness bounded by parameter version.

Waits are bounded by deadlines (``time.perf_counter()`` values; past one a wait raises
:class:`~janus.errors.StagingTimeout`); :meth:`RateLimiter.close` wakes every waiter with
:class:`~janus.errors.PipelineClosedError`. An insert is two steps: :meth:`~RateLimiter.await_insert`
admits (reserves) ``n`` transitions, :meth:`~RateLimiter.commit_insert` says they are written, so a
sample never reads what is admitted and not yet stored.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from janus.errors import BufferInputError, ConfigError, PipelineClosedError, StagingTimeout, invalid


@dataclass(frozen=True)
class SampleGrant:
    """What :meth:`RateLimiter.await_sample` allowed: ``count`` batches (ratio mode may grant fewer
    than asked, never 0); queue mode also says which ``item`` (its sequence number), which ``serve``
    of it (0 .. serve_times-1) and its ``first`` batch within that serve."""

    count: int
    item: int = 0
    serve: int = 0
    first: int = 0


class RateLimiter:
    """Base of the family: a lock with a condition per side, deadline-bounded waits, close, and wait counters."""

    def __init__(self) -> None:
        self._lock = threading.RLock()
        # one condition per side, so a change wakes only the side it may let go on (a sample grant
        # does not wake the samplers, a written insert not the inserters): fewer thread wake-ups
        # beside a learner that needs the GIL
        self._insert_cond = threading.Condition(self._lock)
        self._sample_cond = threading.Condition(self._lock)
        self._closed = False
        self._inserts_finished = False
        self._admitted = 0  # transitions admitted by await_insert (written or being written)
        self._inserted = 0  # transitions written (commit_insert)
        self._sampled = 0  # sampled transitions
        self._insert_wait_s = 0.0
        self._sample_wait_s = 0.0
        self._learner_version: int | None = None
        self._waiting = {"insert": 0, "sample": 0}  # threads waiting on each side now
        self._insert_sizes: dict[int, int] = {}  # transitions each waiting insert asks -> waiters
        self._poll_s: float | None = None  # re-check this often: a readiness this limiter is not told of

    # ---- read-only counters ------------------------------------------------------------------
    @property
    def inserted(self) -> int:
        """Transitions written."""
        return self._inserted

    @property
    def sampled(self) -> int:
        """Transitions sampled (batches x batch size)."""
        return self._sampled

    @property
    def insert_wait_s(self) -> float:
        """Seconds inserters spent waiting to be admitted."""
        return self._insert_wait_s

    @property
    def sample_wait_s(self) -> float:
        """Seconds samplers spent waiting to be allowed."""
        return self._sample_wait_s

    @property
    def insert_waiters(self) -> int:
        """Threads waiting now for an insert to be admitted."""
        return self._waiting["insert"]

    @property
    def sample_waiters(self) -> int:
        """Threads waiting now for a sample to be granted."""
        return self._waiting["sample"]

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def inserts_finished(self) -> bool:
        return self._inserts_finished

    # ---- the insert side ---------------------------------------------------------------------
    def check_insert(self, n: int) -> None:
        """Raise if an insert of ``n`` transitions could never be admitted (it would hang)."""
        if n < 1:
            raise BufferInputError(f"an insert holds at least 1 transition, got {n}")

    def can_insert(self, n: int) -> bool:
        """Whether ``n`` transitions would be admitted now (False also for one never admitted)."""
        with self._lock:
            try:
                self.check_insert(n)
            except (BufferInputError, ConfigError):
                return False
            return self._insert_ready(n)

    def await_insert(self, n: int, deadline: float | None = None, version: int | None = None) -> float:
        """Wait until ``n`` transitions (acted with parameter ``version``; None: never stale) are
        admitted, and reserve them; returns the seconds waited. Follow with :meth:`commit_insert`."""
        with self._lock:
            self.check_insert(n)
            waited = self._await(lambda: self._insert_ready(n), deadline, f"insert {n} transitions",
                                 self._insert_blocker, side="insert", size=n)
            self._insert_wait_s += waited
            self._admit(n, version)
            self._admitted += n  # admitting makes nothing ready: no one to wake
            return waited

    def await_can_insert(self, n: int, deadline: float | None = None) -> float:
        """Wait until ``n`` transitions would be admitted, without reserving them (a writer that
        must not hold its pieces while it waits follows with :meth:`try_insert`)."""
        with self._lock:
            self.check_insert(n)
            waited = self._await(lambda: self._insert_ready(n), deadline, f"insert {n} transitions",
                                 self._insert_blocker, side="insert", size=n)
            self._insert_wait_s += waited
            return waited

    def try_insert(self, n: int, version: int | None = None) -> bool:
        """Admit and reserve ``n`` transitions if allowed now (False: held back; raises for an insert
        that could never be admitted). Follow an admitted one with :meth:`commit_insert`."""
        with self._lock:
            self.check_insert(n)
            if not self._insert_ready(n):
                return False
            self._admit(n, version)
            self._admitted += n
            return True

    def commit_insert(self, n: int) -> None:
        """``n`` admitted transitions are written: samples may read them now."""
        with self._lock:
            self._inserted += n
            self._sample_cond.notify_all()

    def finish_inserts(self) -> None:
        """No insert will come again (beyond those already staged): sampling is no longer held back
        waiting for one, and the ratio no longer holds the staged ones back (so the last batches of
        a run whose inserts ended short of the ratio are trained). Queue mode: capacity still holds."""
        with self._lock:
            self._inserts_finished = True
            self._wake_all()

    # ---- the sample side ---------------------------------------------------------------------
    def can_sample(self, batches: int = 1) -> bool:
        """Whether a sample of (up to) ``batches`` batches would be allowed now."""
        with self._lock:
            return self._sample_ready(batches)

    def await_sample(self, batches: int, deadline: float | None = None) -> SampleGrant:
        """Wait until a sample is allowed, then count it (as sampled, now) and return the grant."""
        if batches < 1:
            raise invalid("batches", batches, "an integer >= 1")
        with self._lock:
            waited = self._await(lambda: self._sample_ready(batches), deadline, "sample", self._sample_blocker, "sample")
            self._sample_wait_s += waited
            grant = self._grant(batches)
            self._wake_ready_inserters()
            return grant

    def sample_done(self, grant: SampleGrant) -> None:
        """The granted batches are read (copied out of the storage): queue mode may now give their
        room to the next insert. Call it after every grant."""

    def set_learner_version(self, version: int) -> None:
        """The learner's parameter version now (queue mode drops items staler than its bound)."""
        if isinstance(version, bool) or not isinstance(version, int) or version < 0:
            raise invalid("version", version, "an integer >= 0")
        with self._lock:
            self._learner_version = version
            self._wake_all()

    # ---- lifecycle ---------------------------------------------------------------------------
    def close(self) -> None:
        """Wake every waiter with :class:`PipelineClosedError`. Later calls that would have to wait
        raise it at once; those allowed now still go through (closing drains what is admitted)."""
        with self._lock:
            self._closed = True
            self._wake_all()

    def restore(self, inserted: int, sampled: int) -> None:
        """Continue a resumed run from its counts (transitions written and sampled)."""
        for name, value in (("inserted", inserted), ("sampled", sampled)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise invalid(name, value, "an integer >= 0")
        with self._lock:
            self._admitted = self._inserted = inserted
            self._sampled = sampled
            self._restored()
            self._wake_all()

    def state_dict(self) -> dict[str, Any]:
        """The counts a checkpoint keeps (see :meth:`load_state_dict`)."""
        with self._lock:
            return {"inserted": self._inserted, "sampled": self._sampled}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.restore(int(state["inserted"]), int(state["sampled"]))

    def _wake_ready_inserters(self) -> None:
        """Wake the inserters (lock held) if one of them may go on now: a grant that leaves every
        waiting insert held back wakes no thread (a learner sampling often would otherwise wake the
        collector on every grant)."""
        if any(self._insert_ready(n) for n in self._insert_sizes):
            self._insert_cond.notify_all()

    def _wake_all(self) -> None:
        """Wake both sides (lock held): a change either may go on after (close, finish, restore)."""
        self._insert_cond.notify_all()
        self._sample_cond.notify_all()

    # ---- what each mode decides (called under the lock) ---------------------------------------
    def _insert_ready(self, n: int) -> bool:
        raise NotImplementedError

    def _admit(self, n: int, version: int | None) -> None:
        """Book-keeping of an admitted insert (before it is counted in ``_admitted``)."""

    def _sample_ready(self, batches: int) -> bool:
        """Whether a sample may be granted now (at least one batch; queue mode: the whole grant)."""
        raise NotImplementedError

    def _sample_blocker(self) -> str:
        """Why a sample waits, for a timeout's message."""
        return "waiting for data"

    def _insert_blocker(self) -> str:
        """Why an insert waits, for a timeout's message."""
        return "waiting for room"

    def _grant(self, batches: int) -> SampleGrant:
        raise NotImplementedError

    def _restored(self) -> None:
        """Mode state derived from the restored counts."""

    def _await(self, ready: Callable[[], bool], deadline: float | None, what: str,
               why: Callable[[], str] | None = None, side: str = "insert", size: int = 0) -> float:
        """Wait (lock held) until ``ready()``; return seconds waited. Raises on close or deadline
        (the timeout's message says ``why()`` it was still waiting). ``size``: the transitions an
        insert waits for (a grant wakes the inserters only when one of them is ready)."""
        if ready():
            return 0.0
        start = time.perf_counter()
        self._waiting[side] += 1
        if side == "insert":
            self._insert_sizes[size] = self._insert_sizes.get(size, 0) + 1
        try:
            while not ready():
                if self._closed:
                    raise PipelineClosedError(f"{type(self).__name__} is closed")
                remaining = None if deadline is None else deadline - time.perf_counter()
                if remaining is not None and remaining <= 0:
                    because = f" ({why()})" if why is not None else ""
                    raise StagingTimeout(f"{type(self).__name__}: timed out waiting to {what}{because}")
                if self._poll_s is not None:
                    remaining = self._poll_s if remaining is None else min(remaining, self._poll_s)
                (self._insert_cond if side == "insert" else self._sample_cond).wait(remaining)
        finally:
            self._waiting[side] -= 1
            if side == "insert":
                left = self._insert_sizes.pop(size) - 1
                if left:
                    self._insert_sizes[size] = left
        return time.perf_counter() - start
