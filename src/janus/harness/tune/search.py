"""``janus tune``: pick the data-path knobs for a workload by measuring them (issue 37, item 5).

The candidates are the settings of :mod:`janus.harness.tune.space`. They are compared by successive
halving (Jamieson and Talwalkar 2016; Li et al.'s Hyperband builds on it): every candidate runs a
short share of the workload, the best third goes on with three times the budget, and so on, so a
poor setting costs one short run and the time goes to the contenders. The defaults are always a
candidate. The winner (or, where the defaults led, the best other setting: a short trial's lead
is noisy either way) and the defaults are then run again, interleaved, and the gain is the ratio
of their medians; where their ranges overlap it is not a measured difference and the defaults stay.

The budget is a promise (:class:`Schedule`): the paired rounds' share of it is set aside up front,
every trial is bounded by a deadline as well as by its work (a trial the runner cuts at its
deadline is scored on what it did, behind every trial that finished), and a trial whose estimated
time (from the trials before it) does not fit in what is left of its phase is not started. The
warm-up (the defaults' first run: kernels, first allocations) is a trial like the others, only
not ranked.

Throughput is what is compared: env steps/s for an algorithm that acts in an environment (its
updates follow the env steps through its sample/insert ratio), learner samples/s for the
synthetic workload. Each trial is a full ``run_runtime`` run, so no process outlives it.
"""

from __future__ import annotations

import math
import random
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from janus.algorithms.base import algorithm
from janus.config import RunConfig, resolve
from janus.harness.experiments.repeats import NOT_MEASURED, ranges_overlap
from janus.harness.tune.space import Candidate, defaults_of

ETA = 3  # successive halving keeps the best 1/ETA of a rung, with ETA times the budget
MIN_SHARE = 1 / 27  # the first rung's share of the workload (three rungs of x3 reach 1/3)
FINAL_ROUNDS = 3  # the challenger and the defaults, interleaved: three each, for a range to compare
FINAL_FRACTION = 0.25  # of the budget, set aside up front for the paired rounds
CUT_FACTOR = 2.0  # a trial may take this many times its estimate before it is cut
FIT = 0.9  # a paired round's work is sized to this fraction of its slot (start-up varies)

Runner = Callable[[RunConfig, float], Any]
"""``run(config, allowed_s)``: runs a configuration within about ``allowed_s`` seconds and returns
a mapping with the throughputs, ``wall_s`` (the run's own clock, start-up excluded) and ``cut``
(True when it was stopped at its deadline and measured on what it did)."""
Clock = Callable[[], float]


@dataclass
class Trial:
    """One run of a candidate at one budget."""

    candidate: Candidate
    rung: int
    share: float
    throughput: float | None  # None: the candidate could not run (its reason in ``error``)
    wall_s: float = 0.0  # the whole trial, start-up included
    error: str = ""
    final_return: float | None = None
    final: bool = False  # a run of the final paired rounds (the challenger against the defaults)
    warmup: bool = False  # the defaults' first run (kernels, first allocations): recorded, not ranked
    cut: bool = False  # stopped at its deadline, measured on what it did
    run_s: float = 0.0  # the run's own clock (start-up excluded)


VERDICTS = {
    "defaults": "no other setting ran: best.yaml holds the defaults",
    "gain": "gain over the defaults: {gain:.2f}x (medians of the paired rounds, ranges apart)",
    "within_spread": ("gain over the defaults: {gain:.2f}x, " + NOT_MEASURED + " (within the paired runs' spread: "
                      "their ranges overlap): best.yaml holds the defaults"),
    "lost": "the challenger lost the paired rounds to the defaults ({gain:.2f}x): best.yaml holds the defaults",
    "not_measured": ("the paired rounds could not run in the budget left (or failed): the gain is not measured, "
                     "best.yaml holds the defaults"),
}
"""What :attr:`TuneResult.verdict` means, as the table says it."""


