"""Repeated measurements for ``janus compare`` and ``janus eval``: each configuration runs several
times, interleaved (round 1 runs every configuration once, then round 2, ...: a drift of the
machine's speed falls on all of them alike), and is reported as its median run with the range.

A configuration's summary is its median run by samples/s (for an even count the lower middle
one), whole, so every figure of a row comes from one run; ``repeats`` lists each run's throughput
and wall time. Where two configurations' ranges overlap, the difference of their medians is
within the noise of the measurement and :func:`spread_notes` says so.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any, TypeVar

from janus.result import as_dict, env_steps_rate

DEFAULT_REPEATS = 3  # compare and eval; --quick (a smoke test) runs each configuration once
SMOKE_NOTE = ("smoke test (--quick): a tiny workload that checks the command runs end to end; its figures "
              "are not a measurement (run without --quick for the medians of interleaved repeats)")

T = TypeVar("T")


def interleaved(configs: Sequence[T], repeats: int) -> list[tuple[int, T]]:
    """``(round, config)`` in run order: every configuration once per round."""
    return [(r, c) for r in range(repeats) for c in configs]


def _sps(run: dict[str, Any]) -> float:
    return float(run.get("samples_per_s") or 0.0)


def summarize(runs: Sequence[Any]) -> list[dict[str, Any]]:
    """One summary per configuration name (in first-seen order) of ``runs`` (RunResults or dicts):
    its median run by samples/s, with ``repeats`` (each run's samples/s, env-steps/s and wall
    time, in run order) when it ran more than once."""
    by_name: dict[str, list[dict[str, Any]]] = {}
    for run in runs:
        d = as_dict(run)
        by_name.setdefault(str(d.get("name")), []).append(d)
    out = []
    for group in by_name.values():
        ranked = sorted(group, key=_sps)
        median = copy.deepcopy(ranked[(len(ranked) - 1) // 2])
        if len(group) > 1:
            median["repeats"] = {
                "runs": len(group),
                "samples_per_s": [_sps(r) for r in group],
                "env_steps_per_s": [float(env_steps_rate(r) or 0.0) for r in group],
                "wall_s": [float(r.get("wall_s") or 0.0) for r in group],
            }
        out.append(median)
    return out


def sps_range(run: dict[str, Any]) -> tuple[float, float] | None:
    """(min, max) samples/s of a summarised configuration; None if it ran once."""
    values = (run.get("repeats") or {}).get("samples_per_s")
    return (min(values), max(values)) if values else None


NOT_MEASURED = "not a measured difference"
"""What a difference of medians within overlapping ranges is (compare, eval and tune say it alike)."""


def ranges_overlap(a: Sequence[float], b: Sequence[float]) -> bool:
    """Whether the ranges (min to max) of two sets of repeated measurements overlap."""
    return bool(a) and bool(b) and not (max(a) < min(b) or max(b) < min(a))


def spread_notes(runs: Sequence[dict[str, Any]]) -> list[str]:
    """A note for every pair of configurations whose samples/s ranges overlap: the difference of
    their medians is not a measured difference."""
    notes = []
    for i, a in enumerate(runs):
        for b in runs[i + 1:]:
            ra, rb = sps_range(a), sps_range(b)
            if ra is None or rb is None or not ranges_overlap(ra, rb):
                continue
            hi, lo = (a, b) if _sps(a) >= _sps(b) else (b, a)
            diff = _sps(hi) / _sps(lo) - 1.0 if _sps(lo) > 0 else 0.0
            notes.append(f"{hi['name']} vs {lo['name']}: medians {diff:+.0%} apart, within their spread "
                         f"(ranges overlap): {NOT_MEASURED}")
    return notes
