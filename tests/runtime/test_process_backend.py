"""The ``process`` backend: workers as OS processes, rollouts through shared memory.

Real spawned processes throughout: conservation of every transition through the slot rings, worker
SIGKILL -> restart, learner failure -> clear error, interrupts and signals leave no process and no
shared-memory segment behind.
"""

from __future__ import annotations

import dataclasses
import json
import multiprocessing
import os
import pickle
import re
import signal
import subprocess
import sys
import threading
import time
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import psutil
import pytest
import torch

from janus.config import JanusConfig, RunConfig, RuntimeConfig, SyntheticConfig, WorkloadConfig, resolve
from janus.runtime import wiring
from janus.runtime.backends.base import Backend
from janus.runtime.backends.pipe import Deliver, SharedSnapshot, StoreAnnounced
from janus.runtime.backends.process import ProcessBackend, ProcessOutbox
from janus.runtime.backends.worker_process import WorkerOutbox, receive_from_learner
from janus.runtime.component import Component, Handlers, Host
from janus.runtime.messages import (
    FetchParamsMsg,
    InsertTransitionMsg,
    LoadParamsMsg,
    ParamsSnapshot,
    PiecesAcceptedMsg,
    StartMsg,
)
from janus.runtime.run import RunFailed, run_runtime
from janus.runtime.shm import ParamStore, segments_of
from janus.runtime.worker import Worker
from janus.runtime.worker_proxy import WorkerProxy

SHM = Path("/dev/shm")
T, ENVS = 4, 3  # steps and environments per piece of the tagged actor
PARAMS = 100_000  # float32 parameters the ParamServer publishes: 400 kB, were they pickled


def segments(pid: int | None = None) -> set[str]:
    """The shared-memory segments of the run whose learner is process ``pid`` (default: this one,
    for runs in this process): other janus runs on the machine have their own, and come and go."""
    return segments_of([os.getpid() if pid is None else pid])


def worker_processes() -> list[psutil.Process]:
    """Live spawned children of this process (not multiprocessing's resource tracker)."""
    out = []
    for p in psutil.Process().children(recursive=True):
        try:
            if p.status() != psutil.STATUS_ZOMBIE and "spawn_main" in " ".join(p.cmdline()):
                out.append(p)
        except psutil.NoSuchProcess:
            pass
    return out


def start_cli_train(run: Path, **popen: Any) -> subprocess.Popen[bytes]:
    """``janus train`` of DQN on the process backend (2 workers, a budget it never reaches) in a
    subprocess, writing to ``run``."""
    cmd = [sys.executable, "-m", "janus.cli", "train", "--algo", "dqn", "--env", "CartPole-v1", "--backend", "process",
           "--num_actors", "2", "--total_env_steps", "10000000", "--out", str(run)]
    return subprocess.Popen(cmd, **popen)


def read_output(proc: subprocess.Popen[bytes]) -> tuple[list[bytes], threading.Thread]:
    """The chunks of ``proc``'s stdout as they come, read by a thread (progress redraws one line
    with \r: raw bytes, not lines)."""
    chunks: list[bytes] = []
    reader = threading.Thread(target=lambda: chunks.extend(iter(lambda: proc.stdout.read1(4096), b"")), daemon=True)  # type: ignore[union-attr]
    reader.start()
    return chunks, reader


class TaggedActor:
    """An ActorSide whose every transition carries a unique id: worker index, piece, step, env."""

    def __init__(self, index: int) -> None:
        self.index, self.pieces = index, 0

    def rollout(self) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
        base = (self.index * 1_000_000 + self.pieces * T * ENVS)
        ids = base + np.arange(T * ENVS, dtype=np.int64).reshape(T, ENVS)
        self.pieces += 1
        return {"id": ids, "obs": np.repeat(ids[..., None], 5, axis=2).astype(np.float32)}, {}

    def load_params(self, snapshot: Any) -> None:
        # the worker process copied these out of the parameter store (they never crossed the pipe)
        assert snapshot.arrays["w"].shape == (PARAMS,) and np.all(snapshot.arrays["w"] == snapshot.version + 1)


