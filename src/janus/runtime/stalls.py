"""Stalls of a run's pipeline: counting the spells in which nothing moved (:class:`StallWatch`) and
saying which stage starves when the stall timeout fails a run (:func:`diagnose_stall`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass


@dataclass(frozen=True)
class Rates:
    """The replay limiter's settings, as a stall's diagnosis names them."""

    min_size_to_sample: int
    samples_per_insert: float
    error_buffer: float


STALL_MIN_S = 3.0  # a stall: nothing moved for at least this long...
STALL_PACE_FACTOR = 4.0  # ...and for this many times the run's usual time between moves
STARTUP_STALL_S = 30.0  # before anything first moved (processes spawn, environments build)


class StallWatch:
    """Counts stalls: spells in which nothing of the pipeline moved (no env step reported, no
    transition inserted, no batch trained) for longer than the run's own pace makes normal.

    A slow learner is no stall: the bar is :data:`STALL_PACE_FACTOR` times the usual time between
    moves (a moving average of the health checks' observations), and at least
    :data:`STALL_MIN_S`; before the first move, :data:`STARTUP_STALL_S`. A spell counts once,
    however long it lasts; a checkpoint or an evaluation in progress holds the pipeline on purpose
    and is none."""

    def __init__(self) -> None:
        self.count = 0
        self.progress: tuple[int, ...] | None = None  # the counts at the last check
        self.moved_at = 0.0  # when they last changed (or the first check, or an excused one)
        self.moved = False  # anything changed since the first check
        self.stalled = False  # the current spell was counted
        self.pace_s: float | None = None  # moving average of the time between moves

    @property
    def threshold_s(self) -> float:
        """How long nothing may move before it is a stall."""
        if not self.moved:
            return STARTUP_STALL_S
        return max(STALL_MIN_S, STALL_PACE_FACTOR * (self.pace_s or 0.0))

    def check(self, now: float, progress: tuple[int, ...], excused: bool = False) -> None:
        """One health check's counts ``progress`` at ``now``; ``excused``: a pause on purpose."""
        if self.progress is None:  # the first check: nothing could have moved yet
            self.progress, self.moved_at = progress, now
        elif progress != self.progress:
            gap = now - self.moved_at
            if self.moved and not self.stalled:  # a stall is not the run's pace
                self.pace_s = gap if self.pace_s is None else 0.8 * self.pace_s + 0.2 * gap
            self.progress, self.moved_at, self.moved, self.stalled = progress, now, True, False
        elif excused:
            self.moved_at = now
        elif not self.stalled and now - self.moved_at > self.threshold_s:
            self.count += 1
            self.stalled = True


def diagnose_stall(idle_s: float, rates: Rates, inserted: int, trained: int, total_updates: int,
                   replay_host: Mapping[str, float], rollouts: int, restarts: Mapping[str, int]) -> str:
    """Which stage starves, and the knob to change: the run made no progress for ``idle_s`` with
    ``inserted`` transitions in the replay and ``trained`` of ``total_updates`` batches trained;
    ``replay_host``: the TrajectoryManager's last counters; ``rollouts``: pieces the workers made."""
    head = (f"no progress for {idle_s:.0f}s ({inserted:,} transitions inserted, "
            f"{trained:,} of {total_updates:,} batches trained)")
    # staged: inserted into the TrajectoryManager by this process and not yet collected into the
    # experience buffer. Both counts are the TrajectoryManager's own, from one report: after a
    # --resume `inserted` also holds the restored transitions, which this process never staged.
    staged = int(replay_host.get("transitions_inserted", 0)) - int(replay_host.get("buffer.transitions_collected", 0))
    if inserted < rates.min_size_to_sample:
        return (f"{head}: sampling waits for {rates.min_size_to_sample:,} transitions (min_size_to_sample: "
                f"learning_starts / runtime.min_inserts) that the workers are not producing "
                f"({rollouts:,} pieces so far, restarts {dict(restarts)}); lower the minimum or raise the budget")
    if staged > 0 and rates.samples_per_insert:
        return (f"{head}: {staged:,} transitions wait in the actor-side staging while the learner takes no "
                f"batch; the replay's ratio (samples_per_insert {rates.samples_per_insert:g}, error_buffer "
                f"{rates.error_buffer:g}) holds them back until it samples — check the learner, or the ratio settings")
    if staged > 0:
        return (f"{head}: {staged:,} transitions wait in the actor-side staging for collection; "
                f"g_collect asks for more pieces per collection than the workers send — lower g_collect")
    return (f"{head}: the learner waits for a batch and no worker inserts (samples_per_insert "
            f"{rates.samples_per_insert:g}) — check the workers (restarts {dict(restarts)}) and the ratio settings")
