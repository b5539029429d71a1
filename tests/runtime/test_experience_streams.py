"""Distinct experience, and figures that count every worker (issue 35 items 3, 4, 5).

Before: actor seeds were ``seed * 1000 + index`` and sub-env ``i`` reset with ``+ i``, so actors 0
and 1 shared three of their four environment streams, and a restarted worker replayed its
predecessor's environment seeds and exploration draws (hundreds of exact duplicate rows in the
replay after one SIGKILL). A process-backend run's live results said ``env_steps 0`` (its workers'
counters reach the learner only when they stop), and a replaced worker's output was left out of
``transitions_produced``.
"""

from __future__ import annotations

import dataclasses
import itertools
import threading
import time
from typing import Any

import numpy as np
import pytest

from janus.algorithms.base import algorithm
from janus.algorithms.seeding import stream_seeds
from janus.config import RunConfig, from_dict, resolve
from janus.runtime import wiring
from janus.runtime.plan import RunPlan
from janus.runtime.run import run_runtime
from janus.runtime.status import RunStatus
from janus.runtime.wiring import make_actor


def dqn_cfg(backend: str, steps: int = 3000, **runtime: Any) -> RunConfig:
    """DQN on CartPole, 2 workers of 4 envs: a few thousand env steps, learning from step 500."""
    overrides = {"seed": 3, "workload": {"num_actors": 2, "total_env_steps": steps},
                 "runtime": {"backend": backend, "ping_interval_s": 0.2, **runtime},
                 "algorithm": {"learning_starts": 500}}
    return resolve(from_dict(overrides, base=from_dict(algorithm("dqn").preset)))


class Recorder:
    """Wraps a proxy factory: every piece a worker sends, as it reaches the learner's side."""

    def __init__(self) -> None:
        self.pieces: list[tuple[str, dict[str, np.ndarray]]] = []
        self.lock = threading.Lock()

    def wrap(self, factory: Any) -> Any:
        def build() -> Any:
            proxy = factory()
            inner = proxy.on_InsertTransitionMsg

            def record(msg: Any) -> None:
                with self.lock:
                    self.pieces.append((msg.source, {k: np.array(v) for k, v in msg.transitions.items()}))
                inner(msg)

            proxy.on_InsertTransitionMsg = record
            return proxy
        return build

    def rows(self) -> list[bytes]:
        """Every transition as the bytes of its (obs, action, next_obs)."""
        with self.lock:
            pieces = list(self.pieces)
        out = []
        for _, p in pieces:
            for t, e in itertools.product(range(p["reward"].shape[0]), range(p["reward"].shape[1])):
                out.append(p["obs"][t, e].tobytes() + p["action"][t, e].tobytes() + p["next_obs"][t, e].tobytes())
        return out

    def duplicates(self) -> int:
        rows = self.rows()
        return len(rows) - len(set(rows))

    def first_observations(self) -> dict[str, np.ndarray]:
        """Each worker's first piece's first observations, one per sub-env."""
        first: dict[str, np.ndarray] = {}
        for source, p in self.pieces:
            first.setdefault(source, p["obs"][0])
        return first


def recorded_backend(cfg: RunConfig, recorder: Recorder) -> Any:
    backend = wiring.make_backend(cfg)
    add = backend.add
    backend.add = lambda name, role, factory, node="node-0": add(  # type: ignore[method-assign]
        name, role, recorder.wrap(factory) if role == "proxy" else factory, node)
    return backend


def observed_run(cfg: RunConfig, kill_at_inserted: int = 0) -> dict[str, Any]:
    """Run ``cfg``, recording its pieces and a live result once it trains; with
    ``kill_at_inserted``, SIGKILL worker-0 once that many transitions are in, then take a live
    result once its replacement has sent a piece."""
    recorder = Recorder()
    backend = recorded_backend(cfg, recorder)
    live: dict[str, Any] = {}

    def observer(status: RunStatus, result_so_far: Any) -> None:
        if "before" not in live and status.trained > 0:
            live["before"] = result_so_far()
        if kill_at_inserted and "killed" not in live and status.inserted >= kill_at_inserted:
            live["killed"] = backend.worker_pids()["worker-0"]
            backend.kill("worker-0")
            deadline = time.monotonic() + 90  # hold the run until the replacement works (spawning can be slow)
            while time.monotonic() < deadline:
                fresh = backend.workers.get("worker-0")
                if fresh is not None and fresh.process.pid != live["killed"] and fresh.ring is not None:
                    break
                time.sleep(0.05)
        if "killed" in live and "after" not in live and status.restarts:
            live["after"] = result_so_far()

    result = run_runtime(cfg, backend=backend, timeout_s=240, observer=observer)
    return {"result": result, "live": live, "recorder": recorder}


@pytest.fixture(scope="module")
def process_runs() -> dict[str, dict[str, Any]]:
    """The same DQN run on the process backend, as is and with worker-0 SIGKILLed mid-run."""
    cfg = dqn_cfg("process", steps=2000, pong_timeout_s=10.0)
    return {"plain": observed_run(cfg), "killed": observed_run(cfg, kill_at_inserted=800)}


