"""Input checks for the experience buffer: every rejection happens before any state changes.

Errors name the argument, what was given and what is accepted.
"""

from __future__ import annotations

import math
import numbers
import sys
from collections.abc import Mapping
from typing import Any, TypeGuard

import numpy as np
import torch

from janus.buffer.storage.ring import FieldSpec
from janus.errors import BufferInputError, BufferTypeError, ConfigError, JanusError, invalid

#: Largest capacity / batch size accepted: far beyond any memory, yet small enough that torch
#: reports an allocation failure (not an integer overflow) when asked for that many items.
MAX_ITEMS = 2**40


def is_int(value: Any) -> TypeGuard[int | np.integer]:
    """A Python or numpy integer, not a bool."""
    return isinstance(value, (int, np.integer)) and not isinstance(value, bool)


def check_int(name: str, value: Any, low: int, high: int | None = None, why: str = "",
              error: type[JanusError] = ConfigError) -> None:
    """Refuse an argument that is not an integer in ``[low, high]`` (``high`` None: no bound),
    naming it; ``why`` is added to what is accepted."""
    if not is_int(value) or value < low or (high is not None and value > high):
        bounds = f"in [{low}, {high}]" if high is not None else f">= {low}"
        raise invalid(name, value, f"an integer {bounds}{why}", error)


def _is_count(value: Any) -> bool:
    return is_int(value) and bool(1 <= value <= MAX_ITEMS)


def check_capacity(capacity: Any) -> None:
    if not _is_count(capacity):
        raise invalid("capacity", capacity, "an integer in [1, 2**40]", BufferInputError)


def check_batch_size(batch_size: Any) -> None:
    if not _is_count(batch_size):
        raise invalid("batch_size", batch_size, "an integer in [1, 2**40]", BufferInputError)


def is_finite_number(value: Any) -> bool:
    """A real number (Python or numpy: ``np.float32(0.5)`` too; not a bool) that is finite as a
    float (compared, not converted: a huge int raises no OverflowError)."""
    if not isinstance(value, numbers.Real) or isinstance(value, (bool, np.bool_)):
        return False
    if isinstance(value, np.generic):  # compared as a Python number (a float32 scalar would warn on overflow)
        value = value.item()
    big = sys.float_info.max
    return -big <= value <= big  # type: ignore[operator]  # typeshed's numbers.Real has no comparisons


def check_seed(seed: Any) -> None:
    if seed is None:
        return
    if not is_int(seed) or not -(2**63) <= seed < 2**63 - 1:
        raise invalid("seed", seed, "None or an integer in [-2**63, 2**63 - 1)", BufferInputError)


def check_sampler_kwargs(sampler: str, kwargs: Mapping[str, Any]) -> None:
    """``sample(**kwargs)``: the prioritized sampler takes ``beta`` (a finite number >= 0), the uniform one nothing."""
    accepted = {"beta"} if sampler == "prioritized" else set()
    unknown = sorted(set(kwargs) - accepted)
    if unknown:
        raise BufferTypeError(
            f"sample() got unexpected keyword argument(s) {unknown} for sampler={sampler!r}; "
            f"accepted: {sorted(accepted) or 'none'}"
        )
    if "beta" in kwargs and kwargs["beta"] is not None:
        beta = kwargs["beta"]
        if not is_finite_number(beta) or beta < 0:
            raise invalid("beta", beta, "a finite number >= 0 (or None for the buffer's beta)", BufferInputError)


def is_out_of_memory(exc: BaseException) -> bool:
    """Whether ``exc`` is torch (or Python) failing to allocate memory (host, pinned or GPU)."""
    text = str(exc)
    return isinstance(exc, (MemoryError, torch.OutOfMemoryError)) or any(
        s in text for s in ("can't allocate memory", "out of memory", "overflow")
    )


MAX_ALPHA = 10.0  # p**alpha: beyond this any priority above ~1.1 overflows float64 in a large buffer
MAX_TREE_TOTAL = 1e300  # the sum tree stays this far below float64's overflow (1.8e308)


def check_prioritized_args(alpha: float, beta: float, eps: float) -> None:
    for name, value, low, strict in (("alpha", alpha, 0.0, False), ("beta", beta, 0.0, False), ("eps", eps, 0.0, True)):
        ok = is_finite_number(value) and (value > low if strict else value >= low)
        if not ok:
            raise invalid(name, value, f"a finite number {'>' if strict else '>='} {low}", BufferInputError)
    if alpha > MAX_ALPHA:
        raise invalid("alpha", alpha, f"a finite number in [0, {MAX_ALPHA:g}] (usual: 0.4-0.7)", BufferInputError)
    if float(eps) ** float(alpha) < sys.float_info.min:  # the leaf of a zero priority would be 0 (or subnormal)
        raise invalid("eps", eps, f"an eps whose eps ** alpha (alpha={alpha:g}) is a normal float64 > 0, so that "
                      "an item of priority 0 can still be drawn (e.g. the default 1e-6)", BufferInputError)


