"""The ``cuda`` placement's path of the experience buffer: batched torch ops on the buffer's device.

On CPU placements every :class:`~janus.buffer.replay.experience.ExperienceBuffer` operation is one
call into a compiled kernel (:mod:`janus.buffer.kernels.native`). On ``cuda`` the storage is torch
tensors on the GPU and the sampler a torch one (:class:`~janus.buffer.replay.samplers.UniformSampler`,
:class:`~janus.buffer.replay.prioritized.PrioritizedSampler` over :mod:`janus.buffer.replay.sumtree`):
these functions are that path's sampler, writes, keys and priority updates. They read and write the
buffer's own fields; the buffer calls them under its lock.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import torch

from janus.buffer.replay import field_casts, field_checks, priority_checks
from janus.buffer.replay.samplers import Sampler, UniformSampler

if TYPE_CHECKING:
    from janus.buffer.replay.experience import ExperienceBuffer


def make_sampler(name: str, capacity: int, device: torch.device, seed: int | None,
                 settings: Mapping[str, float]) -> Sampler:
    """The torch sampler ``name`` (``uniform`` or ``prioritized``, with its checked ``settings``)."""
    if name == "prioritized":
        from janus.buffer.replay.prioritized import PrioritizedSampler

        return PrioritizedSampler(capacity, device, seed, **settings)
    return UniformSampler(capacity, device, seed)


def extend(buf: ExperienceBuffer, data: Mapping[str, Any]) -> torch.Tensor:
    """Write ``data`` (checked, and cast to declared fields) at the ring's head; return the keys."""
    specs = buf._storage.specs
    if buf._declared and not field_checks.matches_specs(data, specs, buf.capacity, buf.device):
        batch, n = field_casts.cast_batch(data, specs, buf.capacity)  # the casts of the CPU path
    else:
        batch, _ = field_checks.check_batch(data, specs, buf.capacity, buf.device)
        n = next(iter(batch.values())).shape[0]
    start = buf._written % buf.capacity
    buf._storage.write(start, batch)
    keys = torch.arange(buf._written, buf._written + n, dtype=torch.long)
    if getattr(buf._sampler, "tracks_writes", True):
        if start + n <= buf.capacity:
            slots = torch.arange(start, start + n, device=buf.device)
        else:
            slots = keys.remainder(buf.capacity).to(buf.device)
        buf._sampler.on_write(slots)
    buf._written += n
    return keys


def keys_of(slots: torch.Tensor, written: int, capacity: int) -> torch.Tensor:
    """Key currently stored at each slot (the most recent write to it), ``written`` items in."""
    slots = slots.to("cpu", torch.long)
    head = written % capacity
    # Slot s was last written ``age`` writes before the newest item (key written - 1), with
    # age = (head - 1 - s) mod capacity: s < head in this lap, s >= head in the previous one.
    age = torch.rsub(slots, head - 1).remainder_(capacity)
    return torch.rsub(age, written - 1)


def update_priority(buf: ExperienceBuffer, index: Any, priority: Any) -> int:
    """Set the priorities of the live keys in ``index`` (checked here); return how many were applied."""
    s = buf._sampler
    keys, prio, first = priority_checks.check_priority_update(index, priority, buf._written)
    if prio.numel() and hasattr(s, "alpha"):  # the torch prioritized sampler (CUDA placements)
        priority_checks.check_priority_scale(float(prio.max()), s.alpha, s.eps, buf.capacity)
    oldest = buf._written - buf.capacity  # smallest key still stored
    if first < oldest:  # some items were overwritten since they were sampled
        live = keys >= oldest
        keys, prio = keys[live], prio[live]
    if keys.numel():
        slots = keys.remainder(buf.capacity).to(buf.device)
        buf._sampler.update_priority(slots, prio.to(buf.device))
    return int(keys.numel())
