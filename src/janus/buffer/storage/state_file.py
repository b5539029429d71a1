"""Safe, atomic, checksummed checkpoint files for buffers (and the runtime's components).

Files are written with ``torch.save`` through :func:`janus.fileio.atomic_open` (a fresh temporary
name created with ``O_EXCL | O_NOFOLLOW``, fsync, rename), so a crash mid-save leaves the previous
checkpoint intact and a planted symlink never redirects the write. Each file carries a SHA-256 of
its state (:func:`state_digest`: every tensor's bytes, dtype and shape, every key and number), so a
flipped byte anywhere is refused on load instead of loading as different numbers. Files are read
with ``torch.load(weights_only=True)``: tensors, numbers, strings and containers only — loading a
checkpoint never executes pickled code. Declared sizes (capacity, field shapes) are checked
against this machine's memory *before* anything is allocated.
"""

from __future__ import annotations

import hashlib
import math
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from janus.buffer.storage.ring import FieldSpec
from janus.errors import BufferTypeError, CheckpointError, invalid
from janus.fileio import atomic_open

FORMAT = "janus.experience_buffer"
VERSION = 2  # 2: the state's sha256 is stored beside it
TREE_BYTES_PER_ITEM = 32  # prioritized sampling: a sum tree and a min tree of 2 * capacity float64 leaves


def state_digest(state: Any) -> str:
    """SHA-256 of a checkpoint state: structure, keys, numbers, strings and every tensor's bytes."""
    h = hashlib.sha256()
    _feed(h, state)
    return h.hexdigest()


def _feed(h: Any, x: Any) -> None:
    if isinstance(x, torch.Tensor):
        # a fresh dense copy: .contiguous() keeps the stride of a size-1 dim (a packed row's field)
        src = x.detach().to("cpu").reshape(-1)
        t = torch.empty(src.shape, dtype=src.dtype).copy_(src)
        h.update(f"T{x.dtype}{tuple(x.shape)};".encode())
        if t.numel():
            h.update(t.view(torch.uint8).numpy() if t.dtype != torch.uint8 else t.numpy())
    elif isinstance(x, Mapping):
        h.update(f"D{len(x)};".encode())
        for k, v in x.items():
            _feed(h, k)
            _feed(h, v)
    elif isinstance(x, (list, tuple)):
        h.update(f"{'L' if isinstance(x, list) else 'U'}{len(x)};".encode())
        for v in x:
            _feed(h, v)
    elif isinstance(x, str):
        b = x.encode("utf-8", "surrogatepass")
        h.update(f"S{len(b)};".encode() + b)
    elif isinstance(x, bytes):
        h.update(f"B{len(x)};".encode() + x)
    elif x is None or isinstance(x, (bool, int, float, complex)):
        h.update(f"{type(x).__name__}:{x!r};".encode())
    else:  # what weights_only loading yields is covered above; anything else by its type and repr
        h.update(f"O{type(x).__module__}.{type(x).__qualname__}:{x!r};".encode())


def save_atomic(state: Mapping[str, Any], path: str | Path, fmt: str = FORMAT) -> None:
    """Write ``state`` (with its checksum) to ``path`` atomically, never through a symlink."""
    state = dict(state)
    blob = {"format": fmt, "version": VERSION, "sha256": state_digest(state), "state": state}
    with atomic_open(path, "wb") as f:
        torch.save(blob, f)


def load_state(path: str | Path, fmt: str = FORMAT) -> dict[str, Any]:
    """Read a checkpoint written by :func:`save_atomic`; clear errors for bad or altered files."""
    if not isinstance(path, (str, os.PathLike)):
        raise invalid("checkpoint path", path, "a str or os.PathLike", BufferTypeError)
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"checkpoint not found: {str(path)!r}" + (" (it is a directory)" if path.is_dir() else ""))
    try:
        blob = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # noqa: BLE001  truncated zip, foreign pickle, unsafe globals...
        raise CheckpointError(
            f"{str(path)!r} is not a readable janus checkpoint (truncated, corrupt or foreign file): "
            f"{type(exc).__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''}"
        ) from None
    if not isinstance(blob, dict) or blob.get("format") != fmt or not isinstance(blob.get("state"), dict):
        raise CheckpointError(f"{str(path)!r} is not a {fmt} checkpoint")
    if blob.get("version") != VERSION:
        version = blob.get("version")
        raise CheckpointError(f"{str(path)!r} has checkpoint version {version!r:.40}; this janus reads {VERSION}"
                              + (" (version 1 files carry no checksum: save them again)" if version == 1 else ""))
    if blob.get("sha256") != state_digest(blob["state"]):
        raise CheckpointError(
            f"{str(path)!r} fails its checksum (the sha256 of its contents differs from the one saved in it): "
            "the file is corrupt or was modified; restore it from a backup or save it again"
        )
    if fmt == FORMAT:
        check_declared_sizes(blob["state"])
    return blob["state"]


def memory_limit(placement: Any = None) -> int:
    """Bytes a buffer may declare: this machine's physical memory (or the GPU's, for ``cuda``)."""
    limit = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    if placement == "cuda" and torch.cuda.is_available():
        limit = max(limit, torch.cuda.get_device_properties(0).total_memory)
    return int(limit)


def _about(n: int) -> str:
    """A size in bounded text, however large the number."""
    return f"{n / 2**30:.1f} GiB" if n < 2**80 else f"about 2^{n.bit_length() - 1} bytes"


def _count(n: int) -> str:
    return f"{n:,}" if n < 10**15 else f"about 2^{n.bit_length() - 1}"


def check_declared_sizes(state: Mapping[str, Any]) -> None:
    """Refuse a state whose declared capacity and field shapes would need more memory than this
    machine has — before anything is allocated (a crafted file of a few bytes can declare
    terabytes)."""
    if not isinstance(state, Mapping):
        raise CheckpointError(f"a checkpoint state is a mapping (state_dict() output), got {type(state).__name__}")
    capacity, fields = state.get("capacity"), state.get("fields")
    if isinstance(capacity, bool) or not isinstance(capacity, int) or capacity < 1:
        raise CheckpointError(f"checkpoint 'capacity' is {capacity!r:.60}; expected an integer >= 1")
    if not isinstance(fields, Mapping):
        raise CheckpointError(f"checkpoint 'fields' is a {type(fields).__name__}; expected a mapping")
    row = 0
    for name, spec in fields.items():
        try:
            shape, dtype = spec
            itemsize = getattr(torch, dtype).itemsize
            if any(isinstance(d, bool) or not isinstance(d, int) or d < 0 for d in shape):
                raise ValueError
        except (TypeError, ValueError, AttributeError):
            raise CheckpointError(f"checkpoint field {str(name)!r:.60} has a malformed spec {spec!r:.80}") from None
        row += math.prod(shape) * itemsize
    trees = TREE_BYTES_PER_ITEM if state.get("sampler") == "prioritized" else 0
    need, limit = capacity * (row + trees), memory_limit(state.get("placement"))
    if need > limit:
        raise CheckpointError(
            f"checkpoint declares a buffer of {_about(need)} (capacity {_count(capacity)} items of "
            f"{_count(row + trees)} bytes each), more than this machine's {_about(limit)}: the file is crafted or corrupt, "
            "or was saved on a larger machine; nothing was allocated"
        )


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
    check_declared_sizes(state)  # before the caller allocates storage for these specs
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
            held = (tuple(t.shape), t.dtype) if isinstance(t, torch.Tensor) else type(t).__name__
            raise CheckpointError(f"checkpoint field {name!r} holds {held}; expected {(tuple(dst.shape), dst.dtype)}")
        dst.copy_(t)
