"""Safe, atomic checkpoint files for buffers.

Files are written with ``torch.save`` to a temporary file in the target folder, flushed to disk
and renamed into place, so a crash mid-save leaves the previous checkpoint intact. They are read
with ``torch.load(weights_only=True)``: tensors, numbers, strings and containers only — loading a
checkpoint never executes pickled code.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any, Mapping

import torch

from janus.buffer.storage import FieldSpec
from janus.errors import BufferTypeError, CheckpointError, invalid

FORMAT = "janus.experience_buffer"
VERSION = 1


def save_atomic(state: Mapping[str, Any], path: str | Path, fmt: str = FORMAT) -> None:
    """Write ``state`` to ``path`` atomically."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            torch.save({"format": fmt, "version": VERSION, "state": dict(state)}, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def load_state(path: str | Path, fmt: str = FORMAT) -> dict[str, Any]:
    """Read a checkpoint written by :func:`save_atomic`; clear errors for bad files."""
    if not isinstance(path, (str, os.PathLike)):
        raise invalid("checkpoint path", path, "a str or os.PathLike", BufferTypeError)
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"checkpoint not found: {str(path)!r}")
    try:
        blob = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # truncated zip, foreign pickle, unsafe globals...
        raise CheckpointError(
            f"{str(path)!r} is not a readable janus checkpoint (truncated, corrupt or foreign file): "
            f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
        ) from None
    if not isinstance(blob, dict) or blob.get("format") != fmt or "state" not in blob:
        raise CheckpointError(f"{str(path)!r} is not a {fmt} checkpoint")
    if blob.get("version") != VERSION:
        raise CheckpointError(f"{str(path)!r} has checkpoint version {blob.get('version')!r}; this janus reads {VERSION}")
    return blob["state"]


def check_compatible(state: Mapping[str, Any], capacity: int, sampler: str) -> None:
    """A state can only be loaded into a buffer of the same capacity and sampler."""
    if not isinstance(state, Mapping):
        raise CheckpointError(f"a checkpoint state is a mapping (state_dict() output), got {type(state).__name__}")
    if state.get("capacity") != capacity or state.get("sampler") != sampler:
        raise CheckpointError(
            f"checkpoint holds capacity={state.get('capacity')!r}, sampler={state.get('sampler')!r}; "
            f"this buffer has capacity={capacity}, sampler={sampler!r}"
        )


def specs_from_state(state: Mapping[str, Any]) -> dict[str, FieldSpec]:
    """Field specs recorded in a state dict."""
    specs = {}
    for name, (shape, dtype) in state["fields"].items():
        torch_dtype = getattr(torch, dtype, None)
        if not isinstance(torch_dtype, torch.dtype):
            raise CheckpointError(f"checkpoint field {name!r} has unknown dtype {dtype!r}")
        specs[name] = FieldSpec(tuple(shape), torch_dtype)
    return specs


def written_from_state(state: Mapping[str, Any]) -> int:
    """Items the checkpointed buffer had written (its next key)."""
    written = state["written"]
    if isinstance(written, bool) or not isinstance(written, int) or written < 0:
        raise CheckpointError(f"checkpoint 'written' is {written!r}; expected an integer >= 0")
    return written


def copy_data(state: Mapping[str, Any], fields: Mapping[str, torch.Tensor], size: int) -> None:
    """Copy the checkpoint's ``size`` stored rows into ``fields``; names, shapes and dtypes must match."""
    data = state["data"]
    if not isinstance(data, Mapping) or set(data) != set(fields):
        got = sorted(map(str, data)) if isinstance(data, Mapping) else type(data).__name__
        raise CheckpointError(f"checkpoint 'data' holds fields {got}; expected {sorted(fields)}")
    for name, t in data.items():
        dst = fields[name][:size]
        if not isinstance(t, torch.Tensor) or t.shape != dst.shape or t.dtype != dst.dtype:
            got = (tuple(t.shape), t.dtype) if isinstance(t, torch.Tensor) else type(t).__name__
            raise CheckpointError(f"checkpoint field {name!r} holds {got}; expected {(tuple(dst.shape), dst.dtype)}")
        dst.copy_(t)
