"""The ray backend: runs, message accounting, restarts, failures, clean shutdown, multi-node.

All tests but the multi-node one share the session's local Ray (``ray_session`` in conftest.py).
The multi-node test starts its own two-node cluster with ``ray start`` in subprocesses.
"""

from __future__ import annotations

import dataclasses
import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import threading
import time
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import pytest

ray = pytest.importorskip("ray")
psutil = pytest.importorskip("psutil")

from janus.config import JanusConfig, RunConfig, RuntimeConfig, SyntheticConfig, WorkloadConfig, resolve  # noqa: E402
from janus.runtime.backends.ray import RayBackend  # noqa: E402
from janus.runtime.backends.ray_actors import RayOutbox, RayParams  # noqa: E402
from janus.runtime.backends.ray_cluster import GcsWatch  # noqa: E402
from janus.runtime.messages import ParamsSnapshot  # noqa: E402
from janus.runtime.plan import RunPlan  # noqa: E402
from janus.runtime.run import RunFailed, run_runtime  # noqa: E402

# Factories defined here run inside Ray actors, which cannot import this test module: ship by value.
ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])

REPO = Path(__file__).resolve().parents[2]


def tiny(on_policy: bool = False, workers: int = 2, **runtime: Any) -> RunConfig:
    g = 0.5 if on_policy else 2
    return resolve(RunConfig(
        janus=JanusConfig(is_on_policy=on_policy, overlap_collect=1, overlap_select=1, g_collect=g, g_select=g,
                          batch_size=64, buffer_capacity=5000),
        workload=WorkloadConfig(num_actors=workers, envs_per_actor=4, rollout_length=16, hidden_size=32, iterations=8,
                                updates_per_iteration=2),
        synthetic=SyntheticConfig(obs_shape=(32,), env_step_ms=0.2),
        runtime=RuntimeConfig(**{"backend": "ray", "ping_interval_s": 0.2, "pong_timeout_s": 3.0, **runtime}),
    ))


def actors_of(backend: RayBackend) -> list[str]:
    """Named actors of this backend's run that Ray still knows as alive."""
    return sorted(a["name"] for a in ray.util.list_named_actors(all_namespaces=True) if a["namespace"] == backend.namespace)


