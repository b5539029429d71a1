"""A worker hung in ``env.step`` is abandoned, not joined, and one that hangs every time is a crash
loop (issue 46 item 1).

Before, on the ``local`` backend a transient hang lost the whole run: the hung worker was replaced
and training reached its budget, then the shutdown joined the hung thread until its deadline ran
out, the data path's stages had no time left to stop, and the run failed ("did not shut down
cleanly", exit 2 or SIGABRT) with no results.json and no final commit. An env that hung every time
was replaced every few seconds, without end, each replacement leaving a hung thread.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from janus.runtime.backends.local import LocalBackend
from janus.runtime.component import Component
from janus.runtime.faults import WorkerFaults
from janus.runtime.messages import StartMsg

REPO = Path(__file__).resolve().parents[2]

HANG_ENVS = '''
import os, threading
import gymnasium as gym
import numpy as np

class Hanging(gym.Env):
    """Episodes of 20 steps; its step number ``at`` never returns: in the first env of the run to
    get there (``once``: a marker file says it happened) or in every env (``always``)."""

    observation_space = gym.spaces.Box(-1.0, 1.0, (4,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def __init__(self, always=False, at=40, in_reset=False, in_evaluation=False):
        self.always, self.at, self.in_reset, self.steps, self.t = always, at, in_reset, 0, 0
        self.in_evaluation = in_evaluation  # only the evaluation's env hangs (and only its steps)

    def hang(self):
        marker = os.environ["HANG_MARKER"]
        if self.always:
            open(marker, "a").close()
            threading.Event().wait()  # never returns
        try:  # once: the first env to create the marker hangs (O_EXCL: two workers never both do)
            os.close(os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        except FileExistsError:
            return
        threading.Event().wait()  # never returns

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        if self.in_reset:
            self.hang()
        self.t = 0
        return np.zeros(4, np.float32), {}

    def step(self, action):
        self.steps += 1
        self.t += 1
        in_evaluation = threading.current_thread().name.startswith("evaluator")
        if self.steps == self.at and in_evaluation == self.in_evaluation:
            self.hang()
        return np.full(4, 0.1 * float(action), np.float32), 1.0, self.t >= 20, False, {}

gym.register("HangsOnce-v0", entry_point=Hanging)
gym.register("HangsAlways-v0", entry_point=Hanging, kwargs={"always": True})
gym.register("HangsInResetAlways-v0", entry_point=Hanging, kwargs={"always": True, "in_reset": True})
gym.register("HangsInEvaluation-v0", entry_point=Hanging, kwargs={"in_evaluation": True, "at": 5})
'''


def train(tmp_path: Path, env_id: str, backend: str, steps: int, *extra: str) -> subprocess.CompletedProcess[str]:
    """``janus train`` of DQN on a hanging env (its module in ``tmp_path``), in a subprocess."""
    (tmp_path / "hang_envs.py").write_text(HANG_ENVS, encoding="utf-8")
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": os.pathsep.join([str(tmp_path), str(REPO / "src")]),
           "HANG_MARKER": str(tmp_path / "hung")}
    argv = [sys.executable, "-m", "janus.cli", "train", "--algo", "dqn", "--env", f"hang_envs:{env_id}",
            "--backend", backend, "--num_actors", "2", "--total_env_steps", str(steps), "--learning_starts", "200",
            "--pong_timeout_s", "1.5", "--seed", "0", "--out", str(tmp_path / "run"), *extra]
    return subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=240)


@pytest.mark.parametrize("backend", ["local", "process"])
def test_a_worker_that_hangs_once_leaves_a_finished_run_with_its_results(tmp_path: Path, backend: str) -> None:
    done = train(tmp_path, "HangsOnce-v0", backend, 3000)
    assert done.returncode == 0, done.stderr[-3000:]  # not 2 ("did not shut down cleanly"), not 134 (SIGABRT)
    assert (tmp_path / "hung").exists(), "the env hung"
    run = json.loads((tmp_path / "run" / "results.json").read_text())["runs"][0]
    assert run["status"] == "finished" and run["counts"]["env_steps"] >= 3000
    state = json.loads((tmp_path / "run" / "checkpoint" / "run_state.json").read_text())  # the final commit
    assert state["env_steps"] == run["counts"]["env_steps"] and state["trained"] == run["counts"]["updates"]
    abandoned = run["runtime"]["workers_abandoned"]
    if backend == "local":  # a thread cannot be killed: left running, and said so in one line
        assert len(abandoned) == 1, (abandoned, done.stderr[-3000:])
        assert done.stderr.count("janus: abandoned 1 thread(s) that did not stop") == 1
    else:  # its process is killed
        assert abandoned == []
    assert "Traceback" not in done.stderr and "did not shut down cleanly" not in done.stderr


@pytest.mark.parametrize("env_id", ["HangsAlways-v0", "HangsInResetAlways-v0"])
def test_a_worker_that_always_hangs_stops_the_run_after_the_crash_loop_limit(tmp_path: Path, env_id: str) -> None:
    """In reset too: a restarted worker whose environment hangs as it starts was given the start
    timeout (120 s, for a process to spawn) twice before the run stopped; it gets the pong timeout
    once it is up, as the first instance does."""
    done = train(tmp_path, env_id, "local", 200_000)
    assert done.returncode == 2, done.stderr[-3000:]
    errors = [line for line in done.stderr.splitlines() if line.startswith("janus train: error:")]
    assert len(errors) == 1 and "failed 3 times in a row" in errors[0] and "not answering a ping" in errors[0], \
        done.stderr[-3000:]
    assert "Traceback" not in done.stderr
    # 3 faults of one worker stop the run: at most 2 replacements each of the 2 workers before it, not dozens
    assert done.stderr.count("did not answer a ping") <= 4, done.stderr[-3000:]


def test_hangs_count_toward_the_crash_loop_limit_and_a_long_healthy_instance_starts_it_again() -> None:
    faults = WorkerFaults(limit=3, window_s=60.0)
    assert faults.record_unresponsive("w0", silent_s=5.0, lived_s=6.0, at_s=6.0) is None
    assert faults.record_unresponsive("w0", silent_s=5.0, lived_s=300.0, at_s=306.0) is None  # worked 295 s: a new series
    assert faults.record("w0", "Traceback ...\nValueError: boom", lived_s=2.0, at_s=308.0) is None  # errors join hangs
    verdict = faults.record_unresponsive("w0", silent_s=5.0, lived_s=7.0, at_s=315.0)
    assert verdict is not None and "'w0' failed 3 times in a row" in verdict and "\n" not in verdict
    assert faults.unresponsive_total == 3 and faults.notices[-1]["stopped_run"]
    assert faults.record("w1", None, lived_s=1.0, at_s=316.0) is None  # crashed on purpose (local kill): ends w1's series
    assert faults.in_a_row["w1"] == 0


class HangingWorker(Component):
    """A worker whose step blocks until ``release`` is set (an env.step that does not return)."""

    def __init__(self, name: str, entered: threading.Event, release: threading.Event) -> None:
        super().__init__(name)
        self.entered, self.release = entered, release

    def step(self) -> bool:
        self.entered.set()
        self.release.wait()
        return False


class Idle(Component):
    """A data-path component that stops when told."""


def test_the_local_shutdown_abandons_a_hung_worker_and_stops_the_others() -> None:
    entered, release = threading.Event(), threading.Event()
    backend = LocalBackend(worker_stop_s=0.5)
    backend.add("worker-0", "worker", lambda: HangingWorker("worker-0", entered, release))
    for name, role in (("proxy-0", "proxy"), ("trajectory_manager", "trajectory_manager"), ("trainer", "trainer"),
                       ("orchestrator", "orchestrator")):
        backend.add(name, role, lambda name=name: Idle(name))  # type: ignore[misc]  # bound per name
    backend.start()
    try:
        for name in backend.hosts:
            backend.deliver(name, StartMsg())
        assert entered.wait(30.0)
        alive = backend.shutdown(timeout=30.0)
        assert alive == [] and backend.abandoned == ["worker-0 (instance 0)"]
        hung: Any = backend.hosts["worker-0"].thread
        assert hung.daemon and hung.is_alive()  # left to the interpreter's exit
        assert all(h.done.is_set() for n, h in backend.hosts.items() if n != "worker-0")
    finally:
        release.set()


def test_a_hang_under_the_serial_scheduler_stops_the_run_in_one_line(tmp_path: Path) -> None:
    """Both overlaps off: every component runs in one scheduler thread, the Orchestrator too, so a
    hung env.step held the whole run, with nothing to notice it, until the 3600 s run limit."""
    done = train(tmp_path, "HangsOnce-v0", "local", 3000, "--overlap_collect", "0", "--overlap_select", "0",
                 "--stall_timeout_s", "3")
    assert done.returncode == 2, done.stderr[-3000:]
    errors = [line for line in done.stderr.splitlines() if line.startswith("janus train: error:")]
    assert len(errors) == 1 and "did not return from a call for" in errors[0] and "serial scheduler" in errors[0], \
        done.stderr[-3000:]
    assert "worker-0 (instance 0, with the serial scheduler)" in done.stderr or \
        "worker-1 (instance 0, with the serial scheduler)" in done.stderr
    assert "Traceback" not in done.stderr


def test_an_evaluation_that_hangs_is_given_up_and_the_run_finishes(tmp_path: Path) -> None:
    """The Evaluator plays in a thread of its own: a hung evaluation env held the run at its goal,
    waiting for that evaluation, until the run limit (3600 s), the stall timeout excused."""
    done = train(tmp_path, "HangsInEvaluation-v0", "local", 2000, "--eval_interval_steps", "1000",
                 "--eval_episodes", "1", "--stall_timeout_s", "3")
    assert done.returncode == 0, done.stderr[-3000:]
    assert (tmp_path / "hung").exists(), "the evaluation env hung"
    run = json.loads((tmp_path / "run" / "results.json").read_text())["runs"][0]
    assert run["status"] == "finished" and run["counts"]["env_steps"] >= 2000
    assert len(run["runtime"]["evaluations_abandoned"]) == 1, run["runtime"]  # the one pending at the goal
    assert "janus: gave up the evaluation at" in done.stderr
    assert any(a.startswith("evaluator") for a in run["runtime"]["workers_abandoned"]), run["runtime"]
    assert json.loads((tmp_path / "run" / "checkpoint" / "run_state.json").read_text())["trained"] == \
        run["counts"]["updates"]  # the final commit
