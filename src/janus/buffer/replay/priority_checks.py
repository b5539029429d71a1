"""Checks of prioritized replay's inputs: its settings, ``sample``'s ``beta`` and ``update_priority``'s keys and priorities.

Every rejection happens before any state changes; errors name the argument, what was given and
what is accepted.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Mapping
from typing import Any

import numpy as np
import torch

from janus.buffer.arguments import is_finite_number
from janus.buffer.kernels.native import priority_limit
from janus.buffer.replay.field_checks import torch_readable
from janus.errors import BufferInputError, BufferTypeError, invalid


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


MAX_ALPHA = 10.0  # p**alpha: beyond this any priority above ~1.1 overflows float64 in a large buffer


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


def check_priority_scale(priority_max: float, alpha: float, eps: float, capacity: int) -> None:
    """Refuse priorities whose ``(p + eps) ** alpha``, summed over a full buffer, would overflow the
    sum tree (sampling would then silently return one item and NaN weights)."""
    if not math.isfinite(priority_max) or priority_max <= 0:
        return  # NaN, inf, negatives: the caller's own checks name them
    if priority_max > priority_limit(alpha, eps, capacity):
        raise BufferInputError(
            f"priorities too large: max {priority_max:.3g} ** alpha {alpha:g} over capacity {capacity:,} would "
            f"overflow the sum tree (float64); scale priorities down (e.g. |td| clipped) or lower alpha")


def _vector(name: str, value: Any, dtype: torch.dtype) -> torch.Tensor:
    try:
        t = value.detach() if isinstance(value, torch.Tensor) else torch.as_tensor(torch_readable(np.asarray(value)))
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