PRIORITIZED_DEFAULTS = {"alpha": 0.6, "beta": 0.4, "eps": 1e-6}


def prioritized_settings(sampler: str, alpha: Any, beta: Any, eps: Any) -> dict[str, float]:
    """A buffer's prioritized-replay settings as plain floats (``{}`` for a uniform sampler), the
    defaults filling what is ``None``. A uniform sampler given any of them is an error: the user
    meant prioritized replay and would otherwise silently get uniform."""
    given = {k: v for k, v in (("alpha", alpha), ("beta", beta), ("eps", eps)) if v is not None}
    if sampler != "prioritized":
        if given:
            raise BufferInputError(f"invalid {', '.join(given)} for sampler={sampler!r}: got {given}; these set "
                                   "prioritized replay: pass sampler='prioritized', or leave them out")
        return {}
    settings = {**PRIORITIZED_DEFAULTS, **given}
    check_prioritized_args(settings["alpha"], settings["beta"], settings["eps"])
    return {k: float(v) for k, v in settings.items()}  # numpy scalars would not load from a checkpoint


def refuse_priorities(sampler: str) -> None:
    """``update_priority`` on a buffer that samples uniformly: an error, not a silent no-op (the
    priorities would steer nothing)."""
    raise BufferInputError(
        f"update_priority() on a buffer with sampler={sampler!r}: it samples uniformly and has no priorities, "
        "so they would be ignored; build the buffer with sampler='prioritized' to sample by priority, "
        "or do not call update_priority()")


def priority_limit(alpha: float, eps: float, capacity: int) -> float:
    """The largest priority whose leaf ``(p + eps) ** alpha``, summed over a full buffer, stays
    below :data:`MAX_TREE_TOTAL` (``inf`` when every finite priority does)."""
    if alpha <= 0:
        return math.inf
    try:
        return math.exp((math.log(MAX_TREE_TOTAL) - math.log(capacity)) / alpha) - eps
    except OverflowError:
        return math.inf


def check_priority_scale(priority_max: float, alpha: float, eps: float, capacity: int) -> None:
    """Refuse priorities whose ``(p + eps) ** alpha``, summed over a full buffer, would overflow the
    sum tree (sampling would then silently return one item and NaN weights)."""
    if not math.isfinite(priority_max) or priority_max <= 0:
        return  # NaN, inf, negatives: the caller's own checks name them
    if priority_max > priority_limit(alpha, eps, capacity):
        raise BufferInputError(
            f"priorities too large: max {priority_max:.3g} ** alpha {alpha:g} over capacity {capacity:,} would "
            f"overflow the sum tree (float64); scale priorities down (e.g. |td| clipped) or lower alpha")


def _torch_readable(value: np.ndarray) -> np.ndarray:
    """``value``, or a copy that torch can take: native byte order (big-endian data from a file
    or a network keeps its values) and writable (torch tensors cannot be read-only)."""
    if not value.dtype.isnative:
        return value.astype(value.dtype.newbyteorder("="))
    return value if value.flags.writeable else value.copy()


def _as_tensor(name: str, value: Any) -> torch.Tensor:
    if isinstance(value, torch.Tensor):
        return value.detach()
    if isinstance(value, np.ndarray):
        if value.dtype == object:
            raise BufferTypeError(f"field {name!r}: numpy arrays of dtype object cannot be stored")
        value = _torch_readable(value)
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


