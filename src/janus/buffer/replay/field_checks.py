"""Checks of the experience buffer's fields: declared fields, ``extend``'s batches as tensors, ``gather``'s slots.

Every rejection happens before any state changes; errors name the field, what was given and what
is accepted. Casting input to declared fields (the CPU path) is :mod:`janus.buffer.replay.field_casts`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import torch

from janus.buffer.storage.ring import FieldSpec
from janus.errors import BufferInputError, BufferTypeError, invalid


def torch_readable(value: np.ndarray) -> np.ndarray:
    """``value``, or a copy that torch can take: native byte order (big-endian data from a file
    or a network keeps its values) and writable (torch tensors cannot be read-only)."""
    if not value.dtype.isnative:
        return value.astype(value.dtype.newbyteorder("="))
    return value if value.flags.writeable else value.copy()


def as_tensor(name: str, value: Any) -> torch.Tensor:
    if isinstance(value, torch.Tensor):
        return value.detach()
    if isinstance(value, np.ndarray):
        if value.dtype == object:
            raise BufferTypeError(f"field {name!r}: numpy arrays of dtype object cannot be stored")
        value = torch_readable(value)
        try:
            return torch.from_numpy(np.ascontiguousarray(value))
        except TypeError:  # str, bytes, datetime, structured... dtypes torch has no equivalent for
            raise invalid(
                f"field {name!r} dtype", f"numpy {value.dtype}", "a numeric or bool dtype torch supports", BufferTypeError
            ) from None
    raise BufferTypeError(
        f"field {name!r}: got {type(value).__name__}; accepted: a torch.Tensor or numpy.ndarray "
        "with a leading batch dimension"
    )


def matches_specs(data: Any, specs: Mapping[str, FieldSpec], capacity: int, device: torch.device) -> bool:
    """Fast path of :func:`check_batch` for the common call: a dict of tensors exactly matching the
    known specs (no grad, right device, 1 to ``capacity`` items). ``False`` sends the batch through
    the full checks, which accept or explain it."""
    if type(data) is not dict or len(data) != len(specs):
        return False
    n = -1
    for name, t in data.items():
        spec = specs.get(name)
        if spec is None or not isinstance(t, torch.Tensor) or t.requires_grad or t.dtype != spec.dtype:
            return False
        shape = t.shape
        if len(shape) != len(spec.shape) + 1 or shape[1:] != spec.shape or (n >= 0 and shape[0] != n):
            return False
        if not (t.is_cpu or t.device.type == device.type):
            return False
        n = shape[0]
    return 0 < n <= capacity


def check_field_names(data: Mapping[Any, Any], caller: str) -> None:
    """Field names are strings (``{1: a, "1": b}`` would otherwise collapse into one field)."""
    for key in data:
        if not isinstance(key, str):
            raise BufferInputError(f"{caller} field names must be strings; got {key!r} ({type(key).__name__})")


#: Names a batch adds to the stored fields: the items' keys and (prioritized) importance weights.
RESERVED_FIELDS = {"index": "the items' keys", "weight": "the importance weights"}


def check_reserved_names(names: Any, reserved: Mapping[str, str] = RESERVED_FIELDS) -> None:
    """Refuse a new field whose name a batch uses for something else: stored, it would be
    silently replaced in every ``sample``/``gather`` result."""
    for name in names:
        if name in reserved:
            raise BufferInputError(f"field name {name!r} is reserved: a batch holds {reserved[name]} under it; "
                                   "rename the field")


def check_batch(
    data: Any, specs: Mapping[str, FieldSpec], capacity: int, device: torch.device
) -> tuple[dict[str, torch.Tensor], dict[str, FieldSpec]]:
    """Validate a batch for ``extend``; return it as tensors plus the (possibly new) field specs."""
    if specs and matches_specs(data, specs, capacity, device):
        return data, specs  # type: ignore[return-value]  # matches_specs: tensors of the specs' own fields
    if not isinstance(data, Mapping) or not data:
        raise BufferTypeError(
            f"extend() takes a non-empty mapping of field name -> tensor, got {type(data).__name__}"
        )
    check_field_names(data, "extend()")
    batch = {str(k): as_tensor(str(k), v) for k, v in data.items()}
    if specs:
        missing, extra = sorted(set(specs) - set(batch)), sorted(set(batch) - set(specs))
        if missing or extra:
            raise BufferInputError(
                f"extend() fields do not match the buffer's: missing {missing}, unexpected {extra}; "
                f"accepted fields: {sorted(specs)}"
            )
    sizes = {}
    for name, t in batch.items():
        if t.dim() == 0:
            raise invalid(f"field {name!r} shape", tuple(t.shape), "a tensor with a leading batch dimension", BufferInputError)
        if t.device.type not in ("cpu", "cuda", device.type):  # copied to the placement (a meta tensor has no data)
            raise invalid(f"field {name!r} device", str(t.device), "'cpu' or 'cuda'", BufferInputError)
        sizes[name] = t.shape[0]
        if specs:
            spec = specs[name]
            if tuple(t.shape[1:]) != spec.shape:
                raise invalid(f"field {name!r} item shape", tuple(t.shape[1:]), f"{spec.shape} (fixed by the first extend)",
                              BufferInputError)
            if t.dtype != spec.dtype:
                raise invalid(f"field {name!r} dtype", t.dtype, f"{spec.dtype} (fixed by the first extend)", BufferInputError)
    if len(set(sizes.values())) != 1:
        raise BufferInputError(f"extend() fields have different batch sizes: {sizes}; all must match")
    n = next(iter(sizes.values()))
    check_item_count(n, capacity)
    if not specs:
        check_reserved_names(batch)
        for name, t in batch.items():
            if 0 in t.shape[1:]:  # as declared fields: items of at least one value
                raise invalid(f"field {name!r} item shape", tuple(t.shape[1:]), "dimensions >= 1 (() for scalars)",
                              BufferInputError)
    new_specs = dict(specs) or {k: FieldSpec(tuple(t.shape[1:]), t.dtype) for k, t in batch.items()}
    return batch, new_specs


def check_item_count(n: int, capacity: int) -> None:
    """An extend writes 1 to ``capacity`` items."""
    if n == 0:
        raise invalid("batch size", 0, "at least 1 item per extend()", BufferInputError)
    if n > capacity:
        raise invalid("batch size", n, f"at most the capacity ({capacity}) items per extend()", BufferInputError)


def slot_array(slots: Any, size: int) -> np.ndarray:
    """``gather``'s slots (a tensor, array or list of integers, any shape: read flat) as a
    contiguous int64 array, each in ``[0, size)``. Floats, bools (a mask is not slots) and
    out-of-range values are refused, not truncated or wrapped."""
    try:
        a = slots.detach().cpu().numpy() if isinstance(slots, torch.Tensor) else np.asarray(slots)
    except (TypeError, ValueError, RuntimeError):
        raise BufferTypeError(f"slots: got {type(slots).__name__}; accepted: integers (a tensor, array or list)") from None
    if a.size and a.dtype.kind not in "iu":
        raise invalid("slots dtype", str(a.dtype), "integers (slots in [0, len(buffer)), not a mask or floats)", BufferTypeError)
    if a.size and not (a.min() >= 0 and a.max() < size):
        raise invalid("slots", [int(a.min()), int(a.max())], f"slots in [0, {size})", BufferInputError)
    return np.ascontiguousarray(a.reshape(-1), dtype=np.int64)


def parse_fields(fields: Any) -> dict[str, FieldSpec]:
    """Declared fields: ``{name: (shape, dtype)}`` or ``{name: {"shape": ..., "dtype": ...}}``;
    shape an int or a tuple (``()`` for scalars), dtype a torch dtype, numpy dtype or its name."""
    if not isinstance(fields, Mapping) or not fields:
        raise invalid("fields", fields, "a non-empty mapping of name -> (shape, dtype)", BufferTypeError)
    check_reserved_names(fields)
    specs = {}
    for name, decl in fields.items():
        if isinstance(decl, Mapping):
            decl = (decl.get("shape", ()), decl.get("dtype", torch.float32))
        if not isinstance(name, str) or not isinstance(decl, (tuple, list)) or len(decl) != 2:
            raise invalid(f"fields[{name!r}]", decl, "(shape, dtype), e.g. ((4,), torch.float32) or ((), 'int64')", BufferTypeError)
        shape, dtype = decl
        shape = (shape,) if isinstance(shape, (int, np.integer)) else shape
        if not isinstance(shape, (tuple, list)) or not all(
            isinstance(d, (int, np.integer)) and not isinstance(d, bool) and d >= 1 for d in shape
        ):
            raise invalid(f"fields[{name!r}] shape", shape, "an int or a tuple of ints >= 1 (() for scalars)", BufferInputError)
        specs[name] = FieldSpec(tuple(int(d) for d in shape), _torch_dtype(name, dtype))
    return specs


def _torch_dtype(name: str, dtype: Any) -> torch.dtype:
    if isinstance(dtype, torch.dtype):
        return dtype
    try:
        return torch.from_numpy(np.zeros(0, dtype=np.dtype(dtype))).dtype
    except (TypeError, ValueError):
        pass
    found = getattr(torch, str(dtype), None)  # torch-only names such as "bfloat16"
    if isinstance(found, torch.dtype):
        return found
    raise invalid(f"fields[{name!r}] dtype", dtype, "a torch dtype, numpy dtype or a name such as 'float32'", BufferTypeError)