def running(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def assert_clean(backend: RayBackend) -> None:
    """No actor of the run left, no process of its components still running, and no thread of the
    run left in this process (the death watch ends with the last run it watched)."""
    assert actors_of(backend) == []
    left = [t.name for t in threading.enumerate() if t.name.startswith("janus-")]
    assert not left, f"a run's thread outlived it: {left}"
    pids = [f["pid"] for f in (backend._final or {}).values()]
    deadline = time.monotonic() + 10
    while any(running(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not [p for p in pids if running(p)], "component processes outlived the run"


def test_local_ray_listens_on_loopback_only(ray_session: Any) -> None:
    gcs_port = int(ray.get_runtime_context().gcs_address.rsplit(":", 1)[1])
    node = next(n for n in ray.nodes() if n["Alive"])
    ports = {gcs_port, node["NodeManagerPort"], node["ObjectManagerPort"]}
    listening = [c for c in psutil.net_connections(kind="tcp") if c.status == psutil.CONN_LISTEN and c.laddr.port in ports]
    assert {c.laddr.port for c in listening} == ports, "GCS and raylet listen"
    assert all(c.laddr.ip in ("127.0.0.1", "::ffff:127.0.0.1") for c in listening), listening
    assert node["NodeManagerAddress"] == "127.0.0.1"


def test_params_are_shared_once_per_version_and_travel_as_a_handle(ray_session: Any) -> None:
    out = RayOutbox("janus-test-unit", "trainer", 4)
    snap = ParamsSnapshot.freeze(3, {"w": np.arange(4.0)})
    handle = out.share(snap)
    assert out.share(snap) is handle and isinstance(handle, RayParams) and handle.version == 3
    assert isinstance(handle.ref, ray.ObjectRef)  # the container keeps Ray from dereferencing it
    got = out.resolve(handle)
    assert got.version == 3 and got.arrays["w"].tolist() == [0, 1, 2, 3]
    assert out.resolve(handle) is got, "resolved once per process"


# off-policy is slow-only: its path (a rate-limited off-policy run on Ray to its update goal, with
# these counts) runs by default in test_killed_worker_process_is_restarted_and_training_completes,
# and every other check here runs by default in the on-policy case
@pytest.mark.parametrize("on_policy", [pytest.param(False, marks=pytest.mark.slow), True])
def test_ray_run_completes_with_consistent_counts(ray_session: Any, on_policy: bool) -> None:
    rates = {} if on_policy else {"samples_per_insert": 1.0, "min_inserts": 256}
    cfg = tiny(on_policy, workers_per_node=1, **rates)
    backend = RayBackend(None, cfg.runtime.max_calls_in_flight)
    run = run_runtime(cfg, backend=backend, timeout_s=120)
    rt, counts, msgs = run["runtime"], run["counts"], run["runtime"]["messages"]
    total = cfg.workload.iterations * cfg.updates_per_iteration
    assert rt["backend"] == "ray"
    assert counts["updates"] >= total
    assert counts["transitions_inserted"] == counts["transitions_produced"] > 0
    # one path on every backend: the Trainer reads the replay through its (remote, prefetching)
    # client, so no batch is a message; the replay host counts what it served
    assert "BatchTrainingDataMsg" not in msgs and msgs["InsertTransitionMsg"]["bytes"] > 0
    assert counts["updates"] <= backend.counters()["trajectory_manager"]["batches_sent"]
    assert msgs["PiecesAcceptedMsg"]["bytes"] == 0 and msgs["PongMsg"]["messages"] > 0
    # one proxy per node (2 workers, 1 per node), at most one fetch per node per version
    assert set(rt["param_fetches_per_node"]) == {"proxy-0", "proxy-1"}
    assert all(0 < n <= rt["param_versions_published"] for n in rt["param_fetches_per_node"].values())
    if on_policy:
        assert all(n == cfg.workload.iterations for n in rt["param_fetches_per_node"].values())
    workers = {n: c for n, c in backend.counters().items() if n.startswith("worker-")}
    assert all(c["params_loaded"] >= 1 for c in workers.values())
    assert set(rt["nodes"]) == set(RunPlan.of(cfg).layout) and all(rt["nodes"].values())
    assert_clean(backend)


def test_killed_worker_process_is_restarted_and_training_completes(ray_session: Any) -> None:
    """A SIGKILLed worker is reported and replaced at once, twice: the first instance by the
    driver's death watch, its replacement by the Orchestrator actor's. The pong timeout is longer
    than the whole run, so pings cannot be what finds them."""
    cfg = tiny(samples_per_insert=1.0, pong_timeout_s=300.0)  # training paced by inserts: it outlasts the restarts
    cfg = dataclasses.replace(cfg, workload=dataclasses.replace(cfg.workload, iterations=40),
                              synthetic=dataclasses.replace(cfg.synthetic, env_step_ms=4.0))
    backend = RayBackend(None, cfg.runtime.max_calls_in_flight)
    killed: list[int] = []

    def progress(done: int, total: int, *_: Any) -> None:
        if len(killed) < 2 and done >= 4 * (len(killed) + 1):
            try:
                pid = ray.get(ray.get_actor("worker-1", namespace=backend.namespace).pid.remote(), timeout=10)
            except (ValueError, ray.exceptions.RayError):  # the name is still the killed actor's, or free
                return
            if pid not in killed:  # the replacement is up
                killed.append(pid)
                backend.kill("worker-1")

    started = time.monotonic()
    run = run_runtime(cfg, progress=progress, backend=backend, timeout_s=180)
    assert time.monotonic() - started < cfg.runtime.pong_timeout_s
    assert len(killed) == 2 and not any(running(p) for p in killed)
    restarts = run["runtime"]["worker_restarts"]
    assert restarts == {"worker-1": 2}
    fresh = backend.counters()["worker-1"]
    assert fresh.get("params_loaded", 0) >= 1 and fresh.get("rollouts", 0) > 0, "the restarted worker loaded params"
    assert backend._final["worker-1"]["pid"] not in killed
    assert run["counts"]["updates"] >= cfg.workload.iterations * cfg.updates_per_iteration
    # the killed instances' output counts too (their counters died with their processes)
    assert run["counts"]["transitions_produced"] >= run["counts"]["transitions_inserted"] > 0
    assert run["counts"]["env_steps"] >= run["counts"]["transitions_inserted"]
    assert_clean(backend)


class ExplodingLearner:
    def __init__(self, inner: Any) -> None:
        self.inner, self.n = inner, 0

    def update(self, batch: Any) -> Any:
        self.n += 1
        if self.n == 3:
            raise RuntimeError("learner exploded on purpose")
        return self.inner.update(batch)

    def params(self) -> Any:
        return self.inner.params()


def exploding_trainer(factory: Any) -> Any:
    trainer = factory()
    real = trainer.make_learner
    trainer.make_learner = lambda: ExplodingLearner(real())
    return trainer


def test_trainer_error_stops_the_run_with_a_clear_error(ray_session: Any) -> None:
    cfg = tiny(workers=1)
    backend = RayBackend(None, cfg.runtime.max_calls_in_flight)
    add = backend.add
    backend.add = lambda name, role, factory, node: add(  # type: ignore[method-assign]
        name, role, partial(exploding_trainer, factory) if role == "trainer" else factory, node)
    start = time.monotonic()
    with pytest.raises(RunFailed, match="learner exploded on purpose"):
        run_runtime(cfg, backend=backend, timeout_s=60)
    assert time.monotonic() - start < 40
    assert_clean(backend)


@pytest.mark.slow
def test_trajectory_manager_process_death_stops_the_run(ray_session: Any) -> None:
    cfg = tiny(workers=1, pong_timeout_s=2.0)
    cfg = dataclasses.replace(cfg, workload=dataclasses.replace(cfg.workload, iterations=200))
    backend = RayBackend(None, cfg.runtime.max_calls_in_flight)
    killed: list[bool] = []

    def progress(done: int, total: int, *_: Any) -> None:
        if done >= 2 and not killed:
            killed.append(True)
            backend.kill("trajectory_manager")

    start = time.monotonic()
    with pytest.raises(RunFailed, match="trajectory_manager"):
        run_runtime(cfg, progress=progress, backend=backend, timeout_s=60)
    assert time.monotonic() - start < 40
    assert_clean(backend)


def broken_factory() -> Any:
    raise RuntimeError("cannot build this component")


def test_component_that_cannot_start_fails_the_run_at_once(ray_session: Any) -> None:
    cfg = tiny(workers=1)
    backend = RayBackend(None, cfg.runtime.max_calls_in_flight)
    add = backend.add
    backend.add = lambda name, role, factory, node: add(  # type: ignore[method-assign]
        name, role, broken_factory if role == "proxy" else factory, node)
    with pytest.raises(RunFailed, match="could not start"):
        run_runtime(cfg, backend=backend, timeout_s=60)
    assert actors_of(backend) == []


def test_interrupt_leaves_no_actor_behind(ray_session: Any) -> None:
    cfg = tiny(workers=1)
    backend = RayBackend(None, cfg.runtime.max_calls_in_flight)

    def progress(done: int, total: int, *_: Any) -> None:
        if done >= 2:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_runtime(cfg, progress=progress, backend=backend, timeout_s=60)
    assert_clean(backend)


# ---- losing Ray's GCS (the cluster's coordinator) ----------------------------------------------
@pytest.mark.parametrize("failure", ["raises", "hangs"])
def test_a_gcs_that_stops_answering_is_reported_within_the_bound(failure: str) -> None:
    """A probe that fails, or one stuck in Ray's C++ (never returning), makes the watch report the
    GCS lost once nothing answered for ``lost_after_s``; an answering GCS never is."""
    broken, release = threading.Event(), threading.Event()

    def probe(timeout_s: float) -> None:
        if broken.is_set():
            if failure == "hangs":
                release.wait()
            raise ConnectionError("Timed out while waiting for GCS to become available.")

    watch = GcsWatch("10.1.2.3:6379", probe, interval_s=0.05, lost_after_s=0.5)
    watch.start()
    try:
        time.sleep(1.0)
        assert watch.lost is None, "a GCS that answers was reported lost"
        broken.set()
        since = time.monotonic()
        while watch.lost is None:
            assert time.monotonic() - since < 3.0, "a silent GCS was not reported"
            time.sleep(0.02)
        assert time.monotonic() - since >= 0.4
        assert "Ray's GCS at 10.1.2.3:6379 stopped answering" in watch.lost and "--resume" in watch.lost
        if failure == "raises":
            assert "ConnectionError: Timed out while waiting for GCS to become available)" in watch.lost
    finally:
        release.set()
        watch.stop()


def test_lost_gcs_stops_the_run_with_a_clear_error_and_no_actor_left(ray_session: Any) -> None:
    """The driver's GCS probe starts failing mid-run (the session's GCS itself stays up, so the
    test can see the actors): the run fails naming the GCS within seconds, with no actor left."""
    cfg = tiny(workers=1, samples_per_insert=1.0)  # the learner paced by the worker's inserts: ~13 s
    cfg = dataclasses.replace(cfg, workload=dataclasses.replace(cfg.workload, iterations=200, updates_per_iteration=1),
                              synthetic=dataclasses.replace(cfg.synthetic, env_step_ms=4.0))
    backend = RayBackend(None, cfg.runtime.max_calls_in_flight)
    lost_at: list[float] = []

    def probe(timeout_s: float) -> None:
        if lost_at:
            raise ConnectionError("GCS unreachable")

    def progress(done: int, total: int, *_: Any) -> None:
        if done >= 2 and not lost_at:
            lost_at.append(time.monotonic())

    backend.gcs_probe, backend.gcs_lost_after_s = probe, 1.0
    with pytest.raises(RunFailed, match=r"Ray's GCS at 127\.0\.0\.1:\d+ stopped answering"):
        run_runtime(cfg, progress=progress, backend=backend, timeout_s=120)
    assert lost_at and time.monotonic() - lost_at[0] < 10
    deadline = time.monotonic() + 10
    while actors_of(backend) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert_clean(backend)


def test_a_local_ray_that_fails_to_start_is_a_clear_error_and_leaves_no_process(monkeypatch: pytest.MonkeyPatch) -> None:
    """``ray.init`` failing half-way (its GCS killed while it starts: "The current node timed out
    during startup") is a RunFailed naming it, and the processes of the session this process
    started are killed, found by the session folder they name (their raylet may be gone); those of
    a Ray this process was running already are not."""
    from janus.runtime.backends import ray as raymod

    earlier = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)",  # a session of this process
                                f"--session-dir=/tmp/ray/session_2025-01-01_00-00-00_000001_{os.getpid()}"])
    _wait_for_command_line(earlier.pid, "session_2025")

    started: list[subprocess.Popen] = []

    def failing_start(**_: Any) -> None:
        session = f"/tmp/ray/session_2026-01-01_00-00-00_000001_{os.getpid()}"
        started.append(subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)", f"--session-dir={session}"],
                                        start_new_session=True))  # an agent handed to init, in its own session
        _wait_for_command_line(started[-1].pid, "session_2026")  # up, as an agent handed to init would be
        raise Exception("The current node timed out during startup. This could happen because ...")

    monkeypatch.setattr(raymod, "start_local_ray", failing_start)
    monkeypatch.setattr(ray, "is_initialized", lambda: False)  # the session's Ray (if any) is not this backend's
    backend = RayBackend(None)
    backend.add("orchestrator", "orchestrator", broken_factory)
    try:
        with pytest.raises(RunFailed, match="could not start a local Ray: Exception: The current node timed out"):
            backend.start()
        assert started and started[0].wait(timeout=10) == -signal.SIGKILL, "the session's process outlived the failure"
        assert earlier.poll() is None, "a process of a Ray this process ran before was killed"
    finally:
        for p in [*started, earlier]:
            if p.poll() is None:
                p.kill()
                p.wait()


