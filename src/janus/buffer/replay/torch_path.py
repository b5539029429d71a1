"""The ``cuda`` placement's path of the experience buffer: batched torch ops on the buffer's device.

On CPU placements every :class:`~janus.buffer.replay.experience.ExperienceBuffer` operation is one
call into a compiled kernel (:mod:`janus.buffer.kernels.native`). On ``cuda`` the storage is torch
tensors on the GPU and the sampler a torch one (:class:`~janus.buffer.replay.samplers.UniformSampler`,
:class:`~janus.buffer.replay.prioritized.PrioritizedSampler` over :mod:`janus.buffer.replay.sumtree`):
these functions are that path's sampler, writes, keys and priority updates, given the buffer's
storage and sampler; the buffer calls them under its lock.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from janus.buffer.replay import field_casts, field_checks, priority_checks
from janus.buffer.replay.samplers import Sampler, UniformSampler
from janus.buffer.storage.ring import RingStorage


def make_sampler(name: str, capacity: int, device: torch.device, seed: int | None,
                 settings: Mapping[str, float]) -> Sampler:
    """The torch sampler ``name`` (``uniform`` or ``prioritized``, with its checked ``settings``)."""
    if name == "prioritized":
        from janus.buffer.replay.prioritized import PrioritizedSampler

        return PrioritizedSampler(capacity, device, seed, **settings)
    return UniformSampler(capacity, device, seed)


def extend(storage: RingStorage, sampler: Any, declared: bool, written: int, data: Mapping[str, Any]) -> torch.Tensor:
    """Write ``data`` (checked, and cast to ``declared`` fields) at the ring's head, ``written`` items
    in, and tell the sampler; return the keys (the caller counts them as written)."""
    specs, capacity, device = storage.specs, storage.capacity, storage.device
    if declared and not field_checks.matches_specs(data, specs, capacity, device):
        batch, n = field_casts.cast_batch(data, specs, capacity)  # the casts of the CPU path
    else:
        batch, _ = field_checks.check_batch(data, specs, capacity, device)
        n = next(iter(batch.values())).shape[0]
    start = written % capacity
    storage.write(start, batch)
    keys = torch.arange(written, written + n, dtype=torch.long)
    if getattr(sampler, "tracks_writes", True):
        if start + n <= capacity:
            slots = torch.arange(start, start + n, device=device)
        else:
            slots = keys.remainder(capacity).to(device)
        sampler.on_write(slots)
    return keys


def keys_of(slots: torch.Tensor, written: int, capacity: int) -> torch.Tensor:
    """Key currently stored at each slot (the most recent write to it), ``written`` items in."""
    slots = slots.to("cpu", torch.long)
    head = written % capacity
    # Slot s was last written ``age`` writes before the newest item (key written - 1), with
    # age = (head - 1 - s) mod capacity: s < head in this lap, s >= head in the previous one.
    age = torch.rsub(slots, head - 1).remainder_(capacity)
    return torch.rsub(age, written - 1)


def update_priority(sampler: Any, index: Any, priority: Any, written: int, capacity: int, device: torch.device) -> int:
    """Set the priorities of the live keys in ``index`` (checked here), ``written`` items in; return
    how many were applied."""
    s = sampler
    keys, prio, first = priority_checks.check_priority_update(index, priority, written)
    if prio.numel() and hasattr(s, "alpha"):  # the torch prioritized sampler (CUDA placements)
        priority_checks.check_priority_scale(float(prio.max()), s.alpha, s.eps, capacity)
    oldest = written - capacity  # smallest key still stored
    if first < oldest:  # some items were overwritten since they were sampled
        live = keys >= oldest
        keys, prio = keys[live], prio[live]
    if keys.numel():
        slots = keys.remainder(capacity).to(device)
        sampler.update_priority(slots, prio.to(device))
    return int(keys.numel())
