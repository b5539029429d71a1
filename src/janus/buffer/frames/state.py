"""The frame side of :class:`~janus.buffer.frames.replay.FrameStackReplay`: arrays and streams.

:class:`Frames` owns the frame ring (see :mod:`janus.buffer.kernels.frames` for what each array
holds) and the per-stream search state. Turning a replay into a checkpoint state and back is
:mod:`janus.buffer.frames.checkpoint`.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch

from janus.buffer.storage.memory import advise_huge_pages
from janus.errors import BufferInputError, BufferTypeError, invalid


def stack_array(name: str, value: Any) -> np.ndarray:
    """A batch of stacks as a C-contiguous numpy array (tensors are read, never converted)."""
    if isinstance(value, torch.Tensor):
        t = value.detach()
        if not t.is_cpu:
            t = t.cpu()
        try:
            return np.ascontiguousarray(t.numpy())
        except TypeError:
            raise invalid(f"field {name!r} dtype", t.dtype, "a dtype numpy can view (uint8 for images)", BufferTypeError) from None
    if isinstance(value, np.ndarray) and value.dtype.kind in "biufc":
        return np.ascontiguousarray(value)
    raise BufferTypeError(f"field {name!r}: got {type(value).__name__} {getattr(value, 'dtype', '')}; accepted: a numeric "
                          "torch.Tensor or numpy.ndarray of shape (n, k, *frame)")


class Frames:
    """The frame ring and the per-stream state of one replay (allocated once the stack shape is known)."""

    def __init__(self, stack_shape: tuple[int, ...], dtype: Any, frame_capacity: int, max_age: int, history: int,
                 placement: str) -> None:
        self.stack_shape = tuple(int(d) for d in stack_shape)
        self.k = self.stack_shape[0]
        self.np_dtype = np.dtype(dtype)
        self.dtype = torch.from_numpy(np.zeros(0, self.np_dtype)).dtype
        self.frame_bytes = math.prod(self.stack_shape[1:]) * self.np_dtype.itemsize
        if self.k < 1 or self.frame_bytes < 1:
            raise invalid("field 'obs' item shape", self.stack_shape, "(k, *frame) with k >= 1 and a non-empty frame", BufferInputError)
        if frame_capacity < 4 * self.k:
            raise invalid("frame_capacity", frame_capacity, f"at least 4 * k = {4 * self.k} frames", BufferInputError)
        # a row writes at most 2k frames: the frames it reuses must survive them
        self.max_age = min(int(max_age), frame_capacity - 2 * self.k)
        frames = torch.empty((frame_capacity, self.frame_bytes), dtype=torch.uint8, pin_memory=placement == "cpu_pinned")
        if placement != "cpu_pinned":
            advise_huge_pages(frames)
        self.frames = frames.numpy()
        self.prev = np.zeros(frame_capacity, np.int64)
        self.gen = np.full(frame_capacity, -1, np.int64)
        self.users = np.full(frame_capacity, -1, np.int64)
        self.meta = np.zeros(2, np.int64)  # frames written, live_from
        self.store64: np.ndarray = np.zeros((0, 0), np.int64)  # the row storage as int64 (set by the replay)
        self.ids: dict[int, int] = {}  # stream id -> row of hist/hist_len/hint
        self.hist = np.full((8, history), -1, np.int64)
        self.hist_len = np.zeros(8, np.int64)
        self.hint = np.full((8, 2, 2), -1, np.int64)

    def check_stacks(self, obs: np.ndarray, nxt: np.ndarray) -> int:
        """The row count of a batch of ``obs`` and ``next_obs`` stacks of this replay's shape and dtype."""
        for name, a in (("obs", obs), ("next_obs", nxt)):
            if a.ndim != len(self.stack_shape) + 1 or a.shape[1:] != self.stack_shape:
                raise invalid(f"field {name!r} item shape", a.shape[1:], f"{self.stack_shape} (fixed by the first extend)",
                              BufferInputError)
            if a.dtype != self.np_dtype:
                raise invalid(f"field {name!r} dtype", a.dtype, f"{self.np_dtype} (fixed by the first extend)", BufferInputError)
        if obs.shape[0] != nxt.shape[0]:
            raise BufferInputError(f"extend() fields have different batch sizes: obs {obs.shape[0]}, next_obs {nxt.shape[0]}")
        return int(obs.shape[0])

    def as_bytes(self, a: np.ndarray, n: int) -> np.ndarray:
        return a.reshape(n, -1).view(np.uint8)

    def stream_indices(self, values: Any, n: int) -> np.ndarray:
        """Each row's stream as a row of ``hist`` (new ids get one); no ``stream`` field: all in one."""
        if values is None:
            ids = np.zeros(n, np.int64)
        else:
            ids = values.detach().cpu().numpy() if isinstance(values, torch.Tensor) else np.asarray(values)
            if ids.dtype.kind not in "iu" or ids.shape != (n,):
                raise invalid("field 'stream'", f"{ids.dtype} {ids.shape}", f"integers of shape ({n},): one stream id per row",
                              BufferInputError)
        first = int(ids[0])
        if (ids == first).all():  # one stream (or a caller that sends one env at a time)
            return np.full(n, self._index_of(first), np.int64)
        unique, inverse = np.unique(ids, return_inverse=True)
        rows = np.array([self._index_of(int(u)) for u in unique], np.int64)
        return rows[inverse]

    def _index_of(self, stream: int) -> int:
        row = self.ids.get(stream)
        if row is None:
            row = self.ids[stream] = len(self.ids)
            if row >= self.hist.shape[0]:
                self._grow(2 * self.hist.shape[0])
        return row

    def _grow(self, rows: int) -> None:
        old = self.hist.shape[0]
        self.hist = np.concatenate([self.hist, np.full((rows - old, self.hist.shape[1]), -1, np.int64)])
        self.hist_len = np.concatenate([self.hist_len, np.zeros(rows - old, np.int64)])
        self.hint = np.concatenate([self.hint, np.full((rows - old, 2, 2), -1, np.int64)])


__all__ = ["Frames", "stack_array"]
