"""Checks of plain arguments shared across the data path: integers, finite numbers, counts, seeds, timeouts.

Errors name the argument, what was given and what is accepted.
"""

from __future__ import annotations

import numbers
import sys
from typing import Any, TypeGuard

import numpy as np

from janus.errors import BufferInputError, ConfigError, JanusError, invalid

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


def check_timeout(timeout: Any, none_ok: bool = True) -> float | None:
    """A timeout is a number of seconds >= 0 (``None``: wait as long as it takes, where allowed);
    returned as a float, or ``None`` for an infinite one (a condition cannot wait ``inf`` seconds)."""
    if timeout is None and none_ok:
        return None
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float, np.integer, np.floating)) or not timeout >= 0:
        raise invalid("timeout", timeout, "a number of seconds >= 0" + (" or None" if none_ok else ""))
    return None if timeout == float("inf") else float(timeout)
