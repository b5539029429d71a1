"""``janus rollout``: run a trained policy from a checkpoint and report its returns."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch

from janus.config import RunConfig, from_dict, read_yaml, resolve
from janus.errors import CheckpointError, ConfigError


def locate(checkpoint: str | Path) -> tuple[Path, Path]:
    """``(run_dir, trainer checkpoint)`` from a run folder, its checkpoint folder or the file itself."""
    path = Path(checkpoint)
    candidates = [path / "checkpoint" / "trainer.pt", path / "trainer.pt", path]
    ckpt = next((c for c in candidates if c.is_file()), None)
    if ckpt is None:
        raise CheckpointError(f"no policy checkpoint at {str(path)!r}: expected RUN_DIR, RUN_DIR/checkpoint or a trainer.pt file")
    run_dir = ckpt.parent.parent if ckpt.parent.name == "checkpoint" else ckpt.parent
    if not (run_dir / "config.yaml").is_file():
        raise CheckpointError(f"{str(run_dir)!r} has no config.yaml: the checkpoint must sit in a janus train run folder")
    return run_dir, ckpt


def load_policy(checkpoint: str | Path) -> tuple[RunConfig, Any]:
    """The run's config and its learner with the saved weights."""
    from janus.buffer.checkpoint import load_state
    from janus.algorithms.base import algorithm, names

    run_dir, ckpt = locate(checkpoint)
    cfg = resolve(from_dict(read_yaml(run_dir / "config.yaml")))
    algo = algorithm(cfg.workload.algo)
    if not algo.has_policy:
        with_policy = [n for n in names() if algorithm(n).has_policy]
        raise ConfigError(f"janus rollout needs a run of --algo {' or '.join(with_policy)}; "
                          f"the {algo.name} workload has no policy")
    side = algo.learner(cfg)
    side.load_state_dict(load_state(ckpt, fmt="janus.trainer")["learner"])
    return cfg, side.learner


@torch.no_grad()
def greedy_action(learner: Any, obs: np.ndarray) -> np.ndarray:
    """The policy's most likely action (DQN: argmax Q; PPO: the mode of its distribution)."""
    x = torch.as_tensor(obs, dtype=torch.float32)
    if hasattr(learner, "q"):
        return learner.q(x).argmax(1).numpy()
    dist = learner.agent.dist(x)
    mode = dist.probs.argmax(-1) if hasattr(dist, "probs") else dist.mean
    return mode.numpy()


def rollout(checkpoint: str | Path, episodes: int, seed: int = 0) -> tuple[RunConfig, list[float]]:
    """Returns of ``episodes`` greedy episodes of the saved policy."""
    from janus.algorithms.envs import make_vector_env

    if episodes < 1:
        raise ConfigError(f"invalid --episodes: got {episodes}; accepted: an integer >= 1")
    cfg, learner = load_policy(checkpoint)
    env = make_vector_env(cfg.workload.env, 1, seed, cfg.workload.env_kwargs)
    space = env.single_action_space
    returns: list[float] = []
    obs, _ = env.reset(seed=seed)
    total = 0.0
    while len(returns) < episodes:
        action = greedy_action(learner, obs)
        if hasattr(space, "low"):
            action = np.clip(action, space.low, space.high)
        elif hasattr(space, "start"):
            action = action + int(space.start)
        obs, reward, term, trunc, _ = env.step(action)
        total += float(reward[0])
        if term[0] or trunc[0]:
            returns.append(total)
            total = 0.0
    env.close()
    return cfg, returns