@dataclass
class TuneResult:
    trials: list[Trial] = field(default_factory=list)
    best: Candidate | None = None
    defaults: Candidate | None = None
    final: dict[str, list[float]] = field(default_factory=dict)  # "best"/"defaults" -> throughputs
    metric: str = "samples_per_s"
    stopped_early: bool = False
    runner_up: Candidate | None = None  # the challenger, when the paired rounds kept the defaults
    verdict: str = ""  # a key of VERDICTS once the search ended
    budget_s: float = 0.0
    elapsed_s: float = 0.0  # on the tune's clock, when it ended (or the last trial did)

    @property
    def gain(self) -> float | None:
        """The challenger's median throughput over the defaults' in the final paired rounds (1.0
        when nothing else ran)."""
        if self.verdict == "defaults":
            return 1.0
        best, base = self.final.get("best"), self.final.get("defaults")
        if not best or not base or statistics.median(base) <= 0:
            return None
        return statistics.median(best) / statistics.median(base)

    def leader(self) -> Candidate | None:
        """The best so far: the result's best once decided, else the fastest of the highest rung
        reached, else (nothing ranked yet) the defaults."""
        if self.best is not None:
            return self.best
        ranked = [t for t in self.trials if t.throughput is not None and not t.warmup and not t.final]
        if not ranked:
            return self.defaults
        top = max(t.rung for t in ranked)
        return min((t for t in ranked if t.rung == top), key=_rank).candidate


def _rank(t: Trial) -> tuple[bool, float]:
    """Sort key: trials that finished first, then by throughput, fastest first."""
    return (t.cut, -(t.throughput or 0.0))


SAMPLING_THRESHOLDS = ("learning_starts",)
"""Hyperparameters (env steps) before which a run does not sample: a trial's share scales them with
its budget, as ``runtime.min_inserts``, so a short trial learns over the same part of its run as the
whole run does (unscaled, a 1/27 share of a small budget could never reach them: every trial failed)."""


def _part(value: int, share: float) -> int:
    """``share`` of a threshold ``value``: 0 stays 0 (none), any other at least 1."""
    return 0 if value <= 0 else max(1, round(value * share))


def scaled(cfg: RunConfig, share: float) -> RunConfig:
    """``cfg`` with ``share`` of its budget (iterations for synthetic, env steps otherwise) and of the
    thresholds its sampling waits for (:data:`SAMPLING_THRESHOLDS`, ``runtime.min_inserts``)."""
    w, r = cfg.workload, cfg.runtime
    known = algorithm(w.algo).defaults()
    hyper = {**cfg.algorithm, **{key: _part(int(cfg.algorithm.get(key, known[key])), share)
                                 for key in SAMPLING_THRESHOLDS if isinstance(known.get(key), int)}}
    return replace(cfg, algorithm=hyper, runtime=replace(r, min_inserts=_part(r.min_inserts, share)),
                   workload=replace(w, iterations=max(2, round(w.iterations * share)),
                                    total_env_steps=max(1, round(w.total_env_steps * share))))


