"""Runtime semantics on the local backend: messages, proxy dedup, rates, faults, shutdown."""

from __future__ import annotations

import dataclasses
import threading
import time
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
import torch

from janus.config import JanusConfig, RunConfig, RuntimeConfig, SyntheticConfig, WorkloadConfig, resolve
from janus.runtime import wiring
from janus.runtime.backends.local import LocalBackend
from janus.runtime.messages import (
    CountsMsg,
    FetchParamsMsg,
    InsertTransitionMsg,
    LoadParamsMsg,
    ParamsSnapshot,
    PiecesAcceptedMsg,
    StartMsg,
)
from janus.runtime.plan import RunPlan
from janus.runtime.run import RunFailed, run_runtime
from janus.runtime.trainer import Trainer
from janus.runtime.trajectory_manager import TrajectoryManager
from janus.runtime.worker_proxy import WorkerProxy


class FakeOutbox:
    def __init__(self) -> None:
        self.sent: list[tuple[str, Any]] = []
        self.resolved = 0

    def send(self, dest: str, msg: Any) -> None:
        self.sent.append((dest, msg))

    def share(self, snapshot: Any) -> Any:
        return snapshot

    def resolve(self, handle: Any) -> Any:
        self.resolved += 1
        return handle

    def of(self, kind: type) -> list[tuple[str, Any]]:
        return [(d, m) for d, m in self.sent if isinstance(m, kind)]


def tiny(on_policy: bool = False, **runtime: Any) -> RunConfig:
    g = 0.5 if on_policy else 2
    return resolve(RunConfig(
        janus=JanusConfig(is_on_policy=on_policy, overlap_collect=1, overlap_select=1, g_collect=g, g_select=g,
                          batch_size=64, buffer_capacity=5000),
        workload=WorkloadConfig(num_actors=3, envs_per_actor=4, rollout_length=16, hidden_size=32, iterations=12,
                                updates_per_iteration=2),
        synthetic=SyntheticConfig(obs_shape=(32,), env_step_ms=0.2),
        runtime=RuntimeConfig(**{"ping_interval_s": 0.1, "pong_timeout_s": 2.0, **runtime}),
    ))


def host_threads() -> list[str]:
    return [t.name for t in threading.enumerate() if t.name.startswith(("host-", "janus-", "trajectory_manager"))]


def test_messages_are_frozen_and_snapshots_immutable() -> None:
    msg = PiecesAcceptedMsg(3)
    with pytest.raises(dataclasses.FrozenInstanceError):
        msg.pieces = 4  # type: ignore[misc]
    source = {"w": np.ones(3, dtype=np.float32)}
    snap = ParamsSnapshot.freeze(1, source)
    source["w"][:] = 7  # the snapshot copied
    assert snap.arrays["w"].tolist() == [1.0, 1.0, 1.0]
    with pytest.raises(ValueError):
        snap.arrays["w"][0] = 5


def test_proxy_forwards_one_fetch_per_version_and_fans_out() -> None:
    proxy = WorkerProxy("proxy-0", "tm", "trainer", batch_transitions=1000)
    out = FakeOutbox()
    proxy.bind(out)
    for w in ("w0", "w1", "w2"):
        proxy.receive(FetchParamsMsg(w, 0))
    assert [d for d, _ in out.of(FetchParamsMsg)] == ["trainer"], "duplicate fetches collapse into one upstream"
    snap = ParamsSnapshot.freeze(0, {"w": np.zeros(2)})
    proxy.receive(LoadParamsMsg(0, snap))
    assert sorted(d for d, _ in out.of(LoadParamsMsg)) == ["w0", "w1", "w2"]
    assert out.resolved == 1 and proxy.fetches_per_version == {0: 1}
    proxy.receive(FetchParamsMsg("w1", 0))  # served from the node's copy, no upstream fetch
    assert len(out.of(FetchParamsMsg)) == 1 and len(out.of(LoadParamsMsg)) == 4


