"""The queue mode of the replay's rate limiter: FIFO items, each served a set number of times.

An *item* is ``item_size`` consecutive transitions, written in insert order; one *serve* of an item
is ``batches_per_item`` batches of ``item_size / batches_per_item`` transitions. Items are served
head first (FIFO); the head is released (its room given to the next insert) once it has been served
``serve_times`` times. At most ``capacity`` items are admitted and not yet released, so the storage
is a ring of ``capacity x item_size`` slots and item ``k`` lives at ``(k % capacity) x item_size``.

* On-policy (PPO): an item is one rollout, served ``num_epochs`` times, ``capacity = 1``: rollout
  ``r+1`` is written only once every minibatch of ``r`` was selected ``num_epochs`` times, and the
  first serve reads a minibatch as soon as its slots are written (the update starts before the
  rollout is complete).
* Asynchronous (IMPALA/APPO): an item is one learner batch, served once, ``capacity`` deep, with
  ``max_staleness``: an item acted with parameter version ``v`` is served only while
  ``learner_version - v <= max_staleness``; a staler item is dropped whole and counted
  (:attr:`QueueLimiter.dropped_items`), never served silently. An item is judged once it is
  completely written (its version is the oldest of its inserts); an item with no version is
  never stale.
"""

from __future__ import annotations

from typing import Any

from janus.buffer.arguments import check_int
from janus.buffer.pacing.rate_limiter import RateLimiter, SampleGrant
from janus.errors import BufferInputError, ConfigError, invalid


