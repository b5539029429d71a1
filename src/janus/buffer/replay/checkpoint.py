"""An :class:`~janus.buffer.replay.experience.ExperienceBuffer` as a checkpoint state and back.

:func:`state_of` copies out the stored items, the cursor, the sampler's state (trees and random
state) and the epoch generator's; :func:`restore` loads them into new storage, sampler and
generator first, all or nothing: a malformed state raises :class:`~janus.errors.CheckpointError`
and leaves the buffer as it was. Both read the buffer's own fields (its owner calls them under its
lock); the file format is :mod:`janus.buffer.storage.state_file`'s.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

import torch

from janus.buffer.replay.samplers import make_generator
from janus.buffer.storage import state_file
from janus.buffer.storage.ring import FieldSpec, RingStorage
from janus.errors import AllocationError, CheckpointError


class CheckpointedBuffer(Protocol):
    """What a checkpoint reads and writes of a :class:`janus.buffer.replay.experience.ExperienceBuffer`:
    its settings, storage, sampler, cursor and epoch generator, and how it allocates storage."""

    seed: int | None
    _sampler_name: str
    _sampler_kwargs: dict[str, float]
    _declared: bool
    _written: int
    _storage: RingStorage
    _sampler: Any
    _epoch_generator: torch.Generator

    @property
    def capacity(self) -> int: ...

    @property
    def placement(self) -> str: ...

    @property
    def device(self) -> torch.device: ...

    @property
    def output(self) -> str: ...

    def __len__(self) -> int: ...

    def _torch_only_field(self, specs: Mapping[str, FieldSpec]) -> str | None: ...

    def _allocate(self, storage: RingStorage, specs: Mapping[str, FieldSpec]) -> None: ...

    def _make_sampler(self, seed: int | None) -> Any: ...


def state_of(buf: CheckpointedBuffer) -> dict[str, Any]:
    """Everything that restores ``buf``: data, cursor, size, sampler state, RNG state."""
    size = len(buf)
    return {
        "capacity": buf.capacity,
        "placement": buf.placement,
        "sampler": buf._sampler_name,
        "sampler_kwargs": dict(buf._sampler_kwargs),
        "seed": buf.seed,
        "output": buf.output,
        "declared": buf._declared,
        "written": buf._written,
        "fields": {k: [list(s.shape), str(s.dtype).removeprefix("torch.")] for k, s in buf._storage.specs.items()},
        "data": {k: t[:size].to("cpu", copy=True) for k, t in buf._storage.fields.items()},
        "sampler_state": _to_cpu(buf._sampler.state_dict()),
        "epoch_rng": buf._epoch_generator.get_state(),
    }


def restore(buf: CheckpointedBuffer, state: Mapping[str, Any]) -> None:
    """Load ``state`` (a :func:`state_of` output: same capacity and sampler) into ``buf``, all or nothing."""
    try:
        state_file.check_compatible(state, buf.capacity, buf._sampler_name)
        written = state_file.written_from_state(state)
        specs = state_file.specs_from_state(state)
        name = buf._torch_only_field(specs)
        if name is not None:
            raise CheckpointError(f"checkpoint field {name!r} is {specs[name].dtype}, which output='numpy' cannot "
                                  "return; load it with output='torch'")
        storage = RingStorage(buf.capacity, buf.placement)
        if specs:
            buf._allocate(storage, specs)
            state_file.copy_data(state, storage.fields, min(written, buf.capacity))
        elif buf._storage.allocated:  # an empty checkpoint keeps this buffer's declared fields
            buf._allocate(storage, buf._storage.specs)
        sampler = buf._make_sampler(0)  # seeded: draws nothing from torch's global RNG
        sampler.load_state_dict(_to_device(state["sampler_state"], buf.device))
        epoch_generator = make_generator(torch.device("cpu"), 0)
        epoch_generator.set_state(state["epoch_rng"])
        declared = state.get("declared", buf._declared)  # older checkpoints: as this buffer
        if not isinstance(declared, bool):
            raise CheckpointError(f"malformed janus checkpoint state: 'declared' is {type(declared).__name__}, "
                                  "not a bool")
    except (CheckpointError, AllocationError):
        raise
    except (LookupError, TypeError, ValueError, AttributeError, RuntimeError) as exc:
        raise CheckpointError(f"malformed janus checkpoint state: {type(exc).__name__}: {exc}") from None
    buf._storage, buf._written = storage, written
    buf._sampler, buf._epoch_generator = sampler, epoch_generator
    if specs:  # the checkpoint's fields, and how they take input
        buf._declared = declared
    if buf._sampler_kwargs:  # what state_dict() reports: the settings now in use
        buf._sampler_kwargs = {k: float(getattr(sampler, k)) for k in ("alpha", "beta", "eps")}


def _to_cpu(state: dict[str, Any]) -> dict[str, Any]:
    return {k: (v.to("cpu") if isinstance(v, torch.Tensor) and k != "rng_state" else v) for k, v in state.items()}


def _to_device(state: Mapping[str, Any], device: torch.device) -> dict[str, Any]:
    return {k: (v.to(device) if isinstance(v, torch.Tensor) and k != "rng_state" else v) for k, v in state.items()}
