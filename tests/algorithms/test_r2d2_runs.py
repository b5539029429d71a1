"""R2D2 through the runtime: local, process and Ray backends, checkpoint and resume of its replay of
sequences, and a memory task where it beats feed-forward DQN."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch
from gymnasium import spaces

from janus.algorithms.base import algorithm
from janus.buffer.storage.state_file import load_state
from janus.cli import main
from janus.config import RunConfig, from_dict, resolve
from janus.runtime.run import run_runtime

SMALL = {"batch_size": 8, "buffer_capacity": 2_000,
         "algorithm": {"seq_len": 8, "burn_in": 2, "n_step": 2, "recurrent_size": 16, "learning_starts": 200,
                       "train_frequency": 16.0},
         "workload": {"envs_per_actor": 4, "rollout_length": 4, "hidden_size": 16}}


def cfg_of(steps: int, env: str = "janus/CartPoleNoVel-v1", **overrides: Any) -> RunConfig:
    layers = {**SMALL, **overrides}
    layers["workload"] = {**SMALL["workload"], "total_env_steps": steps, "env": env, **overrides.get("workload", {})}
    layers["algorithm"] = {**SMALL["algorithm"], **overrides.get("algorithm", {})}
    return resolve(from_dict({**layers, "seed": 0}, base=from_dict(algorithm("r2d2").preset)))


def check_run(run: dict, cfg: RunConfig) -> None:
    """Every worker acted the budget's rounds, the replay took every sequence (counted in env steps)
    and the learner trained the budget's updates."""
    counts, budget = run["counts"], algorithm("r2d2").budget(cfg)
    assert run["status"] == "finished"
    assert counts["env_steps"] == budget.env_steps == counts["transitions_inserted"]
    assert counts["updates"] == budget.total_updates
    assert np.isfinite(run["train_metrics"]["loss"]).all() and "priority_mean" in run["train_metrics"]


@pytest.mark.parametrize("backend", ["local", "process"])
def test_r2d2_trains_end_to_end(backend: str) -> None:
    cfg = cfg_of(1_600, runtime={"backend": backend}, workload={"num_actors": 2})
    run = run_runtime(cfg, timeout_s=300)
    check_run(run, cfg)
    assert run["runtime"]["backend"] == backend


def test_r2d2_on_ray_with_two_workers(ray_session: Any) -> None:
    cfg = cfg_of(1_600, runtime={"backend": "ray"}, workload={"num_actors": 2})
    run = run_runtime(cfg, timeout_s=300)
    assert sorted(n for n in run["runtime"]["nodes"] if n.startswith("worker-")) == ["worker-0", "worker-1"]
    check_run(run, cfg)


def test_checkpoint_and_resume_keep_the_replay_of_sequences(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = tmp_path / "run"
    flags = ["--algo", "r2d2", "--env", "janus/CartPoleNoVel-v1", "--backend", "local", "--seed", "1",
             "--batch_size", "8", "--seq_len", "8", "--burn_in", "2", "--n_step", "2", "--recurrent_size", "16",
             "--rollout_length", "4", "--envs_per_actor", "4", "--learning_starts", "200", "--train_frequency", "16"]
    assert main(["train", *flags, "--total_env_steps", "1200", "--out", str(run)]) == 0
    ckpt = run / "checkpoint"
    replay = load_state(ckpt / "trajectory_manager.pt", fmt="janus.trajectory_manager")
    trainer = load_state(ckpt / "trainer.pt", fmt="janus.trainer")
    state = json.loads((ckpt / "run_state.json").read_text())
    data = replay["buffer"]["data"]
    assert {"obs", "action", "reward", "terminal", "state", "mask", "first"} <= set(data)
    n = replay["buffer"]["written"]
    assert n == state["env_steps"] // 4 == replay["inserted"]  # one row per sequence of 4 new steps
    assert tuple(data["obs"].shape[1:]) == (8, 2) and tuple(data["state"].shape[1:]) == (32,)
    assert state["trained"] == trainer["trained"] > 0
    saved = shutil.copytree(run, tmp_path / "saved")
    capsys.readouterr()
    assert main(["train", "--resume", str(run), "--total_env_steps", "2000"]) == 0
    assert f"{replay['inserted']:,} transitions in replay" in capsys.readouterr().out
    replay2 = load_state(ckpt / "trajectory_manager.pt", fmt="janus.trajectory_manager")
    assert replay2["inserted"] > replay["inserted"] and replay2["buffer"]["written"] > n
    for field, array in data.items():  # the saved sequences came back, in their slots
        assert torch.equal(array[:n], replay2["buffer"]["data"][field][:n]), field
    state2 = json.loads((ckpt / "run_state.json").read_text())
    assert state2["trained"] > state["trained"] and state2["env_steps"] == 2000
    assert (saved / "checkpoint" / "trainer.pt").is_file()


# ------------------------------------------------------------------------------- a task of memory
CUE_ENV = "janus-test/CueRecall-v0"


class CueRecall(gym.Env):
    """See a cue (-1 or +1) first, then ``delay`` blank steps, then a query: the action at the query is
    paid +1 if it names the cue (action 1 for +1), else -1. The query looks the same whatever the cue,
    so a policy without memory averages 0; one that remembers the cue gets 1 every episode."""

    observation_space = spaces.Box(-1.0, 1.0, (2,), np.float32)  # (cue, query flag)
    action_space = spaces.Discrete(2)

    def __init__(self, delay: int = 2) -> None:
        self.delay, self.t, self.cue = delay, 0, 1.0

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[np.ndarray, dict]:
        super().reset(seed=seed)
        self.t, self.cue = 0, float(self.np_random.choice([-1.0, 1.0]))
        return np.array([self.cue, 0.0], np.float32), {}

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict]:
        self.t += 1
        if self.t <= self.delay:
            query = float(self.t == self.delay)
            return np.array([0.0, query], np.float32), 0.0, False, False, {}
        right = (int(action) == 1) == (self.cue > 0)
        return np.array([0.0, 0.0], np.float32), 1.0 if right else -1.0, True, False, {}


if CUE_ENV not in gym.registry:
    gym.register(CUE_ENV, entry_point=CueRecall)


def test_r2d2_remembers_a_cue_that_feed_forward_dqn_cannot() -> None:
    """6,000 env steps of CueRecall (episodes of 3 steps): r2d2 carries the cue to the query and
    gets most episodes right; DQN, whose query observation is the same for both cues, stays near 0."""
    cfg = cfg_of(6_000, env=CUE_ENV, runtime={"backend": "local"},
                 algorithm={"exploration_steps": 2_000, "train_frequency": 4.0, "n_step": 1, "gamma": 0.9,
                            "target_update_interval": 50})
    r2d2 = run_runtime(cfg, timeout_s=300)
    dqn_cfg = resolve(from_dict({"seed": 0, "workload": {"env": CUE_ENV, "total_env_steps": 6_000},
                                 "algorithm": {"exploration_steps": 2_000}, "runtime": {"backend": "local"}},
                                base=from_dict(algorithm("dqn").preset)))
    dqn = run_runtime(dqn_cfg, timeout_s=300)
    assert r2d2["final_mean_return"] > 0.8, r2d2["final_mean_return"]  # seeds 0-2: 1.0 (every episode right)
    assert dqn["final_mean_return"] < 0.6, dqn["final_mean_return"]  # seeds 0-2: -0.3, -0.1, -0.2