def check_piece(
    piece: Any, time_major_dims: int, schema: Mapping[str, tuple[str, tuple[int, ...]]] | None
) -> tuple[int, dict[str, tuple[str, tuple[int, ...]]]]:
    """Validate one piece for ``JanusBuffer.put`` before it is staged; return its transition count
    and its schema (field -> (dtype, item shape)). ``schema``: that of the first piece accepted;
    a piece that differs is refused here, so one bad producer never fails the pipeline for all."""
    if not isinstance(piece, Mapping):
        raise BufferTypeError(f"put() takes a mapping of field name -> array, got {type(piece).__name__}")
    if not piece:
        raise BufferInputError("put() got a piece with no fields")
    check_field_names(piece, "put()")
    if schema is None:  # later pieces must have the first one's fields
        check_reserved_names(piece)
    lead: tuple[int, ...] | None = None
    mine: dict[str, tuple[str, tuple[int, ...]]] = {}
    for name, value in piece.items():
        if not hasattr(value, "shape") or not hasattr(value, "dtype"):
            raise BufferTypeError(f"put() field {name!r}: expected a tensor or numpy array, got {type(value).__name__}")
        if isinstance(value.dtype, np.dtype) and value.dtype.kind not in "biufc":  # str, object, datetime...
            raise invalid(f"put() field {name!r} dtype", f"numpy {value.dtype}", "a numeric or bool dtype", BufferTypeError)
        shape = tuple(int(d) for d in value.shape)
        if len(shape) < time_major_dims:
            raise BufferInputError(f"put() field {name!r} has shape {shape}; expected at least {time_major_dims} leading dims")
        if 0 in shape[time_major_dims:]:
            raise invalid(f"put() field {name!r} item shape", shape[time_major_dims:], "dimensions >= 1 (() for scalars)",
                          BufferInputError)
        if lead is None:
            lead = shape[:time_major_dims]
        elif shape[:time_major_dims] != lead:
            raise BufferInputError(f"put() field {name!r} has leading dims {shape[:time_major_dims]}; other fields have {lead}")
        mine[name] = (str(value.dtype).replace("torch.", ""), shape[time_major_dims:])
    if schema is not None and mine != schema:
        if set(mine) != set(schema):
            raise BufferInputError(f"put() fields {sorted(mine)} differ from the first piece's {sorted(schema)}")
        name = next(k for k in schema if mine[k] != schema[k])
        raise BufferInputError(f"put() field {name!r}: dtype/item shape {mine[name]} differs from the first "
                               f"piece's {schema[name]}; the piece was refused")
    count = 1
    for d in lead or ():
        count *= d
    if count == 0:  # staged, it would fail the collection that writes it, and the pipeline with it
        raise BufferInputError(f"put() got a piece of 0 transitions (leading dims {lead}); a piece holds at least one")
    return count, mine


def check_frame_piece(schema: Mapping[str, tuple[str, tuple[int, ...]]]) -> None:
    """A piece for a frame-stack replay: ``obs`` and ``next_obs`` stacks of frames of one dtype
    and shape (``schema`` as :func:`check_piece` returns it)."""
    missing = [k for k in ("obs", "next_obs") if k not in schema]
    if missing:
        raise BufferInputError(f"put() with frame_stack=True needs fields 'obs' and 'next_obs' (stacks of frames); "
                               f"missing {missing}")
    if schema["next_obs"] != schema["obs"]:
        raise BufferInputError(f"put() field 'next_obs': dtype/item shape {schema['next_obs']} differs from "
                               f"'obs' {schema['obs']}; with frame_stack=True both are stacks of the same frames")
    if not schema["obs"][1]:
        raise BufferInputError("put() field 'obs' has item shape (); with frame_stack=True it is a stack of "
                               "frames, (k, *frame)")
    stream = schema.get("stream")
    if stream is not None and (stream[1] != () or not stream[0].startswith(("int", "uint"))):
        raise BufferInputError(f"put() field 'stream': dtype/item shape {stream}; accepted: one integer per row "
                               "(the environment it comes from)")


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
    batch = {str(k): _as_tensor(str(k), v) for k, v in data.items()}
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


def _vector(name: str, value: Any, dtype: torch.dtype) -> torch.Tensor:
    try:
        t = value.detach() if isinstance(value, torch.Tensor) else torch.as_tensor(_torch_readable(np.asarray(value)))
    except (TypeError, ValueError, RuntimeError):
        raise BufferTypeError(f"{name}: got {type(value).__name__}; accepted: a 1-D tensor, array or list") from None
    if t.dim() > 1 and sum(d > 1 for d in t.shape) <= 1:  # (n, 1), (1, n): a column or a row of n values
        t = t.reshape(-1)
    if t.dim() != 1:
        raise invalid(f"{name} shape", tuple(t.shape), "a 1-D sequence", BufferInputError)
    # An empty list has numpy's default dtype (float64): nothing to reject then.
    if dtype == torch.long and t.numel() and (t.is_floating_point() or t.is_complex() or t.dtype == torch.bool):
        raise invalid(f"{name} dtype", t.dtype, "integer keys as returned in batch['index']", BufferInputError)
    if dtype != torch.long and t.is_complex():
        raise invalid(f"{name} dtype", t.dtype, "real numbers", BufferInputError)
    try:
        return t.to("cpu", dtype)
    except RuntimeError:  # e.g. a meta tensor: no data to read
        raise invalid(f"{name} device", str(t.device), "'cpu' or the buffer's device", BufferInputError) from None


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