def _wait_for_command_line(pid: int, part: str, within_s: float = 10.0) -> None:
    """Wait until ``pid``'s /proc command line shows ``part``: Popen returns once exec has begun,
    and until the kernel has laid out the new arguments the command line reads empty."""
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        try:
            if part in " ".join(psutil.Process(pid).cmdline()):
                return
        except psutil.Error:
            pass
        time.sleep(0.01)
    raise AssertionError(f"process {pid} never showed {part!r} in its command line")


def _descendants(pid: int) -> list[psutil.Process]:
    try:
        return [p for p in psutil.Process(pid).children(recursive=True) if p.status() != psutil.STATUS_ZOMBIE]
    except psutil.NoSuchProcess:
        return []


@pytest.mark.slow
def test_cli_run_whose_gcs_is_killed_ends_within_20s_with_a_clear_error_and_no_orphan(tmp_path: Path) -> None:
    """SIGKILL of the run's own gcs_server mid-training (its actors keep talking without it): the
    run ends within 20 s with an error naming the GCS, every process of its Ray is gone, the run
    folder's lock is released and the last periodic checkpoint is a whole commit."""
    from janus.runtime import checkpoints

    run = tmp_path / "run"
    argv = [sys.executable, "-m", "janus.cli", "train", "--algo", "dqn", "--backend", "ray", "--total_env_steps",
            "10000000", "--checkpoint_interval_s", "2", "--out", str(run)]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
                            env={**os.environ, "OMP_NUM_THREADS": "1"})
    try:
        deadline = time.monotonic() + 180
        while not checkpoints.read_run_state(run / "checkpoint"):  # training, and a periodic commit made
            assert proc.poll() is None, proc.communicate()[1][-3000:]
            assert time.monotonic() < deadline, "no periodic checkpoint within 180 s"
            time.sleep(0.5)
        session = _descendants(proc.pid)
        gcs = [p for p in session if p.name() == "gcs_server"]
        assert len(gcs) == 1, [p.name() for p in session]
        gcs[0].kill()
        killed = time.monotonic()
        _, err = proc.communicate(timeout=40)
        took = time.monotonic() - killed
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)
    assert took < 20, f"the run took {took:.0f}s to end after its GCS was killed"
    assert proc.returncode == 2, err[-3000:]
    assert "janus train: error: " in err and "Ray's GCS at 127.0.0.1:" in err and "stopped answering" in err, err
    assert "Traceback" not in err, err[-3000:]
    time.sleep(0.5)
    orphans = [f"{p.pid} {p.name()}" for p in session if running(p.pid)]
    assert orphans == [], f"processes of the run's Ray outlived it: {orphans}"
    assert not (run / ".janus.lock").exists(), "the run folder's lock was not released"
    checkpoints.recover(run / "checkpoint")  # as --resume does first: the commit is whole
    state = checkpoints.read_run_state(run / "checkpoint")
    assert state["env_steps"] > 0
    checkpoints.verify_committed(run / "checkpoint", state)


