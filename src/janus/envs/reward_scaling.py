"""Reward normalisation of an actor's environments (``algorithm.normalize_reward``).

As Stable-Baselines3's ``VecNormalize`` (and Gymnasium's ``NormalizeReward``): each sub-env keeps
its discounted return ``G <- gamma * G + r`` (reset where an episode ends), a running variance of
those returns is kept over all of the actor's sub-envs, and the reward the algorithm learns from
is ``r / sqrt(var + eps)``, clipped to ``[-clip, clip]``. Only the scale changes (no mean is
subtracted), so the optimal policy is the same.

The statistics live with the actor (each worker keeps its own, as each ``VecNormalize`` does);
a policy does not use them, so a saved policy does not carry them, and a resumed run estimates
them anew from its first steps. The episode returns janus reports stay the environment's own:
the wrapper hands the raw rewards to :class:`~janus.envs.vector.EpisodeTracker` through ``info``
(the same channel Atari's clipped rewards use; where that channel is already set, it is left).
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np


class RunningMoments:
    """Mean and variance of a stream of batches (Chan et al.'s parallel update), in float64."""

    def __init__(self, shape: tuple[int, ...] = ()) -> None:
        self.mean = np.zeros(shape, np.float64)
        self.var = np.ones(shape, np.float64)
        self.count = 0.0

    def update(self, batch: np.ndarray) -> None:
        """Fold in ``batch`` (its first axis is the samples)."""
        x = np.asarray(batch, np.float64)
        n = x.shape[0]
        if n == 0:
            return
        mean, var = x.mean(0), x.var(0)
        total = self.count + n
        delta = mean - self.mean
        self.mean = self.mean + delta * n / total
        self.var = (self.var * self.count + var * n + delta**2 * self.count * n / total) / total
        self.count = total


class NormalizedReward(gym.vector.VectorWrapper):
    """A vector env whose rewards are divided by the running std of the discounted returns."""

    def __init__(self, env: gym.vector.VectorEnv, gamma: float, clip: float = 10.0, eps: float = 1e-8) -> None:
        super().__init__(env)
        self.gamma, self.clip, self.eps = float(gamma), float(clip), float(eps)
        self.returns = np.zeros(env.num_envs, np.float64)
        self.moments = RunningMoments()

    def step(self, actions: Any) -> tuple[Any, ...]:
        obs, reward, terminated, truncated, info = self.env.step(actions)
        raw = np.asarray(reward, np.float64)
        done = np.asarray(terminated) | np.asarray(truncated)
        self.returns = self.returns * self.gamma + raw
        self.moments.update(self.returns)
        self.returns[done] = 0.0
        scaled = np.clip(raw / np.sqrt(self.moments.var + self.eps), -self.clip, self.clip)
        if "raw_reward" not in info and "raw_reward" not in info.get("final_info", {}):
            info = {**info, "raw_reward": raw, "_raw_reward": np.ones(self.num_envs, bool), "game_over": done}
        return obs, scaled.astype(np.asarray(reward).dtype if np.asarray(reward).dtype.kind == "f" else np.float32), \
            terminated, truncated, info
