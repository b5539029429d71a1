"""Preallocated ring storage, one tensor per field, at a placement.

Placements:

* ``cpu_pageable`` — ordinary host memory.
* ``cpu_pinned`` — page-locked host memory, so copies to a GPU can be asynchronous (needs CUDA).
* ``cuda`` — GPU memory.

The storage only writes contiguous ring segments and gathers rows; who may read what, and when,
is the experience buffer's business.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np
import torch

from janus.buffer.storage.memory import HUGE_PAGE_MIN_BYTES, ResultMemory, advise_huge_pages
from janus.errors import PlacementUnavailableError, invalid, one_of

PLACEMENTS = ("cpu_pageable", "cpu_pinned", "cuda")

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
    # The numpy dtype of the same bytes (None for torch-only dtypes such as bfloat16); set once
    # here, as extend's fast path reads it for every field of every call.
    numpy_dtype: np.dtype | None = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "numpy_dtype", _NUMPY_DTYPES.get(self.dtype))

    @property
    def row_bytes(self) -> int:
        return math.prod(self.shape) * self.dtype.itemsize


_NUMPY_DTYPES = {
    t: np.dtype(n)
    for t, n in (
        (torch.float16, "float16"), (torch.float32, "float32"), (torch.float64, "float64"),
        (torch.uint8, "uint8"), (torch.int8, "int8"), (torch.int16, "int16"), (torch.int32, "int32"),
        (torch.int64, "int64"), (torch.bool, "bool"), (torch.uint16, "uint16"), (torch.uint32, "uint32"),
        (torch.uint64, "uint64"), (torch.complex64, "complex64"), (torch.complex128, "complex128"),
    )
}


_from_numpy = torch.from_numpy
_INT64, _FLOAT32 = np.dtype(np.int64), np.dtype(np.float32)


class OutLayout(NamedTuple):
    """Where a kernel writes ``n`` gathered rows: one block per field, then keys and weights."""

    offsets: np.ndarray  # int64: each field block's byte offset, then the keys', then the weights'
    nbytes: int  # the flat buffer's size
    views: tuple[tuple[str, Any, tuple[int, ...], int, torch.dtype], ...]  # name, numpy dtype (None: torch-only), shape, offset, dtype
    keys_at: int  # byte offset of the int64 keys
    weights_at: int  # byte offset of the float32 weights
    numpy_only: bool  # every field has a numpy dtype (the fast unpack)
    indexed: tuple[tuple[str, Any, tuple[int, ...], int, torch.dtype], ...]  # views, then "index" (the keys)
    weighted: tuple[tuple[str, Any, tuple[int, ...], int, torch.dtype], ...]  # views, "weight", "index"


def _align8(nbytes: int) -> int:
    return -(-nbytes // 8) * 8


class RingStorage:
    """Fixed-capacity storage of named fields; rows are written in ring order."""

    def __init__(self, capacity: int, placement: str) -> None:
        self.capacity = capacity
        self.placement = placement
        self.device = placement_device(placement)
        self.specs: dict[str, FieldSpec] = {}
        self.fields: dict[str, torch.Tensor] = {}
        self._large_gather = sys.maxsize  # rows from which a gather's result may need huge pages
        # CPU: one packed uint8 row per item (every field side by side, aligned to its dtype),
        # read and written by the compiled kernels; ``fields`` are strided views of it.
        self.packed: np.ndarray | None = None
        # int64 (2, F): each field's byte offset in a packed row (row 0, :attr:`columns`) and bytes
        # per item (row 1, :attr:`row_bytes`): one argument of the kernels.
        self.field_bytes = np.zeros((2, 0), np.int64)
        self._layouts: dict[int, OutLayout] = {}
        self.result_memory = ResultMemory()  # large results' memory, used again (see memory.py)

    @property
    def columns(self) -> np.ndarray:
        """Each field's byte offset in a packed row (a view of :attr:`field_bytes`)."""
        return self.field_bytes[0]

    @property
    def row_bytes(self) -> np.ndarray:
        """Each field's bytes per item (a view of :attr:`field_bytes`)."""
        return self.field_bytes[1]

    @property
    def allocated(self) -> bool:
        return bool(self.fields)

    def allocate(self, specs: Mapping[str, FieldSpec]) -> None:
        """Allocate every field once.

        Memory is left uninitialised: host pages are committed as rows are first written (no
        up-front cost for a large ring; pageable host storage of 4 MiB and more in huge pages, see
        :func:`advise_huge_pages`), and readers only ever see written slots because samplers draw
        from ``[0, size)``. CPU storage is one packed row per item (see :attr:`packed`).
        """
        pin = self.placement == "cpu_pinned"
        self.specs = dict(specs)
        if self.device.type != "cpu":
            for name, spec in specs.items():
                self.fields[name] = torch.empty((self.capacity, *spec.shape), dtype=spec.dtype, device=self.device)
            return
        sizes = [s.row_bytes for s in specs.values()]
        columns, at = [], 0
        for spec in specs.values():  # each field aligned to its dtype, no more: no padding bytes
            align = spec.dtype.itemsize
            at = -(-at // align) * align
            columns.append(at)
            at += spec.row_bytes
        widest = max(s.dtype.itemsize for s in specs.values())
        stride = -(-at // widest) * widest
        packed = torch.empty((self.capacity, stride), dtype=torch.uint8, pin_memory=pin)
        if not pin:
            advise_huge_pages(packed)
        for (name, spec), col, nbytes in zip(specs.items(), columns, sizes, strict=False):
            cells = packed[:, int(col) : int(col) + nbytes]
            self.fields[name] = cells.view(spec.dtype).view(self.capacity, *spec.shape)
        self.packed = packed.numpy()
        self.field_bytes = np.array([columns, sizes], np.int64)
        self._large_gather = -(-HUGE_PAGE_MIN_BYTES // max(stride, 1))

    def new_output(self, n: int) -> tuple[OutLayout, np.ndarray]:
        """Where a kernel writes ``n`` gathered rows (the layout, cached per ``n``) and a flat byte
        buffer for them that no live result shares (when large, in huge pages and used again once
        its last result is garbage: :class:`ResultMemory`)."""
        layout = self._layouts.get(n)
        if layout is None:
            layout = self._out_layout(n)
        if n < self._large_gather:
            return layout, np.empty(layout.nbytes, np.uint8)
        return layout, self.result_memory.take(layout.nbytes)

    def _out_layout(self, n: int) -> OutLayout:
        offsets, views, at = [], [], 0
        for name, spec in self.specs.items():
            nbytes = n * spec.row_bytes
            offsets.append(at)
            views.append((name, spec.numpy_dtype, (n, *spec.shape), at, spec.dtype))
            at += _align8(nbytes)
        offsets += [at, at + 8 * n]  # int64 keys, float32 weights
        keys = ("index", _INT64, (n,), at, torch.int64)
        weights = ("weight", _FLOAT32, (n,), at + 8 * n, torch.float32)
        layout = OutLayout(np.array(offsets, np.int64), at + _align8(12 * n), tuple(views), at, at + 8 * n,
                           all(v[1] is not None for v in views), (*views, keys), (*views, weights, keys))
        if len(self._layouts) < 64:
            self._layouts[n] = layout
        return layout

    @staticmethod
    def unpack(flat: np.ndarray, layout: OutLayout, as_numpy: bool = False,
               views: tuple[tuple[str, Any, tuple[int, ...], int, torch.dtype], ...] | None = None) -> dict[str, Any]:
        """Tensors (numpy arrays with ``as_numpy``; every field then has a numpy dtype, as
        ``ExperienceBuffer(output="numpy")`` checks) sharing ``flat``'s memory: the field blocks of
        a kernel's output (``views``: ``layout.views``, or ``layout.indexed`` / ``layout.weighted``
        to include the keys as ``"index"`` and the weights as ``"weight"``)."""
        # One np.ndarray (~0.27 us) + torch.from_numpy (~0.65 us) per field; slicing a torch byte
        # tensor and viewing it costs ~3.5x more. A plain loop: a comprehension is one more call on 3.11.
        out = {}
        if views is None:
            views = layout.views
        if as_numpy:
            for name, dt, shape, at, _ in views:
                out[name] = np.ndarray(shape, dt, flat, at)
            return out
        if layout.numpy_only:
            for name, dt, shape, at, _ in views:
                out[name] = _from_numpy(np.ndarray(shape, dt, flat, at))
            return out
        for name, dt, shape, at, dtype in views:
            if dt is None:  # torch-only dtypes (bfloat16 ...)
                out[name] = torch.from_numpy(flat[at : at + math.prod(shape) * dtype.itemsize]).view(dtype).view(shape)
            else:
                out[name] = torch.from_numpy(np.ndarray(shape, dt, flat, at))
        return out

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
