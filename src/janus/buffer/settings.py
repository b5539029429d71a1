"""The data-path knobs: :class:`JanusConfig`, their validation and their placement on this machine.

What a :class:`~janus.buffer.pipeline.JanusBuffer` is built from, below the run-level configuration
(:mod:`janus.config`, which holds a ``JanusConfig`` as ``RunConfig.janus`` and re-exports these
names), so the buffer imports no run-level configuration.
"""

from __future__ import annotations

import math
import re
import sys
from dataclasses import dataclass, replace
from typing import Any

from janus.errors import PlacementUnavailableError, invalid, one_of

PLACEMENTS = ("cpu_pageable", "cpu_pinned", "cuda")
DEVICES = ("cpu", "cuda")
MAX_INT = 1 << 40  # counts and sizes beyond this are no configuration a machine can run


def cuda_available() -> bool:
    """Whether this machine can run CUDA work (patched in tests). Imports torch on first use, so
    parsing a command line or a config does not."""
    import torch

    return torch.cuda.is_available()


@dataclass
class JanusConfig:
    """The data-path knobs of Dual-End Staging."""

    actor_device: str = "cpu"
    """Where actors produce rollouts: ``cpu`` or ``cuda``."""
    placement: str = "auto"
    """Experience buffer storage: ``cpu_pageable``, ``cpu_pinned``, ``cuda``, or ``auto``
    (``cuda`` with a GPU, else ``cpu_pageable``)."""
    learner_device: str = "auto"
    """Where the learner consumes batches: ``cpu``, ``cuda`` or ``auto``."""
    overlap_collect: int = 0
    """1: collection runs in a background thread overlapping rollout; 0: inline in the actor."""
    overlap_select: int = 0
    """1: selection runs in a background thread overlapping the update; 0: inline in the learner."""
    g_collect: float = 1
    """Collection granularity: rollouts per invocation (off-policy, integer >= 1) or the
    fraction k/M of a rollout per invocation (on-policy)."""
    g_select: float = 1
    """Selection granularity: batches per invocation (off-policy, integer >= 1) or the fraction
    k/M of an epoch's minibatches per invocation (on-policy)."""
    is_on_policy: bool = False
    """On-policy: each rollout is consumed in epochs of M minibatches, every transition exactly once
    per epoch. Off-policy: uniform sampling with replacement from a replay ring."""
    batch_size: int = 256
    """Transitions per learner batch (off-policy). On-policy a minibatch is rollout/M."""
    buffer_capacity: int = 100_000
    """Experience buffer capacity in transitions."""
    num_minibatches: int = 4
    """M: minibatches per on-policy epoch."""
    actor_buffer_size: int = 8
    """Actor-side staging queue bound, in rollout pieces (backpressure beyond it)."""
    prefetch: int = 2
    """Learner-side staging bound, in selection invocations."""


def parse_granularity(name: str, value: Any) -> float:
    """Parse a granularity given as a number or a ``"k/M"`` string: a whole number comes back as
    an ``int`` (so config.yaml and messages say ``4``, not ``4.0``), a fraction as a ``float``."""
    if isinstance(value, bool):
        raise invalid(name, value, "a number >= 1 (off-policy) or a fraction k/M (on-policy)")
    if isinstance(value, str):
        # k/M by hand: Fraction("1e999999999") would compute 10**999999999 (minutes of CPU).
        ratio = re.fullmatch(r"\s*([+-]?\d{1,18})\s*/\s*(\d{1,18})\s*", value)
        try:
            return _whole(int(ratio[1]) / int(ratio[2]) if ratio else float(value.strip()))
        except (ValueError, ZeroDivisionError):
            raise invalid(name, value, "a number, or a fraction written k/M such as 1/4") from None
    if _is_number(value):
        return _whole(float(value))
    if isinstance(value, (int, float)):  # NaN, inf, an int beyond float range
        raise invalid(name, value, "a finite number")
    raise invalid(name, value, "a number >= 1 (off-policy) or a fraction k/M (on-policy)")


def _whole(value: float) -> float:
    """``value`` as an ``int`` when it is a whole number a float holds exactly (NaN and inf stay)."""
    return int(value) if math.isfinite(value) and value == int(value) and abs(value) <= 2**53 else value


