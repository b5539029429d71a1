"""The collection unit: what one collection moves from the ActorBuffer into storage, from ``g_collect``.

``g_collect`` is a count of pieces off-policy and a fraction k/M of a rollout on-policy. Both faces
of it are worked out here, once: the unit a collection waits for (:class:`CollectionUnit`) and, on
policy, the piece size that cuts a rollout so that k/M of it is whole pieces (:func:`piece_steps`).
A run's plan (:class:`janus.runtime.plan.RunPlan`) derives them for its workers and passes the unit
to its JanusBuffer; a JanusBuffer built without one derives it from its own config.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class CollectionUnit:
    """Pieces (off-policy) or transitions (on-policy) one collection writes at once; the other None."""

    pieces: int | None = None
    """Off-policy: whole pieces per collection (``g_collect``)."""
    transitions: int | None = None
    """On-policy: transitions per collection, ``g_collect`` (k/M) of the rollout."""

    @classmethod
    def of(cls, on_policy: bool, g_collect: float, rollout_size: int | None) -> CollectionUnit:
        """The unit of ``g_collect`` (parsed: a number): on-policy ``g_collect`` (k/M) of a rollout of
        ``rollout_size`` transitions (rows), off-policy ``g_collect`` pieces."""
        if on_policy:
            return cls(transitions=round(g_collect * (rollout_size or 0)))
        return cls(pieces=int(g_collect))

    @property
    def staged_pieces(self) -> int:
        """Pieces the ActorBuffer must hold at least for one collection (one where transitions count)."""
        return self.pieces or 1


def piece_steps(rollout_length: int, g_collect: float) -> int:
    """On-policy: steps per piece so that pieces tile the rollout and ``g_collect`` (k/M) of it is
    whole pieces: the largest size that divides both (3/4 of 128 steps: pieces of 32, collected
    three at a time)."""
    return math.gcd(rollout_length, round(rollout_length * g_collect))
