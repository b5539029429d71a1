"""The CPU fast path of :class:`~janus.buffer.replay.experience.ExperienceBuffer`: compiled kernels.

On CPU placements every buffer operation is one call into a compiled kernel
(:mod:`janus.buffer.kernels.replay`, Numba, imported and compiled at first use, cached on disk):
``extend`` writes every field and, prioritized, the new items' leaves in both trees; ``sample``
draws, computes keys (and importance weights) and gathers every field; ``update_priority``
validates, drops stale keys and updates both trees. The kernels work on numpy views of the torch
storage (``tensor.numpy()`` shares memory), so the buffer still hands out torch tensors.

:class:`NativeSampler` is the sampler of a CPU buffer: the random state and, prioritized, the
binary sum and min trees. Its :meth:`~NativeSampler.state_dict` uses the same keys as the torch
samplers (``leaves``, ``min_leaves``, ``max_priority``, ``rng_state`` ...), so a checkpoint moves
between CPU and CUDA placements; a random state written by the other implementation (or by janus
before the kernels) is not continued but replaced by one derived from it, deterministically.
"""

from __future__ import annotations

import hashlib
import math
from typing import Any

import numpy as np
import torch

from janus.errors import invalid

_MASK64 = (1 << 64) - 1

#: the sum tree stays this far below float64's overflow (1.8e308)
MAX_TREE_TOTAL = 1e300


def priority_limit(alpha: float, eps: float, capacity: int) -> float:
    """The largest priority whose leaf ``(p + eps) ** alpha``, summed over a full buffer, stays
    below :data:`MAX_TREE_TOTAL` (``inf`` when every finite priority does)."""
    if alpha <= 0:
        return math.inf
    try:
        return math.exp((math.log(MAX_TREE_TOTAL) - math.log(capacity)) / alpha) - eps
    except OverflowError:
        return math.inf


_KERNELS: Any = None


def kernels() -> Any:
    """The compiled kernels module (imports Numba on first use)."""
    global _KERNELS
    if _KERNELS is None:
        from janus.buffer.kernels import replay as _kernels

        _KERNELS = _kernels
    return _KERNELS


def compiled(kernel: Any, *args: Any) -> Any:
    """``kernel``'s compiled code for the types of ``args``, to call without Numba's dispatcher,
    which types every argument of every call (~0.25 us of a sample of one item).

    The compiled code takes its arguments' types on trust (an array of another dtype, layout or
    number of dimensions would be misread), so it is only for arguments whose types the buffer
    fixes itself: its storage, its sampler's state and the output it allocates, never user input.
    """
    from numba import typeof
    from numba.core.typing.typeof import Purpose

    return kernel.compile(tuple(typeof(a, Purpose.argument) for a in args))


def _splitmix(x: int) -> int:
    x = (x + 0x9E3779B97F4A7C15) & _MASK64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _MASK64
    return x ^ (x >> 31)


def seeded_state(seed: int | None) -> np.ndarray:
    """A one-element uint64 SplitMix64 state; ``None`` draws the seed from torch's global RNG."""
    if seed is None:
        seed = int(torch.randint(0, 2**62, (1,)).item())
    return np.array([_splitmix(int(seed) & _MASK64)], dtype=np.uint64)


def state_from_bytes(rng_state: Any) -> np.ndarray:
    """Restore a random state saved by :meth:`NativeSampler.state_dict` (8 bytes); any other
    state (a torch generator's) is hashed into a new one: deterministic, but a different sequence."""
    if not isinstance(rng_state, torch.Tensor) or rng_state.dtype != torch.uint8:
        raise TypeError(f"rng_state is a uint8 tensor, got {type(rng_state).__name__}")
    raw = bytes(rng_state.reshape(-1).tolist())
    if len(raw) == 8:
        return np.frombuffer(raw, dtype=np.uint64).copy()
    digest = hashlib.blake2b(raw, digest_size=8).digest()
    return np.frombuffer(digest, dtype=np.uint64).copy()


def tree_size(capacity: int) -> int:
    """``P``, the power of two >= capacity: leaves of the binary trees start at node ``P``."""
    return 1 << max(0, (capacity - 1).bit_length())


