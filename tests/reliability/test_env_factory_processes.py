"""``janus.train`` with an environment factory on the ``process`` backend (issue 46 item 1).

Before, an environment given as a Python object ran on ``local`` only: a hung ``env.step`` there
can only be abandoned (a thread cannot be killed). Now ``backend="process"`` ships the factory to
the worker processes (cloudpickle: a closure by value), where a hung one is killed and replaced.
"""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest

import janus


class Corridor(gym.Env):
    """Episodes of 10 steps; writes its process id to ``record`` when built; its step number
    ``hang_at`` (0: never) does not return, in the first env of the run to get there (``marker``)."""

    observation_space = gym.spaces.Box(-1.0, 1.0, (3,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def __init__(self, record: Path, marker: Path, hang_at: int) -> None:
        with open(record, "a", encoding="utf-8") as f:
            f.write(f"{os.getpid()}\n")
        self.marker, self.hang_at, self.steps, self.t = marker, hang_at, 0, 0

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[np.ndarray, dict]:
        super().reset(seed=seed)
        self.t = 0
        return np.zeros(3, np.float32), {}

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict]:
        self.steps += 1
        self.t += 1
        if self.steps == self.hang_at and not self.marker.exists():
            self.marker.touch()
            threading.Event().wait()  # never returns
        return np.full(3, 0.1 * float(action), np.float32), float(action), self.t >= 10, False, {}


def test_a_closure_factory_runs_its_envs_in_worker_processes_where_a_hang_is_cut(tmp_path: Path) -> None:
    record, marker = tmp_path / "pids.txt", tmp_path / "hung"
    run = janus.train("dqn", env=lambda: Corridor(record, marker, hang_at=40), backend="process", num_workers=2,
                      total_env_steps=2000, learning_starts=200, pong_timeout_s=1.5, seed=0, out=tmp_path / "run")
    assert run.status == "finished" and marker.exists(), "an env hung, and the run finished"
    pids = {int(p) for p in record.read_text().split()}
    assert len(pids - {os.getpid()}) >= 2, pids  # the workers' envs were built in their processes
    results = json.loads((run.out / "results.json").read_text())["runs"][0]
    assert results["config"]["runtime"]["backend"] == "process" and results["counts"]["env_steps"] >= 2000
    assert results["runtime"]["workers_abandoned"] == []  # the hung worker's process was killed, no thread left
    assert (run.out / "checkpoint" / "run_state.json").exists()


def test_a_factory_that_cannot_be_pickled_is_refused_for_processes_in_one_line(tmp_path: Path) -> None:
    lock = threading.Lock()

    def holds_a_lock() -> gym.Env:
        with lock:
            return gym.make("CartPole-v1")

    with pytest.raises(janus.ConfigError) as refused:
        janus.train("dqn", env=holds_a_lock, backend="process", total_env_steps=500, out=tmp_path / "run")
    message = str(refused.value)
    assert "cannot be sent to the worker processes of backend='process'" in message and "backend='local'" in message
    assert "\n" not in message and not (tmp_path / "run").exists()


@pytest.mark.parametrize("flags", [{"backend": "ray"}, {"backend": "process", "vector_env": "async"}])
def test_an_env_object_is_still_refused_where_it_cannot_be_shipped(tmp_path: Path, flags: dict[str, Any]) -> None:
    with pytest.raises(janus.ConfigError, match="registered in this process only"):
        janus.train("dqn", env=lambda: gym.make("CartPole-v1"), out=tmp_path / "run", **flags)
