"""Why the learner found no batch: the message of the ``StagingTimeout`` that ``JanusBuffer.get`` raises.

It names what holds the data back: pieces staged below the collection unit, too little stored, or
the sample/insert ratio.
"""

from __future__ import annotations

from janus.buffer.pacing.rate_limiter import RateLimiter
from janus.buffer.pacing.ratio_limiter import RatioLimiter
from janus.buffer.staging.actor_buffer import ActorBuffer
from janus.errors import StagingTimeout


def no_batch_message(timeout: float | None, exc: StagingTimeout, staged_pieces: ActorBuffer,
                     unit: tuple[int | None, int | None], limiter: RateLimiter, g_collect: float) -> str:
    """Why ``get`` found no batch within ``timeout``: the pieces staged below the collection
    granularity ``unit`` (which ``flush`` writes now), too little stored, the ratio, or the stage's
    own message (``exc``)."""
    head = "JanusBuffer.get: no batch" + (f" within {timeout:g}s" if timeout is not None else "")
    staged, transitions = len(staged_pieces), staged_pieces.transitions
    pieces_needed, transitions_needed = unit
    if staged and ((pieces_needed is not None and staged < pieces_needed)
                   or (transitions_needed is not None and transitions < transitions_needed)):
        unit_text = (f"g_collect={pieces_needed} pieces" if pieces_needed is not None else
                     f"{transitions_needed} transitions (g_collect={g_collect:g} of a rollout)")
        return (f"{head}: collection is waiting for {unit_text} before it writes, and {staged} piece(s) "
                f"({transitions} transitions) are staged; put more pieces, or call flush() to write "
                "the staged ones now")
    lim = limiter
    if isinstance(lim, RatioLimiter):
        if lim.stored < lim.min_size_to_sample:
            return (f"{head}: the buffer stores {lim.stored} transitions and sampling starts at min_size="
                    f"{lim.min_size_to_sample}; {staged} piece(s) are staged: put more pieces")
        if not lim.can_sample():
            r = lim.ratio
            return (f"{head}: the sample/insert ratio holds sampling back (samples_per_insert="
                    f"{r.samples_per_insert:g}, error_buffer={r.error_buffer:g}, {lim.inserted} transitions "
                    f"written, {lim.sampled} sampled); put more pieces, or call finish_inserts() once none "
                    "will come")
    return f"{head}: {exc}"
