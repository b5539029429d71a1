"""Preallocated ring storage, one tensor per field, at a placement.

Placements:

* ``cpu_pageable`` — ordinary host memory.
* ``cpu_pinned`` — page-locked host memory, so copies to a GPU can be asynchronous (needs CUDA).
* ``cuda`` — GPU memory.

The storage only writes contiguous ring segments and gathers rows; who may read what, and when,
is the experience buffer's business.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

import torch

from janus.errors import PlacementUnavailableError, invalid, one_of

PLACEMENTS = ("cpu_pageable", "cpu_pinned", "cuda")


def placement_device(placement: str) -> torch.device:
    """The torch device that holds storage at ``placement``; fails clearly without CUDA."""
    if placement not in PLACEMENTS:
        raise invalid("placement", placement, one_of(PLACEMENTS))
    if placement in ("cpu_pinned", "cuda") and not torch.cuda.is_available():
        raise PlacementUnavailableError(
            f"placement={placement!r} needs CUDA, but torch.cuda.is_available() is False on this "
            "machine; use placement='cpu_pageable'"
        )
    return torch.device("cuda") if placement == "cuda" else torch.device("cpu")


@dataclass(frozen=True)
class FieldSpec:
    """Per-item shape and dtype of one stored field."""

    shape: tuple[int, ...]
    dtype: torch.dtype


class RingStorage:
    """Fixed-capacity storage of named fields; rows are written in ring order."""

    def __init__(self, capacity: int, placement: str) -> None:
        self.capacity = capacity
        self.placement = placement
        self.device = placement_device(placement)
        self.specs: dict[str, FieldSpec] = {}
        self.fields: dict[str, torch.Tensor] = {}

    @property
    def allocated(self) -> bool:
        return bool(self.fields)

    def allocate(self, specs: Mapping[str, FieldSpec]) -> None:
        """Allocate every field once.

        Memory is left uninitialised: host pages are committed as rows are first written (no
        up-front cost for a large ring), and readers only ever see written slots because samplers
        draw from ``[0, size)``.
        """
        pin = self.placement == "cpu_pinned"
        for name, spec in specs.items():
            self.fields[name] = torch.empty(
                (self.capacity, *spec.shape), dtype=spec.dtype, device=self.device, pin_memory=pin
            )
        self.specs = dict(specs)

    def write(self, start: int, data: Mapping[str, torch.Tensor]) -> None:
        """Write ``n`` rows at ring position ``start`` (wrapping around the end)."""
        n = next(iter(data.values())).shape[0]
        first = min(n, self.capacity - start)
        # Asynchronous only into GPU storage (later GPU reads are stream-ordered); a GPU -> pinned
        # host copy must complete before a CPU gather may read the rows.
        non_blocking = self.device.type == "cuda"
        for name, value in data.items():
            dst = self.fields[name]
            dst[start : start + first].copy_(value[:first], non_blocking=non_blocking)
            if first < n:
                dst[: n - first].copy_(value[first:], non_blocking=non_blocking)

    def gather(self, slots: torch.Tensor, out: Mapping[str, torch.Tensor] | None = None) -> dict[str, torch.Tensor]:
        """Copy the rows at ``slots`` into fresh tensors (or into ``out``); never views of storage."""
        if out is None:
            return {name: torch.index_select(t, 0, slots) for name, t in self.fields.items()}
        for name, t in self.fields.items():
            torch.index_select(t, 0, slots, out=out[name])
        return dict(out)

    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in self.fields.values())