class ParamServer(Component):
    """Learner-process stand-in for the Trainer: publishes one version through its outbox (into the
    backend's parameter store) at the first fetch, and answers every fetch with it."""

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.latest: LoadParamsMsg | None = None

    def handlers(self) -> Handlers:
        return {**super().handlers(), FetchParamsMsg: self.on_FetchParamsMsg}

    def on_FetchParamsMsg(self, msg: FetchParamsMsg) -> None:
        if self.latest is None:
            snapshot = ParamsSnapshot.freeze(0, {"w": np.ones(PARAMS, np.float32)})
            self.latest = LoadParamsMsg(0, self.outbox.share(snapshot))
        self.send(msg.requester, self.latest)


class Sink(Component):
    """Learner-process end of the test pipeline: records every id it is given (slowly)."""

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.ids: list[int] = []
        self.lock = threading.Lock()

    def handlers(self) -> Handlers:
        return {**super().handlers(), InsertTransitionMsg: self.on_InsertTransitionMsg}

    def on_InsertTransitionMsg(self, msg: InsertTransitionMsg) -> None:
        assert np.array_equal(msg.transitions["obs"][..., 0], msg.transitions["id"]), "fields of one piece mixed up"
        time.sleep(0.002)  # slower than the producers: rings fill and workers block
        with self.lock:
            self.ids.extend(msg.transitions["id"].reshape(-1).tolist())
        for worker, pieces in msg.by_worker():  # taken: the workers may send more (as a replay host says)
            self.send(worker, PiecesAcceptedMsg(pieces))


def expected_ids(workers: int, pieces: int) -> list[int]:
    return sorted(i * 1_000_000 + k for i in range(workers) for k in range(pieces * T * ENVS))


def test_every_transition_arrives_exactly_once_through_the_rings() -> None:
    before = segments()
    workers, pieces = 4, 30
    backend = ProcessBackend(slots_per_worker=2)  # tiny rings: wrap-around and backpressure constantly
    assert isinstance(backend, Backend)
    sink = Sink("trajectory_manager")
    backend.add("trajectory_manager", "trajectory_manager", lambda: sink)
    backend.add("trainer", "trainer", partial(ParamServer, "trainer"))
    backend.add("proxy-0", "proxy", partial(WorkerProxy, "proxy-0", "trajectory_manager", "trainer", 2 * T * ENVS))
    for i in range(workers):
        backend.add(f"worker-{i}", "worker", partial(Worker, f"worker-{i}", "proxy-0", partial(TaggedActor, i),
                                                    lockstep=False, max_rollouts=pieces))
    backend.start()  # the store is created at the first fetch: announced to running worker processes
    try:
        assert len(worker_processes()) >= workers
        for name in backend.roles:
            backend.deliver(name, StartMsg())
        deadline = time.monotonic() + 60
        while len(sink.ids) < workers * pieces * T * ENVS and time.monotonic() < deadline:
            time.sleep(0.02)
    finally:
        alive = backend.shutdown()
    assert alive == []
    assert sorted(sink.ids) == expected_ids(workers, pieces), "a transition was lost or duplicated"
    counters = backend.counters()
    assert sum(c["ipc.pieces_via_ring"] for n, c in counters.items() if n.startswith("worker-")) == workers * pieces
    assert all(c.get("ipc.pieces_pickled", 0) == 0 for n, c in counters.items() if n.startswith("worker-"))
    # parameters: fetched through the proxy (once for its node), loaded by every worker from the store
    assert counters["proxy-0"]["param_fetches"] == 1 and counters["trainer"]["msgs_in.FetchParamsMsg"] >= 1
    assert all(c["params_loaded"] == 1 for n, c in counters.items() if n.startswith("worker-"))
    loads = backend.pipe_stats.as_dict()["LoadParamsMsg"]
    assert loads["messages"] >= workers and loads["bytes"] < 1000 * loads["messages"], f"parameters pickled: {loads}"
    assert segments() == before, "shared-memory segments left behind"
    assert not worker_processes()


