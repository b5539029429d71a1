"""The experience buffer: ring storage + a sampler + keys, thread-safe, checkpointable.

Each written item gets a *key*: its insertion number (0, 1, 2, ...). The slot it occupies is
``key % capacity``. ``extend`` returns the keys written and ``sample`` returns them as ``"index"``;
``update_priority`` takes keys, so an update for an item that has since been overwritten is
recognised (its key is older than ``capacity`` writes) and dropped instead of hitting the new
occupant of the slot.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any, Iterator, Mapping

import torch

from janus.buffer import checkpoint, validation
from janus.buffer.samplers import Sampler, UniformSampler, epoch_permutation, make_generator
from janus.buffer.storage import RingStorage, placement_device
from janus.errors import (
    AllocationError,
    BufferEmptyError,
    CheckpointError,
    PlacementUnavailableError,
    invalid,
    one_of,
)

SAMPLERS = ("uniform", "prioritized")


class ExperienceBuffer:
    """Preallocated circular storage with uniform or prioritized sampling.

    Args:
        capacity: items held; the oldest are overwritten first.
        placement: ``cpu_pageable``, ``cpu_pinned`` (needs CUDA) or ``cuda``.
        sampler: ``uniform`` or ``prioritized``.
        seed: seeds the sampler's generator (same seed, same sample sequence).
        alpha, beta, eps: prioritized replay exponents and priority offset.
    """

    def __init__(
        self,
        capacity: int,
        placement: str = "cpu_pageable",
        sampler: str = "uniform",
        seed: int | None = None,
        *,
        alpha: float = 0.6,
        beta: float = 0.4,
        eps: float = 1e-6,
    ) -> None:
        validation.check_capacity(capacity)
        validation.check_seed(seed)
        if sampler not in SAMPLERS:
            raise invalid("sampler", sampler, one_of(SAMPLERS))
        self._storage = RingStorage(int(capacity), placement)
        self._sampler_name = sampler
        self._sampler_kwargs = {"alpha": alpha, "beta": beta, "eps": eps} if sampler == "prioritized" else {}
        self.seed = seed
        try:
            self._sampler: Sampler = self._make_sampler(seed)
        except RuntimeError as exc:  # the prioritized trees may not fit in memory
            if not validation.is_out_of_memory(exc):
                raise
            raise _allocation_error(f"priority trees for capacity={capacity}", exc) from None
        self._epoch_generator = make_generator(torch.device("cpu"), None if seed is None else seed + 1)
        self._lock = threading.RLock()
        self._written = 0  # total items ever written = next key

    def _make_sampler(self, seed: int | None) -> Sampler:
        cap, dev = self._storage.capacity, self._storage.device
        if self._sampler_name == "prioritized":
            from janus.buffer.prioritized import PrioritizedSampler

            validation.check_prioritized_args(**self._sampler_kwargs)
            return PrioritizedSampler(cap, dev, seed, **self._sampler_kwargs)
        return UniformSampler(cap, dev, seed)

    # ---- properties -----------------------------------------------------------------------------
    @property
    def capacity(self) -> int:
        return self._storage.capacity

    @property
    def placement(self) -> str:
        return self._storage.placement

    @property
    def device(self) -> torch.device:
        return self._storage.device

    @property
    def sampler(self) -> Sampler:
        return self._sampler

    @property
    def fields(self) -> dict[str, tuple[tuple[int, ...], torch.dtype]]:
        """Each field's per-item shape and dtype (empty before the first extend)."""
        return {k: (s.shape, s.dtype) for k, s in self._storage.specs.items()}

    @property
    def total_written(self) -> int:
        """Items written since creation (the next key)."""
        return self._written

    def __len__(self) -> int:
        return min(self._written, self.capacity)

    def __repr__(self) -> str:
        return (
            f"ExperienceBuffer(capacity={self.capacity}, placement={self.placement!r}, "
            f"sampler={self._sampler_name!r}, size={len(self)})"
        )

    # ---- writing --------------------------------------------------------------------------------
    def extend(self, data: Mapping[str, Any]) -> torch.Tensor:
        """Append a batch (mapping field -> tensor/array with a leading batch dim); return its keys.

        The first call fixes each field's shape and dtype. Invalid input raises before anything
        is written.
        """
        with self._lock:
            batch, specs = validation.check_batch(data, self._storage.specs, self.capacity, self.device)
            n = next(iter(batch.values())).shape[0]
            if not self._storage.allocated:
                try:
                    self._storage.allocate(specs)
                except RuntimeError as exc:  # undo a partial allocation
                    self._storage = RingStorage(self.capacity, self.placement)
                    if not validation.is_out_of_memory(exc):
                        raise
                    raise _allocation_error(f"storage for capacity={self.capacity} items of {specs}", exc) from None
            start = self._written % self.capacity
            self._storage.write(start, batch)
            keys = torch.arange(self._written, self._written + n, dtype=torch.long)
            if getattr(self._sampler, "tracks_writes", True):
                if start + n <= self.capacity:
                    slots = torch.arange(start, start + n, device=self.device)
                else:
                    slots = keys.remainder(self.capacity).to(self.device)
                self._sampler.on_write(slots)
            self._written += n
            return keys

    # ---- reading --------------------------------------------------------------------------------
    def sample(self, batch_size: int, **sampler_kwargs: Any) -> dict[str, torch.Tensor]:
        """Draw ``batch_size`` items: field -> tensor, plus ``"index"`` (keys) and, if prioritized,
        ``"weight"`` (importance weights)."""
        validation.check_batch_size(batch_size)
        if sampler_kwargs:
            validation.check_sampler_kwargs(self._sampler_name, sampler_kwargs)
        with self._lock:
            size = len(self)
            if size == 0:
                raise BufferEmptyError("cannot sample from an empty ExperienceBuffer: call extend() first")
            try:
                slots, weights = self._sampler.sample(int(batch_size), size, **sampler_kwargs)
                out = self._storage.gather(slots)
            except (RuntimeError, MemoryError) as exc:
                if not validation.is_out_of_memory(exc):
                    raise
                raise _allocation_error(f"a batch of batch_size={batch_size} items", exc) from None
            out["index"] = self._keys_of(slots)
        if weights is not None:
            out["weight"] = weights
        return out

    def gather(self, slots: torch.Tensor) -> dict[str, torch.Tensor]:
        """Copy the items at ``slots`` (not keys) out of storage, plus their keys as ``"index"``."""
        with self._lock:
            out = self._storage.gather(slots)
            out["index"] = self._keys_of(slots)
            return out

    def epoch(self, batch_size: int, shuffle: bool = True) -> Iterator[dict[str, torch.Tensor]]:
        """Iterate over every stored item exactly once, in minibatches of ``batch_size``.

        Bad arguments and an empty buffer raise here, not at the first ``next()``.
        """
        validation.check_batch_size(batch_size)
        if len(self) == 0:
            raise BufferEmptyError("cannot iterate an empty ExperienceBuffer: call extend() first")
        return self._epoch(int(batch_size), shuffle)

    def _epoch(self, batch_size: int, shuffle: bool) -> Iterator[dict[str, torch.Tensor]]:
        size = len(self)
        if shuffle:
            order = epoch_permutation(size, size, self._epoch_generator, torch.device("cpu"))
        else:
            order = torch.arange(size)
        order = order.to(self.device)
        for start in range(0, size, batch_size):
            slots = order[start : start + batch_size]
            yield self.gather(slots)

    def _keys_of(self, slots: torch.Tensor) -> torch.Tensor:
        """Key currently stored at each slot (the most recent write to it)."""
        slots = slots.to("cpu", torch.long)
        head = self._written % self.capacity
        # Slot s was last written ``age`` writes before the newest item (key written - 1), with
        # age = (head - 1 - s) mod capacity: s < head in this lap, s >= head in the previous one.
        age = torch.rsub(slots, head - 1).remainder_(self.capacity)
        return torch.rsub(age, self._written - 1)

    # ---- priorities -----------------------------------------------------------------------------
    def update_priority(self, index: Any, priority: Any) -> int:
        """Set priorities of the items with keys ``index``; returns how many were applied.

        Keys of items overwritten since they were sampled are dropped. With duplicate keys the
        last occurrence wins.
        """
        with self._lock:
            keys, prio, first = validation.check_priority_update(index, priority, self._written)
            oldest = self._written - self.capacity  # smallest key still stored
            if first < oldest:  # some items were overwritten since they were sampled
                live = keys >= oldest
                keys, prio = keys[live], prio[live]
            if keys.numel():
                slots = keys.remainder(self.capacity).to(self.device)
                self._sampler.update_priority(slots, prio.to(self.device))
            return int(keys.numel())

    # ---- checkpoints ----------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """Everything that restores this buffer: data, cursor, size, sampler state, RNG state."""
        with self._lock:
            size = len(self)
            return {
                "capacity": self.capacity,
                "placement": self.placement,
                "sampler": self._sampler_name,
                "sampler_kwargs": dict(self._sampler_kwargs),
                "seed": self.seed,
                "written": self._written,
                "fields": {k: [list(s.shape), str(s.dtype).removeprefix("torch.")] for k, s in self._storage.specs.items()},
                "data": {k: t[:size].to("cpu", copy=True) for k, t in self._storage.fields.items()},
                "sampler_state": _to_cpu(self._sampler.state_dict()),
                "epoch_rng": self._epoch_generator.get_state(),
            }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`state_dict` output into this buffer (same capacity and sampler).

        The state is restored into new storage, sampler and generator first: a malformed state
        raises :class:`CheckpointError` and leaves this buffer as it was.
        """
        with self._lock:
            try:
                checkpoint.check_compatible(state, self.capacity, self._sampler_name)
                written = checkpoint.written_from_state(state)
                specs = checkpoint.specs_from_state(state)
                storage = RingStorage(self.capacity, self.placement)
                if specs:
                    try:
                        storage.allocate(specs)
                    except RuntimeError as exc:
                        if not validation.is_out_of_memory(exc):
                            raise
                        raise _allocation_error(f"storage for capacity={self.capacity} items of {specs}", exc) from None
                    checkpoint.copy_data(state, storage.fields, min(written, self.capacity))
                sampler = self._make_sampler(0)  # seeded: draws nothing from torch's global RNG
                sampler.load_state_dict(_to_device(state["sampler_state"], self.device))
                epoch_generator = make_generator(torch.device("cpu"), 0)
                epoch_generator.set_state(state["epoch_rng"])
            except (CheckpointError, AllocationError):
                raise
            except (LookupError, TypeError, ValueError, AttributeError, RuntimeError) as exc:
                raise CheckpointError(f"malformed janus checkpoint state: {type(exc).__name__}: {exc}") from None
            self._storage, self._written = storage, written
            self._sampler, self._epoch_generator = sampler, epoch_generator

    def save(self, path: str | Path) -> None:
        """Write a checkpoint atomically (temporary file, then rename)."""
        checkpoint.save_atomic(self.state_dict(), path)

    @classmethod
    def load(cls, path: str | Path, placement: str | None = None) -> "ExperienceBuffer":
        """Load a checkpoint written by :meth:`save` (no pickled code is executed)."""
        state = checkpoint.load_state(path)
        if placement is not None:
            placement_device(placement)  # a bad argument is the caller's error, not the file's
        try:
            buf = cls(state["capacity"], placement or state["placement"], state["sampler"], state["seed"],
                      **state["sampler_kwargs"])
        except PlacementUnavailableError:
            raise
        except (LookupError, TypeError, ValueError) as exc:
            raise CheckpointError(
                f"{str(path)!r} holds a malformed janus checkpoint: {type(exc).__name__}: {exc}"
            ) from None
        buf.load_state_dict(state)
        return buf


def _allocation_error(what: str, exc: BaseException) -> AllocationError:
    first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return AllocationError(f"cannot allocate {what}: {first}")


def _to_cpu(state: dict[str, Any]) -> dict[str, Any]:
    return {k: (v.to("cpu") if isinstance(v, torch.Tensor) and k != "rng_state" else v) for k, v in state.items()}


def _to_device(state: Mapping[str, Any], device: torch.device) -> dict[str, Any]:
    return {k: (v.to(device) if isinstance(v, torch.Tensor) and k != "rng_state" else v) for k, v in state.items()}
