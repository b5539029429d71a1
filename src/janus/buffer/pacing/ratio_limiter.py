"""Off-policy pacing: :class:`RatioLimiter`, a minimum size and a two-sided sample/insert ratio.

Inserts are counted in *transitions*, samples in *sampled transitions*; the limiter holds

    diff = samples_per_insert * (inserted - min_size_to_sample) - sampled

within ``[-error_buffer, +error_buffer]``: a batch of ``b`` may be sampled while ``diff - b >=
-error_buffer`` (and ``min_size_to_sample`` transitions are written), ``n`` transitions may be
inserted while ``diff + samples_per_insert * n <= error_buffer``. With ``samples_per_insert = 0``
only the minimum size holds sampling back. :class:`SampleToInsertRatio` validates the settings.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from janus.buffer.pacing.rate_limiter import RateLimiter, SampleGrant
from janus.errors import ConfigError, invalid


@dataclass(frozen=True)
class SampleToInsertRatio:
    """Validated ratio settings (a :class:`RatioLimiter` enforces them).

    Args:
        samples_per_insert: sampled transitions per inserted transition (0: no ratio).
        min_size_to_sample: transitions stored before the first batch is sampled.
        error_buffer: how far ``diff`` may drift either side of 0, in sampled transitions.
        insert_piece: the largest insert, in transitions (one worker piece).
        sample_batch: transitions one sample takes (one learner batch).

    ``error_buffer`` must hold one insert's worth and one batch, or there are states where neither
    side may move (a deadlock): such settings are refused here.
    """

    samples_per_insert: float
    min_size_to_sample: int
    error_buffer: float
    insert_piece: int
    sample_batch: int

    def __post_init__(self) -> None:
        spi = self.samples_per_insert
        if isinstance(spi, bool) or not isinstance(spi, (int, float)) or not math.isfinite(spi) or spi < 0:
            raise invalid("samples_per_insert", spi, "a finite number >= 0 (0: no ratio)")
        for name, low in (("min_size_to_sample", 1), ("insert_piece", 1), ("sample_batch", 1)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise invalid(name, value, f"an integer >= {low}")
        eb = self.error_buffer
        if isinstance(eb, bool) or not isinstance(eb, (int, float)) or not math.isfinite(eb) or eb < 0:
            raise invalid("error_buffer", eb, "a finite number >= 0 (sampled transitions)")
        if spi and eb < self.min_error_buffer:
            raise ConfigError(
                f"invalid error_buffer: got {eb:g} sampled transitions; accepted: at least "
                f"{self.min_error_buffer:g} = max(samples_per_insert x insert_piece = {spi:g} x {self.insert_piece}, "
                f"sample_batch = {self.sample_batch}): a smaller buffer can leave neither a piece insertable "
                f"nor a batch sampleable (a deadlock)"
            )

    @property
    def min_error_buffer(self) -> float:
        """The least ``error_buffer`` that cannot deadlock: one insert's worth and one batch."""
        return max(self.samples_per_insert * self.insert_piece, self.sample_batch)

    @property
    def limits_inserts(self) -> bool:
        """Whether inserts are held back at all (a ratio is set)."""
        return self.samples_per_insert > 0

    def diff(self, inserted: int, sampled: float) -> float:
        """``samples_per_insert * (inserted - min_size_to_sample) - sampled`` (sampled transitions)."""
        return self.samples_per_insert * (inserted - self.min_size_to_sample) - sampled

    def batches_allowed(self, inserted: int) -> int:
        """Batches the ratio allows in all once ``inserted`` transitions are in (ignoring the
        in-flight bound): what a run's workers can ever earn its learner."""
        return math.floor((self.diff(inserted, 0) + self.error_buffer) / self.sample_batch)


