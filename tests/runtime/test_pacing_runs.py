"""The replay's rate limiter in runs: the only pacing. Workers feel it as backpressure (pieces the
replay has not taken), the Trainer as batches that come or not, the Orchestrator issues nothing."""

from __future__ import annotations

import time
from typing import Any

import numpy as np
import pytest

from janus.algorithms.base import algorithm
from janus.buffer.pipeline import JanusBuffer
from janus.config import JanusConfig, from_dict, resolve
from janus.runtime import messages
from janus.runtime.messages import FlushMsg, InsertTransitionMsg, LoadParamsMsg, ParamsSnapshot, PiecesAcceptedMsg, StartMsg
from janus.runtime.run import run_runtime
from janus.runtime.trainer import Trainer
from janus.runtime.trajectory_manager import TrajectoryManager
from janus.runtime.worker import Worker


class Outbox:
    def __init__(self) -> None:
        self.sent: list[tuple[str, Any]] = []

    def send(self, dest: str, msg: Any) -> None:
        self.sent.append((dest, msg))

    def share(self, snapshot: Any) -> Any:
        return snapshot

    def resolve(self, handle: Any) -> Any:
        return handle

    def accepted(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for dest, msg in self.sent:
            if isinstance(msg, PiecesAcceptedMsg):
                out[dest] = out.get(dest, 0) + msg.pieces
        return out


def piece(n: int = 8) -> dict[str, np.ndarray]:
    return {"obs": np.zeros((n, 1, 4), np.float32), "reward": np.zeros((n, 1), np.float32)}


def ratio_buffer(**kw: Any) -> JanusBuffer:
    """Off-policy, 8-transition pieces, batches of 8, one sample per insert: a piece earns a batch."""
    args = {"min_size": 8, "samples_per_insert": 1.0, "error_buffer": 16.0}
    return JanusBuffer(JanusConfig(batch_size=8, buffer_capacity=1000, actor_buffer_size=2, overlap_collect=0,
                                   overlap_select=0), **{**args, **kw})


def host(buffer: JanusBuffer, **kw: Any) -> tuple[TrajectoryManager, Outbox]:
    tm = TrajectoryManager("tm", "orch", buffer, put_wait_s=0.0, **kw)
    out = Outbox()
    tm.bind(out)  # type: ignore[arg-type]
    tm.receive(StartMsg())
    return tm, out


def test_the_orchestrator_issues_no_credits() -> None:
    """The credit messages are gone from the protocol: the replay's limiter is the one pacing."""
    names = {t.__name__ for t in messages.MESSAGE_TYPES}
    assert not names & {"SampleBatchMsg", "InsertCreditMsg", "BatchTrainingDataMsg", "UpdatePriorityMsg"}
    assert "PiecesAcceptedMsg" in names


def test_pieces_the_ratio_holds_back_wait_at_the_host_and_are_accepted_once_taken() -> None:
    buffer = ratio_buffer()
    tm, out = host(buffer)
    try:
        for i in range(8):
            tm.receive(InsertTransitionMsg(f"worker-{i % 2}", piece(), 8))
        # min size 8 + error buffer 16: 3 pieces written; the staging holds 2 more; 3 wait here
        assert len(tm.waiting) == 3 and buffer.rate_limiter.inserted == 24
        assert sum(out.accepted().values()) == 5 and tm.inserted == 40
        assert tm.step() is False, "held back: nothing put, and the host never blocked"
        for _ in range(4):  # the learner samples: the ratio lets the staged pieces in, then the waiting ones
            buffer.get(timeout=0)
        assert tm.step() is True and not tm.waiting
        assert out.accepted() == {"worker-0": 4, "worker-1": 4} and tm.inserted == 64
    finally:
        tm.close()


def test_a_stop_writes_every_piece_that_reached_the_host() -> None:
    buffer = ratio_buffer()
    tm, out = host(buffer)
    for _ in range(8):
        tm.receive(InsertTransitionMsg("worker-0", piece(), 8))
    assert tm.waiting
    tm.receive(messages.StopMsg("test"))
    assert not tm.waiting and tm.counters.get("pieces_dropped_at_stop", 0) == 0
    assert buffer.stats.transitions_collected == tm.inserted == 64 and out.accepted() == {"worker-0": 8}


def test_flush_finishes_the_inserts_once_the_waiting_pieces_are_in() -> None:
    """Every worker sent its last piece: the ratio no longer holds the last batches back."""
    buffer = ratio_buffer()
    tm, _ = host(buffer)
    try:
        for _ in range(6):
            tm.receive(InsertTransitionMsg("worker-0", piece(), 8))
        tm.receive(FlushMsg())
        assert tm.waiting and not buffer.rate_limiter.inserts_finished, "not before the waiting pieces are put"
        for _ in range(3):
            buffer.get(timeout=0)
        tm.step()
        assert not tm.waiting and buffer.rate_limiter.inserts_finished
        taken = 0
        while taken < 50:  # past the ratio: 48 transitions written could never earn 50 batches
            buffer.get(timeout=0)
            taken += 1
    finally:
        tm.close()


def test_a_resumed_host_continues_the_limiters_counts(tmp_path: Any) -> None:
    from janus.runtime.checkpoint_parties import Checkpointer

    class Restored(Checkpointer):
        def restore(self) -> Any:
            return {"buffer": source.experience.state_dict(), "inserted": 24}

    source = ratio_buffer()
    for _ in range(3):
        source.put(piece())
    buffer = ratio_buffer()
    tm, _ = host(buffer, resumed={"trained": 2}, sample_batch=8)
    tm.checkpoint = Restored(str(tmp_path), "tm", True)
    tm.started = False
    tm.receive(StartMsg())
    try:
        assert buffer.rate_limiter.inserted == 24 and buffer.rate_limiter.sampled == 16
        # diff = 1 x (24 - 8) - 16 = 0: one more batch within the error buffer's 16, then held
        buffer.get(timeout=0)
        buffer.get(timeout=0)
        with pytest.raises(Exception, match="no batch"):
            buffer.get(timeout=0)
    finally:
        tm.close()
        source.close()


class Actor:
    def __init__(self) -> None:
        self.loaded = 0

    def rollout(self) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
        return piece(), {"env_steps": 8}

    def load_params(self, params: Any) -> None:
        self.loaded += 1


def test_a_worker_sends_at_most_its_unaccepted_pieces_then_waits() -> None:
    worker = Worker("worker-0", "proxy-0", Actor, lockstep=False, max_unaccepted=2)
    out = Outbox()
    worker.bind(out)  # type: ignore[arg-type]
    worker.receive(StartMsg())
    worker.receive(LoadParamsMsg(0, ParamsSnapshot.freeze(0, {"w": np.zeros(1)})))
    sent = lambda: sum(isinstance(m, InsertTransitionMsg) for _, m in out.sent)  # noqa: E731
    while worker.step():
        pass
    assert sent() == 2, "two pieces in flight, then backpressure"
    worker.receive(PiecesAcceptedMsg(1))
    assert worker.step() and not worker.step() and sent() == 3
    worker.receive(PiecesAcceptedMsg(5))  # a replaced instance's pieces accepted late: never below 0
    assert worker.unaccepted == 0


class ListReplay:
    def __init__(self) -> None:
        self.got = 0
        self.failure = None
        self.versions: list[int] = []

    def get(self, timeout: float | None = None) -> dict[str, Any]:
        import torch

        self.got += 1
        return {"obs": torch.zeros(8, 4), "index": torch.arange(8)}

    def update_priority(self, index: Any, priority: Any) -> int:
        return len(index)

    def set_learner_version(self, version: int) -> None:
        self.versions.append(version)


class Learner:
    def update(self, batch: Any) -> Any:
        return None

    def params(self) -> dict[str, np.ndarray]:
        return {"w": np.zeros(1)}


def test_the_trainer_never_trains_past_its_budget_and_tells_the_replay_its_versions() -> None:
    replay = ListReplay()
    trainer = Trainer("trainer", "orch", Learner, lambda: replay, publish_every=2, max_updates=5)
    trainer.bind(Outbox())  # type: ignore[arg-type]
    trainer.receive(StartMsg())
    steps = 0
    while trainer.step():
        steps += 1
    assert trainer.trained == replay.got == 5 and steps == 5
    assert replay.versions == [0, 1, 2], "the first version, then one per publish"


@pytest.mark.parametrize("workers", [1, 2])
def test_a_dqn_run_holds_the_sample_insert_ratio(workers: int) -> None:
    data = {"seed": 1, "workload": {"total_env_steps": 2000, "num_actors": workers},  # 1,500 steps of paced sampling
            "algorithm": {"learning_starts": 500}}
    cfg = resolve(from_dict(data, base=from_dict(algorithm("dqn").preset)))
    start = time.monotonic()
    run = run_runtime(cfg, timeout_s=300)
    assert time.monotonic() - start < 300
    p, counts = run.runtime["pacing"], run.counts
    spi, eb, batch = p["samples_per_insert"], p["error_buffer"], p["sample_batch"]
    assert spi == 128 / 2.0 and p["min_size_to_sample"] == 500, "DQN's replay ratio and learning_starts"
    sampled = counts["updates"] * batch
    target = spi * (counts["transitions_inserted"] - p["min_size_to_sample"])
    # the last batches come once every piece is in (the ratio no longer holds them back), so the
    # run trains its budget; up to then sampling kept within the error buffer of the ratio
    assert counts["updates"] == algorithm("dqn").budget(cfg).total_updates
    assert target - eb <= sampled <= target + eb, (sampled, target, eb)
    assert counts["transitions_inserted"] == counts["transitions_produced"] == counts["transitions_collected"]
    assert "SampleBatchMsg" not in run.runtime["messages"] and "InsertCreditMsg" not in run.runtime["messages"]
    assert 0 < run.runtime["learner_utilization"] <= 1 and run.runtime["learner_wait_s"] >= 0
