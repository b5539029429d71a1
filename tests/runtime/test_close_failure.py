"""A component whose ``close()`` raises when the run stops is not silent: the run fails naming the
component and the error, after everything else was still closed (no thread, worker process or
shared-memory segment is left), on every backend, in the learner's process and in a worker's."""
from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

import pytest
from tests.runtime.test_process_backend import segments, worker_processes
from tests.runtime.test_startup_failure import run_threads, tiny
from tests.runtime.test_worker_faults import backend_wrapping

from janus.algorithms.base import algorithm
from janus.config import from_dict, resolve
from janus.runtime.checkpoints import FINAL, read_run_state
from janus.runtime.run import RunFailed, run_runtime


class ClosingBadly:
    """Wraps a component factory: the component closes as usual, then raises (picklable, so a
    worker process builds it too)."""

    def __init__(self, factory: Any) -> None:
        self.factory = factory

    def __call__(self) -> Any:
        component = self.factory()
        close = component.close

        def failing_close() -> None:
            close()
            raise RuntimeError(f"{component.name} cannot close, on purpose")

        component.close = failing_close
        return component


@pytest.mark.parametrize("role,name", [("trajectory_manager", "trajectory_manager"), ("worker", "worker-1")])
@pytest.mark.parametrize("backend_name,overlap", [("local", 1), ("local", 0), ("process", 1),
                                                   pytest.param("ray", 1, marks=pytest.mark.slow)],
                         ids=["local", "local-serial", "process", "ray"])
def test_a_component_whose_close_raises_fails_the_run_by_name(backend_name: str, overlap: int, role: str, name: str,
                                                              request: pytest.FixtureRequest) -> None:
    if backend_name == "ray":  # every component in an actor process of its own
        ray = pytest.importorskip("ray")
        request.getfixturevalue("ray_session")
        ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])  # Ray actors cannot import tests/
    before_threads, before_segments = run_threads(), segments()
    cfg = tiny(backend_name, overlap)
    with pytest.raises(RunFailed) as failed:
        run_runtime(cfg, backend=backend_wrapping(cfg, ClosingBadly, role), timeout_s=60)
    message = str(failed.value)
    assert "did not shut down cleanly" in message and "close() raised" in message
    assert f"{name} (closing it failed: RuntimeError: {name} cannot close, on purpose)" in message
    if role == "worker":  # both workers' close raised: both are named
        assert "worker-0 (closing it failed" in message
    deadline = time.monotonic() + 5
    while run_threads() != before_threads and time.monotonic() < deadline:
        time.sleep(0.05)
    assert run_threads() == before_threads, "the buffer's threads were not stopped by the close that ran"
    assert segments() == before_segments and not worker_processes()


def test_the_final_checkpoint_is_committed_before_a_close_failure_is_reported(tmp_path: Path) -> None:
    """The run's work is kept: the failure is found once every component stopped and staged its state."""
    cfg = resolve(from_dict(
        {"workload": {"env": "CartPole-v1", "num_actors": 1, "envs_per_actor": 4, "rollout_length": 8, "total_env_steps": 512},
         "batch_size": 32, "algorithm": {"learning_starts": 128},
         "runtime": {"backend": "local", "checkpoint_dir": str(tmp_path / "checkpoint")}},
        base=from_dict(algorithm("dqn").preset)))
    with pytest.raises(RunFailed, match=r"trajectory_manager \(closing it failed: RuntimeError"):
        run_runtime(cfg, backend=backend_wrapping(cfg, ClosingBadly, "trajectory_manager"), timeout_s=120)
    state = read_run_state(tmp_path / "checkpoint")
    assert state["tag"] == FINAL and state["env_steps"] == 512, state
    assert state["trained"] == algorithm("dqn").budget(cfg).total_updates


def test_an_interrupted_run_that_cannot_close_still_hands_back_its_results(capsys: pytest.CaptureFixture[str]) -> None:
    """Ctrl-C: the caller (the CLI writes results.json from it) gets the run so far, and the close
    failure is printed rather than put in the interrupt's place."""
    cfg = tiny("local", 1)
    cfg = resolve(from_dict({"workload": {"iterations": 1000}}, base=cfg))  # runs until interrupted
    backend = backend_wrapping(cfg, ClosingBadly, "trajectory_manager")
    status, polls = backend.orchestrator_status, [0]

    def interrupted_after_a_while() -> Any:
        polls[0] += 1
        if polls[0] == 10:  # the driver's loop polls every 50 ms: Ctrl-C half a second in
            raise KeyboardInterrupt
        return status()

    backend.orchestrator_status = interrupted_after_a_while  # type: ignore[method-assign]
    with pytest.raises(KeyboardInterrupt) as interrupt:
        run_runtime(cfg, backend=backend, timeout_s=60)
    result = interrupt.value.partial_result  # type: ignore[attr-defined]
    assert result["counts"]["updates"] > 0
    assert "trajectory_manager (closing it failed: RuntimeError" in capsys.readouterr().err