class NativeSampler:
    """Uniform or proportional prioritized sampling state of a CPU buffer (kernels do the work).

    Prioritized: leaf of a slot ``(|p| + eps) ** alpha``; new items get the running max of
    ``|p| + eps`` (starting at 1); stratified draws; weights ``(min leaf / leaf) ** beta``.
    """

    tracks_writes = False  # the extend kernel updates the trees itself

    def __init__(
        self, capacity: int, seed: int | None, prioritized: bool, *,
        alpha: float = 0.6, beta: float = 0.4, eps: float = 1e-6,
    ) -> None:
        self.capacity = capacity
        self.prioritized = prioritized
        self.rng = seeded_state(seed)
        self.beta = float(beta)
        # The kernels' arguments (see janus.buffer.kernels.replay): both trees in one array (the sum
        # tree and the min tree are its rows); params = [max priority, alpha, eps, limit].
        self.trees = np.zeros((2, 2 * tree_size(capacity) if prioritized else 0), np.float64)
        self.trees[1] = math.inf
        self.params = np.ones(4, np.float64)  # max priority starts at 1; the rest set here:
        self._set_rates(float(alpha), float(eps))

    def _set_rates(self, alpha: float, eps: float) -> None:
        self.params[1], self.params[2] = alpha, eps
        self.params[3] = priority_limit(alpha, eps, self.capacity) if self.prioritized else math.inf

    # Views made when asked for, not stored: a stored view would part from ``trees`` in a copy.
    @property
    def sum_t(self) -> np.ndarray:
        """The sum tree: ``2 * P`` float64 nodes, root at 1, leaf of slot ``s`` at ``P + s``."""
        return self.trees[0]

    @property
    def min_t(self) -> np.ndarray:
        """The min tree, laid out as :attr:`sum_t` (unwritten leaves ``+inf``)."""
        return self.trees[1]

    @property
    def max_priority(self) -> np.ndarray:
        """One-element view of the running max of ``|p| + eps`` (new items get it), kept by the kernels."""
        return self.params[0:1]

    @property
    def alpha(self) -> float:
        """Priority exponent: leaves are ``(|p| + eps) ** alpha``."""
        return float(self.params[1])

    @property
    def eps(self) -> float:
        """Added to every ``|p|``, so that no written item has zero probability."""
        return float(self.params[2])

    @property
    def limit(self) -> float:
        """The largest priority an update may set: larger ones could overflow the sum tree."""
        return float(self.params[3])

    def _leaves(self, tree: np.ndarray) -> np.ndarray:
        p = tree.shape[0] // 2
        return tree[p : p + self.capacity]

    def update_priority(self, slots: torch.Tensor, priority: torch.Tensor) -> None:
        """Uniform sampling ignores priorities (prioritized updates run in a kernel)."""

    # ---- checkpoints ------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        rng = torch.from_numpy(self.rng.view(np.uint8).copy())
        if not self.prioritized:
            return {"rng_state": rng}
        return {
            "capacity": self.capacity,
            "leaves": torch.from_numpy(self._leaves(self.sum_t).copy()),
            "min_leaves": torch.from_numpy(self._leaves(self.min_t).copy()),
            "max_priority": float(self.max_priority[0]),
            "alpha": self.alpha,
            "beta": self.beta,
            "eps": self.eps,
            "rng_state": rng,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        rng = state_from_bytes(state["rng_state"])
        if not self.prioritized:
            self.rng = rng
            return
        if int(state["capacity"]) != self.capacity:
            raise invalid("state capacity", state["capacity"], f"{self.capacity}")
        for tree, key in ((self.sum_t, "leaves"), (self.min_t, "min_leaves")):
            leaves = torch.as_tensor(state[key]).to("cpu", torch.float64).reshape(-1)
            if leaves.shape[0] != self.capacity:
                raise invalid(f"state {key}", tuple(leaves.shape), f"({self.capacity},)")
            self._leaves(tree)[:] = leaves.numpy()
        rebuild(self.sum_t, self.min_t)
        self.max_priority[0] = float(state["max_priority"])
        self.beta = float(state["beta"])
        self._set_rates(float(state["alpha"]), float(state["eps"]))
        self.rng = rng


def rebuild(sum_t: np.ndarray, min_t: np.ndarray) -> None:
    """Recompute every inner node of the binary trees from the leaves, level by level."""
    lo = sum_t.shape[0] // 2
    while lo > 1:
        hi, lo = lo, lo // 2
        sum_t[lo:hi] = sum_t[2 * lo : 2 * hi : 2] + sum_t[2 * lo + 1 : 2 * hi : 2]
        np.minimum(min_t[2 * lo : 2 * hi : 2], min_t[2 * lo + 1 : 2 * hi : 2], out=min_t[lo:hi])



class NativePrioritizedSampler(NativeSampler):
    """The prioritized :class:`NativeSampler`, with its trees open to inspection."""

    def __init__(self, capacity: int, seed: int | None, **kwargs: float) -> None:
        super().__init__(capacity, seed, True, **kwargs)

    def priorities(self, slots: torch.Tensor) -> torch.Tensor:
        """Current leaf values ``(|p| + eps) ** alpha`` of ``slots``."""
        return torch.from_numpy(self._leaves(self.sum_t)[np.asarray(slots, dtype=np.int64)].copy())

    def total(self) -> float:
        """Sum of all leaves (the root of the sum tree)."""
        return float(self.sum_t[1])

    def min(self) -> float:
        """Smallest written leaf (``inf`` while nothing is written)."""
        return float(self.min_t[1])
