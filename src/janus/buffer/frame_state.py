"""The frame side of :class:`~janus.buffer.frames.FrameStackReplay`: arrays, streams, checkpoints.

:class:`Frames` owns the frame ring (see :mod:`janus.buffer._frame_kernels` for what each array
holds) and the per-stream search state; :func:`state_of` / :func:`restore` turn a replay into a
checkpoint state and back.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from janus.buffer import checkpoint
from janus.buffer.memory import advise_huge_pages
from janus.errors import AllocationError, BufferInputError, BufferTypeError, CheckpointError, invalid

if TYPE_CHECKING:
    from janus.buffer.frames import FrameStackReplay

KIND = "frame_stack_replay"


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


# ---- checkpoints ---------------------------------------------------------------------------------
def state_of(replay: FrameStackReplay) -> dict[str, Any]:
    f, st = replay._f, replay._storage
    state: dict[str, Any] = {
        "kind": KIND, "capacity": replay.capacity, "placement": replay.placement, "sampler": replay._sampler_name,
        "sampler_kwargs": dict(replay._sampler_kwargs), "seed": replay.seed, "written": replay._written,
        "frame_capacity": replay.frame_capacity, "max_age": replay.max_age, "history": replay.history,
        "order": list(replay._order), "stack": None, "fields": {},
        "sampler_state": {k: (v.cpu() if isinstance(v, torch.Tensor) else v) for k, v in replay._sampler.state_dict().items()},
    }
    if f is None or st.packed is None:
        return state
    rows, nf, ns = min(replay._written, replay.capacity), min(int(f.meta[0]), replay.frame_capacity), len(f.ids)
    state.update({
        "stack": {"shape": list(f.stack_shape), "dtype": str(f.dtype).removeprefix("torch.")},
        "fields": {k: [list(s.shape), str(s.dtype).removeprefix("torch.")] for k, s in st.specs.items() if k != "_frames"},
        "rows": torch.from_numpy(st.packed[:rows].copy()),
        "frames": torch.from_numpy(f.frames[:nf].copy()),
        **{k: torch.from_numpy(getattr(f, k)[:nf].copy()) for k in ("prev", "gen", "users")},
        "meta": torch.from_numpy(f.meta.copy()),
        "streams": torch.tensor(sorted(f.ids, key=f.ids.__getitem__), dtype=torch.int64),
        **{k: torch.from_numpy(getattr(f, k)[:ns].copy()) for k in ("hist", "hist_len", "hint")},
    })
    return state


def restore(replay: FrameStackReplay, state: Mapping[str, Any]) -> None:
    """Load ``state`` into ``replay``, all or nothing."""
    if not isinstance(state, Mapping) or state.get("kind") != KIND:
        raise CheckpointError(f"not a FrameStackReplay state (kind {state.get('kind') if isinstance(state, Mapping) else None!r})")
    mine = {"capacity": replay.capacity, "sampler": replay._sampler_name, "frame_capacity": replay.frame_capacity}
    theirs = {k: state.get(k) for k in mine}
    if theirs != mine:
        raise CheckpointError(f"checkpoint holds {theirs}; this FrameStackReplay has {mine}")
    try:
        written = checkpoint.written_from_state(state)
        sampler = replay._make_sampler(0)
        sampler.load_state_dict({k: v for k, v in state["sampler_state"].items()})
        if state["stack"] is None:
            f, storage, order = None, type(replay._storage)(replay.capacity, replay.placement), []
        else:
            specs = checkpoint.specs_from_state({"capacity": replay.capacity, "fields": state["fields"], "sampler": replay._sampler_name})
            shape, dtype = tuple(state["stack"]["shape"]), getattr(torch, state["stack"]["dtype"])
            _check_frame_memory(replay, shape, dtype)
            np_dtype = torch.empty(0, dtype=dtype).numpy().dtype
            f, storage = replay._build(shape, np_dtype, specs)
            order = [str(k) for k in state["order"]]
            if sorted(order) != sorted([*specs, "obs", "next_obs"]):
                raise CheckpointError(f"checkpoint 'order' {order} does not name its fields {sorted(specs)} + obs, next_obs")
            assert storage.packed is not None  # _build allocated it
            _copy(state["rows"], storage.packed, min(written, replay.capacity), "rows")
            nf = min(int(state["meta"][0]), replay.frame_capacity)
            for name in ("frames", "prev", "gen", "users"):
                _copy(state[name], getattr(f, name), nf, name)
            f.meta[:] = _array(state["meta"], (2,), np.int64, "meta")
            ids = [int(i) for i in _array(state["streams"], None, np.int64, "streams")]
            f.ids = {sid: row for row, sid in enumerate(ids)}
            if len(ids) > f.hist.shape[0]:
                f._grow(len(ids))
            for name in ("hist", "hist_len", "hint"):
                _copy(state[name], getattr(f, name), len(ids), name)
    except (CheckpointError, AllocationError):
        raise
    except (LookupError, TypeError, ValueError, AttributeError, RuntimeError, BufferInputError) as exc:
        raise CheckpointError(f"malformed FrameStackReplay checkpoint state: {type(exc).__name__}: {exc}") from None
    replay._f, replay._storage, replay._order = f, storage, order
    replay._sampler, replay._written = sampler, written


def _check_frame_memory(replay: FrameStackReplay, shape: tuple[int, ...], dtype: torch.dtype) -> None:
    if not isinstance(dtype, torch.dtype) or not all(isinstance(d, int) and d >= 1 for d in shape):
        raise CheckpointError(f"checkpoint 'stack' is malformed: shape {shape!r}, dtype {dtype!r}")
    need, limit = replay.frame_capacity * math.prod(shape[1:]) * dtype.itemsize, checkpoint.memory_limit()
    if need > limit:
        raise CheckpointError(f"checkpoint declares {need / 2**30:.1f} GiB of frames, more than this machine's "
                              f"{limit / 2**30:.1f} GiB; nothing was allocated")


def _array(value: Any, shape: tuple[int, ...] | None, dtype: Any, name: str) -> np.ndarray:
    if not isinstance(value, torch.Tensor):
        raise CheckpointError(f"checkpoint {name!r} is a {type(value).__name__}; expected a tensor")
    a = value.detach().cpu().numpy()
    if (shape is not None and a.shape != shape) or a.dtype != dtype:
        raise CheckpointError(f"checkpoint {name!r} holds {a.dtype} {a.shape}; expected {np.dtype(dtype)} {shape}")
    return a


def _copy(value: Any, dst: np.ndarray, rows: int, name: str) -> None:
    a = _array(value, (rows, *dst.shape[1:]), dst.dtype, name)
    dst[:rows] = a


__all__ = ["Frames", "restore", "stack_array", "state_of"]
