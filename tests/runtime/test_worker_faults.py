"""Worker errors: reported as they happen, restarted, and a crash loop fails the run with the error.

Before, a worker whose environment raised every time was restarted every few seconds for the
whole run, which then ended "successfully" with no word of the error.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from janus.config import JanusConfig, RunConfig, RuntimeConfig, SyntheticConfig, WorkloadConfig, resolve
from janus.runtime import wiring
from janus.runtime.faults import WorkerFaults, last_line
from janus.runtime.plan import RunPlan
from janus.runtime.run import RunFailed, run_runtime

TRACEBACK = 'Traceback (most recent call last):\n  File "env.py", line 3, in step\nValueError: broken env on purpose\n'


# ---- the crash-loop rule ---------------------------------------------------------------------------
def test_three_quick_errors_in_a_row_are_a_crash_loop() -> None:
    faults = WorkerFaults(limit=3, window_s=60.0)
    assert faults.record("w0", TRACEBACK, lived_s=1.0, at_s=1.0) is None
    assert faults.record("w1", TRACEBACK, lived_s=1.0, at_s=2.0) is None  # another worker: its own count
    assert faults.record("w0", TRACEBACK, lived_s=2.0, at_s=3.0) is None
    verdict = faults.record("w0", TRACEBACK, lived_s=3.0, at_s=6.0)
    assert verdict is not None and "'w0' raised an error 3 times in a row" in verdict
    assert verdict.endswith("ValueError: broken env on purpose")
    assert faults.total == 4 and [e["in_a_row"] for e in faults.errors] == [1, 1, 2, 3]
    assert faults.errors[0] == {"worker": "w0", "at_s": 1.0, "lived_s": 1.0, "error": "ValueError: broken env on purpose",
                                "in_a_row": 1, "stopped_run": False}


def test_a_long_healthy_run_or_a_kill_starts_the_count_again() -> None:
    faults = WorkerFaults(limit=3, window_s=60.0)
    for lived in (1.0, 1.0, 61.0, 1.0):  # the error after 61 s of work is the first of a new series
        assert faults.record("w0", TRACEBACK, lived, 0.0) is None
    assert faults.in_a_row["w0"] == 2
    assert faults.record("w0", None, 1.0, 0.0) is None  # hung, or crashed on purpose by the local kill(): no error, the series ends
    assert faults.record("w0", TRACEBACK, 1.0, 0.0) is None and faults.in_a_row["w0"] == 1
    assert faults.total == 5  # a kill is no error


def test_a_bad_setting_stops_the_run_at_its_first_error() -> None:
    """A ConfigError (reported by its message, as error_text writes it) comes back on every restart."""
    faults = WorkerFaults(limit=3, window_s=60.0)
    assert faults.record("w0", TRACEBACK, lived_s=1.0, at_s=1.0) is None
    verdict = faults.record("w0", "PlacementUnavailableError: placement='cuda' needs CUDA", lived_s=0.1, at_s=2.0)
    assert verdict is not None and "'w0' stopped on a setting, which restarting it cannot fix" in verdict
    assert verdict.endswith("PlacementUnavailableError: placement='cuda' needs CUDA")
    assert [e["stopped_run"] for e in faults.errors] == [False, True]
    # Only the message form counts: a traceback that mentions ConfigError is an ordinary error.
    assert WorkerFaults().record("w0", "Traceback (most recent call last):\nConfigError: x", 1.0, 1.0) is None
    assert WorkerFaults(limit=0).record("w0", "ConfigError: invalid --env", 0.1, 0.1) is None


def test_limit_zero_restarts_forever_and_the_summary_keeps_the_newest() -> None:
    faults = WorkerFaults(limit=0)
    for i in range(50):
        assert faults.record("w0", f"RuntimeError: attempt {i}", 0.5, float(i)) is None
    summary = faults.summary()
    assert summary["total"] == 50 and len(summary["recent"]) == 20
    assert summary["recent"][-1]["error"] == "RuntimeError: attempt 49"
    assert summary["first_traceback"] == "RuntimeError: attempt 0"
    assert last_line("") == "an error without a message"


# ---- through each backend ----------------------------------------------------------------------------
class RaisingWorker:
    """Wraps a worker factory: the worker raises on its third step, every instance (picklable)."""

    def __init__(self, factory: Any) -> None:
        self.factory = factory

    def __call__(self) -> Any:
        worker = self.factory()
        step, calls = worker.step, [0]

        def failing() -> bool:
            calls[0] += 1
            if calls[0] == 3:
                self.fail()
            return step()

        worker.step = failing
        return worker

    def fail(self) -> None:
        raise ValueError("broken env on purpose")


def backend_wrapping(cfg: RunConfig, wrap: Callable[[Any], Any], role: str = "worker") -> Any:
    """``cfg``'s backend, with the factory of every component of ``role`` wrapped by ``wrap``
    (to make it fail)."""
    backend = wiring.make_backend(cfg)
    add = backend.add
    backend.add = lambda name, r, factory, node="node-0": add(  # type: ignore[method-assign]
        name, r, wrap(factory) if r == role else factory, node)
    return backend


def tiny(backend: str) -> RunConfig:
    """Pings time out after 30 s, longer than these tests' runs may take: a worker's error must be
    acted on when the backend reports it, not when its pings time out."""
    pong_timeout_s = 30.0
    return resolve(RunConfig(
        janus=JanusConfig(overlap_collect=1, overlap_select=1, g_collect=2, g_select=2, batch_size=64,
                          buffer_capacity=5000),
        workload=WorkloadConfig(num_actors=1, envs_per_actor=4, rollout_length=16, hidden_size=32, iterations=1000,
                                updates_per_iteration=1),
        synthetic=SyntheticConfig(obs_shape=(32,), env_step_ms=0.2),
        runtime=RuntimeConfig(backend=backend, ping_interval_s=0.1, pong_timeout_s=pong_timeout_s, samples_per_insert=2.0,
                              min_inserts=128),  # the learner waits for inserts: it cannot finish alone
    ))


@pytest.mark.parametrize("backend_name", ["local", "process", pytest.param("ray", marks=pytest.mark.slow)])
def test_a_worker_that_always_raises_fails_the_run_with_its_error(backend_name: str, capsys: pytest.CaptureFixture[str],
                                                                  request: pytest.FixtureRequest) -> None:
    if backend_name == "ray":
        ray = pytest.importorskip("ray")
        request.getfixturevalue("ray_session")
        ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])  # Ray actors cannot import tests/
    cfg = tiny(backend_name)
    backend = backend_wrapping(cfg, RaisingWorker)
    with pytest.raises(RunFailed) as failed:
        run_runtime(cfg, backend=backend, timeout_s=25 if backend_name != "ray" else 60)
    message = str(failed.value)
    assert "worker 'worker-0' raised an error 3 times in a row" in message, message
    assert "ValueError: broken env on purpose" in message and "Traceback" in message
    err = capsys.readouterr().err
    assert "janus: a worker raised an error; it is restarted" in err and "Traceback" in err
    assert err.count("janus: worker 'worker-0' raised ValueError: broken env on purpose") >= 2, err[-3000:]


def test_results_record_the_errors_of_a_run_that_survived_them(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """One error, then a healthy instance: the run ends well, and results.json says what happened."""

    class OnceRaising(RaisingWorker):
        def __init__(self, factory: Any) -> None:
            super().__init__(factory)
            self.instances = 0

        def __call__(self) -> Any:
            self.instances += 1
            return super().__call__() if self.instances == 1 else self.factory()

    cfg = tiny("local")
    cfg = resolve(RunConfig(janus=cfg.janus, workload=WorkloadConfig(**{**cfg.workload.__dict__, "iterations": 12}),
                            runtime=cfg.runtime, synthetic=cfg.synthetic))
    backend = backend_wrapping(cfg, OnceRaising)
    result = run_runtime(cfg, backend=backend, timeout_s=120)
    errors = result["runtime"]["worker_errors"]
    assert [(e["worker"], e["error"], e["in_a_row"]) for e in errors] == [
        ("worker-0", "ValueError: broken env on purpose", 1)]
    assert result["runtime"]["worker_restarts"] == {"worker-0": 1} and result["runtime"]["worker_errors_total"] == 1
    from janus.harness.outputs import runtime_summary

    assert "worker errors: 1 (the last: ValueError: broken env on purpose)" in runtime_summary(result["runtime"])
    assert "janus: worker 'worker-0' raised ValueError: broken env on purpose" in capsys.readouterr().err


def test_a_worker_process_that_dies_without_an_error_is_reported_by_how_it_died() -> None:
    """A segfault in native code or the OOM killer leaves no traceback; the exit code says what happened."""
    from janus.runtime.backends.worker_process import died

    assert died(None) is None and died(0) is None  # still running, or a clean exit: no error
    assert died(-11) == "WorkerDied: its process died of SIGSEGV (exit code -11) without reporting an error"
    assert died(-9).startswith("WorkerDied: its process died of SIGKILL")
    assert died(3) == "WorkerDied: its process exited (exit code 3) without reporting an error"


class SegfaultingWorker(RaisingWorker):
    """The worker's process dies of SIGSEGV on its third step (as a crash in native code would)."""

    def fail(self) -> None:
        import os
        import signal

        os.kill(os.getpid(), signal.SIGSEGV)