def _int(name: str, value: Any, low: int = 1, high: int = MAX_INT) -> int:
    accepted = f"an integer >= {low} (at most {high:,})"
    if not _is_number(value) or int(value) != value or not low <= value <= high:
        raise invalid(name, value, accepted)
    return int(value)


def _is_number(value: Any) -> bool:
    """An int or float (not a bool) that is finite as a float (no OverflowError from huge ints)."""
    big = sys.float_info.max
    return not isinstance(value, bool) and isinstance(value, (int, float)) and -big <= value <= big


def _flag(name: str, value: Any) -> int:
    if value in (0, 1) and not isinstance(value, float):
        return int(value)
    raise invalid(name, value, "0 or 1")


def _check_granularity(name: str, g: float, j: JanusConfig) -> None:
    if not j.is_on_policy:
        if not math.isfinite(g) or g < 1 or g != int(g):
            raise invalid(name, g, "an integer >= 1 off-policy (operations batched per invocation)")
        return
    m = j.num_minibatches
    k = g * m
    if not (0 < g <= 1) or abs(k - round(k)) > 1e-9:
        fractions = ", ".join(f"{i}/{m}" for i in range(1, m + 1))
        raise invalid(name, g, f"a fraction k/M of a rollout on-policy with M=num_minibatches={m}: {fractions}")


def validate_janus(j: JanusConfig) -> JanusConfig:
    """Check the data-path knobs; return a copy with normalised types. Raises ConfigError."""
    if j.placement not in ("auto",) + PLACEMENTS:
        raise invalid("placement", j.placement, one_of(("auto",) + PLACEMENTS))
    if j.actor_device not in DEVICES:
        raise invalid("actor_device", j.actor_device, one_of(DEVICES))
    if j.learner_device not in ("auto",) + DEVICES:
        raise invalid("learner_device", j.learner_device, one_of(("auto",) + DEVICES))
    if j.is_on_policy not in (True, False, 0, 1):
        raise invalid("is_on_policy", j.is_on_policy, "true or false")
    out = replace(
        j,
        is_on_policy=bool(j.is_on_policy),
        overlap_collect=_flag("overlap_collect", j.overlap_collect),
        overlap_select=_flag("overlap_select", j.overlap_select),
        g_collect=parse_granularity("g_collect", j.g_collect),
        g_select=parse_granularity("g_select", j.g_select),
        batch_size=_int("batch_size", j.batch_size),
        buffer_capacity=_int("buffer_capacity", j.buffer_capacity),
        num_minibatches=_int("num_minibatches", j.num_minibatches),
        actor_buffer_size=_int("actor_buffer_size", j.actor_buffer_size),
        prefetch=_int("prefetch", j.prefetch),
    )
    for name in ("g_collect", "g_select"):
        _check_granularity(name, getattr(out, name), out)
    if not out.is_on_policy and out.buffer_capacity < out.batch_size:
        raise invalid("buffer_capacity", out.buffer_capacity, f"at least batch_size={out.batch_size}")
    return out


def resolve_janus(j: JanusConfig) -> JanusConfig:
    """Validate the knobs, then resolve ``auto`` placement/devices for this machine.

    Raises :class:`PlacementUnavailableError` when CUDA is asked for but absent.
    """
    j = validate_janus(j)
    has_cuda = cuda_available()
    for name, value, alternative in (
        ("placement", j.placement, "placement: cpu_pageable (or auto)"),
        ("actor_device", j.actor_device, "actor_device: cpu"),
        ("learner_device", j.learner_device, "learner_device: cpu (or auto)"),
    ):
        if value in ("cuda", "cpu_pinned") and not has_cuda:
            what = "pinned host memory for GPU copies" if value == "cpu_pinned" else "a CUDA GPU"
            raise PlacementUnavailableError(
                f"{name}={value!r} needs {what}, but CUDA is not available on this machine "
                f"(torch.cuda.is_available() is False); use {alternative}"
            )
    placement = j.placement if j.placement != "auto" else ("cuda" if has_cuda else "cpu_pageable")
    learner = j.learner_device if j.learner_device != "auto" else ("cuda" if has_cuda else "cpu")
    return replace(j, placement=placement, learner_device=learner)
