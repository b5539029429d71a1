"""A run whose components cannot all be built stops what was built: no thread of the run, no
worker process and no shared-memory segment outlives the error (every backend that builds
components in this process)."""
from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from tests.runtime.test_process_backend import segments, worker_processes

import janus.runtime.wiring as wiring
from janus.config import JanusConfig, RunConfig, RuntimeConfig, SyntheticConfig, WorkloadConfig, resolve
from janus.runtime.run import run_runtime


def tiny(backend: str, overlap: int) -> RunConfig:
    return resolve(RunConfig(
        janus=JanusConfig(is_on_policy=False, overlap_collect=overlap, overlap_select=overlap, g_collect=2, g_select=2,
                          batch_size=64, buffer_capacity=5000),
        workload=WorkloadConfig(num_actors=2, envs_per_actor=4, rollout_length=16, hidden_size=32, iterations=4,
                                updates_per_iteration=2),
        synthetic=SyntheticConfig(obs_shape=(32,), env_step_ms=0.2),
        runtime=RuntimeConfig(backend=backend, ping_interval_s=0.1, pong_timeout_s=2.0),
    ))


def run_threads() -> list[str]:
    """Threads of a run: component hosts, the serial scheduler, a JanusBuffer's operators."""
    return [t.name for t in threading.enumerate() if t.name.startswith(("host-", "janus-", "process-"))]


# Built in this order (runtime.plan.layout): the Trainer (which builds the buffer it shares with the
# TrajectoryManager, then its learner), the TrajectoryManager, the proxies, the workers, the
# Orchestrator. Each case fails one later than the last.
FAILING = {
    "buffer": ("make_buffer", ValueError),  # nothing of this process is built yet (process: workers spawned)
    "learner": ("make_learner", ValueError),  # the shared buffer is built, nothing holds it yet
    "proxy": ("new_proxy", ValueError),  # the Trainer and the TrajectoryManager (its buffer's threads) are built
    "orchestrator": ("new_orchestrator", ValueError),  # every other component is built
    "interrupt": ("new_orchestrator", KeyboardInterrupt),  # Ctrl-C while the run is being built
}


@pytest.mark.parametrize("what", list(FAILING))
@pytest.mark.parametrize("backend,overlap", [("local", 1), ("local", 0), ("process", 1)],
                         ids=["local", "local-serial", "process"])
def test_a_component_that_cannot_be_built_leaves_nothing_of_the_run(
        monkeypatch: pytest.MonkeyPatch, backend: str, overlap: int, what: str) -> None:
    before_threads, before_segments = run_threads(), segments()

    factory, error = FAILING[what]

    def broken(*args: Any, **kwargs: Any) -> Any:
        raise error(f"{what} cannot be built on purpose")

    monkeypatch.setattr(wiring, factory, broken)
    with pytest.raises(error, match=f"{what} cannot be built on purpose"):
        run_runtime(tiny(backend, overlap), timeout_s=60)
    deadline = time.monotonic() + 5  # a thread that was told to stop may take a moment to exit
    while run_threads() != before_threads and time.monotonic() < deadline:
        time.sleep(0.05)
    assert run_threads() == before_threads, "a thread of the failed run is still running"
    assert segments() == before_segments and not worker_processes()
