"""The Trainer: updates the learner from the replay's batches, sets priorities, publishes
immutable versioned parameter snapshots."""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import Any, Protocol

import torch

from janus.algorithms.base import LearnerSide
from janus.errors import PipelineClosedError, StagingTimeout, TrainingDiverged
from janus.runtime.checkpoint_parties import Checkpointer
from janus.runtime.checkpoints import FINAL
from janus.runtime.component import Component, Handlers
from janus.runtime.messages import (
    CheckpointMsg,
    CountsMsg,
    FetchParamsMsg,
    LoadParamsMsg,
    ParamsSnapshot,
    StartMsg,
    StopMsg,
    TrainerCounts,
)
from janus.runtime.replay_client import ReplayClient, set_priorities


class UpdateResult(Protocol):
    priorities: torch.Tensor | None
    metrics: dict[str, float]


def check_finite_losses(metrics: dict[str, Any], update: int) -> None:
    """Raise :class:`TrainingDiverged` if a loss the learner reported (``loss``, ``q_loss``, ...)
    is NaN or infinite: its parameters are then no longer finite, and a run that went on would
    end "successfully" on a broken policy."""
    for name, value in metrics.items():
        if name.endswith("loss") and not math.isfinite(float(value)):
            shown = ", ".join(f"{k} {float(v):.4g}" for k, v in metrics.items())
            raise TrainingDiverged(
                f"training diverged: the learner's {name} is {float(value)} at update {update:,} ({shown}); "
                "its parameters are no longer finite. Start again with a lower learning rate (--lr), tighter "
                "gradient clipping (--max_grad_norm) or rewards of a smaller scale")



