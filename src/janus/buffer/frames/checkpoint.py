"""A :class:`~janus.buffer.frames.replay.FrameStackReplay` as a checkpoint state and back.

:func:`state_of` copies out the rows, the frames and their links and the per-stream search state;
:func:`restore` loads them into new arrays first, all or nothing: a malformed state raises
:class:`~janus.errors.CheckpointError` and leaves the replay as it was. Both read the replay's own
fields (its owner calls them under its lock); the file format is :mod:`janus.buffer.storage.state_file`'s.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, Protocol

import numpy as np
import torch

from janus.buffer.frames.state import Frames
from janus.buffer.kernels.native import NativeSampler
from janus.buffer.storage import state_file
from janus.buffer.storage.ring import FieldSpec, RingStorage
from janus.errors import AllocationError, BufferInputError, CheckpointError


class CheckpointedReplay(Protocol):
    """What a checkpoint reads and writes of a :class:`janus.buffer.frames.replay.FrameStackReplay`:
    its settings, rows, frames, sampler and cursor, and how it builds its arrays."""

    capacity: int
    placement: str
    seed: int | None
    frame_capacity: int
    max_age: int
    history: int
    _sampler_name: str
    _sampler_kwargs: dict[str, float]
    _written: int
    _order: list[str]
    _sampler: NativeSampler
    _f: Frames | None
    _storage: RingStorage

    def _make_sampler(self, seed: int | None) -> NativeSampler: ...

    def _build(self, stack_shape: tuple[int, ...], dtype: Any, specs: Mapping[str, FieldSpec]) -> tuple[Frames, RingStorage]: ...

KIND = "frame_stack_replay"  # a state_dict's "kind"


def state_of(replay: CheckpointedReplay) -> dict[str, Any]:
    """Everything that restores ``replay``: rows, frames and their links, streams, sampler state."""
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


def restore(replay: CheckpointedReplay, state: Mapping[str, Any]) -> None:
    """Load ``state`` into ``replay``, all or nothing."""
    if not isinstance(state, Mapping) or state.get("kind") != KIND:
        raise CheckpointError(f"not a FrameStackReplay state (kind {state.get('kind') if isinstance(state, Mapping) else None!r})")
    mine = {"capacity": replay.capacity, "sampler": replay._sampler_name, "frame_capacity": replay.frame_capacity}
    theirs = {k: state.get(k) for k in mine}
    if theirs != mine:
        raise CheckpointError(f"checkpoint holds {theirs}; this FrameStackReplay has {mine}")
    try:
        written = state_file.written_from_state(state)
        sampler = replay._make_sampler(0)
        sampler.load_state_dict({k: v for k, v in state["sampler_state"].items()})
        if state["stack"] is None:
            f, storage, order = None, type(replay._storage)(replay.capacity, replay.placement), []
        else:
            specs = state_file.specs_from_state({"capacity": replay.capacity, "fields": state["fields"], "sampler": replay._sampler_name})
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


def _check_frame_memory(replay: CheckpointedReplay, shape: tuple[int, ...], dtype: torch.dtype) -> None:
    if not isinstance(dtype, torch.dtype) or not all(isinstance(d, int) and d >= 1 for d in shape):
        raise CheckpointError(f"checkpoint 'stack' is malformed: shape {shape!r}, dtype {dtype!r}")
    need, limit = replay.frame_capacity * math.prod(shape[1:]) * dtype.itemsize, state_file.memory_limit()
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
