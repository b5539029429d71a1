"""The pacing object in real runs: insert credits from the Orchestrator, the ratio a DQN run achieves."""

from __future__ import annotations

from typing import Any

import pytest

from janus.algorithms.base import algorithm
from janus.config import from_dict, resolve
from janus.runtime.messages import CountsMsg, InsertCreditMsg, PongMsg, SampleBatchMsg, StartMsg, WorkerDownMsg
from janus.runtime.orchestrator import Orchestrator
from janus.runtime.pacing import SampleToInsertRatio
from janus.runtime.run import run_runtime


class Outbox:
    def __init__(self) -> None:
        self.sent: list[tuple[str, Any]] = []

    def send(self, dest: str, msg: Any) -> None:
        self.sent.append((dest, msg))

    def credits(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for dest, msg in self.sent:
            if isinstance(msg, InsertCreditMsg):
                out[dest] = out.get(dest, 0) + msg.pieces
        return out


def orchestrator(initial: dict | None = None) -> tuple[Orchestrator, Outbox]:
    roles = {"trainer": "trainer", "trajectory_manager": "trajectory_manager", "proxy-0": "proxy",
             "worker-0": "worker", "worker-1": "worker"}
    # pieces of 32 transitions, 2 sampled per insert: a piece is worth 64 sampled transitions = 2 batches
    limiter = SampleToInsertRatio(2.0, 64, 128.0, insert_piece=32, sample_batch=32, max_in_flight=2)
    orch = Orchestrator("orchestrator", roles, limiter, total_updates=1000, initial=initial)
    out = Outbox()
    orch.bind(out)  # type: ignore[arg-type]
    orch.receive(StartMsg())
    return orch, out


def test_insert_credits_are_granted_ahead_round_robin_and_count_pieces_in_flight() -> None:
    orch, out = orchestrator()
    orch.step()
    # before any sample: up to min size + error_buffer / (2 x 32) = 2 + 2 pieces, over both workers
    assert out.credits() == {"worker-0": 2, "worker-1": 2}
    orch.step()
    assert sum(out.credits().values()) == 4, "granted-but-not-inserted pieces count: no more grants"
    orch.receive(CountsMsg("trajectory_manager", {"inserted": 128, "pieces": 4}))
    orch.step()
    assert sum(1 for _, m in out.sent if isinstance(m, SampleBatchMsg)) == 2, "in-flight bound on samples"
    assert sum(out.credits().values()) == 4 + 1, "two batches requested: one more piece"


def _replace(orch: Orchestrator, worker: str) -> None:
    """Have ``orch`` replace ``worker``'s current instance, as when the backend reports it down."""
    orch.receive(WorkerDownMsg(worker, orch.restarts.get(worker, 0)))


def test_a_restarted_worker_loses_its_unused_credit_and_gets_credit_again() -> None:
    orch, out = orchestrator()
    restarted: list[str] = []
    orch.restart = restarted.append
    orch.step()
    # worker-1 used 1 of its 2 pieces (it arrived), then died
    orch.receive(CountsMsg("trajectory_manager", {"inserted": 32, "pieces": 1, "pieces_from": {"worker-1": 1}}))
    assert orch.pieces_in_flight == 3
    _replace(orch, "worker-1")
    assert restarted == ["worker-1"]
    assert orch.granted["worker-1"] == 0 and orch.pieces_in_flight == 2, "its unused piece is forgotten"
    orch.step()
    assert sum(out.credits().values()) == 5, "the freed piece is granted again"


def test_a_piece_lost_with_a_dead_worker_is_not_waited_for() -> None:
    """A piece the worker sent but that died with its process (a Ray call not yet delivered) never
    arrives: counted in flight, it would hold the ratio back for good and stall a paced run."""
    orch, out = orchestrator()
    orch.restart = lambda name: None
    orch.step()
    orch.receive(PongMsg(1, "worker-1", 0.0, {"rollouts": 2}))  # it sent both its pieces; neither arrived
    _replace(orch, "worker-1")
    assert orch.pieces_in_flight == 2, "only worker-0's two pieces are still to come"
    orch.receive(CountsMsg("trajectory_manager", {"inserted": 96, "pieces": 3,
                                                  "pieces_from": {"worker-0": 2, "worker-1": 1}}))
    assert orch.pieces_in_flight == 0, "one arrived after all: counted then, the ratio errs towards granting"
    _replace(orch, "worker-1")  # the replacement dies too, having sent nothing: its count starts from its own start
    assert orch.pieces_in_flight == 0 and orch.granted_total == 3


def test_no_worker_is_granted_past_its_quota() -> None:
    """Credit a worker cannot use (it has sent all its pieces) would count as in flight forever.
    After a restart the quotas are out of step: the credit goes to the worker that has room."""
    roles = {"trainer": "trainer", "trajectory_manager": "trajectory_manager", "worker-0": "worker", "worker-1": "worker"}
    limiter = SampleToInsertRatio(2.0, 64, 128.0, insert_piece=32, sample_batch=32, max_in_flight=2)
    orch = Orchestrator("orchestrator", roles, limiter, total_updates=1000, restart=lambda name: None,
                        total_pieces=6, worker_quota=3)
    out = Outbox()
    orch.bind(out)  # type: ignore[arg-type]
    orch.receive(StartMsg())
    orch.step()
    assert out.credits() == {"worker-0": 2, "worker-1": 2}
    orch.receive(CountsMsg("trajectory_manager", {"inserted": 128, "pieces": 4, "pieces_from": {"worker-0": 2, "worker-1": 2}}))
    _replace(orch, "worker-1")  # its new instance may send 3 pieces again
    for _ in range(8):
        orch.step()
        inserted = orch.pieces_inserted + orch.pieces_in_flight  # every grant arrives
        orch.receive(CountsMsg("trainer", {"trained": orch.requested}))
        orch.receive(CountsMsg("trajectory_manager", {"inserted": 32 * inserted, "pieces": inserted}))
    credits = out.credits()
    assert credits["worker-0"] == 3 and credits["worker-1"] == 2 + 3, credits
    assert orch.granted == {"worker-0": 3, "worker-1": 3}


def test_no_batch_is_requested_past_the_update_budget() -> None:
    """Also a run whose goal is updates alone (PPO, the synthetic workload): a batch requested past
    the budget was trained before the stop reached the learner (a resumed PPO run from a commit
    inside a rollout trained 1-2 batches past its budget)."""
    orch, out = orchestrator(initial={"trained": 997, "inserted": 10**6})

    def requested() -> int:
        return sum(isinstance(m, SampleBatchMsg) for _, m in out.sent)

    for trained in (997, 998, 999):
        orch.receive(CountsMsg("trajectory_manager", {"inserted": 10**6, "pieces": 0}))
        orch.receive(CountsMsg("trainer", {"trained": trained}))
        orch.step()
    assert requested() == 3 and orch.requested == 1000  # the ratio alone allows far more
    orch.receive(CountsMsg("trainer", {"trained": 1000}))
    orch.step()
    assert requested() == 3 and orch.finished


def test_once_every_piece_is_in_the_learner_gets_the_rest_of_its_budget() -> None:
    """A resumed run counts its pieces from its committed env steps. Its killed predecessor may have
    lost staged pieces, so the inserts can end short of what the ratio needs for the last batches.
    Once every piece is in, no insert can come, and the run must not stall those batches short."""
    roles = {"trainer": "trainer", "trajectory_manager": "trajectory_manager", "worker-0": "worker"}
    limiter = SampleToInsertRatio(2.0, 64, 128.0, insert_piece=32, sample_batch=32, max_in_flight=4)
    orch = Orchestrator("orchestrator", roles, limiter, total_updates=20, initial={"trained": 10, "inserted": 160},
                        total_pieces=2, all_pieces=True)
    out = Outbox()
    orch.bind(out)  # type: ignore[arg-type]
    orch.receive(StartMsg())

    def requested() -> int:
        return sum(isinstance(m, SampleBatchMsg) for _, m in out.sent)

    orch.step()
    # (160 - 64) x 2 + 128 = 320 sampled transitions: 10 batches, all trained before the kill
    assert requested() == 0
    orch.on_CountsMsg(CountsMsg("trajectory_manager", {"inserted": 192, "pieces": 1}))
    orch.step()
    assert requested() == 2  # one piece earns two batches, by the ratio
    orch.on_CountsMsg(CountsMsg("trajectory_manager", {"inserted": 224, "pieces": 2}))
    orch.on_CountsMsg(CountsMsg("trainer", {"trained": 12}))
    orch.step()  # the last piece: two more batches by the ratio, and the flush
    assert requested() == 4 and orch.flushed and orch.beyond_ratio == 0  # 14 in all: what the ratio allows
    for trained in (14, 18):  # 6 batches short, which no insert can earn: granted as room allows
        orch.on_CountsMsg(CountsMsg("trainer", {"trained": trained}))
        orch.step()
    assert requested() == 10 and orch.requested == 20  # its budget, and not one batch more
    assert orch.summary()["batches_beyond_ratio"] == 6  # reported in results.json: none is silent
    orch.on_CountsMsg(CountsMsg("trainer", {"trained": 20}))
    orch.step()
    assert requested() == 10 and orch.finished


def test_resume_continues_the_counters() -> None:
    orch, out = orchestrator({"trained": 10, "inserted": 224, "env_steps": 224})
    assert orch.requested == orch.trained == 10 and orch.inserted == 224
    orch.step()
    # diff = 2 x (224 - 64) - 10 x 32 = 0; the step first requests 2 batches (in-flight bound),
    # diff = -64, then grants (error_buffer + 64) / 64 = 3 pieces
    assert [m.request_id for _, m in out.sent if isinstance(m, SampleBatchMsg)] == [10, 11]
    assert sum(out.credits().values()) == 3


@pytest.mark.parametrize("workers", [1, 2])
def test_a_dqn_run_holds_the_sample_insert_ratio(workers: int) -> None:
    data = {"seed": 1, "workload": {"total_env_steps": 2000, "num_actors": workers},  # 1,500 steps of paced sampling
            "algorithm": {"learning_starts": 500}}
    cfg = resolve(from_dict(data, base=from_dict(algorithm("dqn").preset)))
    run = run_runtime(cfg, timeout_s=300)
    p, counts = run.runtime["pacing"], run.counts
    spi, eb, batch = p["samples_per_insert"], p["error_buffer"], p["sample_batch"]
    assert spi == 128 / 2.0 and p["min_size_to_sample"] == 500, "DQN's replay ratio and learning_starts"
    sampled = counts["updates"] * batch
    target = spi * (counts["transitions_inserted"] - p["min_size_to_sample"])
    in_flight = cfg.runtime.max_in_flight * batch  # requested but not trained at the stop
    assert target - eb - in_flight <= sampled <= target + eb, (sampled, target, eb)
    assert counts["transitions_inserted"] == counts["transitions_produced"]
    assert p["pieces_granted"] * cfg.workload.envs_per_actor * cfg.workload.rollout_length >= counts["transitions_inserted"]
    assert 0 < run.runtime["learner_utilization"] <= 1 and run.runtime["learner_wait_s"] >= 0
