"""The replay's rate limiter: the one object that decides when an insert may be written and when a
sample may be drawn (learned from Reverb's ``RateLimiter``, which its ``Table`` holds).

Two modes, one family (:class:`RateLimiter`):

* :class:`RatioLimiter` (off-policy): a minimum size and a two-sided sample/insert ratio. Inserts are
  counted in *transitions*, samples in *sampled transitions*; the limiter holds

      diff = samples_per_insert * (inserted - min_size_to_sample) - sampled

  within ``[-error_buffer, +error_buffer]``: a batch of ``b`` may be sampled while ``diff - b >=
  -error_buffer`` (and ``min_size_to_sample`` transitions are written), ``n`` transitions may be
  inserted while ``diff + samples_per_insert * n <= error_buffer``. With ``samples_per_insert = 0``
  only the minimum size holds sampling back.
* :class:`~janus.buffer.pacing.queue_limiter.QueueLimiter` (on-policy, asynchronous algorithms): FIFO items,
  each served a set number of times, a capacity in items, staleness bounded by parameter version.

Waits are bounded by deadlines (``time.perf_counter()`` values; past one a wait raises
:class:`~janus.errors.StagingTimeout`); :meth:`RateLimiter.close` wakes every waiter with
:class:`~janus.errors.PipelineClosedError`. An insert is two steps: :meth:`~RateLimiter.await_insert`
admits (reserves) ``n`` transitions, :meth:`~RateLimiter.commit_insert` says they are written, so a
sample never reads what is admitted and not yet stored.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from janus.errors import BufferInputError, ConfigError, PipelineClosedError, StagingTimeout, invalid


@dataclass(frozen=True)
class SampleToInsertRatio:
    """Validated ratio settings (a :class:`RatioLimiter` enforces them).

    Args:
        samples_per_insert: sampled transitions per inserted transition (0: no ratio).
        min_size_to_sample: transitions stored before the first batch is sampled.
        error_buffer: how far ``diff`` may drift either side of 0, in sampled transitions.
        insert_piece: the largest insert, in transitions (one worker piece).
        sample_batch: transitions one sample takes (one learner batch).

    ``error_buffer`` must hold one insert's worth and one batch, or there are states where neither
    side may move (a deadlock): such settings are refused here.
    """

    samples_per_insert: float
    min_size_to_sample: int
    error_buffer: float
    insert_piece: int
    sample_batch: int

    def __post_init__(self) -> None:
        spi = self.samples_per_insert
        if isinstance(spi, bool) or not isinstance(spi, (int, float)) or not math.isfinite(spi) or spi < 0:
            raise invalid("samples_per_insert", spi, "a finite number >= 0 (0: no ratio)")
        for name, low in (("min_size_to_sample", 1), ("insert_piece", 1), ("sample_batch", 1)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise invalid(name, value, f"an integer >= {low}")
        eb = self.error_buffer
        if isinstance(eb, bool) or not isinstance(eb, (int, float)) or not math.isfinite(eb) or eb < 0:
            raise invalid("error_buffer", eb, "a finite number >= 0 (sampled transitions)")
        if spi and eb < self.min_error_buffer:
            raise ConfigError(
                f"invalid error_buffer: got {eb:g} sampled transitions; accepted: at least "
                f"{self.min_error_buffer:g} = max(samples_per_insert x insert_piece = {spi:g} x {self.insert_piece}, "
                f"sample_batch = {self.sample_batch}): a smaller buffer can leave neither a piece insertable "
                f"nor a batch sampleable (a deadlock)"
            )

    @property
    def min_error_buffer(self) -> float:
        """The least ``error_buffer`` that cannot deadlock: one insert's worth and one batch."""
        return max(self.samples_per_insert * self.insert_piece, self.sample_batch)

    @property
    def limits_inserts(self) -> bool:
        """Whether inserts are held back at all (a ratio is set)."""
        return self.samples_per_insert > 0

    def diff(self, inserted: int, sampled: float) -> float:
        """``samples_per_insert * (inserted - min_size_to_sample) - sampled`` (sampled transitions)."""
        return self.samples_per_insert * (inserted - self.min_size_to_sample) - sampled

    def batches_allowed(self, inserted: int) -> int:
        """Batches the ratio allows in all once ``inserted`` transitions are in (ignoring the
        in-flight bound): what a run's workers can ever earn its learner."""
        return math.floor((self.diff(inserted, 0) + self.error_buffer) / self.sample_batch)


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