# ---- multi-node simulation: its own cluster, its own processes -----------------------------------
def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _ray_start(args: list[str], log: Path, env: dict[str, str]) -> subprocess.Popen:
    """``ray start --block ...`` in its own session; returns once the node is up."""
    ray_cli = str(Path(sys.executable).with_name("ray"))
    with log.open("w") as fh:
        proc = subprocess.Popen([ray_cli, "start", "--block", "--disable-usage-stats", *args], stdout=fh,
                                stderr=subprocess.STDOUT, env=env, start_new_session=True)
    deadline = time.monotonic() + 90
    while "block forever" not in log.read_text():
        if proc.poll() is not None or time.monotonic() > deadline:
            _stop([proc])
            raise RuntimeError(f"ray start failed:\n{log.read_text()[-3000:]}")
        time.sleep(0.2)
    return proc


def _stop(procs: list[subprocess.Popen]) -> None:
    """Stop the nodes we started (their process groups), never anyone else's Ray."""
    for proc in procs:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
    for proc in procs:
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)


@pytest.mark.slow
def test_two_node_cluster_runs_one_proxy_per_node(tmp_path: Path) -> None:
    port = _free_port()
    env = {**os.environ, "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": secrets.token_hex(32)}
    procs: list[subprocess.Popen] = []
    try:
        procs.append(_ray_start(["--head", "--node-ip-address=127.0.0.1", f"--port={port}", "--num-cpus=2",
                                 "--include-dashboard=false"], tmp_path / "head.log", env))
        procs.append(_ray_start([f"--address=127.0.0.1:{port}", "--num-cpus=2"], tmp_path / "node.log", env))
        out = tmp_path / "out"
        cmd = [sys.executable, "-m", "janus.cli", "train", "--backend", "ray", "--address", f"127.0.0.1:{port}",
               "--num_workers", "4", "--workers_per_node", "2", "--quick", "--obs_shape", "64", "--out", str(out)]
        done = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    finally:
        _stop(procs)
    run = json.loads((out / "results.json").read_text())["runs"][0]
    nodes, rt = run["runtime"]["nodes"], run["runtime"]
    assert len(set(nodes.values())) == 2, nodes
    assert nodes["proxy-0"] != nodes["proxy-1"], "one WorkerProxy per node"
    for i in range(4):
        assert nodes[f"worker-{i}"] == nodes[f"proxy-{i // 2}"], "workers run on their proxy's node"
    assert nodes["trainer"] == nodes["proxy-0"], "node-0 is the head"
    fetches = rt["param_fetches_per_node"]
    assert set(fetches) == {"proxy-0", "proxy-1"}
    assert all(0 < n <= rt["param_versions_published"] for n in fetches.values())
    assert run["counts"]["transitions_inserted"] == run["counts"]["transitions_produced"] > 0
    assert all(p.poll() is not None for p in procs)


def test_cli_train_on_ray_owns_its_ray_and_reports_after_it_is_gone(tmp_path: Path) -> None:
    """`janus train --backend ray` starts its own Ray, shuts it down, and still writes its results
    and final checkpoint: nothing may ask Ray for status after shutdown (that call used to
    auto-connect to whatever cluster /tmp/ray last recorded, and hang)."""
    from janus.runtime.checkpoints import FINAL, read_run_state

    out = tmp_path / "run"
    argv = [sys.executable, "-m", "janus.cli", "train", "--algo", "dqn", "--total_env_steps", "1500", "--backend", "ray",
            "--out", str(out)]  # 500 steps past learning_starts: it trains; Ray trains DQN at ~500 env steps/s here
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=240, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    run = json.loads((out / "results.json").read_text())["runs"][0]
    state = read_run_state(out / "checkpoint")
    assert state["tag"] == FINAL and state["trained"] == run["counts"]["updates"] > 0
    assert run["runtime"]["backend"] == "ray" and run["episodes"] > 0
