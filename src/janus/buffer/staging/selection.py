"""The selection operator of Dual-End Staging: :class:`SelectionOp`, batches out of the experience buffer.

It picks the slots of the next ``g_select`` batches (uniform samples off-policy; the next
minibatches of the epoch on-policy), gathers them in one copy, moves them to the learner device and
splits them into batches. It only touches data: when it runs is
:class:`~janus.buffer.pipeline.JanusBuffer`'s business, what may be sampled the rate limiter's
(:mod:`janus.buffer.pacing`): selection asks it for a grant and reads what it grants.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

import torch

from janus.buffer.pacing.queue_limiter import QueueLimiter
from janus.buffer.pacing.rate_limiter import RateLimiter, SampleGrant
from janus.buffer.replay.samplers import epoch_permutation, make_generator
from janus.buffer.staging.batch import Batch
from janus.buffer.storage.transfer import BatchTransfer, Pending


class SelectionSource(Protocol):
    """What selection reads from: an experience buffer (or a frame-stack replay) on ``device``."""

    @property
    def device(self) -> torch.device: ...

    def sample(self, batch_size: int, **sampler_kwargs: Any) -> dict[str, Any]: ...

    def gather(self, slots: Any) -> dict[str, Any]: ...


def _reordered(batch: Batch, order: torch.Tensor) -> Batch:
    """``batch``'s rows in ``order`` (a CPU index; the fields and the keys may be on different devices)."""
    on: dict[torch.device, torch.Tensor] = {}
    out = {}
    for k, t in batch.items():
        index = on.get(t.device)
        if index is None:
            index = on[t.device] = order.to(t.device)
        out[k] = t.index_select(0, index)
    return out


class SelectionOp:
    """Assemble the next ``g_select`` batches, gather them in one copy and move them to the learner."""

    def __init__(
        self,
        buffer: SelectionSource,
        batch_size: int,
        batches_per_call: int,
        learner_device: torch.device,
        limiter: RateLimiter,
        seed: int | None = None,
        beta_schedule: Callable[[int], float] | None = None,
    ) -> None:
        self.buffer = buffer
        self.limiter = limiter
        self.beta_schedule = beta_schedule  # prioritized: beta of the n-th batch selected
        self.selected = 0  # batches selected (off-policy)
        self.batch_size = batch_size
        self.batches_per_call = batches_per_call
        self.transfer = BatchTransfer(buffer.device, learner_device)
        self._generator = make_generator(torch.device("cpu"), seed)
        self._order: torch.Tensor | None = None  # on-policy epoch permutation

    def __call__(self, deadline: float | None = None) -> list[Pending]:
        """Return the next bundle of batches (blocking until the limiter grants them).

        ``deadline`` (a ``time.perf_counter()`` value) bounds the wait for the grant: past it,
        raises :class:`~janus.errors.StagingTimeout` with nothing consumed. A ratio limiter
        may grant fewer batches than ``batches_per_call`` (never 0); the bundle holds what it granted.
        """
        grant = self.limiter.await_sample(self.batches_per_call, deadline)
        count = grant.count
        slots = self._item_slots(grant) if isinstance(self.limiter, QueueLimiter) else None
        with self.transfer.stream_context():
            if slots is None:
                bundle = self.buffer.sample(self.batch_size * count, **self._sample_kwargs())
                self.selected += count
                if count > 1 and "weight" in bundle:  # stratified draws: in priority-mass order
                    bundle = _reordered(bundle, self._spread_strata(count))
            else:
                bundle = self.buffer.gather(slots)
            pending = self.transfer(bundle)
        self.limiter.sample_done(grant)  # copied out: a queue may give the slots to the next insert
        if count == 1:
            return [pending]
        sizes = [self.batch_size] * count
        parts = {k: t.split(sizes) for k, t in pending.tensors.items()}
        return [Pending({k: parts[k][i] for k in parts}, pending.event) for i in range(count)]

    def _sample_kwargs(self) -> dict[str, float]:
        """``beta`` of the next batch when annealed (one value for a bundle: that of its first batch)."""
        return {} if self.beta_schedule is None else {"beta": self.beta_schedule(self.selected)}

    def _spread_strata(self, count: int) -> torch.Tensor:
        """The order that makes ``count`` batches of one stratified draw of ``count * batch_size``
        each a stratified draw over the whole buffer.

        Draw ``i`` lies in stratum ``i`` of the priority mass, so consecutive draws are neighbours
        and batches split off in turn would each cover one ``count``-th of the buffer. Here batch
        ``j`` takes, from every group of ``count`` consecutive strata, one at random (the others
        go to the other batches): one draw in each of its ``batch_size`` equal strata, uniform
        within it, as a ``sample(batch_size)`` of its own draws.
        """
        b = self.batch_size
        pick = torch.rand(b, count, generator=self._generator).argsort(dim=1)  # group m: its strata, shuffled
        return (torch.arange(b).unsqueeze(1) * count + pick).t().reshape(-1)

    def _item_slots(self, grant: SampleGrant) -> torch.Tensor:
        """The host slots of a queue grant: its batches of the item's order for this serve.

        Each serve of an item gets a fresh order: the first serve of an item still being written
        shuffles within blocks of one selection (so a block is readable as soon as its slots are
        written); an item written whole by then (one insert: a single worker's whole rollout) and
        every later serve shuffle the whole item, so no minibatch is confined to a stretch of time.
        """
        q = self.limiter
        assert isinstance(q, QueueLimiter)
        if grant.first == 0 or self._order is None:
            whole = grant.serve > 0 or q.item_written(grant.item)
            block = q.item_size if whole else self.batches_per_call * q.batch_size
            self._order = epoch_permutation(q.item_size, block, self._generator, torch.device("cpu"))
        mb, base = q.batch_size, (grant.item % q.capacity) * q.item_size
        return self._order[grant.first * mb : (grant.first + grant.count) * mb] + base
