"""Preallocated ring storage, one tensor per field, at a placement.

Placements:

* ``cpu_pageable`` — ordinary host memory.
* ``cpu_pinned`` — page-locked host memory, so copies to a GPU can be asynchronous (needs CUDA).
* ``cuda`` — GPU memory.

The storage only writes contiguous ring segments and gathers rows; who may read what, and when,
is the experience buffer's business.
"""

from __future__ import annotations

import ctypes
import mmap
import sys
from dataclasses import dataclass
from typing import Any, Mapping

import torch

from janus.errors import PlacementUnavailableError, invalid, one_of

PLACEMENTS = ("cpu_pageable", "cpu_pinned", "cuda")

# Host tensors from this size on are advised onto transparent huge pages (numpy does the same for
# its arrays): first writes fault in 2 MiB pages instead of 4 KiB ones, and random row reads miss
# the TLB less. A multi-GB ring fills several times faster, and a large gather result, which
# malloc often maps afresh for every call (always from 32 MiB, glibc's largest mmap threshold), is
# written ~4x faster (benchmarks/buffer_peers.py). Where malloc reuses mapped memory instead, the
# madvise call costs ~2%.
HUGE_PAGE_MIN_BYTES = 4 << 20
_MADV_HUGEPAGE = 14


def _load_madvise() -> Any:
    """libc ``madvise`` where transparent huge pages are opt-in (``[madvise]``), else ``None``."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        with open("/sys/kernel/mm/transparent_hugepage/enabled") as f:
            if "[madvise]" not in f.read():
                return None  # "always": nothing to ask; "never": nothing to get
        madvise = ctypes.CDLL(None, use_errno=True).madvise
    except (OSError, AttributeError):
        return None
    madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    madvise.restype = ctypes.c_int
    return madvise


_madvise = _load_madvise()


def advise_huge_pages(t: torch.Tensor) -> torch.Tensor:
    """Best effort: back a large, not yet written CPU tensor with transparent huge pages."""
    nbytes = t.numel() * t.element_size()
    if _madvise is not None and nbytes >= HUGE_PAGE_MIN_BYTES and t.device.type == "cpu":
        start = -(-t.data_ptr() // mmap.PAGESIZE) * mmap.PAGESIZE
        stop = (t.data_ptr() + nbytes) // mmap.PAGESIZE * mmap.PAGESIZE
        _madvise(start, stop - start, _MADV_HUGEPAGE)  # a hint: failure changes nothing
    return t


def _gather_into_huge_pages(t: torch.Tensor, slots: torch.Tensor) -> torch.Tensor:
    """``t[slots]`` as a fresh tensor, advised onto huge pages (if large enough) before it is written."""
    out = advise_huge_pages(torch.empty((slots.shape[0], *t.shape[1:]), dtype=t.dtype))
    return torch.index_select(t, 0, slots, out=out)


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
        self._large_gather = sys.maxsize  # rows from which a gather's result may need huge pages

    @property
    def allocated(self) -> bool:
        return bool(self.fields)

    def allocate(self, specs: Mapping[str, FieldSpec]) -> None:
        """Allocate every field once.

        Memory is left uninitialised: host pages are committed as rows are first written (no
        up-front cost for a large ring; pageable host fields of 4 MiB and more in huge pages, see
        :func:`advise_huge_pages`), and readers only ever see written slots because samplers draw
        from ``[0, size)``.
        """
        pin = self.placement == "cpu_pinned"
        for name, spec in specs.items():
            t = torch.empty((self.capacity, *spec.shape), dtype=spec.dtype, device=self.device, pin_memory=pin)
            self.fields[name] = t if pin else advise_huge_pages(t)
        self.specs = dict(specs)
        if self.device.type == "cpu":  # gathers of this many rows or more may use huge pages
            row_bytes = max(t[0].numel() * t.element_size() for t in self.fields.values())
            self._large_gather = -(-HUGE_PAGE_MIN_BYTES // max(row_bytes, 1))

    def write(self, start: int, data: Mapping[str, torch.Tensor]) -> None:
        """Write ``n`` rows at ring position ``start`` (wrapping around the end)."""
        n = next(iter(data.values())).shape[0]
        first = min(n, self.capacity - start)
        # Asynchronous only into GPU storage (later GPU reads are stream-ordered); a GPU -> pinned
        # host copy must complete before a CPU gather may read the rows.
        non_blocking = self.device.type == "cuda"
        if first == n:  # the common case: one segment, the input needs no slicing
            for name, value in data.items():
                self.fields[name][start : start + n].copy_(value, non_blocking=non_blocking)
            return
        for name, value in data.items():
            dst = self.fields[name]
            dst[start : start + first].copy_(value[:first], non_blocking=non_blocking)
            dst[: n - first].copy_(value[first:], non_blocking=non_blocking)

    def gather(self, slots: torch.Tensor, out: Mapping[str, torch.Tensor] | None = None) -> dict[str, torch.Tensor]:
        """Copy the rows at ``slots`` into fresh tensors (or into ``out``); never views of storage."""
        if out is None:
            if slots.shape[0] < self._large_gather:
                return {name: torch.index_select(t, 0, slots) for name, t in self.fields.items()}
            return {name: _gather_into_huge_pages(t, slots) for name, t in self.fields.items()}
        for name, t in self.fields.items():
            torch.index_select(t, 0, slots, out=out[name])
        return dict(out)

    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in self.fields.values())