def tiny(on_policy: bool, workers: int = 4, **runtime: Any) -> RunConfig:
    """A synthetic run on the process backend; the failure and interrupt tests take 2 workers (each
    worker process starts an interpreter and torch: ~1 s of a 2-core machine)."""
    g = 0.5 if on_policy else 2
    return resolve(RunConfig(
        janus=JanusConfig(is_on_policy=on_policy, overlap_collect=1, overlap_select=1, g_collect=g, g_select=g,
                          batch_size=64, buffer_capacity=5000),
        workload=WorkloadConfig(num_actors=workers, envs_per_actor=4, rollout_length=16, hidden_size=32,
                                iterations=10, updates_per_iteration=2),
        synthetic=SyntheticConfig(obs_shape=(32,), env_step_ms=0.2),
        runtime=RuntimeConfig(**{"backend": "process", "ping_interval_s": 0.1, "pong_timeout_s": 2.0, **runtime}),
    ))


# off-policy is slow-only: a rate-limited off-policy run on worker processes to its update goal
# runs by default in test_killed_worker_process_is_restarted_with_the_latest_parameters, each
# transition through the rings exactly once in test_every_transition_arrives_exactly_once_through_the_rings,
# and the four-worker checks here (conservation, two proxies, versions over the pipes) in the on-policy case
@pytest.mark.parametrize("on_policy", [True, pytest.param(False, marks=pytest.mark.slow)])
def test_synthetic_run_conserves_transitions_with_four_worker_processes(on_policy: bool) -> None:
    before = segments()
    rates = {} if on_policy else {"samples_per_insert": 1.0, "min_inserts": 256}
    cfg = tiny(on_policy, workers_per_node=2, **rates)
    backend = wiring.make_backend(cfg)
    assert isinstance(backend, ProcessBackend)
    run = run_runtime(cfg, backend=backend, timeout_s=120)
    counts, rt = run["counts"], run["runtime"]
    assert run["runtime"]["backend"] == "process"
    assert counts["updates"] >= cfg.workload.iterations * cfg.updates_per_iteration
    assert counts["transitions_produced"] == counts["transitions_inserted"] == counts["transitions_collected"] > 0
    if on_policy:  # every rollout transition used exactly num_epochs times, none twice in an epoch
        w = cfg.workload
        assert counts["transitions_produced"] == w.iterations * w.num_actors * w.envs_per_actor * w.rollout_length
        assert counts["batches_selected"] * cfg.minibatch_size == counts["transitions_collected"] * w.num_epochs
    trainer = backend.counters()["trainer"]
    assert trainer.get("batches_moved_to_device", 0) == 0, "batches reached the Trainer on its device"
    workers = {n: c for n, c in backend.counters().items() if n.startswith("worker-")}
    assert len(workers) == 4 and all(c["params_loaded"] >= 1 and c["ipc.pieces_via_ring"] > 0 for c in workers.values())
    # parameters take the path they take on every backend: two nodes, one proxy each, at most one
    # fetch per node per version; what crosses a worker's pipe is the version, not the arrays
    assert set(rt["param_fetches_per_node"]) == {"proxy-0", "proxy-1"}
    assert all(0 < n <= rt["param_versions_published"] for n in rt["param_fetches_per_node"].values())
    loads = backend.pipe_stats.as_dict()["LoadParamsMsg"]
    assert loads["messages"] >= 4 and loads["bytes"] < 1000 * loads["messages"], f"parameters pickled: {loads}"
    assert segments() == before and not worker_processes()


def test_a_shared_snapshot_pickles_as_its_version_alone() -> None:
    snapshot = ParamsSnapshot.freeze(7, {"w": np.ones(PARAMS, np.float32)})
    handle = SharedSnapshot(7, snapshot)
    assert ProcessOutbox(ProcessBackend(), "trainer").resolve(handle) is snapshot  # the learner process: by reference
    wire = pickle.dumps(LoadParamsMsg(7, handle))
    assert len(wire) < 200, "the arrays were pickled with the handle"
    sent = pickle.loads(wire)
    assert sent.params == SharedSnapshot(7) and sent.params.snapshot is None