def test_a_worker_process_that_keeps_crashing_fails_the_run(capsys: pytest.CaptureFixture[str]) -> None:
    cfg = tiny("process")
    backend = backend_wrapping(cfg, SegfaultingWorker)
    with pytest.raises(RunFailed, match=r"raised an error 3 times in a row(.|\n)*died of SIGSEGV \(exit code -11\)"):
        run_runtime(cfg, backend=backend, timeout_s=25)  # each death is seen at once, not 30 s of pings later
    assert "janus: worker 'worker-0' raised WorkerDied: its process died of SIGSEGV" in capsys.readouterr().err


class SlowlyDyingWorker(RaisingWorker):
    """Its pipes close a moment before its process ends (a process tearing down: the learner sees
    EOF before there is an exit code to read). The worker's own side then finds its pipe gone and
    exits with code 3."""

    def fail(self) -> None:
        import os
        import time

        os.closerange(3, 65536)  # every pipe to the learner: EOF there now
        time.sleep(0.5)


def test_a_worker_whose_pipe_closes_before_it_dies_still_counts_how_it_died(capsys: pytest.CaptureFixture[str]) -> None:
    """Read at once, its exit code was not there yet: the death counted as a hang (no error), so a
    worker crashing in native code every time was restarted for the whole run."""
    cfg = tiny("process")
    backend = backend_wrapping(cfg, SlowlyDyingWorker)
    with pytest.raises(RunFailed, match=r"raised an error 3 times in a row(.|\n)*WorkerDied: its process exited \(exit code 3\)"):
        run_runtime(cfg, backend=backend, timeout_s=25)


