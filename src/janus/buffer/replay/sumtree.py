"""Batched wide sum-tree and min-tree in plain torch (same code on CPU and CUDA).

A *wide* tree: the leaves are cut into blocks of ``fanout`` children, each block's reduction (sum or
min) is one node of the level above, and so on up to the *top*, a flat array of a few thousand nodes
that is scanned whole (one ``cumsum`` + ``searchsorted``). With fan-out 32-64 a 1M-leaf tree has a
single block level, so an update or a batched descent is about a dozen torch ops whatever the batch
size: on CPU the per-op overhead, not the arithmetic, dominates at small batches.

Each level is a flat tensor; block level ``k`` is padded with the reduction's identity (0 for sum,
``+inf`` for min) to a whole number of its parent's blocks, so every descent index is in bounds.

Duplicate slots in one :meth:`update` are resolved explicitly (the last occurrence wins): every
duplicate is rewritten with the winner's value, so the scatter is deterministic on CUDA too. Parents
touched several times are recomputed from the same children, hence written with identical values.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from janus.errors import invalid


def default_fanouts(capacity: int) -> list[int]:
    """Fan-out of each block level, leaves first (measured on CPU, see benchmarks/sumtree_micro.py).

    No block level up to 4096 leaves; one level of 32 while the top stays <= 32768 nodes (100k ->
    top 3125, 1M -> top 31250: a longer top scan is cheaper than one more level of torch ops);
    beyond, levels of 32 until at most 4096 nodes remain.
    """
    if capacity <= 4096:
        return []
    if -(-capacity // 32) <= 32768:
        return [32]
    fanouts, n = [], capacity
    while n > 4096:
        fanouts.append(32)
        n = -(-n // 32)
    return fanouts


# Batches from this size on pick the child by counting (vectorised compare + sum) rather than by
# a per-query binary search, whose branch mispredictions dominate for large random batches.
_COUNT_FROM = 1024


class _WideTree:
    """Storage and update logic shared by :class:`SumTree` and :class:`MinTree`."""

    _identity: float

    def __init__(
        self,
        capacity: int,
        device: torch.device | str = "cpu",
        dtype: torch.dtype = torch.float64,
        *,
        fanouts: list[int] | None = None,
    ) -> None:
        if isinstance(capacity, bool) or not isinstance(capacity, int) or capacity < 1:
            raise invalid("capacity", capacity, "an int >= 1")
        self.capacity = capacity
        self.device = torch.device(device)
        self.dtype = dtype
        self.fanouts = default_fanouts(capacity) if fanouts is None else [int(f) for f in fanouts]
        if any(f < 2 for f in self.fanouts):
            raise invalid("fanouts", fanouts, "ints >= 2")
        nodes = [capacity]  # meaningful nodes per level, leaves first
        for f in self.fanouts:
            nodes.append(-(-nodes[-1] // f))
        sizes = [nodes[-1]]  # stored size per level, top first: a whole number of parent blocks
        for f in reversed(self.fanouts):
            sizes.insert(0, sizes[0] * f)
        self._sizes = sizes
        self.levels = [torch.full((n,), self._identity, dtype=dtype, device=self.device) for n in sizes]
        # Block views of each block level (shared storage; everything is updated in place).
        self._rows = [lv.view(-1, f) for lv, f in zip(self.levels, self.fanouts, strict=False)]
        self._scratch: torch.Tensor | None = None
        self._arange: dict[int, torch.Tensor] = {}

    @property
    def leaves(self) -> torch.Tensor:
        """A copy of the ``capacity`` leaf values."""
        return self.levels[0][: self.capacity].clone()

    def get(self, slots: torch.Tensor) -> torch.Tensor:
        """Leaf values at ``slots``."""
        return self.levels[0].index_select(0, slots.reshape(-1))

    def update(self, slots: torch.Tensor, values: torch.Tensor | float, *, unique: bool = False) -> None:
        """Set leaves ``slots`` to ``values`` (one per slot, or a scalar); the last duplicate wins.

        ``unique=True`` skips duplicate resolution: only when ``slots`` has no duplicates or all
        duplicates carry the same value.
        """
        slots = slots.reshape(-1)
        if slots.numel() == 0:
            return
        values = torch.as_tensor(values, dtype=self.dtype, device=self.device).reshape(-1)
        values = values.expand(slots.shape[0])
        if not unique:
            values = self.dedupe(slots, values)
        self.write(slots, values, self.parents(slots))

    def dedupe(self, slots: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
        """``values`` with each duplicated slot carrying its last occurrence's value (no host sync)."""
        if self._scratch is None:
            self._scratch = torch.empty(self.capacity, dtype=torch.long, device=self.device)
        n = slots.shape[0]
        pos = self._arange.get(n)
        if pos is None:
            pos = self._arange[n] = torch.arange(n, device=self.device)
        self._scratch.scatter_reduce_(0, slots, pos, "amax", include_self=False)
        return values.index_select(0, self._scratch.index_select(0, slots))

    def parents(self, slots: torch.Tensor) -> list[torch.Tensor]:
        """Ancestors of ``slots`` at each level whose blocks :meth:`write` gathers (trees of equal
        capacity and fan-outs can share them)."""
        out, idx = [], slots
        for k, f in enumerate(self.fanouts):
            if slots.shape[0] >= self._sizes[k + 1]:
                break  # write() recomputes this level and the ones above whole
            idx = torch.div(idx, f, rounding_mode="floor")
            out.append(idx)
        return out

    def write(self, slots: torch.Tensor, values: torch.Tensor, parents: list[torch.Tensor]) -> None:
        """Low-level update: ``slots`` must be deduplicated (or carry equal values per duplicate)
        and ``parents`` come from :meth:`parents` of the same ``slots``."""
        self.levels[0].index_put_((slots,), values)
        for k, idx in enumerate(parents):
            self.levels[k + 1].index_put_((idx,), self._reduce(self._rows[k].index_select(0, idx)))
        if len(parents) < len(self.fanouts):
            self._rebuild(len(parents) + 1)

    def _rebuild(self, start: int) -> None:
        """Recompute levels ``start..top`` whole from the level below each."""
        for k in range(start, len(self.levels)):
            self.levels[k].copy_(self._reduce(self._rows[k - 1]))

    def _reduce(self, rows: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def state_dict(self) -> dict[str, Any]:
        """The capacity and the leaves (a tensor); inner levels are recomputed on load."""
        return {"capacity": self.capacity, "leaves": self.leaves}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if int(state["capacity"]) != self.capacity:
            raise invalid("state capacity", state["capacity"], f"{self.capacity}")
        leaves = state["leaves"].to(device=self.device, dtype=self.dtype).reshape(-1)
        if leaves.shape[0] != self.capacity:
            raise invalid("state leaves", tuple(leaves.shape), f"({self.capacity},)")
        self.levels[0].fill_(self._identity)
        self.levels[0][: self.capacity] = leaves
        self._rebuild(1)


class SumTree(_WideTree):
    """Sums over the leaves with a batched inverse-CDF search (:meth:`find`). Leaves start at 0."""

    _identity = 0.0

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # [0, inclusive cumsum of the top]: exact exclusive prefixes by indexing.
        self._cs = torch.zeros(self.levels[-1].shape[0] + 1, dtype=self.dtype, device=self.device)
        # Fixed views of it, made once (slicing per call costs a torch op each).
        self._cs_incl, self._cs_inner, self._cs_total = self._cs[1:], self._cs[1:-1], self._cs[-1]
        self._tiny = torch.tensor(torch.finfo(self.dtype).tiny, dtype=self.dtype, device=self.device)
        self._inf = torch.tensor(math.inf, dtype=self.dtype, device=self.device)

    def _reduce(self, rows: torch.Tensor) -> torch.Tensor:
        return rows.sum(-1)

    def total(self) -> torch.Tensor:
        """Sum of all leaves (0-dim tensor)."""
        return self.levels[-1].sum()

    def find(self, mass: torch.Tensor, *, fraction: bool = False, with_values: bool = False) -> Any:
        """Leaf ``i`` with ``prefix(i) <= m < prefix(i+1)`` for each ``m`` of ``mass`` in ``[0, total)``.

        ``fraction=True``: masses are fractions of the total in ``(0, 1]``, searched as
        ``prefix(i) < m * total <= prefix(i+1)`` (boundaries have measure zero; this skips two
        clamps). Masses are kept in ``[tiny, block sum]`` at every level, so float rounding never
        selects a zero-valued leaf while the total is positive; indices are always in
        ``[0, capacity)``, even for NaN leaves. ``with_values`` returns ``(leaves, values)``.
        Exact when float arithmetic represents the sums exactly (e.g. integer leaves); otherwise a
        mass within a few ulps of a boundary may pick the neighbouring leaf.
        """
        if mass.dtype != self.dtype or mass.dim() != 1:
            mass = mass.to(self.dtype).reshape(-1)
        cs = self._cs
        torch.cumsum(self.levels[-1], 0, out=self._cs_incl)
        if fraction:
            mass = mass * self._cs_total
        else:  # ``[p, q)`` search of m == ``(p, q]`` search of the next float up
            mass = torch.clamp(torch.nextafter(mass, self._inf), min=self._tiny, max=self._cs_total)
        # Search the inclusive prefixes of all nodes but the last: always in bounds.
        node = torch.searchsorted(self._cs_inner, mass)
        if not self.fanouts:
            return (node, self.levels[0].index_select(0, node)) if with_values else node
        mass = (mass - cs.index_select(0, node)).unsqueeze_(1)
        for k in range(len(self.fanouts) - 1, -1, -1):
            f = self.fanouts[k]
            rows = self._rows[k].index_select(0, node)
            cs = rows.cumsum(1)
            mass = torch.clamp(mass, min=self._tiny, max=cs[:, -1:])
            if mass.shape[0] >= _COUNT_FROM:
                child = (cs < mass).sum(1, keepdim=True).clamp_(max=f - 1)
            else:
                child = torch.searchsorted(cs, mass).clamp_(max=f - 1)
            if k:
                mass = mass - (cs.gather(1, child) - rows.gather(1, child))  # exact for integers
            node = torch.add(child.view(-1), node, alpha=f)
        if self._sizes[0] > self.capacity:  # padding leaves: reachable only with NaN leaves
            node = node.clamp_(max=self.capacity - 1)
        return (node, rows.gather(1, child).view(-1)) if with_values else node


class MinTree(_WideTree):
    """Minimum over the written leaves (unwritten leaves hold ``+inf``)."""

    _identity = math.inf

    def _reduce(self, rows: torch.Tensor) -> torch.Tensor:
        return rows.amin(-1)

    def min(self) -> torch.Tensor:
        """Smallest written leaf (0-dim tensor; ``+inf`` while nothing is written)."""
        return self.levels[-1].amin()