def test_proxy_batches_inserts() -> None:
    proxy = WorkerProxy("proxy-0", "tm", "trainer", batch_transitions=3 * 8)
    out = FakeOutbox()
    proxy.bind(out)
    for i in range(3):
        proxy.receive(InsertTransitionMsg(f"w{i}", {"x": np.full((2, 4), i)}, 8))
    (dest, merged), = out.of(InsertTransitionMsg)
    assert dest == "tm" and merged.count == 24 and merged.pieces == 3
    assert merged.transitions["x"].shape == (6, 4)


def test_the_replay_hosts_remote_batches_share_no_memory_with_buffer() -> None:
    """What a remote replay client gets (:meth:`TrajectoryManager.sample`) is a copy: writing
    into it leaves the replay as it was."""
    cfg = tiny()
    tm = TrajectoryManager("tm", "orch", wiring.make_buffer(RunPlan.of(cfg)))
    out = FakeOutbox()
    tm.bind(out)
    tm.receive(StartMsg())
    try:
        obs = np.arange(16 * 4 * 32, dtype=np.float32).reshape(16, 4, 32)
        piece = {"obs": obs, "action": np.zeros((16, 4), np.int64), "reward": np.zeros((16, 4), np.float32)}
        for _ in range(2):
            tm.receive(InsertTransitionMsg("w", piece, 64))
        batch = None
        deadline = time.monotonic() + 10
        while batch is None and time.monotonic() < deadline:
            batch = tm.sample(timeout=0.1)
        assert batch is not None and isinstance(batch["obs"], np.ndarray) and batch["obs"].shape == (64, 32)
        before = tm.buffer.experience.gather(torch.arange(len(tm.buffer.experience)))["obs"].clone()
        batch["obs"][:] = -1.0
        after = tm.buffer.experience.gather(torch.arange(len(tm.buffer.experience)))["obs"]
        assert torch.equal(before, after)
        assert tm.counters["batches_sent"] == 1
    finally:
        tm.close()


