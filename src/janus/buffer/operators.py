"""The two operators of Dual-End Staging.

* :class:`CollectionOp` — takes staged rollout pieces, flattens ``[T, envs, ...]`` to
  ``[T*envs, ...]``, concatenates them, applies an optional preprocessing function and writes
  them to the experience buffer in one ``extend`` (several, in order, when they are more than
  its capacity).
* :class:`SelectionOp` — picks the slots of the next ``g_select`` batches (uniform samples
  off-policy; the next minibatches of the epoch on-policy), gathers them in one copy, moves them to
  the learner device and splits them into batches.

Both only touch data; when they run (inline or in a thread) is :class:`~janus.buffer.janus.JanusBuffer`'s
business. On-policy coordination (which rollout may be written, which minibatches may be read) is
:class:`OnPolicySchedule`'s.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import torch

from janus.buffer.experience import ExperienceBuffer
from janus.buffer.samplers import epoch_permutation, make_generator
from janus.buffer.staging import StagingTimeout
from janus.buffer.transfer import BatchTransfer, Pending
from janus.errors import BufferInputError, PipelineClosedError

if TYPE_CHECKING:
    from janus.buffer.frames import FrameStackReplay

Batch = dict[str, torch.Tensor]
Preprocess = Callable[[Batch], Batch]


def flatten_piece(piece: Mapping[str, Any], time_major_dims: int) -> Batch:
    """Merge the leading ``time_major_dims`` dims of every field into one batch dim."""
    out = {}
    for k, v in piece.items():
        t = v if isinstance(v, torch.Tensor) else torch.as_tensor(v)
        if t.dim() < time_major_dims:
            raise BufferInputError(
                f"rollout field {k!r} has shape {tuple(t.shape)}; expected at least {time_major_dims} leading dims"
            )
        out[k] = t.reshape(-1, *t.shape[time_major_dims:]) if time_major_dims > 1 else t
    return out


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


class OnPolicySchedule:
    """Which rollout may be written and which minibatches may be read, on-policy.

    The storage holds one rollout of ``rollout_size`` transitions. Rollout ``r+1`` is only written
    once every minibatch of rollout ``r`` (``num_epochs`` x M) has been selected. In the first
    epoch, minibatches are read as soon as the slots they cover are written, so the update can
    start before the rollout is complete.
    """

    def __init__(self, rollout_size: int, num_minibatches: int, num_epochs: int) -> None:
        self.rollout_size = rollout_size
        self.num_minibatches = num_minibatches
        self.minibatch_size = rollout_size // num_minibatches
        self.num_epochs = num_epochs
        self.cond = threading.Condition()
        self.written = 0  # transitions of the current rollout written
        self.selected = 0  # minibatches of the current rollout selected (over all epochs)
        self.rollouts_done = 0
        self.closed = False
        self.write_wait_s = 0.0  # collector time spent waiting for the previous rollout to be read
        self.read_wait_s = 0.0  # selector time spent waiting for minibatches to be written

    def remaining_to_write(self) -> int:
        return self.rollout_size - self.written

    def wait_writable(self, n: int) -> None:
        """Block the collector while the previous rollout is still being selected."""
        start = time.perf_counter()
        with self.cond:
            while True:
                if self.closed:
                    raise PipelineClosedError("JanusBuffer is closed")
                if self.written < self.rollout_size:
                    break
                self.cond.wait()
            self.write_wait_s += time.perf_counter() - start
            if self.written + n > self.rollout_size:
                raise BufferInputError(
                    f"rollout pieces overshoot the on-policy rollout: {self.written} of "
                    f"{self.rollout_size} transitions written and {n} more given; pieces of one "
                    "rollout must add up to num_actors*envs_per_actor*rollout_length"
                )

    def mark_written(self, n: int) -> None:
        with self.cond:
            self.written += n
            self.cond.notify_all()

    def wait_readable(self, first_minibatch: int, count: int, deadline: float | None = None) -> None:
        """Block the selector until minibatches ``first .. first+count`` of epoch 0 are written.

        ``deadline`` (a ``time.perf_counter()`` value) bounds the wait: past it, raises
        :class:`~janus.buffer.staging.StagingTimeout`.
        """
        need = (first_minibatch + count) * self.minibatch_size
        start = time.perf_counter()
        with self.cond:
            while self.written < need:
                if self.closed:
                    raise PipelineClosedError("JanusBuffer is closed")
                remaining = None if deadline is None else deadline - time.perf_counter()
                if remaining is not None and remaining <= 0:
                    raise StagingTimeout("JanusBuffer.get: timed out waiting for the rollout to be written")
                self.cond.wait(remaining)
            self.read_wait_s += time.perf_counter() - start

    def mark_selected(self, count: int) -> None:
        with self.cond:
            self.selected += count
            if self.selected == self.num_minibatches * self.num_epochs:
                self.selected, self.written = 0, 0
                self.rollouts_done += 1
            self.cond.notify_all()

    def close(self) -> None:
        with self.cond:
            self.closed = True
            self.cond.notify_all()


class CollectionOp:
    """Concatenate staged rollout pieces and write them to the experience buffer in one operation."""

    def __init__(
        self,
        buffer: ExperienceBuffer | FrameStackReplay,
        time_major_dims: int = 1,
        preprocess: Preprocess | None = None,
        schedule: OnPolicySchedule | None = None,
    ) -> None:
        self.buffer = buffer
        self.time_major_dims = time_major_dims
        self.preprocess = preprocess
        self.schedule = schedule

    def __call__(self, pieces: Sequence[Mapping[str, Any]]) -> int:
        """Write ``pieces``; return the number of transitions written."""
        flat = [flatten_piece(p, self.time_major_dims) for p in pieces]
        if len(flat) == 1:
            batch = flat[0]
        else:
            batch = {k: torch.cat([f[k] for f in flat]) for k in flat[0]}
        if self.preprocess is not None:
            batch = self.preprocess(batch)
        n = next(iter(batch.values())).shape[0]
        if self.schedule is not None:
            self.schedule.wait_writable(n)
        capacity = self.buffer.capacity
        if n <= capacity:
            self.buffer.extend(batch)
        else:  # more than the ring holds (g_collect pieces, or one large piece): written in order, as a ring would
            for start in range(0, n, capacity):
                self.buffer.extend({k: v[start : start + capacity] for k, v in batch.items()})
        if self.schedule is not None:
            self.schedule.mark_written(n)
        return n


class SelectionOp:
    """Assemble the next ``g_select`` batches, gather them in one copy and move them to the learner."""

    def __init__(
        self,
        buffer: ExperienceBuffer | FrameStackReplay,
        batch_size: int,
        batches_per_call: int,
        learner_device: torch.device,
        schedule: OnPolicySchedule | None = None,
        seed: int | None = None,
        wait_ready: Callable[[float | None], None] = lambda deadline: None,
        beta_schedule: Callable[[int], float] | None = None,
    ) -> None:
        self.buffer = buffer
        self.wait_ready = wait_ready
        self.beta_schedule = beta_schedule  # prioritized: beta of the n-th batch selected
        self.selected = 0  # batches selected (off-policy)
        self.batch_size = batch_size
        self.batches_per_call = batches_per_call
        self.schedule = schedule
        self.transfer = BatchTransfer(buffer.device, learner_device)
        self._generator = make_generator(torch.device("cpu"), seed)
        self._order: torch.Tensor | None = None  # on-policy epoch permutation

    def __call__(self, deadline: float | None = None) -> list[Pending]:
        """Return the next bundle of batches (blocking until their data is written).

        ``deadline`` (a ``time.perf_counter()`` value) bounds the wait for data: past it, raises
        :class:`~janus.buffer.staging.StagingTimeout` with nothing consumed.
        """
        if self.schedule is None:
            self.wait_ready(deadline)
            count, slots = self.batches_per_call, None
        else:
            slots, count = self._next_minibatch_slots(deadline)
        with self.transfer.stream_context():
            if slots is None:
                bundle = self.buffer.sample(self.batch_size * count, **self._sample_kwargs())
                self.selected += count
                if count > 1 and "weight" in bundle:  # stratified draws: in priority-mass order
                    bundle = _reordered(bundle, self._spread_strata(count))
            else:
                bundle = self.buffer.gather(slots)
            pending = self.transfer(bundle)
        if self.schedule is not None:
            self.schedule.mark_selected(count)
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

    def _next_minibatch_slots(self, deadline: float | None = None) -> tuple[torch.Tensor, int]:
        s = self.schedule
        assert s is not None
        m = s.num_minibatches
        position = s.selected  # minibatches of this rollout already selected
        epoch, first = divmod(position, m)
        count = min(self.batches_per_call, m - first)
        if epoch == 0:
            s.wait_readable(first, count, deadline)
        if first == 0:
            block = self.batches_per_call * s.minibatch_size if epoch == 0 else s.rollout_size
            self._order = epoch_permutation(s.rollout_size, block, self._generator, torch.device("cpu"))
        assert self._order is not None
        mb = s.minibatch_size
        return self._order[first * mb : (first + count) * mb], count  # host slots: gather checks them there
