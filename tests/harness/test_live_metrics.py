"""Live logs (issue 12 item 6): training scalars, TensorBoard while a run trains, results on Ctrl-C.

The tfevents writer needs no tensorboard package; its encoding is checked byte for byte against
protobuf's own (google.protobuf, a dependency of torch's stack here) and, where tensorboard is
installed, read back by TensorBoard itself. The subprocess tests run the CLI of this checkout.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from janus.harness.reports.tensorboard import EventWriter, crc32c, read_scalars, scalar_event, write_scalars
from janus.runtime.messages import CountsMsg, PieceCounts, PongMsg, ReplayCounts, StopMsg, TrainerCounts
from janus.runtime.orchestrator import Orchestrator
from janus.runtime.stalls import Rates
from janus.runtime.status import RunStatus

ROOT = Path(__file__).resolve().parents[2]


# ------------------------------------------------------------------------------ the tfevents format
def test_crc32c_known_vector() -> None:
    assert crc32c(b"123456789") == 0xE3069283  # the CRC-32C check value
    assert crc32c(b"") == 0


def test_scalar_event_is_the_protobuf_encoding_of_an_event() -> None:
    pytest.importorskip("google.protobuf", reason="google.protobuf is not installed")
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

    proto = descriptor_pb2.FileDescriptorProto(name="event_subset.proto", package="t", syntax="proto3")
    value = proto.message_type.add(name="Value")
    value.field.add(name="tag", number=1, type=9, label=1)  # string
    value.field.add(name="simple_value", number=2, type=2, label=1)  # float
    summary = proto.message_type.add(name="Summary")
    summary.field.add(name="value", number=1, type=11, label=3, type_name=".t.Value")
    event = proto.message_type.add(name="Event")
    event.field.add(name="wall_time", number=1, type=1, label=1)  # double
    event.field.add(name="step", number=2, type=3, label=1)  # int64
    event.field.add(name="summary", number=5, type=11, label=1, type_name=".t.Summary")
    pool = descriptor_pool.DescriptorPool()
    pool.Add(proto)
    Event = message_factory.GetMessageClass(pool.FindMessageTypeByName("t.Event"))
    for tag, val, step, wall in [("train/loss", 0.25, 123456789012, 1.7e9 + 0.5), ("a", -1.5, -5, 3.0), ("é/x", 0.0, 0, 0.0)]:
        expected = Event(wall_time=wall, step=step)
        expected.summary.value.add(tag=tag, simple_value=val)
        ours = scalar_event(tag, val, step, wall)
        assert Event.FromString(ours) == expected
        if val and step and wall:  # proto3 leaves zero fields out; we write them (still the same message)
            assert ours == expected.SerializeToString(deterministic=True)


def test_event_file_round_trip_skips_a_torn_last_record_and_rejects_corruption(tmp_path: Path) -> None:
    with EventWriter(tmp_path) as writer:
        writer.add_scalar("train/loss", 0.5, 10, walltime=100.0)
        writer.add_scalar("train/loss", 0.25, 20, walltime=101.0)
        writer.add_scalar("episode/return", 42.0, 20, walltime=101.5)
    assert read_scalars(tmp_path) == {"train/loss": [(10, 0.5, 100.0), (20, 0.25, 101.0)], "episode/return": [(20, 42.0, 101.5)]}
    (path,) = tmp_path.glob("events.out.tfevents.*")
    data = path.read_bytes()
    path.write_bytes(data + data[-30:-7])  # a record cut short by a crash: readers stop before it
    assert read_scalars(tmp_path)["train/loss"] == [(10, 0.5, 100.0), (20, 0.25, 101.0)]
    corrupt = bytearray(data)
    corrupt[-6] ^= 0xFF  # inside the last record's data
    path.write_bytes(bytes(corrupt))
    with pytest.raises(ValueError, match="CRC"):
        read_scalars(tmp_path)


def test_tensorboard_reads_the_event_files() -> None:
    pytest.importorskip("tensorboard", reason="tensorboard is not installed (pip install janus-rl[tensorboard])")
    import tempfile

    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    with tempfile.TemporaryDirectory() as folder:
        run = {"wall_s": 2.0, "learning_curve": {"wall_s": [1.0, 2.0], "env_steps": [100, 200], "return": [10.0, 30.0]},
               "train_metrics": {"wall_s": [1.5], "env_steps": [150], "loss": [0.75]}}
        write_scalars(folder, run)
        acc = EventAccumulator(folder)
        acc.Reload()
        assert [(e.step, e.value) for e in acc.Scalars("episode/return_mean20")] == [(100, 10.0), (200, 20.0)]
        assert [(e.step, e.value) for e in acc.Scalars("train/loss")] == [(150, 0.75)]


# ------------------------------------------------------------- the Orchestrator's view of a run
def orchestrator(interval_s: float = 0.0) -> Orchestrator:
    roles = {"trainer": "trainer", "trajectory_manager": "trajectory_manager", "worker-0": "worker", "worker-1": "worker"}
    return Orchestrator("orchestrator", roles, Rates(1, 0.0, 1.0), 100, metrics_interval_s=interval_s)


def test_trainer_metric_sums_become_rows_of_means_with_the_workers_epsilon() -> None:
    orch = orchestrator(interval_s=3600.0)
    orch.on_PongMsg(PongMsg(1, "worker-0", 0.0, {"actor.epsilon": 0.5}))
    orch.on_PongMsg(PongMsg(1, "worker-1", 0.0, {"actor.epsilon": 0.3}))
    orch.on_CountsMsg(CountsMsg("trainer", TrainerCounts(trained=2, metric_updates=2, metric_sums={"loss": 3.0, "q_mean": 1.0})))
    orch.on_CountsMsg(CountsMsg("trainer", TrainerCounts(trained=3, metric_updates=1, metric_sums={"loss": 3.0, "q_mean": 2.0})))
    assert orch.status().train_metrics == []  # within the interval: still accumulating
    orch.finished = True  # a report after the stop closes a row at once
    orch.on_CountsMsg(CountsMsg("trainer", TrainerCounts(trained=4, metric_updates=1, metric_sums={"loss": 2.0, "q_mean": 1.0})))
    (row,) = orch.status().train_metrics
    assert row["updates"] == 4 and row["loss"] == pytest.approx(2.0) and row["q_mean"] == pytest.approx(1.0)
    assert row["epsilon"] == pytest.approx(0.4)  # the workers' latest, averaged
    orch.on_CountsMsg(CountsMsg("trainer", TrainerCounts(trained=4)))  # no update since: no empty row
    assert len(orch.status().train_metrics) == 1


def test_metric_sums_of_an_interrupted_run_become_a_row_at_the_orchestrators_stop() -> None:
    # Ctrl-C: no stop_all; the backend stops the Trainer (its last report) and then the Orchestrator
    orch = orchestrator(interval_s=3600.0)
    orch.on_CountsMsg(CountsMsg("trainer", TrainerCounts(trained=5, metric_updates=5, metric_sums={"loss": 10.0})))
    assert orch.status().train_metrics == []
    orch.on_StopMsg(StopMsg("shutdown"))
    (row,) = orch.status().train_metrics
    assert row["updates"] == 5 and row["loss"] == pytest.approx(2.0)
    orch.on_StopMsg(StopMsg("shutdown"))  # nothing new: no second row
    assert len(orch.status().train_metrics) == 1


def test_a_slow_healthy_run_has_no_stalls_and_a_stuck_one_counts_each_spell_once() -> None:
    """Issue 35 item 9: a stall is a spell in which nothing moved for longer than the run's own
    pace allows, counted once, not every health check that found no new insert or update (a DQN
    run on Pong at ~4 updates/s reported ``stalls: 328``)."""
    orch = orchestrator()
    orch.bind(type("Outbox", (), {"send": lambda self, dest, msg: None})())  # type: ignore[arg-type]
    t0 = time.monotonic()
    orch.last_pong = {n: t0 + 10_000 for n in orch.roles}
    t, inserted, trained = t0, 0, 0
    orch._health(t)  # the first step of a run: nothing to compare with yet
    for i in range(1, 241):  # 2 minutes of checks every 0.5 s; something moves only every 2 s
        t = t0 + 0.5 * i
        if i % 4 == 0:
            inserted, trained = inserted + 32, trained + 8
            orch.on_CountsMsg(CountsMsg("trajectory_manager", ReplayCounts(inserted)))
            orch.on_CountsMsg(CountsMsg("trainer", TrainerCounts(trained)))
        orch._health(t)
    assert orch.stalls == 0  # slow, never stuck (the old count: 180 here)
    for i in range(1, 61):  # then nothing at all moves for 30 s: one stall
        orch._health(t + 0.5 * i)
    assert orch.stalls == 1
    t += 30.0
    moved = PieceCounts(instance=0, env_steps=64, transitions=0, episode_returns=[])
    orch.on_CountsMsg(CountsMsg("worker-0", moved))  # env steps move: not stuck
    orch._health(t + 0.5)
    for i in range(2, 61):
        orch._health(t + 0.5 * i)
    assert orch.stalls == 2  # a second spell, after the pipeline moved again


def test_a_stall_is_judged_against_the_runs_own_pace_and_not_before_anything_moved() -> None:
    from janus.runtime.stalls import STARTUP_STALL_S, StallWatch

    watch = StallWatch()
    watch.check(0.0, (0, 0, 0))
    watch.check(STARTUP_STALL_S - 1, (0, 0, 0))  # processes spawn, environments build
    assert watch.count == 0
    for i in range(1, 20):  # something moves every 5 s: a 12 s pause is within its pace
        watch.check(STARTUP_STALL_S + 5.0 * i, (i, 0, 0))
    watch.check(STARTUP_STALL_S + 5.0 * 19 + 12.0, (19, 0, 0))
    assert watch.count == 0
    watch.check(STARTUP_STALL_S + 5.0 * 19 + 25.0, (19, 0, 0))  # 5x its pace: stuck
    assert watch.count == 1
    excused = StallWatch()
    excused.check(0.0, (0,))
    excused.check(1.0, (1,))
    for i in range(2, 100):  # a checkpoint holds the pipeline on purpose
        excused.check(float(i), (1,), excused=True)
    assert excused.count == 0


def test_episodes_of_one_piece_are_spread_over_its_env_steps() -> None:
    orch = orchestrator()
    orch.on_CountsMsg(CountsMsg("worker-0", PieceCounts(0, env_steps=512, transitions=0, episode_returns=[10.0, 20.0, 30.0, 40.0])))
    orch.on_CountsMsg(CountsMsg("worker-1", PieceCounts(0, env_steps=512, transitions=0, episode_returns=[50.0, 60.0])))
    steps = [s for _, s, _ in orch.curve]
    walls = [t for t, _, _ in orch.curve]
    assert steps == [128, 256, 384, 512, 768, 1024]  # not four points at 512 (the comb of PPO curves)
    assert all(a <= b for a, b in zip(walls, walls[1:]))
    assert [r for _, _, r in orch.curve] == [10.0, 20.0, 30.0, 40.0, 50.0, 60.0]


# ------------------------------------------------------------------- a real run, three backends
def _tiny(algo: str, backend: str, **overrides: Any) -> Any:
    """A run of a few seconds (tests/algorithms/test_rl_runtime.py's; SAC: 512 Pendulum steps, 256 updates)."""
    sys.path.insert(0, str(ROOT / "tests" / "algorithms"))
    try:
        from test_rl_runtime import rl_cfg, tiny
    finally:
        sys.path.pop(0)
    runtime = {"backend": backend, **overrides.pop("runtime", {})}
    if algo == "sac":
        return rl_cfg("sac", 512, workload={"env": "Pendulum-v1"}, algorithm={"learning_starts": 256},
                      runtime=runtime, **overrides)
    return tiny(algo, runtime=runtime, **overrides)


EXPECTED = {
    "dqn": {"loss", "q_mean", "lr", "epsilon", "grad_norm"},
    "ppo": {"policy_loss", "value_loss", "entropy", "approx_kl", "clipfrac", "lr"},
    "sac": {"q_loss", "policy_loss", "q_mean", "entropy", "alpha"},
}


def assert_training_scalars(run: Any, algo: str, config: Any) -> None:
    metrics = run["train_metrics"]
    assert EXPECTED[algo] | {"wall_s", "env_steps", "updates"} <= set(metrics)
    rows = len(metrics["updates"])
    assert rows >= 1 and all(len(column) == rows for column in metrics.values())
    from janus.algorithms.base import algorithm

    goal = algorithm(algo).budget(config).total_updates
    assert metrics["updates"][-1] >= goal  # the last window, up to the goal, is kept at the stop
    assert all(a <= b for a, b in zip(metrics["env_steps"], metrics["env_steps"][1:]))
    assert all(v is not None and v == v for name in EXPECTED[algo] for v in metrics[name])  # no NaN, no gap
    if algo == "dqn":
        assert 0.05 <= min(metrics["epsilon"]) <= max(metrics["epsilon"]) <= 1.0
    elif algo == "ppo":
        assert all(0 <= v <= 1 for v in metrics["clipfrac"]) and all(v > 0 for v in metrics["entropy"])
    else:
        assert all(v > 0 for v in metrics["alpha"])


@pytest.mark.parametrize("algo", ["dqn", "ppo", "sac"])
def test_local_run_carries_training_scalars(algo: str) -> None:
    from janus.runtime.run import run_runtime

    cfg = _tiny(algo, "local")
    assert_training_scalars(run_runtime(cfg, timeout_s=120), algo, cfg)


def test_prioritized_dqn_reports_mean_td_error() -> None:
    from janus.runtime.run import run_runtime

    cfg = _tiny("dqn", "local", algorithm={"prioritized": True})
    run = run_runtime(cfg, timeout_s=120)
    assert_training_scalars(run, "dqn", cfg)
    assert all(v > 0 for v in run["train_metrics"]["td_abs_mean"])


@pytest.mark.parametrize("backend", ["local", "process"])
def test_actor_metrics_reach_every_row_without_waiting_for_a_pong(backend: str) -> None:
    """Workers send their actor metrics (DQN's epsilon) with each piece's counts, so even a run
    that ends before any health ping is answered has them in every row (it was a race before)."""
    from janus.runtime.run import run_runtime

    cfg = _tiny("dqn", backend, runtime={"ping_interval_s": 600.0})
    run = run_runtime(cfg, timeout_s=180)
    epsilon = run["train_metrics"]["epsilon"]
    assert len(epsilon) == len(run["train_metrics"]["updates"]) >= 1
    assert all(0.0 <= e <= 1.0 for e in epsilon)


def test_process_backend_run_carries_training_scalars() -> None:
    from janus.runtime.run import run_runtime

    cfg = _tiny("dqn", "process")
    assert_training_scalars(run_runtime(cfg, timeout_s=180), "dqn", cfg)


@pytest.mark.slow
def test_ray_backend_run_carries_training_scalars() -> None:
    pytest.importorskip("ray")
    import ray

    from janus.runtime.backends.ray_cluster import start_local_ray
    from janus.runtime.run import run_runtime

    started = not ray.is_initialized()
    if started:
        start_local_ray(num_cpus=2)
    cfg = _tiny("dqn", "ray")
    try:
        run = run_runtime(cfg, timeout_s=240)
    finally:
        if started:
            ray.shutdown()
    assert_training_scalars(run, "dqn", cfg)


# ------------------------------------------------------------------- the CLI, as a user runs it
def start_train(out: Path, *flags: str) -> subprocess.Popen[str]:
    """``janus train --algo dqn`` of this checkout, with a budget it does not reach in these tests.
    On local: the files these tests read are written by the learner's process on every backend
    (the process backend's training scalars: test_process_backend_run_carries_training_scalars)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src") + os.pathsep + os.environ.get("PYTHONPATH", "")}
    argv = [sys.executable, "-m", "janus.cli", "train", "--algo", "dqn", "--backend", "local", "--total_env_steps", "1000000",
            "--min_inserts", "256", "--out", str(out), *flags]
    return subprocess.Popen(argv, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def wait_for(proc: subprocess.Popen[str], ready: Callable[[], bool], timeout_s: float = 90.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not ready():
        if proc.poll() is not None:
            pytest.fail(f"janus train ended early (exit {proc.returncode}):\n{proc.stdout.read() if proc.stdout else ''}")
        if time.monotonic() > deadline:
            pytest.fail(f"not ready within {timeout_s:.0f}s")
        time.sleep(0.2)


def interrupt(proc: subprocess.Popen[str]) -> str:
    """Ctrl-C, as a terminal sends it; returns the output after checking the exit code (130)."""
    proc.send_signal(signal.SIGINT)
    out, _ = proc.communicate(timeout=90)
    assert proc.returncode == 130, out
    return out


def _scalars(folder: Path) -> dict[str, list[tuple[int, float, float]]]:
    return read_scalars(folder) if folder.is_dir() else {}


def test_tensorboard_events_appear_while_dqn_trains(tmp_path: Path) -> None:
    proc = start_train(tmp_path, "--tensorboard", "--results_interval_s", "3600")
    try:
        def live() -> bool:
            tags = _scalars(tmp_path / "tensorboard")
            return len(tags.get("train/loss", [])) >= 2 and bool(tags.get("episode/return")) and "train/epsilon" in tags

        wait_for(proc, live)
        assert proc.poll() is None, "the events were read while the run trains"
        assert not (tmp_path / "results.json").exists()  # nothing was written at an end yet
        during = _scalars(tmp_path / "tensorboard")
        assert "run/wall_s" not in during  # the totals come at the end
        interrupt(proc)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    after = _scalars(tmp_path / "tensorboard")
    assert len(after["train/loss"]) >= len(during["train/loss"]) and "run/wall_s" in after
    (run,) = json.loads((tmp_path / "results.json").read_text())["runs"]
    assert [v for _, v, _ in after["episode/return"]] == pytest.approx(run["learning_curve"]["return"])
    assert len(list((tmp_path / "tensorboard").glob("events.out.tfevents.*"))) == 1  # appended, not rewritten


def test_results_are_written_periodically_and_on_sigint(tmp_path: Path) -> None:
    proc = start_train(tmp_path, "--results_interval_s", "1")
    try:
        def periodic() -> bool:
            path = tmp_path / "results.json"
            return path.exists() and bool(json.loads(path.read_text())["runs"][0].get("episodes"))

        wait_for(proc, periodic)
        assert proc.poll() is None, "results.json appeared before the run ended"
        (early,) = json.loads((tmp_path / "results.json").read_text())["runs"]
        assert (tmp_path / "learning_curve.png").exists() and (tmp_path / "results.csv").exists()
        out = interrupt(proc)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert "interrupted after" in out
    (run,) = json.loads((tmp_path / "results.json").read_text())["runs"]
    assert run["episodes"] >= early["episodes"] > 0 and run["wall_s"] >= early["wall_s"]
    # results.json says which it is: a snapshot of a run still going, then the run so far after Ctrl-C
    # (both used to read like a finished run)
    assert early["status"] == "running" and run["status"] == "interrupted"
    assert run["learning_curve"]["return"][:early["episodes"]] == early["learning_curve"]["return"]
    assert set(run["train_metrics"]) >= EXPECTED["dqn"]
    assert (tmp_path / "learning_curve.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    rows = (tmp_path / "results.csv").read_text().splitlines()
    header, values = rows[0].split(","), rows[1].split(",")
    assert float(values[header.index("final_mean_return")]) == pytest.approx(run["final_mean_return"])
    assert int(values[header.index("episodes")]) == run["episodes"]
    assert values[header.index("status")] == "interrupted"


# --------------------------------------------------------------------- LiveRun on its own
def test_live_run_appends_only_new_points_skips_resumed_ones_and_survives_a_failed_save(tmp_path: Path) -> None:
    from janus.harness.reports.live import LiveRun

    saved: list[str] = []

    def save(result: Any) -> None:
        if result == "broken":
            raise OSError("disk full")
        saved.append(result)

    live = LiveRun(save, results_interval_s=0.0, tensorboard_dir=tmp_path, skip_episodes=1, tensorboard_interval_s=0.0,
                   skip_evaluations=1)
    curve = [(0.5, 10, 1.0)]  # an earlier session's episode and evaluation (resumed): logged back then
    evaluations = [{"env_steps": 10, "mean_return": 9.0, "std_return": 1.0, "wall_s": 0.5}]
    rows: list[dict[str, float]] = []
    live(RunStatus(elapsed_s=1.0, curve=list(curve), train_metrics=rows, evaluations=list(evaluations)), lambda: "first")
    curve += [(1.5, 20, 2.0), (2.0, 30, 3.0)]
    rows.append({"wall_s": 2.0, "env_steps": 30, "updates": 5, "loss": 0.5})
    evaluations.append({"env_steps": 30, "mean_return": 50.0, "std_return": 2.0, "wall_s": 2.0})
    live(RunStatus(elapsed_s=2.0, curve=list(curve), train_metrics=list(rows), evaluations=list(evaluations)), lambda: "broken")
    live(RunStatus(elapsed_s=2.1, curve=list(curve), train_metrics=list(rows), evaluations=list(evaluations)), lambda: "third")
    assert saved == ["first", "third"]  # a failed save is reported and tried again, the run goes on
    live.finish({"wall_s": 2.5, "learning_curve": {"wall_s": [t for t, _, _ in curve], "env_steps": [s for _, s, _ in curve],
                                                   "return": [r for _, _, r in curve]},
                 "train_metrics": {"wall_s": [2.0], "env_steps": [30], "updates": [5], "loss": [0.5]},
                 "evaluations": evaluations})
    scalars = read_scalars(tmp_path)
    assert [(s, v) for s, v, _ in scalars["episode/return"]] == [(20, 2.0), (30, 3.0)]  # each once, none resumed
    assert [(s, v) for s, v, _ in scalars["episode/return_mean20"]] == [(20, 1.5), (30, 2.0)]  # the window spans sessions
    assert [(s, v) for s, v, _ in scalars["train/loss"]] == [(30, 0.5)]
    assert [(s, v) for s, v, _ in scalars["eval/mean_return"]] == [(30, 50.0)]
    assert [v for _, v, _ in scalars["run/wall_s"]] == [2.5]


def test_live_run_writes_nothing_until_ready_then_catches_up(tmp_path: Path) -> None:
    """A resumed run's live logs wait for its first commit (``ready``), then write what they missed."""
    from janus.harness.reports.live import LiveRun

    saves: list[Any] = []
    gate = {"open": False}
    live = LiveRun(saves.append, results_interval_s=0.0, tensorboard_dir=tmp_path / "tb", tensorboard_interval_s=0.0,
                   ready=lambda: gate["open"])
    status = RunStatus(elapsed_s=1.0, curve=[(0.5, 100, 10.0), (0.9, 200, 20.0)], train_metrics=[], evaluations=[])
    for _ in range(3):
        live(status, lambda: "so far")
    assert saves == [] and not (tmp_path / "tb").exists(), "nothing, not even an empty event file"
    gate["open"] = True
    live(status, lambda: "so far")
    live.close()
    assert saves == ["so far"]
    assert sorted(v for _, v, _ in read_scalars(tmp_path / "tb")["episode/return"]) == [10.0, 20.0]