class Trainer(Component):
    """Updates from the replay's batches, sets priorities, publishes immutable versioned snapshots.

    It reads batches and writes priorities through its :class:`~janus.runtime.replay_client.ReplayClient`
    (the JanusBuffer itself in the replay host's process; a prefetching remote client elsewhere),
    as fast as the replay's rate limiter lets batches through, until ``max_updates`` are trained
    (the budget: never a batch past it). Each version it publishes is told to the replay, whose
    limiter bounds the staleness of what it serves.

    Args:
        make_replay: builds the replay client (called once, on start, in the Trainer's process).
        max_updates: batches the run trains in all (a resumed Trainer continues its count); 0: no limit.
        batch_wait_s: longest wait for a batch in one :meth:`step` (messages are handled between
            waits); 0 for the serial scheduler, which must never block.
        max_policy_lag: a batch whose rows carry a ``version`` older than this many versions behind
            the learner's is dropped, not trained (counted as ``batches_dropped_stale``): the replay
            drops stale items before serving them, this catches those that aged in the prefetch
            queue, so every trained row is within the bound. None: no bound.
    """

    def __init__(
        self, name: str, orchestrator: str, make_learner: Callable[[], LearnerSide], make_replay: Callable[[], ReplayClient],
        publish_every: int, checkpoint: Checkpointer | None = None, report_every: int = 1, batch_wait_s: float = 0.02,
        max_updates: int = 0, max_policy_lag: int | None = None,
    ) -> None:
        super().__init__(name)
        self.max_policy_lag = max_policy_lag
        self.make_replay = make_replay
        self.replay: ReplayClient | None = None
        self.batch_wait_s = batch_wait_s
        self.max_updates = max_updates
        self.replay_closed = False
        self.checkpoint = checkpoint
        self.report_every = max(1, report_every)
        self.orchestrator = orchestrator
        self.make_learner = make_learner
        self.publish_every = publish_every
        self.learner: LearnerSide | None = None
        self.version = -1
        self.latest: LoadParamsMsg | None = None
        self.pending: list[FetchParamsMsg] = []
        self.trained = 0
        self.dropped_reported = 0  # batches dropped as too stale, as last told to the Orchestrator
        self.reported = 0  # `trained` as last told to the Orchestrator
        self.metrics: dict[str, float] = {}  # of the last update
        self.metric_sums: dict[str, float] = {}  # over the updates since the last report
        self.metric_updates = 0
        self.idle_since = 0.0  # end of the last update (or start): waiting for a batch since then

    def handlers(self) -> Handlers:
        return {**super().handlers(), FetchParamsMsg: self.on_FetchParamsMsg, CheckpointMsg: self.on_CheckpointMsg}

    def on_StartMsg(self, msg: StartMsg) -> None:
        super().on_StartMsg(msg)
        if self.learner is None:
            self.learner = self.make_learner()
            state = self.checkpoint.restore() if self.checkpoint is not None else None
            if state is not None:
                self.learner.load_state_dict(state["learner"])  # type: ignore[attr-defined]  # a checkpointed learner's side has it
                self.version, self.trained = int(state["version"]) - 1, int(state["trained"])
                self.reported = self.trained
                self.send(self.orchestrator, CountsMsg(self.name, TrainerCounts(self.trained)))
            self.publish()
        if self.replay is None:
            self.replay = self.make_replay()
            self.replay.set_learner_version(self.version)
        self.idle_since = time.perf_counter()

    def save(self, tag: int | str) -> None:
        """Stage checkpoint ``tag``: the learner (policy, optimiser, its counters), version, batches trained."""
        if self.checkpoint is not None and self.learner is not None and hasattr(self.learner, "state_dict"):
            self.checkpoint.stage({"learner": self.learner.state_dict(), "version": self.version, "trained": self.trained}, tag)

    def on_CheckpointMsg(self, msg: CheckpointMsg) -> None:
        self.save(msg.tag)
        self.send(self.orchestrator, CheckpointMsg(msg.tag, self.name, {"trained": self.trained}))

    def on_StopMsg(self, msg: StopMsg) -> None:
        super().on_StopMsg(msg)
        self._report()  # the last count, so the Orchestrator's total matches the checkpoint's
        self.save(FINAL)

    def publish(self) -> None:
        assert self.learner is not None
        self.version += 1
        snapshot = ParamsSnapshot.freeze(self.version, self.learner.params())
        self.latest = LoadParamsMsg(self.version, self.outbox.share(snapshot))
        self.count("versions_published")
        still = []
        for req in self.pending:
            if self.version >= req.min_version:
                self.send(req.requester, self.latest)
                self.count("params_sent")
            else:
                still.append(req)
        self.pending = still

    def on_FetchParamsMsg(self, msg: FetchParamsMsg) -> None:
        if self.latest is not None and self.latest.version >= msg.min_version:
            self.send(msg.requester, self.latest)
            self.count("params_sent")
        else:
            self.pending.append(msg)

    @property
    def budget_left(self) -> bool:
        return not self.max_updates or self.trained < self.max_updates

    def step(self) -> bool:
        """Train on the replay's next batch (waiting at most ``batch_wait_s`` for it); report
        counts when idle. True while it trained (the host then polls again at once)."""
        if self.replay is None or self.replay_closed or self.stopped or not self.budget_left:
            self._report()
            return False
        try:
            batch = self.replay.get(timeout=self.batch_wait_s)
        except StagingTimeout:
            self._report()
            return self.batch_wait_s > 0  # waited: look at the mailbox, then wait again (serial: never waits)
        except PipelineClosedError:
            if self.replay.failure is not None:
                raise self.replay.failure  # noqa: B904  the failure itself, as it was raised; selection failed: the run stops with its cause
            self.replay_closed = True  # closed at shutdown: nothing more to train on
            return False
        lag = self._policy_lag(batch)
        if lag is not None and self.max_policy_lag is not None and lag[1] > self.max_policy_lag:
            self.count("batches_dropped_stale")
            return True
        self._train(batch, lag)
        return True

    def _policy_lag(self, batch: dict[str, Any]) -> tuple[float, float] | None:
        """``(mean, max)`` versions between the parameters that acted the batch's rows and those
        that train it; None for rows that carry no ``version`` (only IMPALA/APPO's do)."""
        if "version" not in batch:
            return None
        lag = (self.version - batch["version"]).float()
        return lag.mean().item(), lag.max().item()

    def _train(self, batch: dict[str, Any], lag: tuple[float, float] | None = None) -> None:
        assert self.learner is not None
        t0 = time.perf_counter()
        self.count("wait_s", t0 - self.idle_since)  # waiting for this batch (and handling other messages)
        result = self.learner.update(batch)
        self.idle_since = time.perf_counter()
        self.count("update_s", self.idle_since - t0)
        self.trained += 1
        self.count("batches_trained")  # by this invocation (``trained`` continues a resumed run's)
        self.metrics = dict(getattr(result, "metrics", {}) or {})
        if lag is not None:
            self._count_policy_lag(*lag)
        check_finite_losses(self.metrics, self.trained)  # before NaN parameters reach the actors
        if self.metrics:
            self.metric_updates += 1
            for key, value in self.metrics.items():
                self.metric_sums[key] = self.metric_sums.get(key, 0.0) + float(value)
        priorities = getattr(result, "priorities", None)
        if priorities is not None:
            self._set_priorities(batch["index"], priorities)
        if self.trained % self.publish_every == 0:
            self.publish()
            assert self.replay is not None
            self.replay.set_learner_version(self.version)
        if self.trained - self.reported >= self.report_every:
            self._report()  # batches still queued: the Orchestrator refills before this mailbox runs dry

    def _count_policy_lag(self, mean: float, worst: float) -> None:
        """A trained batch's policy lag (:meth:`_policy_lag`): in the update's metrics, and the
        run's totals in the counters."""
        self.metrics["policy_lag_mean"], self.metrics["policy_lag_max"] = mean, worst
        self.count("policy_lag_sum", mean)
        self.count("policy_lag_batches")
        self.counters["policy_lag_max"] = max(self.counters.get("policy_lag_max", 0.0), worst)

    def _set_priorities(self, keys: Any, priorities: torch.Tensor) -> None:
        assert self.replay is not None
        set_priorities(self, self.replay, keys, priorities.detach())

    def _report(self) -> None:
        """Report batches trained when the mailbox is drained or every ``report_every`` batches
        (not per batch: on Ray each count is a remote call), with the sums of the learner's
        metrics since the last report (:class:`~janus.runtime.messages.TrainerCounts`)."""
        dropped = int(self.counters.get("batches_dropped_stale", 0))  # never to be trained
        if self.trained != self.reported or dropped != self.dropped_reported:
            self.reported, self.dropped_reported = self.trained, dropped
            counts = TrainerCounts(self.trained, dropped, self.metric_updates, dict(self.metric_sums))
            if self.metric_updates:
                self.metric_sums, self.metric_updates = {}, 0
            self.send(self.orchestrator, CountsMsg(self.name, counts))
