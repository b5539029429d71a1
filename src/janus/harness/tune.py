"""``janus tune``: pick the data-path knobs for a workload by measuring them (issue 37, item 5).

The search space is placement x overlap (collect, select) x granularity x backend x workers x
envs per worker (x the vector-env mode for Gymnasium algorithms), cut to what this machine can run
(placements it has, at most its CPU count of workers). For the synthetic workload the workers and
envs per worker stay the workload's: there they define the work (each actor's rollouts), and a
setting with fewer would win by doing less. Candidates are compared by successive
halving (Jamieson and Talwalkar 2016; Li et al.'s Hyperband builds on it): every candidate runs a
short share of the workload, the best third goes on with three times the budget, and so on, so a
poor setting costs one short run and the time goes to the contenders. The defaults are always a
candidate. The winner and the defaults are then run again side by side at the largest budget, and
the gain is the ratio of their medians.

Throughput is what is compared: env steps/s for an algorithm that acts in an environment (its
updates follow the env steps through its sample/insert ratio), learner samples/s for the
synthetic workload. Each trial is a full ``run_runtime`` run, so no process outlives it.
"""

from __future__ import annotations

import itertools
import math
import os
import random
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from janus.algorithms.base import algorithm
from janus.config import RunConfig, available_placements, resolve
from janus.errors import JanusError
from janus.harness.granularity import candidates as granularity_candidates

BACKENDS = ("local", "process", "ray")
ETA = 3  # successive halving keeps the best 1/ETA of a rung, with ETA times the budget
MIN_SHARE = 1 / 27  # the first rung's share of the workload (three rungs of x3 reach 1/3)
FINAL_ROUNDS = 2  # the winner and the defaults, interleaved, at the last rung's budget

Runner = Callable[[RunConfig], Any]  # runs a configuration, returns a result with the throughputs


@dataclass(frozen=True)
class Candidate:
    """One setting of the knobs tune searches."""

    placement: str
    overlap_collect: int
    overlap_select: int
    granularity: float
    backend: str
    num_workers: int
    envs_per_actor: int
    vector_env: str | None = None  # Gymnasium algorithms only

    def label(self) -> str:
        vec = f" vector_env={self.vector_env}" if self.vector_env else ""
        return (f"{self.backend} {self.placement} overlap={self.overlap_collect}/{self.overlap_select} "
                f"g={self.granularity:g} workers={self.num_workers} envs={self.envs_per_actor}{vec}")

    def apply(self, cfg: RunConfig) -> RunConfig:
        """``cfg`` with these knobs (not resolved)."""
        janus = replace(cfg.janus, placement=self.placement, overlap_collect=self.overlap_collect,
                        overlap_select=self.overlap_select, g_collect=self.granularity, g_select=self.granularity)
        w = cfg.workload
        rollout_length = w.rollout_length
        if on_policy(cfg):  # the same rollout, spread over these workers and envs: the same batches and updates
            rollout_length = cfg.rollout_transitions // (self.num_workers * self.envs_per_actor)
        workload = replace(w, num_actors=self.num_workers, envs_per_actor=self.envs_per_actor,
                           rollout_length=rollout_length, vector_env=self.vector_env or w.vector_env)
        runtime = replace(cfg.runtime, backend=self.backend, workers_per_node=0)
        return replace(cfg, janus=janus, workload=workload, runtime=runtime)


def on_policy(cfg: RunConfig) -> bool:
    """Whether ``cfg``'s algorithm learns on-policy (its config may not be validated yet)."""
    return bool(cfg.janus.is_on_policy or algorithm(cfg.workload.algo).is_on_policy(cfg))


MIN_ROLLOUT_STEPS = 8
"""On-policy, the shortest rollout a worker/env split may leave (GAE needs a horizon)."""