@dataclass
class Schedule:
    """How a tune spends ``budget_s`` from ``start`` on ``clock``: the search until
    :attr:`search_end`, then the paired rounds, planned up front, until :attr:`end`; and the time
    a trial is expected to take, from the trials before it (start-up + seconds per share)."""

    start: float
    budget_s: float
    clock: Clock = time.monotonic
    costs: dict[Candidate, tuple[float, float]] = field(default_factory=dict)  # start-up s, run s per share

    @property
    def end(self) -> float:
        return self.start + self.budget_s

    @property
    def search_end(self) -> float:
        return self.end - FINAL_FRACTION * self.budget_s

    def left(self, until: float) -> float:
        return until - self.clock()

    def record(self, trial: Trial) -> None:
        """Learn a candidate's cost from a trial that finished its work."""
        if trial.throughput is not None and not trial.cut and trial.share > 0:
            self.costs[trial.candidate] = (max(0.0, trial.wall_s - trial.run_s), trial.run_s / trial.share)

    def cost(self, cand: Candidate) -> tuple[float, float] | None:
        """``cand``'s (start-up s, run s per share): its own if it ran, else the median of those
        seen on its backend (a process trial starts processes, a local one does not); None when
        none has run there yet (its first trial then gets the time left in its phase)."""
        if cand in self.costs:
            return self.costs[cand]
        seen = [c for k, c in self.costs.items() if k.backend == cand.backend]
        if not seen:
            return None
        return statistics.median(c[0] for c in seen), statistics.median(c[1] for c in seen)

    def estimate(self, cand: Candidate, share: float) -> float:
        """Seconds ``cand`` is expected to take at ``share`` (0.0 when nothing has run yet)."""
        cost = self.cost(cand)
        return 0.0 if cost is None else cost[0] + cost[1] * share

    def allowed(self, cand: Candidate, share: float, until: float) -> float:
        """The deadline of a trial started now: :data:`CUT_FACTOR` times its estimate, within ``until``."""
        est = self.estimate(cand, share)
        left = self.left(until)
        return min(left, CUT_FACTOR * est) if est > 0 else left

    def fits(self, cand: Candidate, share: float, until: float) -> bool:
        """Whether ``cand`` at ``share`` is expected to finish before ``until``."""
        return self.left(until) > 0 and self.estimate(cand, share) <= self.left(until)

    def rung_fraction(self, shares: Sequence[float]) -> float:
        """The fraction of the search's time left that the first of the rungs at ``shares`` gets:
        each later rung runs 1/ETA as many trials at ETA times the share, so when start-up dominates
        a trial the later rungs cost little and the first gets most; when the work dominates, each
        rung costs about the same."""
        seen = list(self.costs.values())
        if not seen:
            return 1 / len(shares)
        startup, per_share = statistics.median(c[0] for c in seen), statistics.median(c[1] for c in seen)
        costs = [(startup + per_share * share) / ETA ** k for k, share in enumerate(shares)]
        return costs[0] / sum(costs) if sum(costs) > 0 else 1 / len(shares)

    def final_share(self, cands: Sequence[Candidate], most: float, trials: int) -> float:
        """The largest share up to ``most`` at which ``trials`` runs of the slowest of ``cands`` fit
        in the time left (each in its slot, at :data:`FIT` of it); 0.0 when even start-up does not."""
        slot = FIT * self.left(self.end) / trials
        share = most
        for cand in cands:
            cost = self.cost(cand)
            if cost is None:
                continue
            startup, per_share = cost
            if per_share > 0:
                share = min(share, (slot - startup) / per_share)
        return max(0.0, share)


def _trial(cfg: RunConfig, cand: Candidate, rung: int, share: float, run: Runner, metric: str, allowed_s: float,
           clock: Clock) -> Trial:
    start = clock()
    try:
        result = run(resolve(scaled(cand.apply(cfg), share)), allowed_s)
    except Exception as exc:  # noqa: BLE001 - a setting this workload refuses or that fails: recorded, not fatal
        return Trial(cand, rung, share, None, clock() - start, f"{type(exc).__name__}: {exc}")
    # a RunResult or a dict: both are read by key
    return Trial(cand, rung, share, float(result[metric]), clock() - start,
                 final_return=result.get("final_mean_return"), cut=bool(result.get("cut", False)),
                 run_s=float(result.get("wall_s") or 0.0))


