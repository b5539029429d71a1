"""What an algorithm declares of its pace: the rates and piece sizes of :class:`Pacing`, the default
drift of its sample/insert ratio (:func:`default_error_buffer`) and the replay's largest insert.

:meth:`janus.algorithms.base.Algorithm.pacing` builds one; the run's plan
(:class:`janus.runtime.plan.RunPlan`) derives the replay's limiter settings and collection unit from it.
"""

from __future__ import annotations

from dataclasses import dataclass

from janus.config.schema import RunConfig


@dataclass(frozen=True)
class Pacing:
    """Rates and piece sizes: what the replay's rate limiter and the Workers are built from.

    Sizes are in transitions; ``error_buffer`` is in sampled transitions (see
    :class:`~janus.buffer.pacing.ratio_limiter.RatioLimiter`).
    """

    samples_per_insert: float
    """Sampled transitions per inserted transition (0: no ratio, sampling bounded by in-flight only)."""
    min_size_to_sample: int
    """Transitions inserted before the first batch is sampled."""
    error_buffer: float
    """How far the sample/insert difference may drift either side of its target."""
    publish_every: int
    """Trained batches between parameter versions (not a ratio: how fresh the actors' policy is)."""
    piece_steps: int
    """Vector-env steps per piece a Worker sends."""
    pieces_per_rollout: int
    """Pieces per rollout (on-policy lockstep: a new version is needed every rollout)."""
    max_pieces: int
    """Pieces a Worker produces in all (0: until stopped)."""
    lockstep: bool
    """On-policy: rollout ``i`` acts with the parameters trained on rollout ``i-1`` (correctness)."""


def default_error_buffer(samples_per_insert: float, piece: int, workers: int, batch: int,
                         largest_insert: int = 0) -> float:
    """Two rounds of one piece from every worker (in sampled transitions), and at least the
    replay's largest insert, plus one batch: workers keep a round in flight while the learner
    works through the previous one, and the replay can always admit its next collection."""
    return samples_per_insert * max(2 * piece * workers, largest_insert) + batch


def largest_insert(cfg: RunConfig, piece: int) -> int:
    """The most transitions the replay's collection writes at once, off-policy: ``g_collect``
    puts of the node with the most workers (its proxy merges one piece of each)."""
    per_node = min(cfg.runtime.workers_per_node or cfg.workload.num_actors, cfg.workload.num_actors)
    return max(1, round(cfg.janus.g_collect)) * per_node * piece
