"""Typed snapshots of a running run: the Orchestrator's :class:`RunStatus` (what the poll loop, the
observers and the summary read) and :class:`RunCounters`, the components' counters a result
reports. Both are read by attribute, never by string; where a file needs a dict (a commit record,
results.json) it is converted at that edge (:meth:`RunStatus.to_dict`, :func:`run_state`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field, fields
from typing import Any, TypeVar

C = TypeVar("C")


@dataclass(frozen=True)
class RunStatus:
    """The Orchestrator's status at one poll: its counts, learning curve, evaluations and training
    scalars so far, and whether the run finished or failed (a snapshot: its containers are copies)."""

    inserted: int = 0
    """Replay rows inserted (a resumed run's restored ones included)."""
    trained: int = 0
    """Batches trained over the whole run."""
    pieces_inserted: int = 0
    """Worker pieces this session inserted."""
    restarts: dict[str, int] = field(default_factory=dict)
    """Worker name -> restarts this session."""
    failure: str | None = None
    """Why the run was stopped, when it failed (a stall, a crash loop, a lost coordinator)."""
    stalls: int = 0
    """Spells in which nothing of the pipeline moved (:class:`~janus.runtime.stalls.StallWatch`)."""
    worker_errors: dict[str, Any] = field(default_factory=dict)
    """The worker faults' report (:meth:`janus.runtime.faults.WorkerFaults.summary`)."""
    curve: list[tuple[float, int, float]] = field(default_factory=list)
    """(wall seconds, env steps, return) per finished episode."""
    env_steps: int = 0
    """Environment steps of the whole run."""
    elapsed_s: float = 0.0
    """The run's clock (a resumed run's earlier sessions included)."""
    evaluations: list[dict[str, Any]] = field(default_factory=list)
    retired_env_steps: int = 0
    """Env steps of the worker instances a restart replaced."""
    retired_transitions: int = 0
    worker_env_steps: int = 0
    """Env steps of every worker instance of this session, as last reported."""
    worker_transitions: int = 0
    train_metrics: list[dict[str, float]] = field(default_factory=list)
    """Rows of training scalars (wall_s, env_steps, updates, the learner's and the actors' metrics)."""
    evaluations_abandoned: list[int] = field(default_factory=list)
    """Env steps of the evaluations given up at the goal (hung)."""
    finished: bool = False
    """The Orchestrator stopped the run (its goal reached, or it failed)."""
    solved: dict[str, Any] | None = None
    """The evaluation that reached ``runtime.target_return`` (env_steps, mean_return, train_s: the run's
    clock, at: Unix seconds), None before one does (or with no target)."""

    def to_dict(self) -> dict[str, Any]:
        """Every field by its name, as the status dict of earlier versions had them."""
        return asdict(self)


def run_state(status: RunStatus) -> dict[str, Any]:
    """The part of a status that ``--resume`` continues: the commit record's counters, learning
    curve, clock, restarts, evaluations and training scalars."""
    return {"trained": status.trained, "env_steps": status.env_steps, "curve": status.curve,
            "wall_s": status.elapsed_s, "restarts": status.restarts, "evaluations": status.evaluations,
            "train_metrics": status.train_metrics}


# ---- the components' counters a result reports -----------------------------------------------------
# Each reads the free-form counters a component keeps (Component.counters) once, here, with the
# defaults a missing count takes; values are kept as the component counted them.
REPLAY_HOST_OWN = frozenset({"transitions_inserted", "pieces_dropped_at_stop", "priorities_dropped"})
"""The TrajectoryManager's own counters; its JanusBuffer's are reported as ``buffer.<name>``."""


def read_counters(cls: type[C], counts: Mapping[str, float], key: Callable[[str], str] = lambda name: name) -> C:
    """A counters record ``cls`` from a component's reported counts: each field from ``counts[key(field)]``,
    a count not reported taking the field's default (one place for the defaults: the dataclass's own)."""
    return cls(**{f.name: counts.get(key(f.name), f.default) for f in fields(cls)})  # type: ignore[arg-type]


@dataclass(frozen=True)
class ReplayHostCounters:
    """The TrajectoryManager's counters (its buffer's under ``buffer.``)."""

    transitions_inserted: float = 0
    pieces_dropped_at_stop: float = 0
    priorities_dropped: float = 0
    transitions_collected: float = 0
    collect_calls: float = 0
    select_calls: float = 0
    batches_selected: float = 0
    items_dropped_stale: float = 0
    collect_s: float = 0.0
    select_s: float = 0.0
    learner_wait_s: float = 0.0
    actor_blocked_s: float = 0.0
    insert_wait_s: float = 0.0
    sample_wait_s: float = 0.0

    @classmethod
    def of(cls, c: Mapping[str, float]) -> ReplayHostCounters:
        """From the TrajectoryManager's counters."""
        return read_counters(cls, c, lambda name: name if name in REPLAY_HOST_OWN else f"buffer.{name}")


@dataclass(frozen=True)
class TrainerCounters:
    """The Trainer's counters."""

    batches_trained: float | None = None
    """None when it never reported (the Orchestrator's count stands in)."""
    update_s: float = 0.0
    wait_s: float = 0.0
    versions_published: float = 0
    priorities_dropped: float = 0
    batches_dropped_stale: float = 0
    policy_lag_batches: float = 0
    policy_lag_sum: float = 0.0
    policy_lag_max: float = 0.0

    @classmethod
    def of(cls, c: Mapping[str, float]) -> TrainerCounters:
        """From the Trainer's counters."""
        return read_counters(cls, c)


@dataclass(frozen=True)
class WorkerCounters:
    """A worker's counters (the current instance's)."""

    env_steps: float = 0
    transitions: float = 0
    rollout_s: float = 0.0

    @classmethod
    def of(cls, c: Mapping[str, float]) -> WorkerCounters:
        """From a worker's counters."""
        return read_counters(cls, c)


@dataclass(frozen=True)
class RunCounters:
    """The counters of a run's components that its result reports, typed (a snapshot of
    :meth:`janus.runtime.backends.base.Backend.counters`)."""

    replay: ReplayHostCounters = field(default_factory=ReplayHostCounters)
    trainer: TrainerCounters = field(default_factory=TrainerCounters)
    workers: dict[str, WorkerCounters] = field(default_factory=dict)
    param_fetches: dict[str, float] = field(default_factory=dict)
    """Proxy name -> the parameter fetches it made (one node each)."""

    @classmethod
    def of(cls, counters: Mapping[str, Mapping[str, float]]) -> RunCounters:
        """From every component's counters by name (``worker-<i>``, ``proxy-<i>``, ``trainer``,
        ``trajectory_manager``; others are not reported)."""
        return cls(
            replay=ReplayHostCounters.of(counters.get("trajectory_manager", {})),
            trainer=TrainerCounters.of(counters.get("trainer", {})),
            workers={n: WorkerCounters.of(c) for n, c in counters.items() if n.startswith("worker-")},
            param_fetches={n: c.get("param_fetches", 0) for n, c in counters.items() if n.startswith("proxy-")})
