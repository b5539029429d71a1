"""Casting ``extend``'s input to the buffer's fields: each field's bytes, ready for the compiled kernels.

Declared fields take numpy arrays, tensors, numbers and lists, with or without the batch dimension,
of any dtype that casts within its kind, and the cast must keep the values; fields fixed by a first
extend take their exact dtype. Input that cannot be cast raises, naming the field, before anything
is written.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import torch

from janus.buffer.replay.field_checks import as_tensor, check_field_names, check_item_count
from janus.buffer.storage.ring import FieldSpec
from janus.errors import BufferInputError, BufferTypeError, invalid


def coerce_batch(
    data: Any, specs: Mapping[str, FieldSpec], capacity: int, strict: bool = False, addresses: bool = False
) -> tuple[tuple[np.ndarray, ...] | tuple[int, ...], int]:
    """Cast ``data`` (field -> array, tensor, number or list; with or without the batch dimension)
    to the declared fields; return each field's bytes (in ``specs`` order) and the item count.

    Raises a :class:`BufferInputError` / :class:`BufferTypeError` naming the field for input that
    cannot be cast (float -> int, wrong item shape, missing or unknown fields, mismatched counts).
    ``strict`` (fields fixed by a first extend, not declared): tensors and arrays of the exact
    dtype with the batch dimension only, as before fields could be declared.
    ``addresses``: when every field is a contiguous CPU tensor of its exact dtype, its bytes are
    returned as addresses (``data_ptr()``, valid while ``data`` holds the tensors), not arrays.
    """
    if type(data) is dict:  # the usual call: exact dtypes, contiguous, in one pass without copies
        fast = _exact_sources(data, specs, capacity, strict, addresses)
        if fast is not None:
            return fast
    if not isinstance(data, Mapping) or not data:
        raise BufferTypeError(f"extend() takes a non-empty mapping of field name -> values, got {type(data).__name__}")
    check_field_names(data, "extend()")
    if len(data) != len(specs):
        _raise_field_mismatch(data, specs)
    views, n = [], -1
    for name, spec in specs.items():
        value = data.get(name, _MISSING)
        if value is _MISSING:
            _raise_field_mismatch(data, specs)
        if isinstance(value, torch.Tensor) and (value.is_conj() or value.is_neg()):
            value = value.resolve_conj().resolve_neg()  # lazy conjugates and negations: their values
        # The common inputs skip the casting logic: a CPU tensor or an array of the field's dtype.
        if type(value) is torch.Tensor and value.dtype is spec.dtype and value.is_cpu and not value.requires_grad:
            a = value.numpy() if spec.numpy_dtype is not None else value
        elif type(value) is np.ndarray and value.dtype == spec.numpy_dtype:
            a = value
        elif strict:
            a = _strict_array(name, value, spec)
        else:
            a = _as_array(name, value, spec)
        shape, item = a.shape, spec.shape
        if len(shape) == len(item) + 1 and shape[1:] == item:
            count = shape[0]
        elif shape == item and not strict:  # one transition without the batch dimension
            a, count = a.reshape((1, *item)), 1
        elif strict:
            raise invalid(f"field {name!r} shape", tuple(shape),
                          f"(n, *{item}) for n items (fields fixed by the first extend need the batch dimension; "
                          "fields declared with fields= also take one item without it)", BufferInputError)
        else:
            raise invalid(
                f"field {name!r} shape", tuple(shape), f"{item} for one item or (n, *{item}) for n items", BufferInputError
            )
        if count != n:
            if n >= 0:
                raise BufferInputError(
                    f"extend() fields have different batch sizes: field {name!r} has {count} items, "
                    f"the fields before it {n}; all must match"
                )
            n = count
        views.append(_bytes_of(a))
    check_item_count(n, capacity)
    return tuple(views), n


def cast_batch(data: Any, specs: Mapping[str, FieldSpec], capacity: int) -> tuple[dict[str, torch.Tensor], int]:
    """:func:`coerce_batch` for the batched-torch path (the ``cuda`` placement): declared fields
    take the same inputs and casts as on the CPU; returns each field as a CPU tensor of its dtype
    and shape ``(n, *item)``, and ``n``."""
    views, n = coerce_batch(data, specs, capacity)
    return {name: torch.from_numpy(v).view(spec.dtype).view(n, *spec.shape)
            for (name, spec), v in zip(specs.items(), views, strict=False)}, n


def _exact_sources(data: dict[str, Any], specs: Mapping[str, FieldSpec], capacity: int, strict: bool,
                   addresses: bool) -> tuple[tuple[Any, ...], int] | None:
    """The fast path of :func:`coerce_batch`: every field a C-contiguous numpy array, or (with
    ``addresses``) every field a contiguous CPU tensor, of the field's exact dtype and shape.
    Complex tensors are not read by address (a lazy conjugate's bytes are not its values).
    ``None`` for anything else, which the full checks then accept or explain."""
    if not data or len(data) != len(specs):
        return None
    out: list[Any] = []
    n = -1
    by_address = addresses and type(next(iter(data.values()))) is torch.Tensor
    for name, spec in specs.items():
        v = data.get(name)
        if by_address:
            if (type(v) is not torch.Tensor or v.dtype is not spec.dtype or spec.dtype.is_complex or not v.is_cpu
                    or v.layout is not torch.strided or v.is_neg() or not v.is_contiguous()):
                return None
        # A read-only array takes the copying path: the kernel's tuple of sources must be of one type
        # (a tuple mixing read-only and writeable views cannot be indexed by a run-time field number).
        elif type(v) is not np.ndarray or v.dtype is not spec.numpy_dtype or not ((f := v.flags).c_contiguous and f.writeable):
            return None
        shape, item = v.shape, spec.shape
        if len(shape) == len(item) + 1 and shape[1:] == item:
            count = shape[0]
        elif shape == item and not strict:  # one item without the batch dimension
            count = 1
        else:
            return None
        if count != n:
            if n >= 0:
                return None
            n = count
        out.append(v.data_ptr() if by_address else v.reshape(-1).view(np.uint8))  # type: ignore[union-attr, call-overload]  # by_address: a Tensor
    if not 0 < n <= capacity:
        return None
    return tuple(out), n


_MISSING = object()


def _strict_array(name: str, value: Any, spec: FieldSpec) -> np.ndarray | torch.Tensor:
    t = as_tensor(name, value)
    if t.device.type == "cuda":  # a GPU actor's piece: copied to the host, as declared fields are
        t = t.cpu()
    if not t.is_cpu:
        raise invalid(f"field {name!r} device", str(t.device), "'cpu' or 'cuda'", BufferInputError)
    if t.dtype != spec.dtype:
        raise invalid(f"field {name!r} dtype", t.dtype, f"{spec.dtype} (fixed by the first extend)", BufferInputError)
    return t.numpy() if spec.numpy_dtype is not None else t


def _raise_field_mismatch(data: Mapping[str, Any], specs: Mapping[str, FieldSpec]) -> None:
    missing, extra = sorted(set(specs) - set(data)), sorted(map(str, set(data) - set(specs)))
    raise BufferInputError(
        f"extend() fields do not match the buffer's: missing {missing}, unexpected {extra}; "
        f"accepted fields: {sorted(specs)}"
    )


def _bytes_of(a: np.ndarray | torch.Tensor) -> np.ndarray:
    """The item bytes of ``a`` as a contiguous 1-D uint8 array (a view when ``a`` is contiguous)."""
    if isinstance(a, torch.Tensor):
        return a.contiguous().reshape(-1).view(torch.uint8).numpy()
    flat = a.reshape(-1)  # a copy unless a is contiguous (or 1-D)
    if flat.strides[0] != flat.itemsize or not flat.flags.writeable:  # read-only: see _exact_sources
        flat = flat.copy()
    return flat.view(np.uint8)


def _cast_error(name: str, given: Any, spec: FieldSpec) -> BufferInputError:
    return invalid(
        f"field {name!r} dtype", given,
        f"{str(spec.dtype).removeprefix('torch.')} or a dtype that casts to it within its kind "
        "(bool -> int -> float, wider -> narrower when the values fit; not float -> int)", BufferInputError,
    )


def _as_array(name: str, value: Any, spec: FieldSpec) -> np.ndarray | torch.Tensor:
    """``value`` as a numpy array (a tensor for torch-only dtypes) of the field's dtype."""
    np_dtype = spec.numpy_dtype
    if isinstance(value, torch.Tensor):
        if value.requires_grad:
            value = value.detach()
        if value.dtype != spec.dtype:
            if not torch.can_cast(value.dtype, spec.dtype):
                raise _cast_error(name, value.dtype, spec)
            cast = value.to(spec.dtype)
            _check_cast_kept_values(name, value, cast, spec)
            value = cast
        if not value.is_cpu:
            value = value.cpu()
        return value.numpy() if np_dtype is not None else value
    if not isinstance(value, np.ndarray):
        try:
            value = np.asarray(value)
        except (TypeError, ValueError):  # ragged lists and the like
            raise invalid(f"field {name!r}", type(value).__name__, "an array, tensor, number or (nested) list of one shape",
                          BufferTypeError) from None
    if np_dtype is None:  # bfloat16 & co: cast through torch
        if value.dtype.kind not in "biuf":
            raise _cast_error(name, f"numpy {value.dtype}", spec)
        source = torch.from_numpy(np.ascontiguousarray(value))
        cast = source.to(spec.dtype)
        _check_cast_kept_values(name, source, cast, spec)
        return cast
    if value.dtype.kind not in "biufc":  # object, str, bytes, datetime, structured...
        raise invalid(f"field {name!r} dtype", f"numpy {value.dtype}", "a numeric or bool dtype", BufferTypeError)
    if value.dtype != np_dtype:
        integers = value.dtype.kind in "biu" and np_dtype.kind in "iu"  # any int (a Python int is int64) fits if in range
        if not integers and not np.can_cast(value.dtype, np_dtype, "same_kind"):
            raise _cast_error(name, f"numpy {value.dtype}", spec)
        with np.errstate(over="ignore", invalid="ignore"):
            cast = value.astype(np_dtype)
        _check_cast_kept_values(name, value, cast, spec)
        value = cast
    return value


def _check_cast_kept_values(name: str, value: Any, cast: Any, spec: FieldSpec) -> None:
    """A narrowing cast must keep the values: integers within the field's range, finite numbers
    finite. Wrapping ``300`` to ``44`` in an int8 field, or ``1e39`` to ``inf`` in a float32 one,
    would store a different number without a word. ``value`` and ``cast``: both numpy or both torch."""
    if (value.size if isinstance(value, np.ndarray) else value.numel()) == 0:
        return
    kind = str(spec.dtype).removeprefix("torch.")
    integer_field = not (spec.dtype.is_floating_point or spec.dtype.is_complex or spec.dtype == torch.bool)
    if integer_field:
        a = value if isinstance(value, np.ndarray) else value.cpu().numpy()  # integers: numpy has every dtype
        if a.dtype.kind == "b":
            return
        info = torch.iinfo(spec.dtype)
        lo, hi = int(a.min()), int(a.max())
        if lo < info.min or hi > info.max:
            raise invalid(f"field {name!r} values", f"{lo}..{hi}", f"integers in [{info.min}, {info.max}] ({kind})", BufferInputError)
    elif spec.dtype.is_floating_point:
        lib = np if isinstance(value, np.ndarray) else torch
        overflow = lib.isinf(cast) & ~lib.isinf(value)
        if bool(overflow.any()):
            raise invalid(f"field {name!r} values", value[overflow][:3].tolist(),
                          f"numbers within {kind}'s range (+-{torch.finfo(spec.dtype).max:.4g})", BufferInputError)