def successive_halving(cfg: RunConfig, candidates: list[Candidate], run: Runner, budget_s: float,
                       progress: Callable[[Trial, int, int], None] | None = None, seed: int = 0,
                       plain: bool = False, clock: Clock = time.monotonic, start: float | None = None,
                       snapshot: Callable[[TuneResult], None] | None = None) -> TuneResult:
    """Tune ``cfg`` over ``candidates`` within ``budget_s`` seconds from ``start`` (default: now) on
    ``clock`` (see the module): the warm-up, the search and the paired rounds all in it.

    ``progress(trial, count, total)`` and ``snapshot(result so far)`` are called after every trial.
    ``plain``: the search successive halving is measured against (``janus tune --search plain``):
    candidates in the same random order, each at the last rung's budget, until the search's time is spent."""
    metric = algorithm(cfg.workload.algo).throughput_metric
    defaults = defaults_of(cfg)
    out = TuneResult(defaults=defaults, metric=metric, budget_s=budget_s)
    plan = Schedule(clock() if start is None else start, budget_s, clock)
    rungs = max(1, round(math.log(1 / MIN_SHARE, ETA)))
    last_share = min(1.0, MIN_SHARE * ETA ** (rungs - 1))
    first_share = last_share if plain else MIN_SHARE
    pool = [c for c in candidates if c != defaults]
    random.Random(seed).shuffle(pool)
    alive = [defaults, *pool]
    standing: list[Candidate] = []  # the last rung ranked, fastest first
    total = len(alive) + 1
    count = 0

    def done(trial: Trial) -> None:
        nonlocal count
        out.trials.append(trial)
        plan.record(trial)
        count += 1
        out.elapsed_s = clock() - plan.start
        if progress is not None:
            progress(trial, count, total)
        if snapshot is not None:
            snapshot(out)

    if plan.left(plan.search_end) <= 0:  # nothing can run: the defaults, unmeasured
        out.best, out.verdict = defaults, "not_measured"
        return _ended(out, plan)
    # the warm-up: the defaults' first run, given at most half the search's time
    warm = _trial(cfg, defaults, 0, first_share, run, metric, plan.left(plan.search_end) / 2, clock)
    warm.warmup = True
    done(warm)
    for rung in range(1 if plain else rungs):
        share = first_share * ETA ** rung
        shares = [first_share * ETA ** k for k in range(rung, rungs)]
        rung_end = plan.search_end if plain else clock() + plan.left(plan.search_end) * plan.rung_fraction(shares)
        results: list[Trial] = []
        for cand in alive:
            if not plan.fits(cand, share, rung_end):  # never start what cannot finish in its phase
                out.stopped_early = out.stopped_early or rung > 0
                break
            trial = _trial(cfg, cand, rung, share, run, metric, plan.allowed(cand, share, rung_end), clock)
            results.append(trial)
            done(trial)
        ranked = sorted((t for t in results if t.throughput is not None), key=_rank)
        if not ranked or (rung > 0 and len(ranked) < 2):  # a rung cut to one trial compares nothing
            break
        standing = [t.candidate for t in ranked]
        alive = standing[: max(1, math.ceil(len(results) / ETA))]
        total = count + len(alive)
        if len(alive) == 1 or plan.left(plan.search_end) <= 0:  # a rung cut short still leaves the next its time
            break
    if not any(t.throughput is not None and not t.warmup for t in out.trials):
        out.best, out.verdict = defaults, "not_measured"
        return _ended(out, plan)
    # the paired rounds: the search's winner against the defaults, or, where the defaults led, the
    # best other setting of the last rung ranked (a short trial's lead is noisy either way)
    challenger = next((c for c in standing if c != defaults), None)
    if challenger is None:  # nothing else ran: no gain to measure
        out.best, out.verdict = defaults, "defaults"
        return _ended(out, plan)
    _paired_rounds(cfg, out, plan, (challenger, defaults), (rungs, 1.0), run, metric, done)
    return _ended(out, plan)


def _paired_rounds(cfg: RunConfig, out: TuneResult, plan: Schedule, pair: tuple[Candidate, Candidate],
                   at: tuple[int, float], run: Runner, metric: str, done: Callable[[Trial], None]) -> None:
    """The challenger and the defaults (``pair``), interleaved, at rung ``at[0]`` and at most share
    ``at[1]``, each run sized to fit the time set aside; the verdict: a gain only where the two
    ranges do not overlap (as ``janus compare`` reads them)."""
    best, defaults = pair
    rung, most = at
    share = plan.final_share([best, defaults], most, 2 * FINAL_ROUNDS)
    left = 2 * FINAL_ROUNDS
    for _ in range(FINAL_ROUNDS if share > 0 else 0):
        for name, cand in (("best", best), ("defaults", defaults)):
            trial = _trial(cfg, cand, rung, share, run, metric, plan.left(plan.end) / left, plan.clock)
            trial.final = True
            left -= 1
            done(trial)
            if trial.throughput is not None:
                out.final.setdefault(name, []).append(trial.throughput)
    mine, theirs = out.final.get("best", []), out.final.get("defaults", [])
    gain = out.gain
    if len(mine) < 2 or len(theirs) < 2 or gain is None:
        out.verdict = "not_measured"
    elif ranges_overlap(mine, theirs):
        out.verdict = "within_spread"
    else:
        out.verdict = "gain" if gain > 1.0 else "lost"
    out.best = best if out.verdict == "gain" else defaults
    out.runner_up = None if out.verdict == "gain" else best


def _ended(out: TuneResult, plan: Schedule) -> TuneResult:
    out.elapsed_s = plan.clock() - plan.start
    return out
