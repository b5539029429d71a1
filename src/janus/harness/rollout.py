"""``janus rollout``: run a trained policy (:func:`janus.load_policy`) and report its returns."""

from __future__ import annotations

from pathlib import Path

from janus.config import RunConfig
from janus.errors import ConfigError
from janus.policy import Policy, load_policy


def episode_returns(policy: Policy, episodes: int, seed: int = 0, deterministic: bool = True) -> list[float]:
    """Returns of ``episodes`` episodes of ``policy`` in a fresh copy of its run's environment."""
    from janus.algorithms.envs import make_vector_env

    env = make_vector_env(policy.cfg.workload.env, 1, seed, policy.cfg.workload.env_kwargs, training=False)  # whole games, real rewards
    returns: list[float] = []
    obs, _ = env.reset(seed=seed)
    total = 0.0
    try:
        while len(returns) < episodes:
            obs, reward, term, trunc, _ = env.step(policy.predict(obs, deterministic=deterministic))
            total += float(reward[0])
            if term[0] or trunc[0]:
                returns.append(total)
                total = 0.0
    finally:
        env.close()
    return returns


def rollout(checkpoint: str | Path, episodes: int, seed: int = 0) -> tuple[RunConfig, list[float]]:
    """Returns of ``episodes`` greedy episodes of the policy saved at ``checkpoint``."""
    if episodes < 1:
        raise ConfigError(f"invalid --episodes: got {episodes}; accepted: an integer >= 1")
    policy = load_policy(checkpoint)
    return policy.cfg, episode_returns(policy, episodes, seed)