def check_priority_update(index: Any, priority: Any, written: int) -> tuple[torch.Tensor, torch.Tensor, int]:
    """Validate ``update_priority`` arguments; return (keys, priorities) as CPU tensors and the
    smallest key (``written`` when there are none)."""
    keys = _vector("index", index, torch.long)
    prio = _vector("priority", priority, torch.float64)
    if keys.numel() != prio.numel():
        raise BufferInputError(f"index and priority lengths differ: {keys.numel()} vs {prio.numel()}; they must match")
    if prio.numel():
        lo, hi = torch.aminmax(prio)  # one pass; a NaN propagates to both and fails the test
        if not (lo.item() >= 0 and hi.item() < math.inf):
            bad = ~torch.isfinite(prio) | (prio < 0)
            raise invalid("priority", prio[bad][:5].tolist(), "finite numbers >= 0", BufferInputError)
        lo, hi = torch.aminmax(keys)
        first = int(lo.item())
        if first < 0 or hi.item() >= written:
            out_of_range = (keys < 0) | (keys >= written)
            raise invalid(
                "index", keys[out_of_range][:5].tolist(),
                f"keys of written items, 0 <= key < {written} (as returned by extend/sample)", BufferInputError,
            )
        return keys, prio, first
    return keys, prio, written


# ---- casting inputs to declared fields (CPU fast path) ----------------------------------------
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


def check_item_count(n: int, capacity: int) -> None:
    """An extend writes 1 to ``capacity`` items."""
    if n == 0:
        raise invalid("batch size", 0, "at least 1 item per extend()", BufferInputError)
    if n > capacity:
        raise invalid("batch size", n, f"at most the capacity ({capacity}) items per extend()", BufferInputError)


_MISSING = object()


def _strict_array(name: str, value: Any, spec: FieldSpec) -> np.ndarray | torch.Tensor:
    t = _as_tensor(name, value)
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


_KERNEL_FLOATS = (np.dtype(np.float32), np.dtype(np.float64))  # the priority dtypes the kernels take


_LIKE: dict[torch.dtype, np.ndarray] = {torch.float32: np.zeros(0, np.float32), torch.float64: np.zeros(0, np.float64)}


def priority_addresses(index: Any, priority: Any) -> tuple[int, int, int, np.ndarray] | None:
    """The usual ``update_priority`` inputs, read by address: a batch's ``"index"`` tensor and a
    float32 or float64 tensor of as many priorities, both 1-D, contiguous, on the CPU. Returns
    ``(keys address, priorities address, n, an empty array of the priorities' dtype)``, or
    ``None`` for anything else (:func:`priority_arrays` then converts it or explains it). Saves a
    ``tensor.numpy()`` (~1 us) per argument."""
    if (type(index) is torch.Tensor and type(priority) is torch.Tensor and index.dtype is torch.long
            and priority.dtype in _LIKE and index.layout is torch.strided and priority.layout is torch.strided
            and index.dim() == 1 and priority.dim() == 1 and index.is_cpu and priority.is_cpu
            and index.is_contiguous() and priority.is_contiguous() and not index.is_neg() and not priority.is_neg()):
        n = index.shape[0]
        if priority.shape[0] == n:
            return index.data_ptr(), priority.data_ptr(), n, _LIKE[priority.dtype]
    return None


def priority_arrays(index: Any, priority: Any) -> tuple[np.ndarray, np.ndarray]:
    """``update_priority`` arguments as contiguous 1-D int64 keys and float32 or float64
    priorities (numpy, for the kernel, which checks their values); shapes, lengths and dtypes are
    checked here. The usual inputs (the ``"index"`` tensor of a batch; a float tensor or array of
    priorities) are taken as they are, without a copy."""
    if type(index) is torch.Tensor and index.dtype is torch.long and index.dim() == 1 and index.is_cpu:
        keys = index.numpy()
    elif type(index) is np.ndarray and index.dtype == np.int64 and index.ndim == 1:  # output="numpy"
        keys = index
    else:
        keys = _vector("index", index, torch.long).numpy()
    if type(priority) is torch.Tensor and priority.is_cpu and priority.dim() == 1 and priority.dtype in (torch.float32, torch.float64):
        prio = (priority.detach() if priority.requires_grad else priority).numpy()
    elif type(priority) is np.ndarray and priority.ndim == 1 and priority.dtype in _KERNEL_FLOATS:
        prio = priority
    else:
        prio = _vector("priority", priority, torch.float64).numpy()
    if keys.shape[0] != prio.shape[0]:
        raise BufferInputError(f"index and priority lengths differ: {keys.shape[0]} vs {prio.shape[0]}; they must match")
    return np.ascontiguousarray(keys), np.ascontiguousarray(prio)