def test_a_worker_loads_the_store_and_records_the_version_it_holds() -> None:
    """A handle of version 1 reaches a worker after version 2 was published: the receiver posts the
    arrays of version 2 as version 2, so the Worker records the version of what it loads. Parameters
    ahead of the StartMsg answer a killed predecessor's fetch: dropped (the Worker has no actor yet)."""
    store = ParamStore.create({"w": np.zeros(4, np.float32)})
    mine, theirs = multiprocessing.Pipe(duplex=True)
    host = Host(Component("worker-0"))
    outbox = WorkerOutbox("worker-0", theirs, 2, "unused")
    receiver = threading.Thread(target=receive_from_learner, args=(host, outbox, theirs), daemon=True)
    receiver.start()
    try:
        mine.send(StoreAnnounced(store.name, store.layout))
        store.publish(1, {"w": np.full(4, 1.0, np.float32)})
        store.publish(2, {"w": np.full(4, 2.0, np.float32)})
        mine.send(Deliver(LoadParamsMsg(1, SharedSnapshot(1))))  # before StartMsg: the predecessor's
        mine.send(Deliver(StartMsg()))
        mine.send(Deliver(LoadParamsMsg(1, SharedSnapshot(1))))
        first, posted = host.inbox.get(timeout=10), host.inbox.get(timeout=10)
    finally:
        host.done.set()
        receiver.join(5)
        for segment in (outbox.store, store):
            if segment is not None:
                segment.close()
        store.unlink()
        mine.close()
        theirs.close()
    assert isinstance(first, StartMsg) and host.inbox.empty()
    assert isinstance(posted, LoadParamsMsg) and posted.version == posted.params.version == 2
    assert np.array_equal(posted.params.arrays["w"], np.full(4, 2.0, np.float32))
    assert not posted.params.arrays["w"].flags.writeable, "a snapshot is immutable"


def test_killed_worker_process_is_restarted_with_the_latest_parameters() -> None:
    cfg = tiny(False, samples_per_insert=1.0, min_inserts=256, pong_timeout_s=1.0)
    cfg = dataclasses.replace(cfg, workload=dataclasses.replace(cfg.workload, iterations=60),
                              synthetic=dataclasses.replace(cfg.synthetic, env_step_ms=8.0))
    backend = ProcessBackend(cfg)
    killed: list[int] = []

    def progress(done: int, total: int, *_: Any) -> None:
        if done >= 4 and not killed:
            killed.append(backend.worker_pids()["worker-1"])
            backend.kill("worker-1")
            # Hold the run open (this callback runs in its loop) until the replacement has sent a
            # piece: on a loaded machine spawning it can take longer than the rest of the run.
            deadline = time.monotonic() + 90
            while time.monotonic() < deadline:
                fresh = backend.workers.get("worker-1")
                if fresh is not None and fresh.process.pid != killed[0] and fresh.ring is not None:
                    break
                time.sleep(0.05)

    run = run_runtime(cfg, progress=progress, backend=backend, timeout_s=180)
    assert (killed and not psutil.pid_exists(killed[0])) or psutil.Process(killed[0]).status() == psutil.STATUS_ZOMBIE
    restarts = run["runtime"]["worker_restarts"]
    assert set(restarts) == {"worker-1"} and restarts["worker-1"] >= 1
    fresh = backend.counters()["worker-1"]
    assert fresh.get("params_loaded", 0) >= 1 and fresh.get("rollouts", 0) > 0, f"the new worker loaded params and worked: {fresh}"
    assert backend.worker_pids()["worker-1"] != killed[0]
    # the killed instance's env steps still count (before, a restart made the run's total drop)
    assert run["counts"]["env_steps"] >= run["counts"]["transitions_inserted"] > 0
    assert run["counts"]["updates"] >= cfg.workload.iterations * cfg.updates_per_iteration
    assert not worker_processes()


def test_learner_failure_stops_the_run_with_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
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

    before = segments()
    real = wiring.make_learner
    monkeypatch.setattr(wiring, "make_learner", lambda cfg: Exploding(real(cfg)))  # the learner is in this process
    start = time.monotonic()
    with pytest.raises(RunFailed, match="learner exploded on purpose"):
        run_runtime(tiny(False, workers=2), timeout_s=60)
    assert time.monotonic() - start < 45
    assert segments() == before and not worker_processes()


