"""Rates the Orchestrator enforces, as credits (learned from Reverb's rate limiters)."""

from __future__ import annotations

from dataclasses import dataclass

from janus.errors import ConfigError, invalid


@dataclass
class RateLimiter:
    """Decides how many training batches may have been requested, given transitions inserted.

    * ``min_inserts``: transitions stored before the first batch is sampled;
    * ``samples_per_insert``: sampled transitions per inserted transition (0 = unlimited);
    * ``max_in_flight``: batches requested but not yet trained (prefetch depth).
    """

    batch_size: int
    min_inserts: int = 0
    samples_per_insert: float = 0.0
    max_in_flight: int = 4

    def __post_init__(self) -> None:
        if self.min_inserts < 0:
            raise invalid("min_inserts", self.min_inserts, "an integer >= 0")
        if self.samples_per_insert < 0:
            raise invalid("samples_per_insert", self.samples_per_insert, "a number >= 0 (0: unlimited)")
        if self.max_in_flight < 1:
            raise invalid("max_in_flight", self.max_in_flight, "an integer >= 1")
        if self.batch_size < 1:
            raise ConfigError(f"invalid batch_size: got {self.batch_size}; accepted: an integer >= 1")

    def allowed(self, inserted: int) -> int | None:
        """Batches that may have been requested in total (None: no ratio limit)."""
        if inserted < max(self.min_inserts, 1):
            return 0
        if not self.samples_per_insert:
            return None
        return int(self.samples_per_insert * inserted // self.batch_size)

    def credits(self, inserted: int, requested: int, trained: int) -> int:
        """How many more batches to request now."""
        room = self.max_in_flight - (requested - trained)
        allowed = self.allowed(inserted)
        if allowed is not None:
            room = min(room, allowed - requested)
        if inserted < max(self.min_inserts, 1):
            return 0
        return max(room, 0)
