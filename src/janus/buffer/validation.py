"""Input checks for the experience buffer: every rejection happens before any state changes.

Errors name the argument, what was given and what is accepted.
"""

from __future__ import annotations

import math
import sys
from typing import Any, Mapping

import numpy as np
import torch

from janus.buffer.storage import FieldSpec
from janus.errors import BufferInputError, BufferTypeError, invalid

#: Largest capacity / batch size accepted: far beyond any memory, yet small enough that torch
#: reports an allocation failure (not an integer overflow) when asked for that many items.
MAX_ITEMS = 2**40


def _is_count(value: Any) -> bool:
    return not isinstance(value, bool) and isinstance(value, (int, np.integer)) and 1 <= value <= MAX_ITEMS


def check_capacity(capacity: Any) -> None:
    if not _is_count(capacity):
        raise invalid("capacity", capacity, "an integer in [1, 2**40]", BufferInputError)


def check_batch_size(batch_size: Any) -> None:
    if not _is_count(batch_size):
        raise invalid("batch_size", batch_size, "an integer in [1, 2**40]", BufferInputError)


def is_finite_number(value: Any) -> bool:
    """An int or float (not a bool) that is finite as a float (compared, not converted: a huge int
    raises no OverflowError)."""
    big = sys.float_info.max
    return not isinstance(value, bool) and isinstance(value, (int, float)) and -big <= value <= big


def check_seed(seed: Any) -> None:
    if seed is None:
        return
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or not -(2**63) <= seed < 2**63 - 1:
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


def check_prioritized_args(alpha: float, beta: float, eps: float) -> None:
    for name, value, low, strict in (("alpha", alpha, 0.0, False), ("beta", beta, 0.0, False), ("eps", eps, 0.0, True)):
        ok = is_finite_number(value) and (value > low if strict else value >= low)
        if not ok:
            raise invalid(name, value, f"a finite number {'>' if strict else '>='} {low}", BufferInputError)


def _as_tensor(name: str, value: Any) -> torch.Tensor:
    if isinstance(value, torch.Tensor):
        return value.detach()
    if isinstance(value, np.ndarray):
        if value.dtype == object:
            raise BufferTypeError(f"field {name!r}: numpy arrays of dtype object cannot be stored")
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


def _matches_specs(data: Any, specs: Mapping[str, FieldSpec], capacity: int, device: torch.device) -> bool:
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


def check_batch(
    data: Any, specs: Mapping[str, FieldSpec], capacity: int, device: torch.device
) -> tuple[dict[str, torch.Tensor], dict[str, FieldSpec]]:
    """Validate a batch for ``extend``; return it as tensors plus the (possibly new) field specs."""
    if specs and _matches_specs(data, specs, capacity, device):
        return data, specs  # type: ignore[return-value]
    if not isinstance(data, Mapping) or not data:
        raise BufferTypeError(
            f"extend() takes a non-empty mapping of field name -> tensor, got {type(data).__name__}"
        )
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
        if t.device.type not in ("cpu", device.type):
            raise invalid(f"field {name!r} device", str(t.device), f"'cpu' or {device.type!r}", BufferInputError)
        sizes[name] = t.shape[0]
        if specs:
            spec = specs[name]
            if tuple(t.shape[1:]) != spec.shape:
                raise invalid(f"field {name!r} item shape", tuple(t.shape[1:]), f"{spec.shape} (fixed by the first extend)", BufferInputError)
            if t.dtype != spec.dtype:
                raise invalid(f"field {name!r} dtype", t.dtype, f"{spec.dtype} (fixed by the first extend)", BufferInputError)
    if len(set(sizes.values())) != 1:
        raise BufferInputError(f"extend() fields have different batch sizes: {sizes}; all must match")
    n = next(iter(sizes.values()))
    if n == 0:
        raise invalid("batch size", 0, "at least 1 item per extend()", BufferInputError)
    if n > capacity:
        raise invalid("batch size", n, f"at most the capacity ({capacity}) items per extend()", BufferInputError)
    new_specs = dict(specs) or {k: FieldSpec(tuple(t.shape[1:]), t.dtype) for k, t in batch.items()}
    return batch, new_specs


def _vector(name: str, value: Any, dtype: torch.dtype) -> torch.Tensor:
    try:
        t = value.detach() if isinstance(value, torch.Tensor) else torch.as_tensor(np.asarray(value))
    except (TypeError, ValueError, RuntimeError):
        raise BufferTypeError(f"{name}: got {type(value).__name__}; accepted: a 1-D tensor, array or list") from None
    if t.dim() > 1:
        t = t.reshape(-1) if t.numel() == t.shape[0] else t
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
