"""Per-stage statistics of the data path: :class:`StageStats`, seconds and counts per stage of a JanusBuffer."""

from __future__ import annotations

from dataclasses import asdict, dataclass


@dataclass
class StageStats:
    """Seconds and counts per stage, accumulated since the buffer was created."""

    collect_s: float = 0.0
    collect_calls: int = 0
    transitions_collected: int = 0
    select_s: float = 0.0  # selecting the batches the learner took (so within the run's time)
    select_ahead_s: float = 0.0  # selecting batches not taken (yet; after close: never), e.g. prefetched past a run's end
    select_calls: int = 0
    batches_selected: int = 0
    batches_delivered: int = 0
    learner_wait_s: float = 0.0
    actor_blocked_s: float = 0.0
    pieces_put: int = 0
    transitions_put: int = 0
    pieces_dropped_on_close: int = 0
    insert_wait_s: float = 0.0  # collection waiting for the rate limiter to admit staged pieces
    sample_wait_s: float = 0.0  # selection waiting for the rate limiter to grant a sample
    items_dropped_stale: int = 0  # queue mode: items staler than max_staleness, never served

    def as_dict(self) -> dict[str, float]:
        return asdict(self)
