"""Worker, WorkerProxy, TrajectoryManager and Trainer (the Orchestrator is in orchestrator.py).

Data flows Worker -> WorkerProxy -> TrajectoryManager -> Trainer; parameters flow back
Trainer -> WorkerProxy (one fetch per node per version) -> Workers.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable
from typing import Any, Protocol, cast

import numpy as np
import torch

from janus.algorithms.base import ActorSide, LearnerSide
from janus.buffer.staging import StagingTimeout
from janus.errors import PipelineClosedError, TrainingDiverged
from janus.runtime.checkpoints import FINAL, Checkpointer
from janus.runtime.component import Component
from janus.runtime.messages import (
    BatchTrainingDataMsg,
    CheckpointMsg,
    CountsMsg,
    FetchParamsMsg,
    FlushMsg,
    InsertCreditMsg,
    InsertTransitionMsg,
    LoadParamsMsg,
    ParamsSnapshot,
    PingMsg,
    SampleBatchMsg,
    StartMsg,
    StopMsg,
    UpdatePriorityMsg,
)


class UpdateResult(Protocol):
    priorities: torch.Tensor | None
    metrics: dict[str, float]


class Worker(Component):
    """Rolls out in the background and sends its transitions to its node's WorkerProxy.

    Two rules say when the next piece may start:

    * ``paced``: only with an insert credit, granted by the Orchestrator's
      :class:`~janus.runtime.pacing.SampleToInsertRatio` (:class:`InsertCreditMsg`); a restarted
      worker starts with none and is granted credit again.
    * ``lockstep`` (on-policy, correctness rather than a rate): rollout ``i`` acts with parameters
      of version ``>= base + i``, i.e. trained on rollout ``i-1``. Off-policy, a worker asks for a
      newer version after each piece but never waits for it.

    ``make_actor`` builds the actor when the worker starts; with ``actor_takes_instance`` it is
    given the worker's :attr:`instance` (0 the first, +1 per restart), so that a restarted worker
    acts in an experience stream of its own (see :mod:`janus.algorithms.seeding`).
    """

    def __init__(
        self, name: str, proxy: str, make_actor: Callable[..., ActorSide], lockstep: bool,
        max_rollouts: int = 0, pieces_per_rollout: int = 1, orchestrator: str | None = None, paced: bool = False,
        actor_takes_instance: bool = False,
    ) -> None:
        super().__init__(name)
        self.proxy = proxy
        self.orchestrator = orchestrator
        self.make_actor = make_actor
        self.actor_takes_instance = actor_takes_instance
        self.lockstep = lockstep
        self.max_rollouts = max_rollouts  # pieces to produce; 0: unlimited
        self.pieces_per_rollout = pieces_per_rollout
        self.paced = paced
        self.insert_credit = 0  # pieces the worker may still send (paced)
        self.actor: ActorSide | None = None
        self.version = -1
        self.base_version = 0  # first version loaded: lockstep counts from there (resume, restart)
        self.fetch_pending = False
        self.rollouts = 0

    def required_version(self) -> int:
        """The parameter version the next piece needs (lockstep only; else any loaded version)."""
        if not self.lockstep:
            return 0
        return self.base_version + self.rollouts // self.pieces_per_rollout

    def on_StartMsg(self, msg: StartMsg) -> None:
        super().on_StartMsg(msg)
        if self.actor is None:
            self.actor = self.make_actor(self.instance) if self.actor_takes_instance else self.make_actor()
        self._fetch(0)

    def on_InsertCreditMsg(self, msg: InsertCreditMsg) -> None:
        self.insert_credit += msg.pieces
        self.count("insert_credit", msg.pieces)

    def _fetch(self, min_version: int) -> None:
        if not self.fetch_pending:
            self.fetch_pending = True
            self.send(self.proxy, FetchParamsMsg(self.name, min_version))

    def on_LoadParamsMsg(self, msg: LoadParamsMsg) -> None:
        self.fetch_pending = False
        if msg.version > self.version:
            assert self.actor is not None
            self.actor.load_params(self.outbox.resolve(msg.params))
            if self.version < 0:
                self.base_version = msg.version
            self.version = msg.version
            self.count("params_loaded")

    def step(self) -> bool:
        if self.actor is None or (self.max_rollouts and self.rollouts >= self.max_rollouts):
            return False
        if self.paced and self.insert_credit <= 0:
            return False
        needed = self.required_version()
        if self.version < needed:
            self._fetch(needed)
            return False
        t0 = time.perf_counter()
        piece, info = self.actor.rollout()
        self.count("rollout_s", time.perf_counter() - t0)
        count = int(np.prod(next(iter(piece.values())).shape[:2]))
        self.rollouts += 1
        self.insert_credit -= self.paced
        self.count("transitions", count)
        self.count("rollouts")
        self.count("env_steps", info.get("env_steps", count))
        actor_metrics = {f"actor.{key}": float(value) for key, value in info.get("metrics", {}).items()}  # DQN's epsilon
        self.counters.update(actor_metrics)
        returns = list(info.get("episode_returns", ()))
        if returns:
            self.count("episodes", len(returns))
        if self.orchestrator is not None:  # metrics, not data: a few floats (every piece: the counts stay exact)
            # before the piece: an instance killed between the two has its piece counted as produced
            # (and lost), never inserted without being produced; the Orchestrator keeps every
            # instance's counts, so a replaced one's still count when its process took its counters
            self.send(self.orchestrator, CountsMsg(self.name, {
                "env_steps": self.counters["env_steps"], "transitions": self.counters["transitions"],
                "instance": self.instance, "episode_returns": returns, **actor_metrics}))
        self.send(self.proxy, InsertTransitionMsg(self.name, piece, count, self.version))
        if not self.lockstep:
            self._fetch(self.version + 1)
        return True

    def close(self) -> None:
        """Close the actor's environments when it has any (subprocesses of ``vector_env: async``)."""
        close = getattr(self.actor, "close", None)
        if close is not None:
            close()


