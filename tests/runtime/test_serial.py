"""--seed reproducibility: a local run with both overlaps off uses the serial scheduler."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from janus.algorithms.base import algorithm
from janus.config import JanusConfig, RunConfig, SyntheticConfig, WorkloadConfig, from_dict, resolve
from janus.runtime.backends.local import LocalBackend
from janus.runtime.component import Component
from janus.runtime.messages import StartMsg
from janus.runtime.plan import serial
from janus.runtime.run import run_runtime


def rl_cfg(algo: str, seed: int, steps: int, **algorithm_overrides: Any) -> RunConfig:
    overrides = {"overlap_collect": 0, "overlap_select": 0, "seed": seed, "workload": {"total_env_steps": steps},
                 "algorithm": algorithm_overrides}
    return resolve(from_dict(overrides, base=from_dict(algorithm(algo).preset)))


# DQN: 1,000 steps past learning_starts; SAC: 3 of its 4 Pendulum episodes after learning starts
# (its learner draws the policy's noise: from its own seeded generator, not torch's global one)
@pytest.mark.parametrize("algo,steps,overrides", [("dqn", 2000, {}), ("ppo", 6000, {}),
                                                  # 21 s; the serial path DQN's and PPO's cases cover
                                                  pytest.param("sac", 800, {"learning_starts": 200},
                                                               marks=pytest.mark.slow)])
def test_same_seed_same_returns(algo: str, steps: int, overrides: dict[str, Any]) -> None:
    cfg = rl_cfg(algo, 5, steps, **overrides)
    assert serial(cfg)
    first, second = run_runtime(cfg, timeout_s=120), run_runtime(cfg, timeout_s=120)
    assert first["learning_curve"]["return"] == second["learning_curve"]["return"]
    assert first["learning_curve"]["env_steps"] == second["learning_curve"]["env_steps"]
    assert first["counts"]["updates"] == second["counts"]["updates"]
    other = run_runtime(rl_cfg(algo, 6, steps, **overrides), timeout_s=120)
    assert other["learning_curve"]["return"] != first["learning_curve"]["return"]
    assert not [t for t in threading.enumerate() if t.name.startswith("host-")]


def test_serial_synthetic_run_conserves_transitions() -> None:
    cfg = resolve(RunConfig(
        janus=JanusConfig(overlap_collect=0, overlap_select=0, g_collect=2, g_select=2, batch_size=64, buffer_capacity=4096),
        workload=WorkloadConfig(num_actors=2, envs_per_actor=4, rollout_length=16, hidden_size=16, iterations=8),
        synthetic=SyntheticConfig(obs_shape=(16,), env_step_ms=0.0),
    ))
    run = run_runtime(cfg, timeout_s=60)
    assert run["counts"]["transitions_inserted"] == run["counts"]["transitions_produced"] == 2 * 8 * 64
    assert run["counts"]["updates"] >= 8 * cfg.updates_per_iteration


class Counted(Component):
    """A component that counts its closes; ``fail`` makes its step raise (a crash)."""

    def __init__(self, name: str, fail: bool) -> None:
        super().__init__(name)
        self.fail, self.closes = fail, 0

    def step(self) -> bool:
        if self.fail:
            raise RuntimeError("crashed on purpose")
        return False

    def close(self) -> None:
        self.closes += 1


def wait_for(condition: Any, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.005)


@pytest.mark.parametrize("serial_scheduler", [True, False], ids=["serial", "threads"])
def test_every_component_instance_is_closed_once_crashed_replaced_or_stopped(serial_scheduler: bool) -> None:
    """A crashed component is closed as it ends (its environments' subprocesses, its buffer's
    threads); one replaced by a restart and one that ran to the end are closed at shutdown; none twice."""
    made: list[Counted] = []

    def factory(fail: bool) -> Counted:
        made.append(Counted("w", fail))
        return made[-1]

    backend = LocalBackend(serial=serial_scheduler)
    backend.add("w", "worker", lambda: factory(fail=len(made) == 0))  # the first instance crashes
    backend.start()
    backend.deliver("w", StartMsg())
    wait_for(lambda: backend.hosts["w"].done.is_set())
    assert made[0].closes == 1, "the crashed instance was closed as it ended"
    backend.restart("w")  # a healthy instance...
    backend.deliver("w", StartMsg())
    backend.restart("w")  # ...replaced while it runs (as a hung worker is)
    backend.deliver("w", StartMsg())
    assert backend.shutdown(timeout=5.0) == []
    assert [c.closes for c in made] == [1, 1, 1]
