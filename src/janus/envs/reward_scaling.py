"""Reward normalisation of an actor's environments (``algorithm.normalize_reward``).

As Stable-Baselines3's ``VecNormalize`` (and Gymnasium's ``NormalizeReward``): each sub-env keeps
its discounted return ``G <- gamma * G + r`` (reset where an episode ends), a running variance of
those returns is kept, and the reward the algorithm learns from is ``r / sqrt(var + eps)``,
clipped to ``[-clip, clip]``. Only the scale changes (no mean is subtracted), so the optimal
policy is the same.

Each actor scales by its own running estimate, updated every step, as each ``VecNormalize`` does
(measured against scaling by the learner's estimate, fixed for a version: Hopper-v5, 100k env steps,
4 seeds, returns ~1,000 vs ~600; docs/benchmarks.md, "Family presets vs the RL Zoo's"). The
statistics are still saved: :class:`NormalizedReward` reports each step's ``G`` in
``info["discounted_return"]``, the actor stores it in its piece (``discounted_return``), and the
learner folds the returns it trains on into a ``RunningNorm(())`` published with the network
(:mod:`janus.algorithms.normalization`). So a checkpoint and a saved policy carry them, and an actor
that starts with a version already holding them (a resumed run, a restarted worker) starts its
estimate from them (:func:`seed_reward_statistics`) instead of from nothing.

The episode returns janus reports stay the environment's own: the wrapper hands the raw rewards to
:class:`~janus.envs.vector.EpisodeTracker` through ``info`` (the channel Atari's clipped rewards
use; where that channel is already set, it is left).
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

DISCOUNTED_RETURN = "discounted_return"
"""The piece field (and ``info`` key) of each step's discounted return, for the learner's statistics."""


def merged_moments(count: Any, mean: Any, var: Any, n: Any, batch_mean: Any, batch_var: Any) -> tuple[Any, Any, Any]:
    """``(count, mean, var)`` of a population of ``count`` (mean, variance) joined by ``n`` more
    (``batch_mean``, ``batch_var``): Chan et al.'s parallel update, for floats, arrays or tensors alike."""
    total = count + n
    delta = batch_mean - mean
    return total, mean + delta * n / total, (var * count + batch_var * n + delta * delta * count * n / total) / total


class RunningMoments:
    """Mean and variance of a stream of batches, in float64."""

    def __init__(self) -> None:
        self.mean, self.var, self.count = 0.0, 1.0, 0.0

    def update(self, batch: np.ndarray) -> None:
        x = np.asarray(batch, np.float64)
        self.count, self.mean, self.var = merged_moments(self.count, self.mean, self.var, x.size, float(x.mean()), float(x.var()))


class NormalizedReward(gym.vector.VectorWrapper):
    """A vector env whose rewards are divided by the running std of the discounted returns (this
    actor's estimate, updated every step) and clipped, reporting each step's discounted return in
    ``info["discounted_return"]``."""

    def __init__(self, env: gym.vector.VectorEnv, gamma: float, clip: float = 10.0, eps: float = 1e-8) -> None:
        super().__init__(env)
        self.gamma, self.clip, self.eps = float(gamma), float(clip), float(eps)
        self.returns = np.zeros(env.num_envs, np.float64)
        self.own = RunningMoments()

    @property
    def factor(self) -> float:
        return float(1.0 / np.sqrt(self.own.var + self.eps))

    def step(self, actions: Any) -> tuple[Any, ...]:
        obs, reward, terminated, truncated, info = self.env.step(actions)
        raw = np.asarray(reward, np.float64)
        done = np.asarray(terminated) | np.asarray(truncated)
        self.returns = self.returns * self.gamma + raw
        self.own.update(self.returns)
        info = {**info, DISCOUNTED_RETURN: self.returns.astype(np.float32)}
        self.returns[done] = 0.0
        scaled = np.clip(raw * self.factor, -self.clip, self.clip).astype(np.float32)
        if "raw_reward" not in info and "raw_reward" not in info.get("final_info", {}):
            info.update(raw_reward=raw, _raw_reward=np.ones(self.num_envs, bool), game_over=done)
        return obs, scaled, terminated, truncated, info


SEEDED_COUNT_CAP = 100_000.0
"""The most weight saved statistics get in a new actor's estimate: the learner counts a return each
time it trains on it (epochs, replay), so its count overstates the returns seen."""


def seed_reward_statistics(envs: gym.vector.VectorEnv, statistics: Any) -> None:
    """Start ``envs``' estimate from the published statistics (a ``RunningNorm(())``) if it
    normalises rewards, has seen no return yet and the statistics hold some (a resumed run)."""
    if isinstance(envs, NormalizedReward) and statistics is not None and envs.own.count == 0 and float(statistics.count) > 0:
        envs.own.mean, envs.own.var = float(statistics.mean), float(statistics.var)
        envs.own.count = min(float(statistics.count), SEEDED_COUNT_CAP)