class MisconfiguredWorker(RaisingWorker):
    """Every instance finds a bad setting on its third step (say, an environment option it rejects)."""

    def fail(self) -> None:
        from janus.errors import ConfigError

        raise ConfigError("invalid env option 'frameskip': got -1; accepted: a positive integer")


@pytest.mark.parametrize("backend_name", ["local", "process", pytest.param("ray", marks=pytest.mark.slow)])
def test_a_worker_that_stops_on_a_bad_setting_fails_the_run_at_once(backend_name: str, capsys: pytest.CaptureFixture[str],
                                                                    request: pytest.FixtureRequest) -> None:
    """Before, a bad setting was restarted like a transient fault, three times (6-7 s on the process
    backend) and reported three times before the run stopped."""
    if backend_name == "ray":
        ray = pytest.importorskip("ray")
        request.getfixturevalue("ray_session")
        ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    cfg = tiny(backend_name)
    with pytest.raises(RunFailed) as failed:
        run_runtime(cfg, backend=backend_wrapping(cfg, MisconfiguredWorker), timeout_s=25 if backend_name != "ray" else 60)
    message = str(failed.value)
    assert "worker 'worker-0' stopped on a setting, which restarting it cannot fix" in message, message
    assert message.rstrip().endswith("ConfigError: invalid env option 'frameskip': got -1; accepted: a positive integer")
    err = capsys.readouterr().err
    assert "it is restarted" not in err and "restarted it" not in err, err[-3000:]