class RatioLimiter(RateLimiter):
    """Off-policy pacing: ``min_size_to_sample`` written before the first sample, and, with
    ``samples_per_insert > 0``, the sample/insert ratio within ``error_buffer`` (see the module).

    Args:
        min_size_to_sample: transitions written before the first sample (>= 1).
        sample_batch: transitions one batch takes.
        samples_per_insert: sampled transitions per inserted transition (0: no ratio).
        error_buffer: sampled transitions ``diff`` may drift (needed with a ratio).
        max_insert: the largest insert, if known now: settings that could deadlock with it are
            refused here; unknown (None), an insert too large for ``error_buffer`` is refused when it
            comes (:meth:`check_insert`), never left to hang.
        stored: how many transitions the storage holds now, for the minimum size (default: those
            committed here). The JanusBuffer passes its storage's length, so a storage loaded from
            a checkpoint directly (``experience.load_state_dict``) counts before any new insert.
    """

    def __init__(self, min_size_to_sample: int, sample_batch: int, samples_per_insert: float = 0.0,
                 error_buffer: float | None = None, max_insert: int | None = None,
                 stored: Callable[[], int] | None = None) -> None:
        super().__init__()
        self._stored = stored
        if stored is not None:  # the storage may fill without a commit here (a checkpoint loaded into it)
            self._poll_s = 0.1
        if samples_per_insert and error_buffer is None:
            raise ConfigError(f"invalid error_buffer: got None with samples_per_insert={samples_per_insert!r}; "
                              "accepted: a number of sampled transitions >= max(samples_per_insert x largest "
                              "insert, sample batch)")
        self.ratio = SampleToInsertRatio(samples_per_insert, min_size_to_sample,
                                         0.0 if error_buffer is None else error_buffer, max_insert or 1, sample_batch)

    @property
    def min_size_to_sample(self) -> int:
        return self.ratio.min_size_to_sample

    @property
    def stored(self) -> int:
        """Transitions the storage holds, as the minimum size counts them."""
        return self._inserted if self._stored is None else self._stored()

    @property
    def diff(self) -> float:
        """``samples_per_insert * (inserted - min_size_to_sample) - sampled``, now."""
        return self.ratio.diff(self._inserted, self._sampled)

    def check_insert(self, n: int) -> None:
        super().check_insert(n)
        r = self.ratio
        if r.limits_inserts and not self._inserts_finished and r.samples_per_insert * n > r.error_buffer:
            raise ConfigError(
                f"an insert of {n} transitions is worth samples_per_insert x {n} = {r.samples_per_insert * n:g} "
                f"sampled transitions, more than error_buffer={r.error_buffer:g}: the ratio could hold it back "
                f"for ever (a deadlock); accepted: inserts of at most {math.floor(r.error_buffer / r.samples_per_insert)} "
                "transitions (put smaller pieces or fewer per collection, g_collect), or a larger error_buffer"
            )

    def _insert_ready(self, n: int) -> bool:
        r = self.ratio
        if not r.limits_inserts or self._inserts_finished:
            return True
        return r.diff(self._admitted + n, self._sampled) <= r.error_buffer

    def _allowed_batches(self) -> int:
        """Batches a sample may take now (0: none)."""
        r = self.ratio
        if self.stored < r.min_size_to_sample:
            return 0
        if not r.limits_inserts or self._inserts_finished:
            return 1 << 30
        return max(math.floor((self.diff + r.error_buffer) / r.sample_batch), 0)

    def _sample_ready(self, batches: int) -> bool:
        return self._allowed_batches() > 0

    def _sample_blocker(self) -> str:
        r = self.ratio
        if self.stored < r.min_size_to_sample:
            return f"{self.stored} transitions stored, sampling starts at min_size_to_sample={r.min_size_to_sample}"
        return (f"the ratio samples_per_insert={r.samples_per_insert:g} holds sampling back: diff={self.diff:g}, "
                f"error_buffer={r.error_buffer:g}, a batch is {r.sample_batch}")

    def _insert_blocker(self) -> str:
        r = self.ratio
        return (f"the ratio samples_per_insert={r.samples_per_insert:g} holds inserts back until the learner "
                f"samples: diff={r.diff(self._admitted, self._sampled):g}, error_buffer={r.error_buffer:g}")

    def _grant(self, batches: int) -> SampleGrant:
        count = min(batches, self._allowed_batches())
        self._sampled += count * self.ratio.sample_batch
        return SampleGrant(count)
