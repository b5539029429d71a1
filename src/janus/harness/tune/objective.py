"""The time-to-solve objective of ``janus tune``: one trial is a real janus run with ``target_return``
(:func:`run_solving_trial`), scored by :func:`objective_value`.

A trial's score is ``solved_at_s``, the seconds from the trial's start (its run's build, start-up
and training: :func:`~janus.runtime.command_clock.command_started_here`) to the evaluation that
reached the target. A trial that did not solve within its cap is ranked after every one that did:
``cap x (1 + margin + gap)``, where ``gap`` is how far its best evaluation fell short of the
target, relative to the target's size (so among the unsolved, the closer ranks first).

The trial reports each of its run's evaluations as it arrives (the run's observer sees them in the
status) to ``on_evaluation``; when that answers True the trial is pruned: :class:`TrialPruned`, a
stop request raised in the run's poll loop, stops the run cleanly as a trial's deadline does.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from janus import stopping
from janus.config import RunConfig
from janus.harness.tune.trials import run_within, trial_backend
from janus.runtime.command_clock import command_started_here
from janus.runtime.run import run_runtime
from janus.runtime.status import RunStatus

UNSOLVED_MARGIN = 0.01
"""An unsolved trial scores at least ``cap x (1 + this)``: after a trial that solved at its cap."""
MAX_GAP = 10.0
"""The most an unsolved trial's shortfall adds (in caps); a trial with no evaluation scores as this far."""

OnEvaluation = Callable[[int, float], bool]
"""``on_evaluation(env_steps, mean_return)``: called per evaluation of a trial's run; True prunes the trial."""


class TrialPruned(stopping.StopRequested):
    """The pruner stopped a time-to-solve trial: it stops as a callback's stop does (clean shutdown),
    and is scored on what it did."""


def objective_value(solved_at_s: float | None, best_return: float | None, target: float, cap_s: float) -> float:
    """The score a time-to-solve search minimises: ``solved_at_s`` where the trial solved, else
    ``cap_s x (1 + margin + gap)`` by its best evaluation's shortfall (see the module)."""
    if solved_at_s is not None:
        return float(solved_at_s)
    if best_return is None or not math.isfinite(best_return):
        gap = MAX_GAP
    else:
        gap = min(MAX_GAP, max(0.0, (target - best_return) / (abs(target) + 1.0)))
    return cap_s * (1.0 + UNSOLVED_MARGIN + gap)


@dataclass
class Outcome:
    """What one time-to-solve run did."""

    solved_at_s: float | None  # None: not solved (pruned, cut at its deadline, or its budget ran out)
    best_return: float | None  # the best evaluation's mean return (None: no evaluation)
    env_steps: int
    wall_s: float  # the whole trial, start-up included
    evaluations: int = 0
    pruned: bool = False
    cut: bool = False  # stopped at its deadline

    def value(self, target: float, cap_s: float) -> float:
        """Its :func:`objective_value`."""
        return objective_value(self.solved_at_s, self.best_return, target, cap_s)


class EvaluationWatch:
    """An observer of a run (``janus.runtime.run.Observer``) that hands each new evaluation to
    ``on_evaluation`` and raises :class:`TrialPruned` when it answers True."""

    def __init__(self, on_evaluation: OnEvaluation | None) -> None:
        self.on_evaluation = on_evaluation
        self.seen = 0

    def __call__(self, status: RunStatus, result_so_far: Callable[[], Any]) -> None:
        for evaluation in status.evaluations[self.seen:]:
            self.seen += 1
            steps, mean = int(evaluation["env_steps"]), float(evaluation["mean_return"])
            if self.on_evaluation is not None and self.on_evaluation(steps, mean) and status.solved is None:
                raise TrialPruned(f"pruned at {steps:,} env steps (mean return {mean:.1f})")


def run_solving_trial(cfg: RunConfig, allowed_s: float, on_evaluation: OnEvaluation | None = None,
                      clock: Callable[[], float] | None = None) -> Outcome:
    """Run ``cfg`` (resolved, with ``runtime.target_return``) until it solves, its budget ends, the
    pruner stops it (``on_evaluation``) or ``allowed_s`` seconds pass (then measured on what it did);
    a stop signal (Ctrl-C, SIGTERM) is raised on."""
    clock = clock or time.monotonic
    start = clock()
    with command_started_here():
        result, early = run_within(allowed_s, lambda: run_runtime(cfg, backend=trial_backend(cfg),
                                                                  observer=EvaluationWatch(on_evaluation)), (TrialPruned,))
    pruned, cut = early == "stopped", early == "cut"
    evaluations = list(result.get("evaluations") or [])
    returns = [float(e["mean_return"]) for e in evaluations if e.get("mean_return") is not None]
    solved = bool(result.get("solved"))
    return Outcome(solved_at_s=float(result["solved_at_s"]) if solved and result.get("solved_at_s") is not None else None,
                   best_return=max(returns) if returns else None, env_steps=int((result.get("counts") or {}).get("env_steps", 0)),
                   wall_s=clock() - start, evaluations=len(evaluations), pruned=pruned and not solved,
                   cut=cut and not solved)