class WorkerProxy(Component):
    """One per node: batches its workers' inserts and fetches parameters once per node per version."""

    def __init__(self, name: str, trajectory_manager: str, trainer: str, batch_transitions: int, max_delay_s: float = 0.005) -> None:
        super().__init__(name)
        self.tm = trajectory_manager
        self.trainer = trainer
        self.batch_transitions = batch_transitions
        self.max_delay_s = max_delay_s
        self.pending: list[InsertTransitionMsg] = []
        self.pending_count = 0
        self.oldest = 0.0
        self.waiting: dict[str, int] = {}  # local worker -> min version it waits for
        self.upstream_min: int | None = None  # min version of the one fetch in flight upstream
        self.cached: LoadParamsMsg | None = None
        self.fetches_per_version: dict[int, int] = {}

    def on_InsertTransitionMsg(self, msg: InsertTransitionMsg) -> None:
        if not self.pending:
            self.oldest = time.perf_counter()
        self.pending.append(msg)
        self.pending_count += msg.count
        if self.pending_count >= self.batch_transitions:
            self._flush()

    def step(self) -> bool:
        if self.pending and time.perf_counter() - self.oldest >= self.max_delay_s:
            self._flush()
        return False

    def _flush(self) -> None:
        msgs, self.pending, self.pending_count = self.pending, [], 0
        first = msgs[0].transitions
        if len(msgs) == 1:
            merged = dict(first)
        else:
            parts = {k: np.concatenate([m.transitions[k] for m in msgs], axis=0) if _same_tail(msgs, k) else None for k in first}
            if any(v is None for v in parts.values()):  # pieces of different env counts: send separately
                for m in msgs:
                    self.send(self.tm, InsertTransitionMsg(self.name, m.transitions, m.count, m.params_version, m.pieces,
                                                           m.by_worker()))
                return
            merged = cast(dict[str, np.ndarray], parts)  # no None left
        count = sum(m.count for m in msgs)
        origins: dict[str, int] = {}
        for m in msgs:
            for worker, pieces in m.by_worker():
                origins[worker] = origins.get(worker, 0) + pieces
        self.send(self.tm, InsertTransitionMsg(self.name, merged, count, min(m.params_version for m in msgs),
                                               sum(m.pieces for m in msgs), tuple(origins.items())))
        self.count("inserts_forwarded")

    def on_StopMsg(self, msg: StopMsg) -> None:
        if self.pending:  # never drop staged transitions
            self._flush()
        super().on_StopMsg(msg)

    def on_FetchParamsMsg(self, msg: FetchParamsMsg) -> None:
        if self.cached is not None and self.cached.version >= msg.min_version:
            self.send(msg.requester, self.cached)
            return
        self.waiting[msg.requester] = msg.min_version
        self._ask_upstream()

    def _ask_upstream(self) -> None:
        """At most one fetch in flight upstream, for the lowest version a local worker waits for."""
        if self.waiting and self.upstream_min is None:
            self.upstream_min = min(self.waiting.values())
            self.send(self.trainer, FetchParamsMsg(self.name, self.upstream_min))
            self.count("fetches_upstream")

    def on_LoadParamsMsg(self, msg: LoadParamsMsg) -> None:
        self.upstream_min = None
        if self.cached is None or msg.version > self.cached.version:
            self.outbox.resolve(msg.params)  # pull to this node once
            self.cached = msg
            self.fetches_per_version[msg.version] = self.fetches_per_version.get(msg.version, 0) + 1
            self.count("param_fetches")
        for worker, need in list(self.waiting.items()):
            if self.cached.version >= need:
                self.send(worker, self.cached)
                del self.waiting[worker]
        self._ask_upstream()


