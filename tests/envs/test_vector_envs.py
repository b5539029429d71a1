"""``workload.vector_env``: sync and async vector envs step the same transitions; async ones leave
no process behind; ``auto`` picks by env and machine; worker processes may start async envs."""

from __future__ import annotations

import os
import time

import numpy as np
import psutil
import pytest

from janus.config import from_dict, resolve
from janus.envs import vector as envs_module
from janus.envs.vector import EpisodeTracker, make_vector_env, next_obs_of, vector_env_kind
from janus.errors import ConfigError


def env_processes() -> set[int]:
    """Live processes under this one that run environments: every descendant except the
    multiprocessing helpers that live as long as this process (forkserver, resource tracker)."""
    out = set()
    for p in psutil.Process().children(recursive=True):
        try:
            cmd = " ".join(p.cmdline())
            if p.status() == psutil.STATUS_ZOMBIE:
                continue
            helper = p.ppid() == os.getpid() and ("forkserver import main" in cmd or "resource_tracker" in cmd)
            if not helper:
                out.add(p.pid)
        except psutil.NoSuchProcess:
            pass
    return out


def wait_gone(pids: set[int], timeout: float = 10.0) -> set[int]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        left = {p for p in pids if psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE}
        if not left:
            return left
        time.sleep(0.05)
    return left


def transitions(env_id: str, kind: str, steps: int, num_envs: int = 3, training: bool = True) -> dict[str, np.ndarray]:
    envs = make_vector_env(env_id, num_envs, 0, training=training, vector_env=kind)
    try:
        obs, _ = envs.reset(seed=4)
        rng = np.random.default_rng(1)
        tracker = EpisodeTracker(num_envs)
        out: dict[str, list] = {k: [] for k in ("obs", "reward", "next_obs", "terminated", "truncated")}
        for _ in range(steps):
            action = rng.integers(0, envs.single_action_space.n, num_envs)
            next_obs, reward, term, trunc, info = envs.step(action)
            for k, v in (("obs", obs), ("reward", reward), ("next_obs", next_obs_of(next_obs, term, trunc, info)),
                         ("terminated", term), ("truncated", trunc)):
                out[k].append(np.array(v, copy=True))
            tracker.step(reward, term | trunc, info)
            obs = next_obs
        episodes = tracker.pop()
    finally:
        envs.close()
    return {**{k: np.stack(v) for k, v in out.items()}, "returns": episodes.returns, "lengths": episodes.lengths}


def test_async_and_sync_step_identical_cartpole_transitions() -> None:
    sync, async_ = transitions("CartPole-v1", "sync", 300), transitions("CartPole-v1", "async", 300)
    assert sync["terminated"].sum() >= 10, "episodes end (and reset) within the window"
    for key in sync:
        assert np.array_equal(sync[key], async_[key]), key


def test_async_atari_steps_the_same_games() -> None:
    pytest.importorskip("ale_py")
    sync, async_ = (transitions("ALE/Breakout-v5", kind, 250, num_envs=2) for kind in ("sync", "async"))
    assert async_["obs"].shape == (250, 2, 4, 84, 84) and async_["obs"].dtype == np.uint8
    assert sync["terminated"].any(), "a life was lost (a training episode ended) within the window"
    for key in sync:
        assert np.array_equal(sync[key], async_[key]), key


def test_close_leaves_no_env_process() -> None:
    before = env_processes()
    envs = make_vector_env("CartPole-v1", 3, 0, vector_env="async")
    envs.reset(seed=0)
    started = env_processes() - before
    assert len(started) == 3, "one process per sub-env"
    envs.step(np.zeros(3, dtype=np.int64))
    envs.close()
    assert not wait_gone(started), "every sub-env process ended"
    assert env_processes() <= before


def test_auto_is_sync_on_two_cpus_and_for_cheap_envs(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(envs_module, "usable_cpus", lambda: 2)
    assert vector_env_kind("ALE/Pong-v5", 8) == "sync"
    monkeypatch.setattr(envs_module, "usable_cpus", lambda: 16)
    assert vector_env_kind("ALE/Pong-v5", 8) == "async"
    assert vector_env_kind("ale_py:ALE/Pong-v5", 2) == "async"
    assert vector_env_kind("ALE/Pong-v5", 1) == "sync"
    assert vector_env_kind("CartPole-v1", 8) == "sync"
    assert vector_env_kind("CartPole-v1", 8, "async") == "async" and vector_env_kind("ALE/Pong-v5", 8, "sync") == "sync"
    with pytest.raises(ConfigError, match="vector_env"):
        vector_env_kind("CartPole-v1", 2, "threads")


def test_config_rejects_an_unknown_vector_env() -> None:
    with pytest.raises(ConfigError, match="workload.vector_env: got 'processes'.*'sync', 'async', 'auto'"):
        resolve(from_dict({"workload": {"vector_env": "processes"}}))


def test_process_backend_workers_run_async_envs_and_leave_no_process() -> None:
    """Worker processes are not daemonic, so their envs may be subprocesses; all end with the run."""
    from janus.algorithms.base import algorithm
    from janus.runtime.run import run_runtime

    before = env_processes()
    cfg = resolve(from_dict({"workload": {"total_env_steps": 1024, "envs_per_actor": 2, "rollout_length": 64,
                                          "num_actors": 1, "vector_env": "async"},
                             "runtime": {"backend": "process"}}, base=from_dict(algorithm("ppo").preset)))
    run = run_runtime(cfg)
    assert run["counts"]["transitions_produced"] == 1024
    assert not wait_gone(env_processes() - before), "worker processes and their env processes all ended"
