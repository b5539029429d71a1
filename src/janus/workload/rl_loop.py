"""A minimal single-process training loop: one actor, one learner, a janus ExperienceBuffer.

The reference for how a distributed runtime hosts the pieces: the actor's pieces are flattened
(time and env dims merged) into the buffer, the learner updates from buffer batches and publishes
``params()`` snapshots that the actor loads. Deterministic: the same seed gives the same returns
(envs, networks, action sampling and the buffer are all seeded; use one torch thread).
"""

from __future__ import annotations

import time
from typing import Any, Callable

import numpy as np

from janus.buffer.experience import ExperienceBuffer
from janus.errors import invalid, one_of
from janus.workload.dqn import DQNActor, DQNConfig, DQNLearner
from janus.workload.envs import ALGOS, Episodes
from janus.workload.ppo import PPOActor, PPOConfig, PPOLearner


def flatten(piece: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Merge the ``[T, num_envs]`` leading dims of a piece into one batch dim."""
    return {k: v.reshape(-1, *v.shape[2:]) for k, v in piece.items()}


class _Log:
    """Episode returns against env steps, plus the stopping rule."""

    def __init__(self, stop_at_return: float | None, window: int, log_every: int | None) -> None:
        self.returns: list[float] = []
        self.lengths: list[int] = []
        self.steps: list[int] = []
        self.stop_at, self.window, self.log_every = stop_at_return, window, log_every
        self.start = time.perf_counter()
        self.reached_s: float | None = None
        self.reached_step: int | None = None
        self._next_log = log_every or 0

    def add(self, episodes: Episodes, env_steps: int) -> None:
        self.returns += episodes.returns.tolist()
        self.lengths += episodes.lengths.tolist()
        self.steps += [env_steps] * len(episodes.returns)
        if self.reached_s is None and self.stop_at is not None and len(self.returns) >= self.window:
            if self.mean_last() >= self.stop_at:
                self.reached_s, self.reached_step = time.perf_counter() - self.start, env_steps
        if self.log_every and env_steps >= self._next_log:
            self._next_log += self.log_every
            print(f"  step {env_steps:>8d}  {time.perf_counter() - self.start:7.1f}s  "
                  f"mean return (last {self.window}) {self.mean_last():7.1f}", flush=True)

    def mean_last(self) -> float:
        return float(np.mean(self.returns[-self.window:])) if self.returns else float("nan")

    def done(self) -> bool:
        return self.reached_s is not None


def train_local(
    algo: str,
    env_id: str = "CartPole-v1",
    total_steps: int = 100_000,
    seed: int = 0,
    config: DQNConfig | PPOConfig | None = None,
    *,
    stop_at_return: float | None = None,
    window: int = 20,
    log_every: int | None = None,
) -> dict[str, Any]:
    """Train ``algo`` (``"dqn"`` or ``"ppo"``) on ``env_id`` for ``total_steps`` env steps.

    Stops early once the mean return of the last ``window`` episodes reaches ``stop_at_return``.
    Returns ``episode_returns``, ``episode_lengths``, ``episode_env_steps`` (env steps when each
    episode's piece ended), ``env_steps``, ``updates``, ``wall_s``, ``env_steps_per_s``,
    ``mean_return_last`` (over ``window``), ``reached_s``/``reached_step`` (None if not reached),
    ``metrics`` (the last update's) and the ``learner``.
    """
    if algo not in ALGOS:
        raise invalid("--algo", algo, one_of(ALGOS))
    log = _Log(stop_at_return, window, log_every)
    run: Callable[..., tuple[Any, int, dict[str, float]]] = _train_dqn if algo == "dqn" else _train_ppo
    learner, steps, metrics = run(env_id, total_steps, seed, config, log)
    wall = time.perf_counter() - log.start
    return {
        "episode_returns": log.returns, "episode_lengths": log.lengths, "episode_env_steps": log.steps,
        "env_steps": steps, "updates": learner.updates, "wall_s": wall, "env_steps_per_s": steps / wall,
        "mean_return_last": log.mean_last(), "reached_s": log.reached_s, "reached_step": log.reached_step,
        "metrics": metrics, "learner": learner,
    }


def _train_dqn(env_id: str, total_steps: int, seed: int, cfg: DQNConfig | None, log: _Log) -> tuple[Any, int, dict[str, float]]:
    cfg = cfg or DQNConfig()
    actor = DQNActor(cfg, env_id, seed)
    learner = DQNLearner(cfg, actor.envs.single_observation_space, actor.envs.single_action_space, seed)
    sampler = "prioritized" if cfg.prioritized else "uniform"
    buf = ExperienceBuffer(cfg.buffer_size, sampler=sampler, seed=seed, alpha=cfg.per_alpha, beta=cfg.per_beta)
    actor.load_params(learner.params(), learner.updates)
    steps, credit, metrics = 0, 0.0, {}
    try:
        while steps < total_steps and not log.done():
            piece, episodes = actor.rollout(cfg.rollout_steps, global_step=steps)
            new = cfg.rollout_steps * actor.num_envs
            steps += new
            log.add(episodes, steps)
            buf.extend(flatten(piece))
            if steps < cfg.learning_starts:
                continue
            credit += new / cfg.train_frequency
            while credit >= 1.0:
                credit -= 1.0
                kwargs = {"beta": cfg.per_beta + (1.0 - cfg.per_beta) * min(1.0, steps / total_steps)} if cfg.prioritized else {}
                batch = buf.sample(cfg.batch_size, **kwargs)
                result = learner.update(batch)
                if result.priorities is not None:
                    buf.update_priority(batch["index"], result.priorities)
                metrics = result.metrics
            actor.load_params(learner.params(), learner.updates)
    finally:
        actor.close()
    return learner, steps, metrics


def _train_ppo(env_id: str, total_steps: int, seed: int, cfg: PPOConfig | None, log: _Log) -> tuple[Any, int, dict[str, float]]:
    cfg = cfg or PPOConfig()
    actor = PPOActor(cfg, env_id, seed)
    learner = PPOLearner(cfg, actor.envs.single_observation_space, actor.envs.single_action_space, seed)
    rollout_size = cfg.rollout_steps * actor.num_envs
    minibatch = -(-rollout_size // cfg.num_minibatches)  # ceil: exactly num_minibatches batches
    buf = ExperienceBuffer(rollout_size, seed=seed)  # holds one rollout; each extend overwrites it
    actor.load_params(learner.params(), learner.updates)
    steps, metrics = 0, {}
    try:
        while steps < total_steps and not log.done():
            learner.set_progress(steps / total_steps)
            piece, episodes = actor.rollout(cfg.rollout_steps)
            steps += rollout_size
            log.add(episodes, steps)
            buf.extend(flatten(piece))
            for _ in range(cfg.update_epochs):
                for batch in buf.epoch(minibatch):
                    metrics = learner.update(batch).metrics
            actor.load_params(learner.params(), learner.updates)
    finally:
        actor.close()
    return learner, steps, metrics