def set_priorities(component: Component, buffer: Any, keys: Any, priorities: Any) -> None:
    """Set priorities on ``buffer`` (a JanusBuffer) and count in ``component`` how many were
    applied and how many dropped (keys of items overwritten since they were sampled)."""
    applied = buffer.update_priority(keys, priorities)
    component.count("priorities_applied", applied)
    component.count("priorities_dropped", len(keys) - applied)


def _same_tail(msgs: list[InsertTransitionMsg], key: str) -> bool:
    tail = msgs[0].transitions[key].shape[1:]
    return all(m.transitions[key].shape[1:] == tail for m in msgs)


class TrajectoryManager(Component):
    """Hosts the JanusBuffer: inserts transitions, checkpoints the replay, and — where the Trainer
    lives in another process (``serves``: Ray) — serves sample credits and applies priorities.

    Batches are served by a thread of its own, so a wait for data never blocks the inserts that
    would provide it. Sent batches are copies (selection gathers), never views of the buffer.
    Where the Trainer shares this process it takes batches from the buffer itself (see
    :class:`Trainer`) and this component only writes.
    """

    def __init__(
        self, name: str, trainer: str, orchestrator: str, buffer: Any,
        checkpoint: Checkpointer | None = None, serves: bool = True,
    ) -> None:
        super().__init__(name)
        self.trainer = trainer
        self.orchestrator = orchestrator
        self.buffer = buffer  # the JanusBuffer it hosts and owns: closed by close(), started or not
        self.checkpoint = checkpoint
        self.serves = serves  # serve sample credits (a thread of its own) for a Trainer elsewhere
        self.credits = threading.Semaphore(0)
        self.requests: list[int] = []
        self.lock = threading.Lock()
        self.serve_thread: threading.Thread | None = None
        self.serve_error: BaseException | None = None
        self.inserted = 0
        self.pieces = 0  # worker pieces inserted by this process (the Orchestrator's insert credits)
        self.pieces_from: dict[str, int] = {}  # the same, by worker (credit a dead instance never used)
        self.reported = 0  # `inserted` as last told to the Orchestrator

    def on_StartMsg(self, msg: StartMsg) -> None:
        first = not self.started  # the buffer takes the checkpoint's replay (if any) once
        super().on_StartMsg(msg)
        if first:
            state = self.checkpoint.restore() if self.checkpoint is not None else None
            if state is not None:
                self.buffer.experience.load_state_dict(state["buffer"])
                self.inserted = self.reported = int(state["inserted"])
                self.send(self.orchestrator, CountsMsg(self.name, {"inserted": self.inserted}))
            if self.serves:
                self.serve_thread = threading.Thread(target=self._serve, name=f"{self.name}-serve", daemon=True)
                self.serve_thread.start()

    def save(self, tag: int | str) -> None:
        """Stage checkpoint ``tag``: the replay buffer with every transition inserted so far."""
        if self.checkpoint is not None and self.started:  # restored first: never an empty replay over a saved one
            self.buffer.flush()  # staged pieces first, so the buffer holds exactly `inserted`
            self.checkpoint.stage({"buffer": self.buffer.experience.state_dict(), "inserted": self.inserted}, tag)

    def on_CheckpointMsg(self, msg: CheckpointMsg) -> None:
        self.save(msg.tag)
        self.send(self.orchestrator, CheckpointMsg(msg.tag, self.name, {"inserted": self.inserted}))

    def on_InsertTransitionMsg(self, msg: InsertTransitionMsg) -> None:
        self._raise_if_failed()
        t0 = time.perf_counter()
        self.buffer.put({k: torch.from_numpy(np.asarray(v)) for k, v in msg.transitions.items()})
        self.count("insert_s", time.perf_counter() - t0)
        self.inserted += msg.count
        self.pieces += msg.pieces
        for worker, pieces in msg.by_worker():
            self.pieces_from[worker] = self.pieces_from.get(worker, 0) + pieces
        self.count("transitions_inserted", msg.count)

    def on_FlushMsg(self, msg: FlushMsg) -> None:
        self.buffer.flush()

    def on_SampleBatchMsg(self, msg: SampleBatchMsg) -> None:
        self._raise_if_failed()
        if not self.serves:
            raise TypeError(f"TrajectoryManager {self.name!r} does not serve batches: its Trainer takes them from the buffer")
        with self.lock:
            self.requests.append(msg.request_id)
        self.credits.release()

    def on_UpdatePriorityMsg(self, msg: UpdatePriorityMsg) -> None:
        set_priorities(self, self.buffer, msg.keys, msg.priorities)

    def _serve(self) -> None:
        torch.set_num_threads(1)
        try:
            while not self.stopped:
                if not self.credits.acquire(timeout=0.05):
                    continue
                with self.lock:
                    request_id = self.requests.pop(0)
                t0 = time.perf_counter()
                batch = self.buffer.get()
                self.count("serve_wait_s", time.perf_counter() - t0)
                self._send_batch(request_id, batch)
        except PipelineClosedError:
            pass
        except BaseException as exc:  # noqa: BLE001 - surfaced on the next message
            self.serve_error = exc

    def _raise_if_failed(self) -> None:
        if self.serve_error is not None:
            raise self.serve_error

    def step(self) -> bool:
        self._raise_if_failed()
        self._report_inserted()
        return False

    def _report_inserted(self) -> None:
        """One count for every insert drained since the last step, not one per insert."""
        if self.inserted != self.reported:
            self.reported = self.inserted
            self.send(self.orchestrator, CountsMsg(self.name, {"inserted": self.inserted, "pieces": self.pieces,
                                                               "pieces_from": dict(self.pieces_from)}))

    def _send_batch(self, request_id: int, batch: dict) -> None:
        # Tensors as the LearnerBuffer holds them (on the learner device): a Trainer in this process
        # takes them by reference; a transport that crosses processes converts them (see Ray's outbox).
        self.send(self.trainer, BatchTrainingDataMsg(request_id, batch))
        self.count("batches_sent")

    def on_StopMsg(self, msg: StopMsg) -> None:
        super().on_StopMsg(msg)
        self.buffer.close()  # writes every staged piece first (off-policy)
        self._report_inserted()
        self.save(FINAL)

    def on_PingMsg(self, msg: PingMsg) -> None:
        self._buffer_counters()  # refreshed for the Pong, not on every step (a dict per step adds up)
        super().on_PingMsg(msg)

    def _buffer_counters(self) -> None:
        for k, v in self.buffer.stats.as_dict().items():
            self.counters["buffer." + k] = v

    def close(self) -> None:
        """Close the buffer (its operator threads), also when this component never started."""
        self.stopped = True
        self.buffer.close()
        self._buffer_counters()
        if self.serve_thread is not None:
            self.serve_thread.join(timeout=10)


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
    """Updates from batches, sets priorities, publishes immutable versioned snapshots.

    Where it shares the TrajectoryManager's process (``buffer`` given: local and process backends)
    the Trainer takes its batches from the JanusBuffer's LearnerBuffer itself, one per
    :class:`SampleBatchMsg` credit, and sets priorities on it directly: no thread of the
    TrajectoryManager's and no message stands between a selected batch and the update. Elsewhere
    (Ray) batches arrive as :class:`BatchTrainingDataMsg` and priorities leave as messages.

    Args:
        buffer: returns the JanusBuffer the TrajectoryManager hosts (called once, on start).
        batch_wait_s: longest wait for a batch in one :meth:`step` (messages are handled between
            waits); 0 for the serial scheduler, which must never block.
    """

    def __init__(
        self, name: str, trajectory_manager: str, orchestrator: str, make_learner: Callable[[], LearnerSide],
        publish_every: int, learner_device: str = "cpu", checkpoint: Checkpointer | None = None,
        report_every: int = 1, buffer: Callable[[], Any] | None = None, batch_wait_s: float = 0.02,
    ) -> None:
        super().__init__(name)
        self.make_buffer = buffer
        self.buffer: Any = None
        self.batch_wait_s = batch_wait_s
        self.credits = 0  # sample credits not yet used (``buffer`` given)
        self.checkpoint = checkpoint
        self.report_every = max(1, report_every)
        self.tm = trajectory_manager
        self.orchestrator = orchestrator
        self.make_learner = make_learner
        self.publish_every = publish_every
        self.device = torch.device(learner_device)
        self.learner: LearnerSide | None = None
        self.version = -1
        self.latest: LoadParamsMsg | None = None
        self.pending: list[FetchParamsMsg] = []
        self.trained = 0
        self.reported = 0  # `trained` as last told to the Orchestrator
        self.metrics: dict[str, float] = {}  # of the last update
        self.metric_sums: dict[str, float] = {}  # over the updates since the last report
        self.metric_updates = 0
        self.idle_since = 0.0  # end of the last update (or start): waiting for a batch since then

    def on_StartMsg(self, msg: StartMsg) -> None:
        super().on_StartMsg(msg)
        if self.learner is None:
            self.learner = self.make_learner()
            state = self.checkpoint.restore() if self.checkpoint is not None else None
            if state is not None:
                self.learner.load_state_dict(state["learner"])  # type: ignore[attr-defined]  # a checkpointed learner's side has it
                self.version, self.trained = int(state["version"]) - 1, int(state["trained"])
                self.reported = self.trained
                self.send(self.orchestrator, CountsMsg(self.name, {"trained": self.trained}))
            self.publish()
        if self.buffer is None and self.make_buffer is not None:
            self.buffer = self.make_buffer()
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

    def on_SampleBatchMsg(self, msg: SampleBatchMsg) -> None:
        if self.make_buffer is None:
            raise TypeError(f"Trainer {self.name!r} has no buffer to take batches from: sample credits go to the TrajectoryManager")
        self.credits += 1

    def step(self) -> bool:
        """Train on the next batch of the LearnerBuffer if a credit allows one (waiting at most
        ``batch_wait_s`` for it); report counts when idle. True while credits remain."""
        if self.credits and self.buffer is not None and not self.stopped:
            try:
                batch = self.buffer.get(timeout=self.batch_wait_s)
            except StagingTimeout:
                self._report()
                return self.batch_wait_s > 0  # waited: look at the mailbox, then wait again
            except PipelineClosedError:
                if self.buffer.failure is not None:
                    raise self.buffer.failure  # noqa: B904  the failure itself, as it was raised; selection failed: the run stops with its cause
                self.credits = 0  # closed at shutdown: nothing more to train on
                return False
            self.credits -= 1
            self._train(batch)
            if self.credits:
                return True
        self._report()  # out of credits: the Orchestrator grants more on this count, now, not after a poll
        return False

    def on_BatchTrainingDataMsg(self, msg: BatchTrainingDataMsg) -> None:
        # Ray: numpy from another process, moved to the learner device here.
        batch = {k: torch.as_tensor(v) for k, v in msg.batch.items()}
        if any(v.device != self.device for v in batch.values()):
            batch = {k: v.to(self.device, non_blocking=True) for k, v in batch.items()}
            self.count("batches_moved_to_device")
        self._train(batch)

    def _train(self, batch: dict[str, Any]) -> None:
        assert self.learner is not None
        t0 = time.perf_counter()
        self.count("wait_s", t0 - self.idle_since)  # waiting for this batch (and handling other messages)
        result = self.learner.update(batch)
        self.idle_since = time.perf_counter()
        self.count("update_s", self.idle_since - t0)
        self.trained += 1
        self.count("batches_trained")  # by this invocation (``trained`` continues a resumed run's)
        self.metrics = dict(getattr(result, "metrics", {}) or {})
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
        if self.trained - self.reported >= self.report_every:
            self._report()  # batches still queued: the Orchestrator refills before this mailbox runs dry

    def _set_priorities(self, keys: Any, priorities: torch.Tensor) -> None:
        if self.buffer is not None:  # the same process: straight into the sampler's trees
            set_priorities(self, self.buffer, keys, priorities.detach())
            return
        keys = keys.cpu().numpy() if isinstance(keys, torch.Tensor) else np.asarray(keys)
        self.send(self.tm, UpdatePriorityMsg(keys, priorities.detach().cpu().numpy()))

    def _report(self) -> None:
        """Report batches trained when the mailbox is drained or every ``report_every`` batches
        (not per batch: on Ray each count is a remote call), with the sums of the learner's
        metrics since the last report (``metric.<name>``) over ``metric_updates`` updates."""
        if self.trained != self.reported:
            self.reported = self.trained
            counts: dict[str, float] = {"trained": self.trained}
            if self.metric_updates:
                counts["metric_updates"] = self.metric_updates
                counts.update({f"metric.{k}": v for k, v in self.metric_sums.items()})
                self.metric_sums, self.metric_updates = {}, 0
            self.send(self.orchestrator, CountsMsg(self.name, counts))