class QueueLimiter(RateLimiter):
    """FIFO items served ``serve_times`` each, ``capacity`` items deep, bounded staleness.

    Args:
        item_size: transitions per item (a rollout on-policy).
        batches_per_item: batches one serve of an item takes (``num_minibatches``); divides ``item_size``.
        serve_times: serves of each item (``num_epochs`` on-policy; 1 for IMPALA).
        capacity: items admitted and not yet fully served (>= 1).
        max_staleness: parameter versions an item may lag the learner's (None: no bound).
    """

    def __init__(self, item_size: int, batches_per_item: int = 1, serve_times: int = 1, capacity: int = 1,
                 max_staleness: int | None = None) -> None:
        super().__init__()
        check_int("item_size", item_size, 1)
        check_int("batches_per_item", batches_per_item, 1)
        if item_size % batches_per_item:
            raise ConfigError(f"invalid item_size: got {item_size}; accepted: a multiple of "
                              f"batches_per_item={batches_per_item} (an item splits into equal batches)")
        check_int("serve_times", serve_times, 1)
        check_int("capacity", capacity, 1)
        if max_staleness is not None:
            check_int("max_staleness", max_staleness, 0, why=" or None (no bound)")
        self.item_size, self.batches_per_item = int(item_size), int(batches_per_item)
        self.batch_size = self.item_size // self.batches_per_item
        self.serve_times, self.capacity = int(serve_times), int(capacity)
        self.max_staleness = max_staleness
        self._head = 0  # the item being served; items before it are released
        self._position = 0  # batches of the head served, over all its serves
        self._versions: dict[int, int] = {}  # item -> oldest parameter version of its inserts
        self.dropped_items = 0  # items dropped as stale
        self.dropped_transitions = 0

    @property
    def head(self) -> int:
        """The item being served (all before it are released)."""
        return self._head

    def item_written(self, item: int) -> bool:
        """Whether every transition of ``item`` is written (an item before the head always is)."""
        with self._lock:
            return item < self._head or (item == self._head and self._head_written() == self.item_size)

    def remaining_in_item(self) -> int:
        """Transitions the item being written still takes (an insert must not cross into the next)."""
        with self._lock:
            return self.item_size - self._admitted % self.item_size

    # ---- the insert side ---------------------------------------------------------------------
    def check_insert(self, n: int) -> None:
        super().check_insert(n)
        written = self._admitted % self.item_size
        if written + n > self.item_size:
            raise BufferInputError(
                f"rollout pieces overshoot the queue's item: {written} of {self.item_size} transitions "
                f"written and {n} more given; the pieces of one item (an on-policy rollout) must add up to "
                f"its size, {self.item_size} (num_actors*envs_per_actor*rollout_length on-policy)"
            )

    def _insert_ready(self, n: int) -> bool:
        return self._admitted + n <= (self._head + self.capacity) * self.item_size

    def _admit(self, n: int, version: int | None) -> None:
        if version is not None:
            item = self._admitted // self.item_size
            self._versions[item] = min(self._versions.get(item, version), version)

    def _insert_blocker(self) -> str:
        return (f"the queue is full: {self.capacity} item(s) of {self.item_size} transitions admitted and not yet "
                f"served serve_times={self.serve_times} times (item {self._head} is served)")

    # ---- the sample side ---------------------------------------------------------------------
    def _head_written(self) -> int:
        return min(max(self._inserted - self._head * self.item_size, 0), self.item_size)

    def _drop_stale_head(self) -> bool:
        """Drop the head if it is complete, not yet served at all and staler than ``max_staleness``;
        True if dropped. A head whose serving began is served to the end: a batch granted from it
        may still be reading its slots (dropping would give them to the next insert), and an item
        is either served ``serve_times`` times or dropped whole, never both."""
        if (self.max_staleness is None or self._learner_version is None or self._position
                or self._head_written() < self.item_size):
            return False
        version = self._versions.get(self._head)
        if version is None or self._learner_version - version <= self.max_staleness:
            return False
        self.dropped_items += 1
        self.dropped_transitions += self.item_size
        self._release_head()
        self._insert_cond.notify_all()  # inserters waiting for room
        return True

    def commit_insert(self, n: int) -> None:
        super().commit_insert(n)
        with self._lock:  # a head completed now may be stale already: its room goes to the next insert
            while self._drop_stale_head():
                pass

    def set_learner_version(self, version: int) -> None:
        super().set_learner_version(version)
        with self._lock:
            while self._drop_stale_head():
                pass

    def _release_head(self) -> None:
        self._versions.pop(self._head, None)
        self._head += 1
        self._position = 0

    def _grant_size(self, batches: int) -> tuple[int, int, int]:
        serve, first = divmod(self._position, self.batches_per_item)
        return serve, first, min(batches, self.batches_per_item - first)

    def _sample_ready(self, batches: int) -> bool:
        while self._drop_stale_head():
            pass
        if self._position == self.batches_per_item * self.serve_times:
            return False  # the head is served out; its last batches are being read (sample_done releases it)
        serve, first, count = self._grant_size(batches)
        # the first serve reads a batch once its slots are written; later ones the whole item is
        return serve > 0 or self._head_written() >= (first + count) * self.batch_size

    def _sample_blocker(self) -> str:
        serve, first, _ = self._grant_size(1)
        return (f"item {self._head}: {self._head_written()} of {self.item_size} transitions written, serve "
                f"{serve} of {self.serve_times} is at batch {first} of {self.batches_per_item}")

    def _grant(self, batches: int) -> SampleGrant:
        serve, first, count = self._grant_size(batches)
        grant = SampleGrant(count, self._head, serve, first)
        self._position += count
        self._sampled += count * self.batch_size
        return grant

    def sample_done(self, grant: SampleGrant) -> None:
        """Release the head once its last granted batches are read: only then may the next insert
        overwrite its slots."""
        with self._lock:
            if grant.item == self._head and self._position == self.batches_per_item * self.serve_times:
                self._release_head()
                self._wake_all()  # room for inserters; the next item for samplers

    # ---- resume ------------------------------------------------------------------------------
    def restore(self, inserted: int, sampled: int) -> None:
        """Continue a resumed run at an item boundary: every item written before is taken as served
        (an on-policy run resumes with a fresh rollout)."""
        if isinstance(inserted, int) and not isinstance(inserted, bool) and inserted % self.item_size:
            raise invalid("inserted", inserted, f"a multiple of item_size={self.item_size} (a resumed queue "
                          "starts at an item boundary)")
        super().restore(inserted, sampled)

    def _restored(self) -> None:
        self._head, self._position = self._inserted // self.item_size, 0
        self._versions.clear()

    def state_dict(self) -> dict[str, Any]:
        state = super().state_dict()
        with self._lock:
            state.update(dropped_items=self.dropped_items, dropped_transitions=self.dropped_transitions)
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        with self._lock:
            self.dropped_items = int(state.get("dropped_items", 0))
            self.dropped_transitions = int(state.get("dropped_transitions", 0))
