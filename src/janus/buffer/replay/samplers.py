"""Samplers: which slots of an :class:`~janus.buffer.replay.experience.ExperienceBuffer` to read.

A sampler knows nothing of the stored data, only of slots ``0..capacity-1``. It owns its random
generator (so a checkpoint can restore the exact sampling sequence) and lives on the buffer's device.

* :class:`UniformSampler` — uniform with replacement over the written slots (off-policy).
* :class:`~janus.buffer.replay.prioritized.PrioritizedSampler` — proportional prioritized replay.
* :func:`epoch_permutation` — every slot exactly once, shuffled (on-policy epochs).
"""

from __future__ import annotations

import hashlib
from typing import Any, Protocol

import torch


class Sampler(Protocol):
    """What the experience buffer needs from a sampler."""

    def on_write(self, slots: torch.Tensor) -> None:
        """Slots were (over)written with new items."""

    def sample(self, batch_size: int, size: int) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Return ``(slots, weights)`` for ``batch_size`` draws among slots ``[0, size)``.

        ``weights`` is ``None`` for samplers without importance weights.
        """

    def update_priority(self, slots: torch.Tensor, priority: torch.Tensor) -> None:
        """Set the priority of ``slots`` (already validated, deduplicated, non-stale)."""

    def state_dict(self) -> dict[str, Any]:
        """Tensors and numbers that restore this sampler (RNG state included)."""

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore what :meth:`state_dict` returned."""


def restore_generator(generator: torch.Generator, state: Any) -> None:
    """Set a generator to a saved state. The CPU kernels' state (8 bytes of SplitMix64, see
    :mod:`janus.buffer.kernels.native`) cannot be continued by a torch generator: it seeds it instead,
    deterministically, so a checkpoint moved from a CPU to a CUDA placement still loads."""
    if isinstance(state, torch.Tensor) and state.dtype == torch.uint8 and state.numel() == 8:
        digest = hashlib.blake2b(bytes(state.reshape(-1).tolist()), digest_size=8).digest()
        generator.manual_seed(int.from_bytes(digest, "little") >> 1)
        return
    generator.set_state(state)


def make_generator(device: torch.device, seed: int | None) -> torch.Generator:
    """A generator on ``device``; seeded from ``seed`` or from torch's global RNG when ``None``."""
    gen = torch.Generator(device=device)
    if seed is None:
        seed = int(torch.randint(0, 2**62, (1,)).item())
    gen.manual_seed(int(seed))
    return gen


class UniformSampler:
    """Uniform sampling with replacement over the written slots."""

    tracks_writes = False  # on_write is a no-op: the buffer need not compute written slots

    def __init__(self, capacity: int, device: torch.device, seed: int | None = None) -> None:
        self.capacity = capacity
        self.device = device
        self.generator = make_generator(device, seed)

    def on_write(self, slots: torch.Tensor) -> None:
        """Uniform sampling keeps no per-slot state."""

    def sample(self, batch_size: int, size: int) -> tuple[torch.Tensor, None]:
        slots = torch.randint(0, size, (batch_size,), generator=self.generator, device=self.device)
        return slots, None

    def update_priority(self, slots: torch.Tensor, priority: torch.Tensor) -> None:
        """Uniform sampling ignores priorities."""

    def state_dict(self) -> dict[str, Any]:
        return {"rng_state": self.generator.get_state()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        restore_generator(self.generator, state["rng_state"])


def epoch_permutation(
    num_items: int, block: int, generator: torch.Generator, device: torch.device
) -> torch.Tensor:
    """A permutation of ``0..num_items-1`` shuffled within consecutive blocks of ``block`` items.

    With ``block == num_items`` this is a full shuffle. Smaller blocks let the first epoch of an
    on-policy rollout start before the whole rollout is written: block ``j`` only holds items
    ``[j*block, (j+1)*block)``, so it can be served as soon as those are written. Every item still
    appears exactly once.
    """
    perm = torch.empty(num_items, dtype=torch.long, device=device)
    for start in range(0, num_items, block):
        stop = min(start + block, num_items)
        perm[start:stop] = start + torch.randperm(stop - start, generator=generator, device=device)
    return perm
