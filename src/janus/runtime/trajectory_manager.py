"""The TrajectoryManager: the replay host. It owns the run's JanusBuffer (and so its rate limiter,
the run's only pacing), puts the pieces the WorkerProxies forward, tells each worker when its
pieces are taken (backpressure), checkpoints the replay, and serves remote replay clients (a
Trainer in another process: :meth:`sample`, :meth:`update_priority`)."""

from __future__ import annotations

import collections
import threading
import time
from collections.abc import Mapping
from typing import Any

import numpy as np
import torch

from janus.buffer.pipeline import JanusBuffer
from janus.errors import StagingTimeout
from janus.runtime.checkpoint_parties import Checkpointer
from janus.runtime.checkpoints import FINAL
from janus.runtime.component import Component, Handlers
from janus.runtime.messages import (
    CheckpointMsg,
    CountsMsg,
    FlushMsg,
    InsertTransitionMsg,
    PiecesAcceptedMsg,
    PingMsg,
    ReplayCounts,
    StartMsg,
    StopMsg,
)

STOP_PUT_S = 5.0  # at the stop, how long pieces still waiting at the host may take to be put


class TrajectoryManager(Component):
    """Hosts the JanusBuffer: inserts transitions and checkpoints the replay.

    A Trainer in this process reads the same buffer directly (it is its replay client); one in
    another process calls :meth:`sample` and :meth:`update_priority` through its backend's remote
    client. Sent batches are copies (selection gathers), never views of the buffer.

    The host never blocks on a put: a piece the buffer's staging cannot take now (its rate limiter
    holds inserts back) waits here, in arrival order, and is put by later steps, waiting at most
    ``put_wait_s`` for room each (0 for the serial scheduler), so pings and checkpoints are still
    answered; while pieces wait, the host polls for room rather than for messages.
    Each worker is told when its pieces are taken (:class:`PiecesAcceptedMsg`) and sends only a
    few ahead, so what waits here stays small.

    Args:
        resumed: the commit record of the run being resumed (``{}``: a fresh run): the limiter
            continues its counts from the transitions restored and the batches trained.
        sample_batch: transitions one trained batch sampled (the limiter's sampled count on resume).
        batches_per_item: on-policy, the batches each queue item is served as: an item dropped as
            too stale is reported as that many batches that will never be trained.
    """

    def __init__(self, name: str, orchestrator: str, buffer: JanusBuffer, checkpoint: Checkpointer | None = None,
                 put_wait_s: float = 0.02, resumed: Mapping[str, Any] | None = None, sample_batch: int = 1,
                 batches_per_item: int = 0) -> None:
        super().__init__(name)
        self.orchestrator = orchestrator
        self.buffer = buffer  # the JanusBuffer it hosts and owns: closed by close(), started or not
        self.checkpoint = checkpoint
        self.put_wait_s = put_wait_s
        self.resumed_trained = int((resumed or {}).get("trained", 0))
        self.sample_batch = sample_batch
        # pieces not yet taken by the buffer, each with its fields as tensors
        self.waiting: collections.deque[tuple[InsertTransitionMsg, dict[str, torch.Tensor]]] = collections.deque()
        self.inserted = 0
        self.pieces = 0  # worker pieces inserted by this process
        self.reported = 0  # `inserted` as last told to the Orchestrator
        self.dropped_reported = 0  # batches of stale items dropped, as last told
        self.batches_per_item = batches_per_item
        self.sample_lock = threading.Lock()  # remote clients' calls come on several threads
        self.learner_version = -1  # the newest a remote learner told
        self.version_lock = threading.Lock()  # not the sample lock: a sample may wait 0.2 s for data
        self.finishing = False  # told every piece was sent (FlushMsg)
        self.finished = False  # ... and the buffer's inserts were finished

    def handlers(self) -> Handlers:
        return {
            **super().handlers(),
            InsertTransitionMsg: self.on_InsertTransitionMsg,
            FlushMsg: self.on_FlushMsg,
            CheckpointMsg: self.on_CheckpointMsg,
        }

    def on_StartMsg(self, msg: StartMsg) -> None:
        first = not self.started  # the buffer takes the checkpoint's replay (if any) once
        super().on_StartMsg(msg)
        if first:
            state = self.checkpoint.restore() if self.checkpoint is not None else None
            if state is not None:
                self.buffer.experience.load_state_dict(state["buffer"])
                self.inserted = self.reported = int(state["inserted"])
                # the ratio continues: what the replay holds, and what the batches trained sampled
                self.buffer.rate_limiter.restore(self.inserted, self.resumed_trained * self.sample_batch)
                self.send(self.orchestrator, CountsMsg(self.name, ReplayCounts(self.inserted)))

    def save(self, tag: int | str) -> int:
        """Stage checkpoint ``tag``: the replay buffer with the transitions written to it so far;
        returns their count, ``inserted`` less what its staging still holds (a rate limiter holding
        pieces back: a resumed run continues without them, as without a killed run's staged pieces).
        The state and the count are taken together: a collection in between would make the file
        disagree with the commit record."""
        if self.checkpoint is None or not self.started:  # restored first: never an empty replay over a saved one
            return self.inserted
        self.buffer.flush()  # staged pieces the limiter admits
        state, staged = self.buffer.snapshot()
        stored = self.inserted - staged
        self.checkpoint.stage({"buffer": state, "inserted": stored}, tag)
        return stored

    def on_CheckpointMsg(self, msg: CheckpointMsg) -> None:
        stored = self.save(msg.tag)
        self.send(self.orchestrator, CheckpointMsg(msg.tag, self.name, {"inserted": stored}))

    def on_InsertTransitionMsg(self, msg: InsertTransitionMsg) -> None:
        tensors = {k: torch.from_numpy(np.asarray(v)) for k, v in msg.transitions.items()}  # once, not per retry
        self.waiting.append((msg, tensors))
        self._put_waiting(0.0)

    def _put_waiting(self, wait_s: float) -> bool:
        """Put the waiting pieces, in order, while the buffer takes them (waiting at most ``wait_s``
        for room for the first); True if any was put."""
        put = False
        while self.waiting:
            msg, tensors = self.waiting[0]
            t0 = time.perf_counter()
            if not self.buffer.wait_for_room(wait_s):
                self.count("put_wait_s", time.perf_counter() - t0)
                return put
            try:
                self.buffer.put(tensors, timeout=0.0, version=msg.params_version)
            except StagingTimeout:  # the room went (another writer): wait again on the next step
                self.count("put_wait_s", time.perf_counter() - t0)
                return put
            self.count("insert_s", time.perf_counter() - t0)
            self.waiting.popleft()
            put, wait_s = True, 0.0
            self.inserted += msg.count
            self.pieces += msg.pieces
            for worker, pieces in msg.by_worker():
                self.send(worker, PiecesAcceptedMsg(pieces))
            self.count("transitions_inserted", msg.count)
        return put

    def on_FlushMsg(self, msg: FlushMsg) -> None:
        """Every worker sent its last piece: once they are all put, the replay's inserts are finished."""
        self.finishing = True
        self._finish_if_done()

    def _finish_if_done(self) -> None:
        """The limiter stops holding samples back for inserts that cannot come, and the staged
        pieces are written (not ``JanusBuffer.finish_inserts``, which refuses later puts: a
        replaced worker's new instance may still send pieces past the budget's count)."""
        if self.finishing and not self.waiting and not self.finished:
            self.finished = True
            self.buffer.rate_limiter.finish_inserts()
            self.buffer.flush()

    # ---- for a replay client in another process (see janus.runtime.replay_client) ----------------
    def sample(self, timeout: float) -> dict[str, np.ndarray] | None:
        """The next batch as numpy arrays, or None if none is ready within ``timeout`` seconds."""
        with self.sample_lock:
            try:
                batch = self.buffer.get(timeout=timeout)
            except StagingTimeout:
                return None
        self.count("batches_sent")
        return {k: v.detach().cpu().numpy() for k, v in batch.items()}

    def update_priority(self, keys: Any, priorities: Any) -> int:
        """Set a remote learner's priorities (counted here: applied, and dropped as overwritten)."""
        applied = self.buffer.update_priority(keys, priorities)
        self.count("priorities_applied", applied)
        self.count("priorities_dropped", len(keys) - applied)
        return applied

    def set_learner_version(self, version: int) -> None:
        """A remote learner's parameter version (the newest of those told: calls may overtake)."""
        with self.version_lock:
            if version > self.learner_version:
                self.learner_version = version
                self.buffer.set_learner_version(version)

    def step(self) -> bool:
        if self.buffer.failure is not None:
            raise self.buffer.failure
        put = self._put_waiting(self.put_wait_s) if self.waiting else False
        self._report_inserted()
        self._finish_if_done()
        return put or (bool(self.waiting) and self.put_wait_s > 0)  # pieces wait: poll for room, not the inbox

    def _report_inserted(self) -> None:
        """One count for every insert drained since the last step, not one per insert; with them,
        the batches of the items the on-policy queue dropped as too stale (never to be trained)."""
        dropped = self.buffer.stats.items_dropped_stale * self.batches_per_item
        if self.inserted != self.reported or dropped != self.dropped_reported:
            self.reported, self.dropped_reported = self.inserted, dropped
            self.send(self.orchestrator, CountsMsg(self.name, ReplayCounts(self.inserted, self.pieces, dropped)))

    def on_StopMsg(self, msg: StopMsg) -> None:
        """The run ends: the limiter stops holding inserts back (nothing samples any more), so every
        piece that reached the host is written; then the final checkpoint is staged."""
        super().on_StopMsg(msg)
        self.buffer.rate_limiter.finish_inserts()
        deadline = time.monotonic() + STOP_PUT_S
        while self.waiting and self.buffer.failure is None and time.monotonic() < deadline:
            self.buffer.flush()  # staging drains now (on-policy: a rollout left incomplete cannot)
            self._put_waiting(0.05)
        self.count("pieces_dropped_at_stop", sum(m.pieces for m, _ in self.waiting))
        self.waiting.clear()
        self.buffer.close()
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