# ---- item 3: a restarted worker continues, it does not repeat ------------------------------------
def test_a_sigkilled_worker_adds_no_duplicate_experience(process_runs: dict[str, dict[str, Any]]) -> None:
    plain, killed = process_runs["plain"], process_runs["killed"]
    assert killed["result"]["runtime"]["worker_restarts"] == {"worker-0": 1}
    assert len(killed["recorder"].rows()) > 1200
    # before: 468-492 duplicate rows after one restart (the replacement replayed its predecessor)
    duplicates = killed["recorder"].duplicates(), plain["recorder"].duplicates()
    assert duplicates[0] <= duplicates[1], f"duplicate rows with the kill, without: {duplicates}"


def test_each_instance_of_a_worker_and_each_resumed_session_has_a_stream_of_its_own() -> None:
    names = [(w, s, i) for w in range(6) for s in (0, 1, 5001) for i in range(4)]
    seeds = {name: stream_seeds(7, *name[:1], 4, session=name[1], instance=name[2]) for name in names}
    env_seeds = [s for ss in seeds.values() for s in ss.envs]
    assert len(set(env_seeds)) == len(env_seeds)  # no sub-env stream shared by any two
    assert len({ss.torch_seed for ss in seeds.values()}) == len(names)
    draws = {tuple(ss.numpy().random(4)) for ss in seeds.values()}
    assert len(draws) == len(names)  # exploration draws differ too
    assert stream_seeds(7, 1, 4, instance=2).envs == stream_seeds(7, 1, 4, instance=2).envs  # --seed reproducibility


def test_the_instance_reaches_the_actor_and_changes_its_stream() -> None:
    cfg = dqn_cfg("local")
    first, replacement = make_actor(RunPlan.of(cfg), 0), make_actor(RunPlan.of(cfg), 0, instance=1)
    try:
        assert not np.isclose(first.actor.obs[:, None], replacement.actor.obs[None]).all(-1).any()
        assert first.actor.rng.random() != replacement.actor.rng.random()
    finally:
        first.close(), replacement.close()


def test_a_resumed_session_does_not_replay_the_first_one(monkeypatch: pytest.MonkeyPatch) -> None:
    """A ``--resume`` session acts in streams of its own: session ``1 +`` the env steps it resumes from."""
    cfg = dqn_cfg("local")
    plan = RunPlan.of(cfg)
    fresh = make_actor(plan, 0)
    at_start = make_actor(dataclasses.replace(plan, resumed={"env_steps": 0, "trained": 0}), 0)  # resumed at its start
    later = make_actor(dataclasses.replace(plan, resumed={"env_steps": 5000, "trained": 100}), 0)
    try:
        for a, b in ((fresh, at_start), (fresh, later), (at_start, later)):
            assert not np.isclose(a.actor.obs[:, None], b.actor.obs[None]).all(-1).any()
        assert later.actor.env_steps == 5000 // cfg.workload.num_actors  # its exploration schedule continues
    finally:
        for side in (fresh, at_start, later):
            side.close()


def test_a_restarted_worker_component_knows_its_instance() -> None:
    """The backend tells the component which instance it is, before it builds its actor (the
    process backend's, in the worker's process: the duplicate-row test above fails without it)."""
    cfg = dqn_cfg("local")
    backend = wiring.make_backend(cfg)
    try:
        plan = RunPlan.of(cfg)
        wiring.build(plan, backend, wiring.SharedBuffer(plan))
        backend.restart("worker-1")
        backend.restart("worker-1")
        assert backend.component("worker-1").instance == 2 and backend.component("worker-0").instance == 0
    finally:
        backend.shutdown(timeout=10.0)


# ---- item 4: actors do not share environment streams --------------------------------------------
def test_actors_first_observations_differ() -> None:
    recorder = Recorder()
    cfg = dqn_cfg("local", steps=1000)
    run_runtime(cfg, backend=recorded_backend(cfg, recorder), timeout_s=120)
    first = recorder.first_observations()
    assert set(first) == {"worker-0", "worker-1"}
    rows = np.concatenate([first["worker-0"], first["worker-1"]])  # 8 sub-envs' first states
    same = np.isclose(rows[:, None], rows[None]).all(-1)
    assert same.sum() == len(rows), f"sub-envs started from the same state: {np.argwhere(np.triu(same, 1))}"


# ---- item 5: every figure counts every worker, live and final, on every backend ------------------
def test_live_results_of_a_process_run_count_env_steps(process_runs: dict[str, dict[str, Any]]) -> None:
    for run in process_runs.values():
        counts = run["live"]["before"]["counts"]
        assert counts["env_steps"] >= counts["transitions_produced"] > 0  # before: env_steps 0, steps/s 0
        assert run["live"]["before"]["env_steps_per_s"] > 0


def test_live_results_of_a_local_run_count_env_steps() -> None:
    run = observed_run(dqn_cfg("local", steps=1500))
    counts = run["live"]["before"]["counts"]
    assert counts["env_steps"] >= counts["transitions_produced"] > 0


def test_a_replaced_workers_output_counts_live_and_in_the_final_result(process_runs: dict[str, dict[str, Any]]) -> None:
    killed = process_runs["killed"]
    after = killed["live"]["after"]["counts"]
    assert after["env_steps"] >= after["transitions_produced"] > 0  # before: 0 live on this backend
    final = killed["result"]["counts"]
    # before: 6,480 produced against 8,104 inserted (the killed instance's pieces left out)
    assert final["transitions_produced"] >= final["transitions_inserted"] > 0
    assert final["env_steps"] >= final["transitions_inserted"]
    assert killed["result"]["runtime"]["worker_restarts"] == {"worker-0": 1}
