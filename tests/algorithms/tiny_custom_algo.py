"""A custom algorithm defined outside janus, as a user would write one (docs/custom-algorithm.md):
a two-armed bandit whose learner estimates each arm's value. Arm 1 pays 1, arm 0 pays 0, so a
learner that trains ends with ``q[1] > q[0]``.

``tests/algorithms/test_custom_algorithm.py`` trains it with ``janus train --algo
tiny_custom_algo:TinyAlgo``; the other names here are the seam's misuses it checks.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any, ClassVar

import numpy as np

from janus.algorithms import Algorithm, FamilyPreset, Hyperparameter
from janus.algorithms.dqn import DQN
from janus.config.schema import RunConfig

LEARNERS: list[BanditLearner] = []
"""Every learner built in this process (the test reads the one a run trained)."""


class BanditActor:
    """``envs`` bandits pulled ``steps`` times per piece, epsilon-greedy on the published values."""

    def __init__(self, envs: int, steps: int, seed: int) -> None:
        self.envs, self.steps = envs, steps
        self.rng = np.random.default_rng(seed)
        self.q = np.zeros(2, dtype=np.float32)

    def rollout(self) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
        shape = (self.steps, self.envs)
        greedy = np.full(shape, int(np.argmax(self.q)))
        action = np.where(self.rng.random(shape) < 0.5, self.rng.integers(0, 2, shape), greedy).astype(np.int64)
        reward = (action == 1).astype(np.float32)
        piece = {"obs": np.zeros((*shape, 1), np.float32), "action": action, "reward": reward,
                 "done": np.ones(shape, dtype=bool)}
        return piece, {"episode_returns": reward.ravel().tolist(), "env_steps": action.size}

    def load_params(self, snapshot: Any) -> None:
        self.q = np.asarray(dict(snapshot.arrays)["q"], dtype=np.float32)


class BanditLearner:
    """Moves each arm's value towards the rewards the batch saw for it (step ``lr``)."""

    def __init__(self, lr: float) -> None:
        self.lr = lr
        self.q = np.zeros(2, dtype=np.float32)
        self.updates = 0
        LEARNERS.append(self)

    def update(self, batch: dict[str, Any]) -> Any:
        action = np.asarray(batch["action"].cpu()).reshape(-1)
        reward = np.asarray(batch["reward"].cpu()).reshape(-1)
        errors = []
        for arm in (0, 1):
            seen = reward[action == arm]
            if seen.size:
                errors.append(float(seen.mean() - self.q[arm]))
                self.q[arm] += self.lr * errors[-1]
        self.updates += 1
        return SimpleNamespace(priorities=None, metrics={"loss": float(np.mean(np.square(errors)))})

    def params(self) -> dict[str, np.ndarray]:
        return {"q": self.q.copy()}


class TinyAlgo(Algorithm):
    """The bandit as a janus algorithm: its actor, its learner, its one hyperparameter, its preset."""

    preset: ClassVar[dict[str, Any]] = {
        "batch_size": 32, "buffer_capacity": 1024, "overlap_collect": 0, "overlap_select": 0,
        "workload": {"num_actors": 1, "envs_per_actor": 4, "rollout_length": 8, "iterations": 12,
                     "updates_per_iteration": 2, "env_step_ms": 0},
    }

    def flags(self) -> dict[str, Hyperparameter]:
        return {"lr": Hyperparameter(0.1, "Step size of the arm values.")}

    def actor(self, cfg: RunConfig, index: int, initial_env_steps: int = 0, instance: int = 0,
              session: int = 0) -> BanditActor:
        w = cfg.workload
        return BanditActor(w.envs_per_actor, w.rollout_length, seed=cfg.seed * 1000 + index * 10 + instance)

    def learner(self, cfg: RunConfig) -> BanditLearner:
        return BanditLearner(self.hyperparameter(cfg, "lr"))


class NoLearner(Algorithm):
    """Forgets :meth:`learner`: naming it is refused, the missing method named."""

    def actor(self, cfg: RunConfig, index: int, initial_env_steps: int = 0, instance: int = 0,
              session: int = 0) -> BanditActor:
        return BanditActor(1, 1, 0)


class ClassicDQN(DQN):
    """DQN with a classic-control overlay of its own, declared as the built-in algorithms declare theirs."""

    family_presets: ClassVar[dict[str, FamilyPreset]] = {
        "classic_control": FamilyPreset({"batch_size": 48, "workload": {"total_env_steps": 3_000},
                                         "algorithm": {"lr": 5e-4}}, "tiny_custom_algo's own"),
    }


NOT_AN_ALGORITHM = BanditLearner
"""A class, but no Algorithm."""