@pytest.mark.parametrize("placement", ["cpu_pageable", "cuda"])
def test_the_trajectory_manager_loads_the_replay_kernels_before_the_clock_starts(placement: str,
                                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """Before, the first configuration of a ``compare`` paid the kernels' load (~0.4 s) inside
    its timed collection (0.41-0.54 s of collect against 0.07 for the others in a --quick run)."""
    calls: list[str] = []
    monkeypatch.setattr(wiring, "warm_up", lambda: calls.append("warm"))
    monkeypatch.setattr(wiring, "make_buffer", lambda plan: SimpleNamespace())  # no CUDA needed for this check
    cfg = dataclasses.replace(tiny(), janus=dataclasses.replace(tiny().janus, placement=placement))
    wiring.new_trajectory_manager(RunPlan.of(cfg))
    assert calls == (["warm"] if placement != "cuda" else [])


def test_warm_up_loads_the_kernels_once_per_process() -> None:
    """In a fresh process (this one has loaded them long ago): nothing loaded before, every
    kernel a run starts with loaded after, and a second call does nothing."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    probe = (
        "import sys\n"
        "from janus.buffer.kernels import native\nfrom janus.buffer.replay import experience\n"
        "assert 'janus.buffer.kernels.replay' not in sys.modules\n"
        "experience.warm_up()\n"
        "k = native.kernels()\n"
        "loaded = [k.extend.signatures, k.sample_prioritized.signatures, k.update_priority_at.signatures,\n"
        "          k.update_priority.signatures]\n"
        "assert all(loaded), loaded\n"
        "experience.warm_up()\n"
        "assert len(k.extend.signatures) == 1\n"
        "print('ok')\n"
    )
    src = Path(__file__).resolve().parents[2] / "src"
    proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(src)})
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr[-2000:]


class ListReplay:
    """A replay client that hands out the batches it was given, in order."""

    def __init__(self, batches: list[dict[str, Any]]) -> None:
        self.batches = list(batches)
        self.failure = None

    def get(self, timeout: float | None = None) -> dict[str, Any]:
        return {k: torch.as_tensor(v) for k, v in self.batches.pop(0).items()}

    def update_priority(self, index: Any, priority: Any) -> int:
        return len(index)

    def set_learner_version(self, version: int) -> None:
        pass


def test_trainer_snapshots_do_not_change_when_training_goes_on() -> None:
    cfg = tiny()
    batch = {"obs": np.random.rand(64, 32).astype(np.float32), "action": np.zeros(64, np.int64),
             "reward": np.ones(64, np.float32), "index": np.arange(64)}
    trainer = Trainer("trainer", "orch", lambda: wiring.make_learner(RunPlan.of(cfg)), lambda: ListReplay([batch] * 3),
                      publish_every=1, max_updates=3)
    out = FakeOutbox()
    trainer.bind(out)
    trainer.receive(StartMsg())
    trainer.receive(FetchParamsMsg("proxy-0", 0))
    (_, first), = out.of(LoadParamsMsg)
    frozen = {k: v.copy() for k, v in first.params.arrays.items()}
    while trainer.step():
        pass
    assert trainer.version == 3
    assert all(np.array_equal(frozen[k], first.params.arrays[k]) for k in frozen)
    latest = trainer.latest.params.arrays
    assert any(not np.array_equal(frozen[k], latest[k]) for k in frozen), "training changed the live parameters"


def _trainer_on(buffer: Any, cfg: RunConfig, **kwargs: Any) -> tuple[Trainer, FakeOutbox]:
    trainer = Trainer("trainer", "orch", lambda: wiring.make_learner(RunPlan.of(cfg)), lambda: buffer, publish_every=100,
                      **kwargs)
    out = FakeOutbox()
    trainer.bind(out)
    trainer.receive(StartMsg())
    return trainer, out


def _filled(cfg: RunConfig) -> Any:
    buffer = wiring.make_buffer(RunPlan.of(cfg))
    piece = {"obs": np.random.rand(16, 4, 32).astype(np.float32), "action": np.zeros((16, 4), np.int64),
             "reward": np.zeros((16, 4), np.float32)}
    for _ in range(2):
        buffer.put(piece)
    buffer.flush()
    return buffer


def test_trainer_takes_batches_from_the_shared_buffer_up_to_its_budget() -> None:
    cfg = tiny()
    buffer = _filled(cfg)
    trainer, out = _trainer_on(buffer, cfg, report_every=100, max_updates=3)
    try:
        while trainer.step():
            pass
        assert trainer.trained == 3, "the budget, not a credit, ends its training"
        # at its budget it reports at once (the Orchestrator stops the run on this count)
        assert [m.counters.trained for _, m in out.of(CountsMsg)] == [3]
        assert buffer.stats.batches_delivered == 3
        assert trainer.step() is False and trainer.trained == 3
    finally:
        buffer.close()


def test_trainer_on_a_shared_buffer_raises_a_selection_failure_and_stops_quietly_on_close() -> None:
    cfg = tiny()
    buffer = _filled(cfg)
    trainer, _ = _trainer_on(buffer, cfg)
    buffer._fail(RuntimeError("selection broke on purpose"))  # what a background selection error does
    with pytest.raises(RuntimeError, match="selection broke on purpose"):
        while trainer.step():
            pass

    buffer = _filled(cfg)
    trainer, _ = _trainer_on(buffer, cfg)
    buffer.close()  # what the TrajectoryManager's stop does before the Trainer's
    assert trainer.step() is False and trainer.trained == 0 and trainer.replay_closed
    assert trainer.step() is False, "closed: it asks no more"


def test_trainer_waits_for_a_batch_in_slices_and_never_when_serial() -> None:
    cfg = tiny()
    buffer = wiring.make_buffer(RunPlan.of(cfg))  # empty: no batch can be selected
    try:
        for wait_s, busy in ((0.05, True), (0.0, False)):
            trainer, _ = _trainer_on(buffer, cfg, batch_wait_s=wait_s)
            start = time.perf_counter()
            assert trainer.step() is busy, "a Trainer that waited looks at its mailbox, then waits again"
            took = time.perf_counter() - start
            assert (took >= wait_s) if wait_s else (took < 0.5)
            assert trainer.trained == 0
    finally:
        buffer.close()


@pytest.mark.parametrize("on_policy", [False, True])
def test_local_run_counts_messages_and_respects_rates(on_policy: bool) -> None:
    rates = {} if on_policy else {"samples_per_insert": 1.0, "min_inserts": 256}
    cfg = tiny(on_policy, workers_per_node=2, **rates)
    run = run_runtime(cfg, timeout_s=120)
    rt, counts = run["runtime"], run["counts"]
    msgs = rt["messages"]
    total = cfg.workload.iterations * cfg.updates_per_iteration
    assert counts["updates"] >= total
    assert counts["transitions_inserted"] == counts["transitions_produced"] > 0
    # the Trainer reads the buffer of its process: no batch, and no credit, travels as a message;
    # each piece taken is acknowledged to its worker (backpressure), with no payload
    assert counts["updates"] == total
    assert msgs["InsertTransitionMsg"]["bytes"] > 0 and msgs["PiecesAcceptedMsg"]["bytes"] == 0
    assert msgs["PiecesAcceptedMsg"]["messages"] > 0
    # two nodes (3 workers, 2 per node): one proxy each, at most one fetch per node per version
    assert set(rt["param_fetches_per_node"]) == {"proxy-0", "proxy-1"}
    assert all(0 < n <= rt["param_versions_published"] for n in rt["param_fetches_per_node"].values())
    if on_policy:
        # every rollout needs the next version on every node: exactly one fetch per node per rollout
        assert all(n == cfg.workload.iterations for n in rt["param_fetches_per_node"].values())
    else:
        p = rt["pacing"]  # the two-sided ratio: sampled (trained, and selected ahead) within the error buffer
        spi, batch, eb = p["samples_per_insert"], p["sample_batch"], p["error_buffer"]
        target = spi * (counts["transitions_inserted"] - p["min_size_to_sample"])
        assert counts["updates"] * batch <= target + eb
    assert not host_threads(), "every component thread joined"


def test_worker_crash_is_restarted_and_training_continues() -> None:
    cfg = tiny(pong_timeout_s=1.5, samples_per_insert=1.0)  # training paced by inserts: outlasts detection
    cfg = dataclasses.replace(cfg, workload=dataclasses.replace(cfg.workload, iterations=100),
                              synthetic=dataclasses.replace(cfg.synthetic, env_step_ms=2.0))
    backend = LocalBackend()
    killed = threading.Event()

    def progress(done: int, total: int, note: str = "") -> None:
        if done >= 4 and not killed.is_set():
            killed.set()
            backend.kill("worker-1")

    run = run_runtime(cfg, progress=progress, backend=backend, timeout_s=120)
    assert killed.is_set()
    assert run["runtime"]["worker_restarts"] == {"worker-1": 1}
    assert backend.component("worker-1").counters.get("params_loaded", 0) >= 1, "restarted worker loaded params"
    assert run["counts"]["updates"] >= cfg.workload.iterations * cfg.updates_per_iteration
    assert not host_threads()


def test_trainer_failure_stops_the_run_with_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    class Exploding:
        def __init__(self, inner: Any) -> None:
            self.inner, self.n = inner, 0

        def update(self, batch: Any) -> Any:
            self.n += 1
            if self.n == 3:
                raise RuntimeError("learner exploded on purpose")
            return self.inner.update(batch)

        def params(self) -> Any:
            return self.inner.params()

    real = wiring.make_learner
    monkeypatch.setattr(wiring, "make_learner", lambda cfg: Exploding(real(cfg)))
    start = time.monotonic()
    with pytest.raises(RunFailed, match="learner exploded on purpose"):
        run_runtime(tiny(), timeout_s=60)
    assert time.monotonic() - start < 30
    assert not host_threads()


def test_off_policy_rates_on_policy_are_a_config_error() -> None:
    from janus.errors import ConfigError

    with pytest.raises(ConfigError, match="runtime.min_inserts"):
        tiny(True, min_inserts=256)


def test_interrupt_stops_everything() -> None:
    def progress(done: int, total: int, note: str = "") -> None:
        if done >= 2:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_runtime(tiny(), progress=progress, timeout_s=60)
    assert not host_threads()


def test_component_error_after_the_goal_fails_the_run_and_skips_the_final_commit(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> None:
    """An error while draining (here: the Trainer's stop) is not swallowed: RunFailed, no final commit."""
    def broken_stop(self: Trainer, msg: Any) -> None:
        raise RuntimeError("trainer failed while stopping")

    monkeypatch.setattr(Trainer, "on_StopMsg", broken_stop)
    with pytest.raises(RunFailed, match="trainer failed while stopping"):
        run_runtime(tiny(), timeout_s=60)
    assert not host_threads()


def test_a_stall_fails_the_run_within_its_timeout_naming_the_starved_stage(monkeypatch: pytest.MonkeyPatch) -> None:
    """Inserts that never reach the buffer: no progress -> RunFailed after stall_timeout_s, not an hour."""
    monkeypatch.setattr(TrajectoryManager, "on_InsertTransitionMsg", lambda self, msg: None)
    cfg = tiny(False, samples_per_insert=1.0, min_inserts=256, stall_timeout_s=1.0)
    start = time.monotonic()
    with pytest.raises(RunFailed, match=r"no progress for \d+s .*sampling waits for 256 transitions .*lower the minimum"):
        run_runtime(cfg, timeout_s=120)
    assert time.monotonic() - start < 30
    assert not host_threads()


def test_a_stall_diagnosis_names_collection_when_pieces_wait_in_staging() -> None:
    from janus.runtime.orchestrator import Orchestrator

    cfg = tiny(False, samples_per_insert=1.0, min_inserts=256)
    orch = Orchestrator("orchestrator", {"trainer": "trainer", "tm": "trajectory_manager", "worker-0": "worker"},
                        RunPlan.of(cfg).rates, total_updates=100)
    orch.inserted, orch.component_counters["tm"] = 640, {"transitions_inserted": 640, "buffer.transitions_collected": 512}
    text = orch.stall_diagnosis(5.0)
    assert "128 transitions wait in the actor-side staging" in text and "samples_per_insert 1" in text
    orch.component_counters["tm"] = {"transitions_inserted": 640, "buffer.transitions_collected": 640}
    orch.trained = 3
    assert "the learner waits for a batch and no worker inserts" in orch.stall_diagnosis(5.0)


def test_a_stall_diagnosis_after_a_resume_does_not_count_restored_transitions_as_staged() -> None:
    """A resumed run's `inserted` starts at the checkpoint's count; the transitions restored with the
    buffer were never staged by this process, so they are not blamed on collection."""
    from janus.runtime.orchestrator import Orchestrator

    cfg = tiny(False, samples_per_insert=1.0, min_inserts=256)
    orch = Orchestrator("orchestrator", {"trainer": "trainer", "tm": "trajectory_manager", "worker-0": "worker"},
                        RunPlan.of(cfg).rates, total_updates=10_000, initial={"inserted": 5_000, "trained": 4_000})
    orch.inserted = 5_640  # restored 5,000 + 640 inserted and collected by this process
    orch.component_counters["tm"] = {"transitions_inserted": 640, "buffer.transitions_collected": 640}
    orch.trained = 4_200
    text = orch.stall_diagnosis(5.0)
    assert "staging" not in text and "g_collect" not in text, text
    assert "the learner waits for a batch" in text
    orch.component_counters["tm"] = {"transitions_inserted": 640, "buffer.transitions_collected": 576}
    assert "64 transitions wait in the actor-side staging" in orch.stall_diagnosis(5.0)


def test_a_run_whose_ratio_can_never_allow_its_batches_is_rejected_before_work() -> None:
    from janus.errors import ConfigError

    cfg = tiny(False, samples_per_insert=1.0, min_inserts=256)
    run_runtime(cfg, timeout_s=60)  # feasible: the check passes it
    starved = resolve(dataclasses.replace(cfg, workload=dataclasses.replace(cfg.workload, updates_per_iteration=50)))
    with pytest.raises(ConfigError, match=r"can never train its [\d,]+ batches: at samples_per_insert 1 .* allow \d+ batches"):
        run_runtime(starved, timeout_s=30)
    assert not host_threads()


def test_a_run_that_can_never_sample_is_rejected_before_work() -> None:
    from janus.errors import ConfigError

    cfg = tiny(False, samples_per_insert=1.0, min_inserts=10**7)  # far beyond what the workers produce
    with pytest.raises(ConfigError, match="can never sample.*min_inserts"):
        run_runtime(cfg, timeout_s=30)
    assert not host_threads()


def test_a_restarted_worker_gets_its_start_timeout_before_it_is_restarted_again() -> None:
    """Spawning a worker can take longer than pong_timeout_s on a loaded machine: the new instance
    is judged by start_timeout_s until it answers a ping newer than its restart, so a slow start
    is not a restart loop; a late answer of the killed instance does not count as the new one's."""
    from janus.runtime.messages import PongMsg
    from janus.runtime.orchestrator import Orchestrator

    class Outbox:
        def __init__(self) -> None:
            self.sent: list[tuple[str, Any]] = []

        def send(self, dest: str, msg: Any) -> None:
            self.sent.append((dest, msg))

    restarted: list[str] = []
    cfg = tiny(False, samples_per_insert=1.0, min_inserts=256)
    orch = Orchestrator("orchestrator", {"trainer": "trainer", "tm": "trajectory_manager", "worker-0": "worker"},
                        RunPlan.of(cfg).rates, total_updates=100, restart=restarted.append, pong_timeout_s=1.0, start_timeout_s=30.0)
    orch.bind(Outbox())  # type: ignore[arg-type]
    t0 = time.monotonic()  # on_PongMsg stamps answers with the real clock
    orch.last_pong = {n: t0 for n in orch.roles}

    def answer(name: str, now: float, seq: int) -> None:
        orch.on_PongMsg(PongMsg(seq, name, now))

    for name in ("trainer", "tm"):
        orch.last_pong[name] = t0 + 2.0
    orch._health(t0 + 2.0)  # worker-0 silent for 2 s > 1 s: restarted
    assert restarted == ["worker-0"]
    stale = orch.seq - 1  # a ping the dead instance had been sent
    for step in range(1, 20):  # 19 s of a slow start; the others keep answering
        now = t0 + 2.0 + step
        for name in ("trainer", "tm"):
            orch.last_pong[name] = now
        answer("worker-0", now, stale)  # late pongs of the old instance change nothing
        orch._health(now)
    assert restarted == ["worker-0"] and orch.failure is None
    answer("worker-0", t0 + 22.0, orch.seq)  # the new instance is up
    assert "worker-0" not in orch.starting
    for name in ("trainer", "tm"):
        orch.last_pong[name] = t0 + 24.0
    orch._health(t0 + 24.0)  # silent again for 2 s > pong_timeout_s: restarted again
    assert restarted == ["worker-0", "worker-0"] and orch.restarts["worker-0"] == 2
    for name in ("trainer", "tm"):
        orch.last_pong[name] = t0 + 55.0
    orch._health(t0 + 55.0)  # never answered within start_timeout_s: a third restart
    assert restarted == ["worker-0"] * 3
