"""Proportional prioritized replay (Schaul et al. 2016) on batched torch sum/min trees.

* Leaf value of slot ``i``: ``(|p_i| + eps) ** alpha``; ``P(i) = leaf_i / total``.
* New items get the running maximum priority (tracked in ``|p| + eps`` space, starting at 1.0).
* Sampling is stratified: one uniform draw in each of ``batch_size`` equal segments of the mass.
* Importance weights ``w_i = (N P(i)) ** -beta / (N P_min) ** -beta = (leaf_min / leaf_i) ** beta``
  (``N`` and the total cancel out), so the largest possible weight is exactly 1.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from janus.buffer.arguments import check_int, is_finite_number
from janus.buffer.replay.samplers import make_generator, restore_generator
from janus.buffer.replay.sumtree import MinTree, SumTree
from janus.errors import BufferEmptyError, BufferInputError, invalid


def _check_number(name: str, value: float, positive: bool = False) -> float:
    if not is_finite_number(value):
        raise invalid(name, value, "a finite number")
    if value < 0 or (positive and value == 0):
        raise invalid(name, value, "a number > 0" if positive else "a number >= 0")
    return float(value)


@dataclass(frozen=True)
class LinearSchedule:
    """``start`` at step ``offset``, moving linearly to ``end`` at step ``steps``, ``end`` after it:
    ``schedule(n)`` is the value of the ``n``-th step counted from ``offset`` (a resumed run passes
    the steps it had taken). PER's importance exponent: ``LinearSchedule(0.4, 1.0, total_updates)``
    (Schaul et al., 2016, anneal beta to 1 over training)."""

    start: float
    end: float
    steps: int
    offset: int = 0

    def __post_init__(self) -> None:
        _check_number("start", self.start)
        _check_number("end", self.end)
        check_int("steps", self.steps, 1)
        check_int("offset", self.offset, 0)

    def __call__(self, step: int) -> float:
        frac = min(1.0, (self.offset + step) / self.steps)
        return self.start + frac * (self.end - self.start)


class PrioritizedSampler:
    """Proportional prioritized sampling over slots ``0..capacity-1`` (see the module docstring)."""

    def __init__(
        self,
        capacity: int,
        device: torch.device | str,
        seed: int | None = None,
        *,
        alpha: float = 0.6,
        beta: float = 0.4,
        eps: float = 1e-6,
    ) -> None:
        self.capacity = capacity
        self.device = torch.device(device)
        self.alpha = _check_number("alpha", alpha)
        self.beta = _check_number("beta", beta)
        self.eps = _check_number("eps", eps)
        self.generator = make_generator(self.device, seed)
        self.sum_tree = SumTree(capacity, self.device)
        self.min_tree = MinTree(capacity, self.device)
        # Running max of |p| + eps (0-dim tensor: no host sync on CUDA).
        self.max_priority = torch.ones((), dtype=torch.float64, device=self.device)
        self._offsets: dict[int, torch.Tensor] = {}

    def on_write(self, slots: torch.Tensor) -> None:
        """New items get the running max priority."""
        slots = slots.reshape(-1)
        leaf = self.max_priority.pow(self.alpha).expand(slots.shape[0])
        self._write(slots, leaf)

    def sample(
        self, batch_size: int, size: int, beta: float | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``(slots, weights)``: ``batch_size`` stratified draws among the ``size`` written slots.

        ``weights`` is float32 on the sampler's device, max-normalised importance weights for
        ``beta`` (default: :attr:`beta`).
        """
        if size < 1:
            raise BufferEmptyError(f"cannot sample from an empty buffer (size={size})")
        if batch_size < 1:
            raise invalid("batch_size", batch_size, "an int >= 1", BufferInputError)
        beta = self.beta if beta is None else float(beta)  # a huge int would overflow pow_
        offsets = self._offsets.get(batch_size)
        if offsets is None:  # segment starts; the first is nudged above 0 so fractions are > 0
            offsets = torch.arange(batch_size, dtype=torch.float64, device=self.device) / batch_size
            offsets[0] = 1e-12 / batch_size
            self._offsets[batch_size] = offsets
        u = torch.rand(batch_size, generator=self.generator, dtype=torch.float64, device=self.device)
        fractions = torch.add(offsets, u, alpha=1.0 / batch_size)  # one draw per segment, in (0, 1]
        slots, leaf = self.sum_tree.find(fractions, fraction=True, with_values=True)
        weights = torch.div(self.min_tree.min(), leaf).pow_(beta).to(torch.float32)
        return slots, weights

    def update_priority(self, slots: torch.Tensor, priority: torch.Tensor) -> None:
        """Set the priority of ``slots``; for duplicated slots the last occurrence wins."""
        slots = slots.reshape(-1)
        if slots.numel() == 0:
            return
        p = priority.to(device=self.device, dtype=torch.float64).reshape(-1).abs().add_(self.eps)
        p = self.sum_tree.dedupe(slots, p)
        self.max_priority = torch.maximum(self.max_priority, p.max())
        self._write(slots, p.pow_(self.alpha))

    def _write(self, slots: torch.Tensor, leaf: torch.Tensor) -> None:
        """Write leaves into both trees (same geometry: the ancestors are computed once)."""
        parents = self.sum_tree.parents(slots)
        self.sum_tree.write(slots, leaf, parents)
        self.min_tree.write(slots, leaf, parents)

    def priorities(self, slots: torch.Tensor) -> torch.Tensor:
        """Current leaf values ``(|p| + eps) ** alpha`` of ``slots`` (for inspection and tests)."""
        return self.sum_tree.get(slots)

    def total(self) -> float:
        """Sum of all leaves."""
        return float(self.sum_tree.total().item())

    def min(self) -> float:
        """Smallest written leaf (``inf`` while nothing is written)."""
        return float(self.min_tree.min().item())

    def state_dict(self) -> dict[str, Any]:
        return {
            "capacity": self.capacity,
            "leaves": self.sum_tree.leaves,
            "min_leaves": self.min_tree.leaves,
            "max_priority": float(self.max_priority.item()),
            "alpha": self.alpha,
            "beta": self.beta,
            "eps": self.eps,
            "rng_state": self.generator.get_state(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if int(state["capacity"]) != self.capacity:
            raise invalid("state capacity", state["capacity"], f"{self.capacity}")
        self.sum_tree.load_state_dict({"capacity": self.capacity, "leaves": state["leaves"]})
        self.min_tree.load_state_dict({"capacity": self.capacity, "leaves": state["min_leaves"]})
        self.max_priority = torch.tensor(
            float(state["max_priority"]), dtype=torch.float64, device=self.device
        )
        self.alpha = _check_number("alpha", state["alpha"])
        self.beta = _check_number("beta", state["beta"])
        self.eps = _check_number("eps", state["eps"])
        restore_generator(self.generator, state["rng_state"])