def test_interrupt_stops_every_worker_process() -> None:
    before = segments()

    def progress(done: int, total: int, *_: Any) -> None:
        if done >= 2:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_runtime(tiny(True, workers=2), progress=progress, timeout_s=60)
    assert segments() == before and not worker_processes()


# SIGINT is slow-only: once raised, it and SIGTERM (cli.Terminated is a KeyboardInterrupt) take the
# same path out of the process backend, which the SIGTERM case covers by default; SIGINT itself is
# covered by default by test_resume.py's signal test (local backend) and test_live_metrics.py's Ctrl-C.
@pytest.mark.parametrize("sig", [pytest.param(signal.SIGINT, marks=pytest.mark.slow), signal.SIGTERM])
def test_cli_signal_exits_cleanly_without_orphans_or_segments(tmp_path: Path, sig: int) -> None:
    proc = start_cli_train(tmp_path / "run", stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           env={**os.environ, "PYTHONUNBUFFERED": "1"})
    chunks, reader = read_output(proc)
    children: list[int] = []
    try:
        deadline = time.monotonic() + 150
        while len(children) < 2 or b"backend=process" not in b"".join(chunks):  # the run is set up
            assert proc.poll() is None, b"".join(chunks).decode(errors="replace")
            assert time.monotonic() < deadline, "no worker processes within 150 s"
            time.sleep(0.2)
            children = [c.pid for c in psutil.Process(proc.pid).children(recursive=True) if "spawn_main" in " ".join(c.cmdline())]
        time.sleep(3.0)  # workers built and rolling out (progress prints only every 25% off a terminal)
        proc.send_signal(sig)
        proc.wait(timeout=60)
        reader.join(10)
    finally:
        if proc.poll() is None:
            proc.kill()
    out = b"".join(chunks).decode(errors="replace")
    assert proc.returncode == (130 if sig == signal.SIGINT else 143), out
    assert "interrupted" in out
    gone = [pid for pid in children if psutil.pid_exists(pid) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE]
    assert gone == [], f"orphan processes {gone}"
    assert segments(proc.pid) == set(), "shared-memory segments left behind"


def test_a_second_group_signal_does_not_cut_the_saving_short(tmp_path: Path) -> None:
    """SIGTERM to the whole process group (kill -- -PGID, scancel), twice: the workers leave the
    stopping to the learner, so their counts reach the results, and the second signal, arriving
    while the learner saves, only says so: checkpoint and results are still written."""
    run = tmp_path / "run"
    proc = start_cli_train(run, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True,
                           env={**os.environ, "PYTHONUNBUFFERED": "1"})
    chunks, reader = read_output(proc)
    try:
        deadline = time.monotonic() + 150
        while b"backend=process" not in b"".join(chunks) or len(segments(proc.pid)) < 3:  # workers are stepping
            assert proc.poll() is None, b"".join(chunks).decode(errors="replace")
            assert time.monotonic() < deadline, "the run did not start within 150 s"
            time.sleep(0.2)
        time.sleep(3.0)
        os.killpg(proc.pid, signal.SIGTERM)
        time.sleep(0.3)  # the learner is now stopping its workers and saving
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=60)
        reader.join(10)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    out = b"".join(chunks).decode(errors="replace")
    assert proc.returncode == 143, out
    results = json.loads((run / "results.json").read_text())
    steps = results["runs"][0]["counts"]["env_steps"]
    assert steps > 0, "the workers' counts were lost"
    assert json.loads((run / "checkpoint" / "run_state.json").read_text())["env_steps"] == steps
    assert segments(proc.pid) == set() and not worker_processes()