class RatioLimiter(RateLimiter):
    """Off-policy pacing: ``min_size_to_sample`` written before the first sample, and, with
    ``samples_per_insert > 0``, the sample/insert ratio within ``error_buffer`` (see the module).

    Args:
        min_size_to_sample: transitions written before the first sample (>= 1).
        sample_batch: transitions one batch takes.
        samples_per_insert: sampled transitions per inserted transition (0: no ratio).
        error_buffer: sampled transitions ``diff`` may drift (needed with a ratio).
        max_insert: the largest insert, if known now: settings that could deadlock with it are
            refused here; unknown (None), an insert too large for ``error_buffer`` is refused when it
            comes (:meth:`check_insert`), never left to hang.
        stored: how many transitions the storage holds now, for the minimum size (default: those
            committed here). The JanusBuffer passes its storage's length, so a storage loaded from
            a checkpoint directly (``experience.load_state_dict``) counts before any new insert.
    """

    def __init__(self, min_size_to_sample: int, sample_batch: int, samples_per_insert: float = 0.0,
                 error_buffer: float | None = None, max_insert: int | None = None,
                 stored: Callable[[], int] | None = None) -> None:
        super().__init__()
        self._stored = stored
        if stored is not None:  # the storage may fill without a commit here (a checkpoint loaded into it)
            self._poll_s = 0.1
        if samples_per_insert and error_buffer is None:
            raise ConfigError(f"invalid error_buffer: got None with samples_per_insert={samples_per_insert!r}; "
                              "accepted: a number of sampled transitions >= max(samples_per_insert x largest "
                              "insert, sample batch)")
        self.ratio = SampleToInsertRatio(samples_per_insert, min_size_to_sample,
                                         0.0 if error_buffer is None else error_buffer, max_insert or 1, sample_batch)

    @property
    def min_size_to_sample(self) -> int:
        return self.ratio.min_size_to_sample

    @property
    def stored(self) -> int:
        """Transitions the storage holds, as the minimum size counts them."""
        return self._inserted if self._stored is None else self._stored()

    @property
    def diff(self) -> float:
        """``samples_per_insert * (inserted - min_size_to_sample) - sampled``, now."""
        return self.ratio.diff(self._inserted, self._sampled)

    def check_insert(self, n: int) -> None:
        super().check_insert(n)
        r = self.ratio
        if r.limits_inserts and not self._inserts_finished and r.samples_per_insert * n > r.error_buffer:
            raise ConfigError(
                f"an insert of {n} transitions is worth samples_per_insert x {n} = {r.samples_per_insert * n:g} "
                f"sampled transitions, more than error_buffer={r.error_buffer:g}: the ratio could hold it back "
                f"for ever (a deadlock); accepted: inserts of at most {math.floor(r.error_buffer / r.samples_per_insert)} "
                "transitions (put smaller pieces or fewer per collection, g_collect), or a larger error_buffer"
            )

    def _insert_ready(self, n: int) -> bool:
        r = self.ratio
        if not r.limits_inserts or self._inserts_finished:
            return True
        return r.diff(self._admitted + n, self._sampled) <= r.error_buffer

    def _allowed_batches(self) -> int:
        """Batches a sample may take now (0: none)."""
        r = self.ratio
        if self.stored < r.min_size_to_sample:
            return 0
        if not r.limits_inserts or self._inserts_finished:
            return 1 << 30
        return max(math.floor((self.diff + r.error_buffer) / r.sample_batch), 0)

    def _sample_ready(self, batches: int) -> bool:
        return self._allowed_batches() > 0

    def _sample_blocker(self) -> str:
        r = self.ratio
        if self.stored < r.min_size_to_sample:
            return f"{self.stored} transitions stored, sampling starts at min_size_to_sample={r.min_size_to_sample}"
        return (f"the ratio samples_per_insert={r.samples_per_insert:g} holds sampling back: diff={self.diff:g}, "
                f"error_buffer={r.error_buffer:g}, a batch is {r.sample_batch}")

    def _insert_blocker(self) -> str:
        r = self.ratio
        return (f"the ratio samples_per_insert={r.samples_per_insert:g} holds inserts back until the learner "
                f"samples: diff={r.diff(self._admitted, self._sampled):g}, error_buffer={r.error_buffer:g}")

    def _grant(self, batches: int) -> SampleGrant:
        count = min(batches, self._allowed_batches())
        self._sampled += count * self.ratio.sample_batch
        return SampleGrant(count)
