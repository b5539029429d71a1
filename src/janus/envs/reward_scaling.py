"""Reward normalisation of an actor's environments (``algorithm.normalize_reward``).

As Stable-Baselines3's ``VecNormalize`` (and Gymnasium's ``NormalizeReward``): each sub-env keeps
its discounted return ``G <- gamma * G + r`` (reset where an episode ends), a running variance of
those returns is kept, and the reward the algorithm learns from is ``r / sqrt(var + eps)``,
clipped to ``[-clip, clip]``. Only the scale changes (no mean is subtracted), so the optimal
policy is the same.

Unlike ``VecNormalize``, the variance is not the worker's own: :class:`NormalizedReward` reports
each step's ``G`` in ``info["discounted_return"]``, the actor stores it in its piece
(``discounted_return``), the learner folds the returns it trains on into a ``RunningNorm(())``
published with the network (:mod:`janus.algorithms.normalization`), and the actor sets the factor
of each version it loads (:func:`set_reward_factor`). So all workers scale alike, a checkpoint and
a saved policy carry the statistics, and a resumed run continues with them. Until the first
version the factor is 1.

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


class NormalizedReward(gym.vector.VectorWrapper):
    """A vector env whose rewards are multiplied by ``factor`` (the learner's ``1/sqrt(var)``) and
    clipped, reporting each step's discounted return in ``info["discounted_return"]``."""

    def __init__(self, env: gym.vector.VectorEnv, gamma: float, clip: float = 10.0) -> None:
        super().__init__(env)
        self.gamma, self.clip = float(gamma), float(clip)
        self.returns = np.zeros(env.num_envs, np.float64)
        self.factor = 1.0

    def step(self, actions: Any) -> tuple[Any, ...]:
        obs, reward, terminated, truncated, info = self.env.step(actions)
        raw = np.asarray(reward, np.float64)
        done = np.asarray(terminated) | np.asarray(truncated)
        self.returns = self.returns * self.gamma + raw
        info = {**info, DISCOUNTED_RETURN: self.returns.astype(np.float32)}
        self.returns[done] = 0.0
        scaled = np.clip(raw * self.factor, -self.clip, self.clip).astype(np.float32)
        if "raw_reward" not in info and "raw_reward" not in info.get("final_info", {}):
            info.update(raw_reward=raw, _raw_reward=np.ones(self.num_envs, bool), game_over=done)
        return obs, scaled, terminated, truncated, info


def set_reward_factor(envs: gym.vector.VectorEnv, statistics: Any) -> None:
    """Scale ``envs``' rewards by the published statistics (a ``RunningNorm(())``), if it normalises them."""
    if isinstance(envs, NormalizedReward) and statistics is not None:
        envs.factor = statistics.reward_factor()
