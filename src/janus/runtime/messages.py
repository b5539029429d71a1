"""The messages components exchange: small frozen dataclasses.

Bulk payloads are numpy arrays (cheap to serialise across processes); parameter snapshots travel
as a backend handle (the snapshot itself in-process, an object reference on Ray).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np


@dataclass(frozen=True)
class ParamsSnapshot:
    """Immutable, versioned policy parameters (read-only numpy arrays)."""

    version: int
    arrays: Mapping[str, np.ndarray]

    @staticmethod
    def freeze(version: int, arrays: Mapping[str, np.ndarray]) -> ParamsSnapshot:
        """Copy ``arrays`` and mark them read-only, so the snapshot never changes."""
        frozen = {}
        for k, v in arrays.items():
            a = np.array(v, copy=True)
            a.setflags(write=False)
            frozen[k] = a
        return ParamsSnapshot(version, frozen)

    @property
    def nbytes(self) -> int:
        return sum(a.nbytes for a in self.arrays.values())


@dataclass(frozen=True)
class InsertTransitionMsg:
    """Transitions (time-major ``[T, envs, ...]`` numpy arrays) for the TrajectoryManager."""

    source: str
    transitions: Mapping[str, np.ndarray]
    count: int
    params_version: int = 0
    pieces: int = 1
    origins: tuple[tuple[str, int], ...] = ()  # (worker, pieces) merged into this message; () means (source, pieces)

    def by_worker(self) -> tuple[tuple[str, int], ...]:
        """The pieces of each worker this message carries (a proxy merges several workers')."""
        return self.origins or ((self.source, self.pieces),)


@dataclass(frozen=True)
class PiecesAcceptedMsg:
    """TrajectoryManager -> Worker: the replay took ``pieces`` more of this worker's pieces into its
    staging. A worker keeps at most a few pieces unaccepted: when the replay's rate limiter holds
    inserts back, staging fills, pieces wait at the host, acceptances stop and the workers wait
    (backpressure, not a rate of their own)."""

    pieces: int


@dataclass(frozen=True)
class FlushMsg:
    """Orchestrator -> TrajectoryManager: every worker has sent its last piece; the replay's inserts
    are finished (:meth:`~janus.buffer.pipeline.JanusBuffer.finish_inserts`): what is staged is written,
    below the collection granularity too, and the rate limiter no longer holds sampling back for
    inserts that cannot come, or the learner would wait for them forever."""


@dataclass(frozen=True)
class FetchParamsMsg:
    """Ask for parameters of at least ``min_version``; answered once such a version exists."""

    requester: str
    min_version: int


@dataclass(frozen=True)
class LoadParamsMsg:
    """Parameters to load: ``params`` is a backend handle to a :class:`ParamsSnapshot`."""

    version: int
    params: Any


@dataclass(frozen=True)
class StartMsg:
    """Begin work (sent by the Orchestrator; also after a restart)."""


@dataclass(frozen=True)
class StopMsg:
    """Stop work and let the backend shut the component down."""

    reason: str = "stop"


@dataclass(frozen=True)
class PingMsg:
    """Health check; answered with a :class:`PongMsg` to ``reply_to``."""

    seq: int
    sent_at: float
    reply_to: str


@dataclass(frozen=True)
class PongMsg:
    """Health answer, carrying the sender's counters (how the Orchestrator sees progress)."""

    seq: int
    sender: str
    sent_at: float
    counters: Mapping[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class ReplayCounts:
    """The TrajectoryManager's progress: replay rows inserted in all; and, with its regular reports
    (None in the one it sends on restoring a checkpoint: unchanged), the worker pieces this session
    inserted and the batches of on-policy items its replay dropped as too stale."""

    inserted: int
    pieces: int | None = None
    batches_dropped: int | None = None


@dataclass(frozen=True)
class TrainerCounts:
    """The Trainer's progress: batches trained; the batches it dropped as too stale (None in the
    report it sends on restoring a checkpoint: unchanged); and the sums of the learner's metrics
    (by name) over ``metric_updates`` updates since its last report."""

    trained: int
    batches_dropped: int | None = None
    metric_updates: int = 0
    metric_sums: Mapping[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class PieceCounts:
    """A worker's counts, sent with each piece (before it): its instance's env steps and
    transitions so far, the returns of the episodes the piece finished, and its actor's metrics
    (``actor.<name>``, e.g. DQN's epsilon)."""

    instance: int
    env_steps: float
    transitions: float
    episode_returns: list[float] = field(default_factory=list)
    actor_metrics: Mapping[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class EvaluationReport:
    """The Evaluator's result of one evaluation (of the policy version ``version`` at ``env_steps``)."""

    env_steps: int
    version: int
    mean_return: float
    std_return: float
    episodes: int


Counts = ReplayCounts | TrainerCounts | PieceCounts | EvaluationReport
"""What a :class:`CountsMsg` carries: one typed record per kind of sender."""


@dataclass(frozen=True)
class CountsMsg:
    """A component's progress for the Orchestrator (counts only, never data)."""

    sender: str
    counters: Counts


@dataclass(frozen=True)
class CheckpointMsg:
    """Orchestrator -> component: stage checkpoint ``tag``; the component answers with the same
    message type, its ``sender`` name and the counters its staged file holds."""

    tag: int
    sender: str = ""
    counters: Mapping[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class EvaluateMsg:
    """Orchestrator -> Evaluator: the run reached ``env_steps``; evaluate the latest policy."""

    env_steps: int


@dataclass(frozen=True)
class WorkerDownMsg:
    """Backend -> Orchestrator: instance ``instance`` of worker ``worker`` (0 the first, +1 per
    restart) ended with an error, could not be built, or its process died. The Orchestrator
    replaces it at once instead of waiting for its pings to time out (a hung worker still is found
    by them); a notice about an instance already replaced is ignored."""

    worker: str
    instance: int


@dataclass(frozen=True)
class WorkerUpMsg:
    """Backend -> Orchestrator: instance ``instance`` of worker ``worker``, started by a restart, is
    up (its process or actor spawned, its component built). Its pings then time out after the
    pong timeout, as the first instance's do, not after the start timeout that a spawn may need: an
    environment that hangs as it is built or reset is found in seconds."""

    worker: str
    instance: int


MESSAGE_TYPES = (
    InsertTransitionMsg, PiecesAcceptedMsg, FlushMsg, FetchParamsMsg,
    LoadParamsMsg, StartMsg, StopMsg, PingMsg, PongMsg, CountsMsg, CheckpointMsg,
    EvaluateMsg, WorkerDownMsg, WorkerUpMsg,
)
