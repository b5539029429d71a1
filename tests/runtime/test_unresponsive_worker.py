"""A worker replaced for not answering pings is announced while the run goes on (issue 35 item 9).

Before, a worker that raised was announced on stderr, but one replaced after SIGSTOP (a stopped or
hung process: no error to report) never was: the run went on in silence.
"""

from __future__ import annotations

import os
import signal
import time
from typing import Any

import pytest

from janus.config import JanusConfig, RunConfig, RuntimeConfig, SyntheticConfig, WorkloadConfig, resolve
from janus.runtime.backends.process import ProcessBackend
from janus.runtime.faults import WorkerFaults
from janus.runtime.orchestrator import Orchestrator
from janus.runtime.run import report_worker_errors, run_runtime
from janus.runtime.stalls import Rates
from janus.runtime.status import RunStatus


def test_a_replacement_for_silence_is_a_notice_and_no_error(capsys: pytest.CaptureFixture[str]) -> None:
    faults = WorkerFaults()
    # hung: no error, but a fault of the crash-loop series (issue 46: an env that always hangs stops the run)
    assert faults.record_unresponsive("worker-1", silent_s=5.2, lived_s=3.0, at_s=4.0) is None
    shown = report_worker_errors(faults.summary(), 0)
    assert shown == 1 and faults.total == 0 and faults.in_a_row["worker-1"] == 1
    err = capsys.readouterr().err
    assert "janus: worker 'worker-1' did not answer a ping for 5.2s (a stopped or hung process); replaced it" in err
    assert "Traceback" not in err
    faults.record("worker-0", "Traceback ...\nValueError: boom", lived_s=1.0, at_s=5.0)
    assert report_worker_errors(faults.summary(), shown) == 2  # only the new one, with the first traceback
    err = capsys.readouterr().err
    assert "did not answer" not in err and "janus: worker 'worker-0' raised ValueError: boom" in err
    assert "Its traceback:\nTraceback ...\nValueError: boom" in err


def test_the_orchestrator_records_a_worker_replaced_for_silence(capsys: pytest.CaptureFixture[str]) -> None:
    roles = {"trainer": "trainer", "trajectory_manager": "trajectory_manager", "worker-0": "worker", "worker-1": "worker"}
    replaced: list[str] = []
    orch = Orchestrator("orchestrator", roles, Rates(1, 0.0, 1.0), 100,
                        restart=lambda name: replaced.append(name),  # returns None: it hung, no error
                        pong_timeout_s=2.0)
    orch.bind(type("Outbox", (), {"send": lambda self, dest, msg: None})())  # type: ignore[arg-type]
    t0 = time.monotonic()
    orch.last_pong = {n: t0 + 100 for n in roles}
    orch.last_pong["worker-1"] = t0 - 3.0  # silent for 3 s
    orch._health(t0)
    assert replaced == ["worker-1"] and orch.restarts == {"worker-1": 1}
    faults = orch.status().worker_errors
    assert faults["total"] == 0 and faults["unresponsive_total"] == 1
    assert report_worker_errors(faults, 0) == 1
    assert "janus: worker 'worker-1' did not answer a ping for 3.0s" in capsys.readouterr().err


@pytest.mark.slow  # ~20 s on a loaded 2-core host; the fast test above covers the Orchestrator's side
def test_a_sigstopped_worker_process_is_announced_while_the_run_goes_on(capsys: pytest.CaptureFixture[str]) -> None:
    cfg = resolve(RunConfig(
        janus=JanusConfig(overlap_collect=1, overlap_select=1, g_collect=2, g_select=2, batch_size=64, buffer_capacity=5000),
        workload=WorkloadConfig(num_actors=2, envs_per_actor=4, rollout_length=16, hidden_size=16, iterations=150,
                                updates_per_iteration=1),
        synthetic=SyntheticConfig(obs_shape=(16,), env_step_ms=2.0),
        runtime=RuntimeConfig(backend="process", ping_interval_s=0.1, pong_timeout_s=1.5, samples_per_insert=1.0,
                              min_inserts=128),  # paced: the learner waits for inserts, the stopped worker holds credit
    ))
    backend = ProcessBackend(cfg)
    stopped: list[int] = []
    seen: dict[str, Any] = {}
    err: list[str] = []

    def observer(status: RunStatus, _: Any) -> None:
        if not stopped and status.inserted > 0:
            stopped.append(backend.worker_pids()["worker-1"])
            os.kill(stopped[0], signal.SIGSTOP)
            return
        err.append(capsys.readouterr().err)
        if "announced" not in seen and "did not answer a ping" in "".join(err):
            seen["announced"] = (status.finished, status.trained)
            # hold the run until it is seen working on (the replacement spawns in a few seconds)
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and backend.orchestrator_status().trained == status.trained:
                time.sleep(0.05)

    try:
        result = run_runtime(cfg, backend=backend, timeout_s=180, observer=observer)
    finally:
        if stopped:
            try:
                os.kill(stopped[0], signal.SIGKILL)  # whatever happened, leave no stopped process behind
            except ProcessLookupError:
                pass
    err.append(capsys.readouterr().err)
    assert stopped and "announced" in seen, ("".join(err)[-2000:], result["runtime"]["worker_restarts"], result["wall_s"])
    finished, trained = seen["announced"]
    assert not finished and trained < result["counts"]["updates"]  # announced while the run went on
    assert "janus: worker 'worker-1' did not answer a ping for " in "".join(err)
    assert result["runtime"]["worker_restarts"] == {"worker-1": 1}
    assert result["runtime"]["worker_errors_total"] == 0  # a stopped process raised no error
