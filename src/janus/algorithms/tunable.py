"""The ranges an algorithm declares for ``janus tune --objective time_to_solve``: one :class:`TunableRange`
per hyperparameter, keyed by its config path (``algorithm.lr``, ``batch_size``, ``workload.num_epochs``),
beside the algorithm's preset (:attr:`~janus.algorithms.base.Algorithm.tunable_ranges`).

A range is a log-uniform or uniform interval (of integers or floats) or a set of choices. The tune
widens a range to hold the run's own value (:meth:`TunableRange.holding`), so the defaults are always
a point of the search, whatever preset or config set them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any


@dataclass(frozen=True)
class TunableRange:
    """The values one hyperparameter may take in a time-to-solve tune: ``choices`` when given, else
    ``[low, high]`` (``integer``: whole numbers; ``log``: sampled log-uniformly)."""

    low: float = 0.0
    high: float = 0.0
    log: bool = False
    integer: bool = False
    choices: tuple[Any, ...] = ()

    def __post_init__(self) -> None:
        if not self.choices and not (self.low <= self.high and (not self.log or self.low > 0)):
            raise ValueError(f"a tunable range needs low <= high (and low > 0 when log): {self}")

    def contains(self, value: Any) -> bool:
        """Whether ``value`` is a point of this range."""
        if self.choices:
            return value in self.choices
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            return False
        return self.low <= value <= self.high and (not self.integer or float(value).is_integer())

    def holding(self, value: Any) -> TunableRange:
        """This range widened to hold ``value`` (a choice added, an interval stretched): the run's own value."""
        if value is None or self.contains(value):
            return self
        if self.choices:
            return replace(self, choices=(*self.choices, value))
        return replace(self, low=min(self.low, value), high=max(self.high, value))


def log_uniform(low: float, high: float) -> TunableRange:
    """A float in ``[low, high]``, sampled log-uniformly (a learning rate)."""
    return TunableRange(low, high, log=True)


def uniform(low: float, high: float) -> TunableRange:
    """A float in ``[low, high]``, sampled uniformly (a coefficient)."""
    return TunableRange(low, high)


def integers(low: int, high: int, log: bool = False) -> TunableRange:
    """An integer in ``[low, high]`` (``log``: sampled log-uniformly, for counts spanning decades)."""
    return TunableRange(low, high, log=log, integer=True)


def one_of(*values: Any) -> TunableRange:
    """One of ``values`` (a batch size, a frequency)."""
    return TunableRange(choices=tuple(values))
