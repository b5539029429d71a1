"""The settings ``janus tune`` tries: one :class:`Candidate` per setting of the knobs, and the
search space of a workload on this machine.

The search space is placement x overlap (collect, select) x granularity x backend x workers x
envs per worker (x the vector-env mode for Gymnasium algorithms), cut to what this machine can run
(placements it has, at most its CPU count of workers). For the synthetic workload the workers and
envs per worker stay the workload's: there they define the work (each actor's rollouts), and a
setting with fewer would win by doing less. :mod:`janus.harness.tune.search` compares them.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Sequence
from dataclasses import dataclass, replace

from janus.algorithms.base import algorithm, learns_on_policy
from janus.config import RunConfig, available_placements, resolve
from janus.harness.experiments.granularity import candidates as granularity_candidates

BACKENDS = ("local", "process", "ray")


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
        if learns_on_policy(cfg):  # the same rollout, spread over these workers and envs: the same batches and updates
            rollout_length = cfg.rollout_transitions // (self.num_workers * self.envs_per_actor)
        workload = replace(w, num_actors=self.num_workers, envs_per_actor=self.envs_per_actor,
                           rollout_length=rollout_length, vector_env=self.vector_env or w.vector_env)
        runtime = replace(cfg.runtime, backend=self.backend, workers_per_node=0)
        return replace(cfg, janus=janus, workload=workload, runtime=runtime)


MIN_ROLLOUT_STEPS = 8
"""On-policy, the shortest rollout a worker/env split may leave (GAE needs a horizon)."""


def worker_splits(cfg: RunConfig, workers: list[int], envs: list[int]) -> list[tuple[int, int]]:
    """The ``(workers, envs per worker)`` pairs to try. On-policy the rollout stays the same size
    (the batches and updates are the algorithm's: more envs must not mean fewer, larger batches),
    so a pair must divide it into rollouts of at least :data:`MIN_ROLLOUT_STEPS` steps."""
    pairs = list(itertools.product(workers, envs))
    if not learns_on_policy(cfg):
        return pairs
    total = cfg.rollout_transitions
    return [(w, e) for w, e in pairs if total % (w * e) == 0 and total // (w * e) >= MIN_ROLLOUT_STEPS]


def acts_in_environment(cfg: RunConfig) -> bool:
    """Its algorithm acts in environments whose work the budget counts (not simulated ones whose
    workers and envs are the work: :attr:`~janus.algorithms.base.Algorithm.simulates_environments`)."""
    return not algorithm(cfg.workload.algo).simulates_environments


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