def worker_splits(cfg: RunConfig, workers: list[int], envs: list[int]) -> list[tuple[int, int]]:
    """The ``(workers, envs per worker)`` pairs to try. On-policy the rollout stays the same size
    (the batches and updates are the algorithm's: more envs must not mean fewer, larger batches),
    so a pair must divide it into rollouts of at least :data:`MIN_ROLLOUT_STEPS` steps."""
    pairs = list(itertools.product(workers, envs))
    if not on_policy(cfg):
        return pairs
    total = cfg.rollout_transitions
    return [(w, e) for w, e in pairs if total % (w * e) == 0 and total // (w * e) >= MIN_ROLLOUT_STEPS]


def acts_in_environment(cfg: RunConfig) -> bool:
    return cfg.workload.algo != "synthetic"


def defaults_of(cfg: RunConfig) -> Candidate:
    """The knobs ``cfg`` itself runs with (``auto`` resolved), the candidate every tune includes."""
    r = resolve(cfg)
    return Candidate(r.janus.placement, r.janus.overlap_collect, r.janus.overlap_select, r.janus.g_select,
                     r.runtime.backend, r.workload.num_actors, r.workload.envs_per_actor,
                     r.workload.vector_env if acts_in_environment(cfg) else None)


def search_space(cfg: RunConfig, backends: Sequence[str], cpus: int | None = None) -> list[Candidate]:
    """Every knob setting this machine can run for ``cfg``'s workload."""
    cpus = cpus or os.cpu_count() or 1
    placements = [p for p, why in available_placements().items() if why is None]
    if acts_in_environment(cfg):  # the budget is env steps: more workers or envs do the same work faster, or not
        workers = sorted({1, *range(2, cpus + 1, max(1, cpus // 4))})
        envs = [1, 4, 8, 16]
        vectors: list[str | None] = ["sync", "async"]
    else:  # synthetic: workers x envs x iterations *is* the work (fewer actors would win by doing less)
        workers, envs, vectors = [cfg.workload.num_actors], [cfg.workload.envs_per_actor], [None]
    return [Candidate(p, oc, os_, g, b, w, e, v) for p, (oc, os_), g, b, (w, e), v in itertools.product(
        placements, [(0, 0), (1, 0), (0, 1), (1, 1)], granularity_candidates(cfg), backends,
        worker_splits(cfg, workers, envs), vectors)]


@dataclass
class Trial:
    """One run of a candidate at one budget."""

    candidate: Candidate
    rung: int
    share: float
    throughput: float | None  # None: the candidate could not run (its reason in ``error``)
    wall_s: float = 0.0
    error: str = ""
    final_return: float | None = None
    final: bool = False  # a run of the final paired rounds (the winner against the defaults)


@dataclass
class TuneResult:
    trials: list[Trial] = field(default_factory=list)
    best: Candidate | None = None
    defaults: Candidate | None = None
    final: dict[str, list[float]] = field(default_factory=dict)  # "best"/"defaults" -> throughputs
    metric: str = "samples_per_s"
    stopped_early: bool = False
    runner_up: Candidate | None = None  # the search's winner, when it lost the paired rounds to the defaults

    @property
    def gain(self) -> float | None:
        """The best's median throughput over the defaults' in the final paired rounds (1.0 when
        the defaults won)."""
        if self.best is not None and self.best == self.defaults and self.runner_up is None:
            return 1.0
        best, base = self.final.get("best"), self.final.get("defaults")
        if not best or not base or statistics.median(base) <= 0:
            return None
        return statistics.median(best) / statistics.median(base)


def scaled(cfg: RunConfig, share: float) -> RunConfig:
    """``cfg`` with ``share`` of its budget (iterations for synthetic, env steps otherwise)."""
    w = cfg.workload
    return replace(cfg, workload=replace(w, iterations=max(2, round(w.iterations * share)),
                                         total_env_steps=max(1, round(w.total_env_steps * share))))


def _trial(cfg: RunConfig, cand: Candidate, rung: int, share: float, run: Runner, metric: str) -> Trial:
    start = time.perf_counter()
    try:
        result = run(resolve(scaled(cand.apply(cfg), share)))
    except JanusError as exc:  # a setting this workload refuses (on-policy divisibility, ...): not a candidate
        return Trial(cand, rung, share, None, time.perf_counter() - start, f"{type(exc).__name__}: {exc}")
    # a RunResult or a dict: both are read by key
    return Trial(cand, rung, share, float(result[metric]), time.perf_counter() - start,
                 final_return=result.get("final_mean_return"))


def successive_halving(cfg: RunConfig, candidates: list[Candidate], run: Runner, budget_s: float,
                       progress: Callable[[Trial, int, int], None] | None = None, seed: int = 0,
                       plain: bool = False) -> TuneResult:
    """Tune ``cfg`` over ``candidates`` within about ``budget_s`` seconds (see the module).

    ``plain``: the search successive halving is measured against (``janus tune --search plain``):
    candidates in the same random order, each at the last rung's budget, until the rungs' share
    of the time is spent."""
    metric = "env_steps_per_s" if acts_in_environment(cfg) else "samples_per_s"
    defaults = defaults_of(cfg)
    out = TuneResult(defaults=defaults, metric=metric)
    deadline = time.monotonic() + budget_s
    rungs = max(1, round(math.log(1 / MIN_SHARE, ETA)))
    first_share = MIN_SHARE * ETA ** (rungs - 1) if plain else MIN_SHARE
    run(resolve(scaled(defaults.apply(cfg), first_share)))  # warm-up (kernels, first allocations): not timed
    # rung 0 gets its share of the budget (the rungs after it cost about as much each: a third of the
    # candidates at three times the budget), then the best third goes on; the final paired rounds
    # of the winner and the defaults come last
    rung_s = budget_s * rungs / (rungs + 1) if plain else budget_s / (rungs + 1)
    pool = [c for c in candidates if c != defaults]
    random.Random(seed).shuffle(pool)
    alive = [defaults, *pool]
    total = len(alive)
    count = 0
    for rung in range(1 if plain else rungs):
        share = first_share * ETA ** rung
        results: list[Trial] = []
        rung_end = time.monotonic() + rung_s
        for cand in alive:
            if time.monotonic() > (rung_end if rung == 0 else deadline) and len(results) >= 2:
                out.stopped_early = out.stopped_early or rung > 0
                break
            trial = _trial(cfg, cand, rung, share, run, metric)
            out.trials.append(trial)
            count += 1
            if progress is not None:
                progress(trial, count, total)
            results.append(trial)
        ranked = sorted((t for t in results if t.throughput is not None), key=lambda t: -(t.throughput or 0.0))
        if not ranked:
            break
        alive = [t.candidate for t in ranked[: max(1, math.ceil(len(results) / ETA))]]
        total = count + len(alive)
        if len(alive) == 1 or out.stopped_early:
            break
    best = out.best = alive[0]
    if best == defaults:  # nothing beat them: no gain to measure
        return out
    share = min(1.0, MIN_SHARE * ETA ** (rungs - 1))
    for _ in range(FINAL_ROUNDS):
        for name, cand in (("best", best), ("defaults", defaults)):
            trial = _trial(cfg, cand, rungs, share, run, metric)
            trial.final = True
            out.trials.append(trial)
            if trial.throughput is not None:
                out.final.setdefault(name, []).append(trial.throughput)
    gain = out.gain
    if gain is not None and gain < 1.0:  # the search's winner lost the paired rounds: keep the defaults
        out.runner_up, out.best = best, defaults
    return out