class RebuildFailingWorker(RaisingWorker):
    """The first instance raises on its third step; every later one cannot even be built (say, the
    port its environment server needs is still taken). Counted in a file: process workers are built
    in processes of their own."""

    def __init__(self, factory: Any, marker: Path) -> None:
        super().__init__(factory)
        self.marker = marker

    def __call__(self) -> Any:
        if self.marker.exists():
            raise OSError("the environment server's port is taken")
        self.marker.touch()
        return super().__call__()


@pytest.mark.parametrize("backend_name", ["local", "process", pytest.param("ray", marks=pytest.mark.slow)])
def test_a_worker_that_cannot_be_rebuilt_is_a_crash_loop_with_its_error(backend_name: str, tmp_path: Path,
                                                                        capsys: pytest.CaptureFixture[str],
                                                                        request: pytest.FixtureRequest) -> None:
    """Before, a failing rebuild crashed the Orchestrator on the local backend; on the process
    and Ray backends it went unseen until the start timeout (120 s), so the run died of the stall
    timeout with a message blaming the sampling threshold."""
    if backend_name == "ray":
        ray = pytest.importorskip("ray")
        request.getfixturevalue("ray_session")
        ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    cfg = tiny(backend_name)
    backend = backend_wrapping(cfg, lambda factory: RebuildFailingWorker(factory, tmp_path / "built"))
    with pytest.raises(RunFailed) as failed:
        run_runtime(cfg, backend=backend, timeout_s=25 if backend_name != "ray" else 60)
    message = str(failed.value)
    assert "worker 'worker-0' raised an error 3 times in a row" in message, message
    assert message.rstrip().endswith("OSError: the environment server's port is taken"), message
    err = capsys.readouterr().err
    assert "raised ValueError: broken env on purpose (1 in a row)" in err, err[-3000:]
    assert "raised OSError: the environment server's port is taken (2 in a row)" in err, err[-3000:]


def test_a_failed_worker_is_replaced_at_once_and_a_late_notice_changes_nothing() -> None:
    """The backend's WorkerDownMsg names the instance that failed: one about an instance already
    replaced (its pings timed out first, say), or one that comes once the run is stopping, is ignored."""
    from janus.runtime.messages import StartMsg, WorkerDownMsg
    from janus.runtime.orchestrator import Orchestrator

    sent: list[tuple[str, Any]] = []

    class Outbox:
        def send(self, dest: str, msg: Any) -> None:
            sent.append((dest, msg))

    replaced: list[str] = []

    def restart(name: str) -> str:
        replaced.append(name)
        return TRACEBACK

    roles = {"trainer": "trainer", "tm": "trajectory_manager", "worker-0": "worker", "worker-1": "worker"}
    orch = Orchestrator("orchestrator", roles, RunPlan.of(tiny("local")).rates, total_updates=100, restart=restart,
                        pong_timeout_s=3600.0)
    orch.bind(Outbox())  # type: ignore[arg-type]
    orch.receive(WorkerDownMsg("worker-0", 0))
    assert replaced == ["worker-0"] and orch.restarts == {"worker-0": 1}
    assert ("worker-0", StartMsg()) in sent and orch.faults.total == 1
    orch.receive(WorkerDownMsg("worker-0", 0))  # the replaced instance again: nothing happens
    orch.receive(WorkerDownMsg("trainer", 0))  # not a worker: the backend reports those as fatal
    assert replaced == ["worker-0"]
    orch.receive(WorkerDownMsg("worker-0", 1))  # the new instance failed too
    assert replaced == ["worker-0", "worker-0"] and orch.faults.in_a_row["worker-0"] == 2
    orch.stop_all("goal reached")
    orch.receive(WorkerDownMsg("worker-1", 0))  # a worker failing while the run stops stays stopped
    assert replaced == ["worker-0", "worker-0"] and orch.failure is None
