"""The one pacing object of a run: a two-sided sample/insert ratio (learned from Reverb's
``SampleToInsertRatio``), enforced by the Orchestrator as credits.

Units: inserts are counted in *transitions* and arrive in pieces of ``insert_piece`` transitions
(a worker's ``envs_per_actor x piece_steps``); samples are counted in *sampled transitions* and
are taken in batches of ``sample_batch``. The limiter holds the difference

    diff = samples_per_insert * (inserted - min_size_to_sample) - sampled

within ``[-error_buffer, +error_buffer]``: a batch may be sampled while ``diff - sample_batch >=
-error_buffer`` (and ``min_size_to_sample`` transitions are stored), a piece may be inserted while
``diff + samples_per_insert * insert_piece <= error_buffer``. ``error_buffer`` is therefore in
sampled transitions. It must hold at least one piece's worth and one batch, or there are states
where neither side may move (a deadlock): the constructor rejects such settings.

With ``samples_per_insert = 0`` there is no ratio: inserts are unlimited and sampling is bounded
only by ``max_in_flight`` (batches requested but not yet trained).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from janus.errors import ConfigError, invalid


@dataclass(frozen=True)
class SampleToInsertRatio:
    """Grants sample credits (batches) and insert credits (pieces) so the ratio holds.

    Args:
        samples_per_insert: sampled transitions per inserted transition (0: no ratio).
        min_size_to_sample: transitions stored before the first batch is sampled.
        error_buffer: how far ``diff`` may drift either side of 0, in sampled transitions.
        insert_piece: transitions one insert credit allows (one worker piece).
        sample_batch: transitions one sample credit takes (one learner batch).
        max_in_flight: batches requested but not yet trained (the prefetch depth).
    """

    samples_per_insert: float
    min_size_to_sample: int
    error_buffer: float
    insert_piece: int
    sample_batch: int
    max_in_flight: int = 4

    def __post_init__(self) -> None:
        spi = self.samples_per_insert
        if isinstance(spi, bool) or not isinstance(spi, (int, float)) or not math.isfinite(spi) or spi < 0:
            raise invalid("samples_per_insert", spi, "a finite number >= 0 (0: no ratio)")
        for name, low in (("min_size_to_sample", 1), ("insert_piece", 1), ("sample_batch", 1), ("max_in_flight", 1)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise invalid(name, value, f"an integer >= {low}")
        if not math.isfinite(self.error_buffer) or self.error_buffer < 0:
            raise invalid("error_buffer", self.error_buffer, "a finite number >= 0 (sampled transitions)")
        if spi and self.error_buffer < self.min_error_buffer:
            raise ConfigError(
                f"invalid error_buffer: got {self.error_buffer:g} sampled transitions; accepted: at least "
                f"{self.min_error_buffer:g} = max(samples_per_insert x insert_piece = {spi:g} x {self.insert_piece}, "
                f"sample_batch = {self.sample_batch}): a smaller buffer can leave neither a piece insertable "
                f"nor a batch sampleable (a deadlock)"
            )

    @property
    def min_error_buffer(self) -> float:
        """The least ``error_buffer`` that cannot deadlock: one piece's worth and one batch."""
        return max(self.samples_per_insert * self.insert_piece, self.sample_batch)

    @property
    def limits_inserts(self) -> bool:
        """Whether inserts need credits (a ratio is set)."""
        return self.samples_per_insert > 0

    def _diff(self, inserted: int, sampled_batches: int) -> float:
        return self.samples_per_insert * (inserted - self.min_size_to_sample) - sampled_batches * self.sample_batch

    def batches_allowed(self, inserted: int) -> int:
        """Batches the ratio allows in all once ``inserted`` transitions are in (ignoring the
        in-flight bound): what a run's workers can ever earn its learner."""
        return math.floor((self._diff(inserted, 0) + self.error_buffer) / self.sample_batch)

    def sample_credits(self, inserted: int, requested: int, trained: int, inserts_done: bool = False) -> int:
        """Batches to request now, given transitions ``inserted`` (stored), batches ``requested``
        so far and batches ``trained`` (requested - trained are in flight). ``inserts_done``: every
        insert of the run is in, so none can come to earn a batch; only the in-flight bound is
        left (a run whose inserts ended short of the ratio must not stall its last batches)."""
        if inserted < self.min_size_to_sample:
            return 0
        room = self.max_in_flight - (requested - trained)
        if self.limits_inserts and not inserts_done:
            room = min(room, math.floor((self._diff(inserted, requested) + self.error_buffer) / self.sample_batch))
        return max(room, 0)

    def insert_credits(self, issued: int, requested: int) -> int | None:
        """Pieces to grant now, given transitions ``issued`` (inserted plus pieces granted and not yet
        inserted, at ``insert_piece`` each) and batches ``requested``; None: no limit."""
        if not self.limits_inserts:
            return None
        worth = self.samples_per_insert * self.insert_piece
        return max(math.floor((self.error_buffer - self._diff(issued, requested)) / worth), 0)
