"""The TrajectoryManager: the replay host. It owns the run's JanusBuffer (and so its rate limiter),
writes the pieces the WorkerProxies forward, checkpoints the replay, and serves remote replay
clients (a Trainer in another process: :meth:`sample`, :meth:`update_priority`)."""

from __future__ import annotations

import threading
import time
from typing import Any

import numpy as np
import torch

from janus.buffer.janus import JanusBuffer
from janus.buffer.staging import StagingTimeout
from janus.runtime.checkpoints import FINAL, Checkpointer
from janus.runtime.component import Component
from janus.runtime.messages import CheckpointMsg, CountsMsg, FlushMsg, InsertTransitionMsg, PingMsg, StartMsg, StopMsg


class TrajectoryManager(Component):
    """Hosts the JanusBuffer: inserts transitions and checkpoints the replay.

    A Trainer in this process reads the same buffer directly (it is its replay client); one in
    another process calls :meth:`sample` and :meth:`update_priority` through its backend's remote
    client. Sent batches are copies (selection gathers), never views of the buffer.
    """

    def __init__(self, name: str, orchestrator: str, buffer: JanusBuffer, checkpoint: Checkpointer | None = None) -> None:
        super().__init__(name)
        self.orchestrator = orchestrator
        self.buffer = buffer  # the JanusBuffer it hosts and owns: closed by close(), started or not
        self.checkpoint = checkpoint
        self.inserted = 0
        self.pieces = 0  # worker pieces inserted by this process
        self.pieces_from: dict[str, int] = {}  # the same, by worker
        self.reported = 0  # `inserted` as last told to the Orchestrator
        self.sample_lock = threading.Lock()  # remote clients' calls come on several threads

    def on_StartMsg(self, msg: StartMsg) -> None:
        first = not self.started  # the buffer takes the checkpoint's replay (if any) once
        super().on_StartMsg(msg)
        if first:
            state = self.checkpoint.restore() if self.checkpoint is not None else None
            if state is not None:
                self.buffer.experience.load_state_dict(state["buffer"])
                self.inserted = self.reported = int(state["inserted"])
                self.send(self.orchestrator, CountsMsg(self.name, {"inserted": self.inserted}))

    def save(self, tag: int | str) -> None:
        """Stage checkpoint ``tag``: the replay buffer with every transition inserted so far."""
        if self.checkpoint is not None and self.started:  # restored first: never an empty replay over a saved one
            self.buffer.flush()  # staged pieces first, so the buffer holds exactly `inserted`
            self.checkpoint.stage({"buffer": self.buffer.experience.state_dict(), "inserted": self.inserted}, tag)

    def on_CheckpointMsg(self, msg: CheckpointMsg) -> None:
        self.save(msg.tag)
        self.send(self.orchestrator, CheckpointMsg(msg.tag, self.name, {"inserted": self.inserted}))

    def on_InsertTransitionMsg(self, msg: InsertTransitionMsg) -> None:
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

    def step(self) -> bool:
        if self.buffer.failure is not None:
            raise self.buffer.failure
        self._report_inserted()
        return False

    def _report_inserted(self) -> None:
        """One count for every insert drained since the last step, not one per insert."""
        if self.inserted != self.reported:
            self.reported = self.inserted
            self.send(self.orchestrator, CountsMsg(self.name, {"inserted": self.inserted, "pieces": self.pieces,
                                                               "pieces_from": dict(self.pieces_from)}))

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