@pytest.mark.skipif(not SHM.is_dir(), reason="needs /dev/shm (Linux) to list segments")
def test_a_full_dev_shm_is_a_clear_error_of_the_command(tmp_path: Path) -> None:
    """``JANUS_TEST_SHM_FREE`` (tests/reliability/hooks) makes /dev/shm report 20 kB free in every
    process of the run, as in a small container: exit 2 naming the fix, no traceback, nothing left."""
    hooks = Path(__file__).resolve().parents[1] / "reliability" / "hooks"
    env = {**os.environ, "JANUS_TEST_SHM_FREE": "20000", "OMP_NUM_THREADS": "1",
           "PYTHONPATH": os.pathsep.join([str(hooks), str(Path(wiring.__file__).resolve().parents[2])])}
    proc = subprocess.Popen([sys.executable, "-m", "janus.cli", "train", "--algo", "dqn", "--backend", "process", "--quick",
                             "--out", str(tmp_path / "run")], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        _, stderr = proc.communicate(timeout=240)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 2, stderr[-3000:]
    assert "SharedMemoryFull: the process backend needs" in stderr and "--shm-size" in stderr, stderr[-3000:]
    assert "Traceback" not in stderr
    assert segments(proc.pid) == set()


@pytest.mark.skipif(not SHM.is_dir(), reason="needs /dev/shm (Linux) to list segments")
def test_segments_of_a_run_killed_with_its_resource_tracker_are_removed_by_the_next_run(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """SIGKILL to the whole process group (the learner, its workers and Python's resource tracker)
    leaves the run's segments in /dev/shm; the next process-backend run removes them, and says so
    (with any other killed run's: the count is at least this one's)."""
    before = segments()
    proc = start_cli_train(tmp_path / "run", stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
    try:
        deadline = time.monotonic() + 150
        while len(segments(proc.pid)) < 3:  # two rings and the parameter store: the run is set up
            assert proc.poll() is None, proc.stderr.read().decode(errors="replace")  # type: ignore[union-attr]
            assert time.monotonic() < deadline, "no segments within 150 s"
            time.sleep(0.2)
        leaked = segments(proc.pid)
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
        time.sleep(0.5)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert leaked <= segments(proc.pid), "the resource tracker was killed too: the segments must still be there"
    run = run_runtime(tiny(False, workers=2, samples_per_insert=1.0, min_inserts=256), timeout_s=120)
    assert run["counts"]["updates"] > 0
    assert not segments(proc.pid), f"left behind: {sorted(segments(proc.pid))}"
    said = re.search(r"removed (\d+) shared-memory segment\(s\) of killed runs", capsys.readouterr().err)
    assert said is not None and int(said.group(1)) >= len(leaked), "the next run did not say it removed them"
    assert segments() == before


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (the learner end on the device)")
@pytest.mark.parametrize("placement", ["cpu_pinned", "cuda"])
def test_learner_end_delivers_batches_on_the_gpu(placement: str) -> None:
    cfg = tiny(False, samples_per_insert=1.0, min_inserts=256)
    cfg = dataclasses.replace(cfg, janus=dataclasses.replace(cfg.janus, placement=placement, learner_device="cuda"))
    backend = ProcessBackend(cfg)
    run = run_runtime(cfg, backend=backend, timeout_s=120)
    assert run["counts"]["updates"] >= cfg.workload.iterations * cfg.updates_per_iteration
    trainer = backend.counters()["trainer"]
    assert trainer.get("batches_moved_to_device", 0) == 0, "SelectionOp put every batch on the GPU"


def test_a_script_without_a_main_guard_runs_its_workers(tmp_path: Path) -> None:
    """Spawned workers would import the user's script again; without ``if __name__ == "__main__":``
    each ran the run again and died. They now start without importing it (janus.spawn), and one
    line says so."""
    script = tmp_path / "train.py"
    script.write_text(
        "from janus.config import from_dict, resolve\n"
        "from janus.runtime.run import run_runtime\n"
        "print('SCRIPT RAN', flush=True)\n"
        "run = run_runtime(resolve(from_dict({'runtime': {'backend': 'process'}, 'workload': {'iterations': 2}})))\n"
        "print('UPDATES', run['counts']['updates'], flush=True)\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).parents[2] / "src"), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=env, cwd=tmp_path)
    try:
        stdout, stderr = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, stderr[-3000:]
    assert stdout.count("SCRIPT RAN") == 1, stdout  # no worker ran the script again
    assert "UPDATES" in stdout and "start without importing this program's __main__" in stdout
    assert "Traceback" not in stderr, stderr[-3000:]
    assert segments(proc.pid) == set()  # the learner removed its segments on the way out
