"""PPO's minibatches at its preset: every epoch, the first included, draws each minibatch from the
whole rollout (issue 48: a first epoch of time-contiguous minibatches made janus PPO's greedy
evaluation trail SB3's, whose rollout buffer shuffles the whole rollout every epoch)."""

from __future__ import annotations

import time

import numpy as np
import pytest

from janus.algorithms import ppo_agent
from janus.algorithms.base import algorithm
from janus.buffer.pacing.queue_limiter import QueueLimiter
from janus.config import from_dict, resolve
from janus.runtime.run import run_runtime


def record_training(monkeypatch: pytest.MonkeyPatch) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Record the observations of every rollout the actor makes and of every minibatch the learner trains on."""
    rollouts: list[np.ndarray] = []
    minibatches: list[np.ndarray] = []
    rollout, update = ppo_agent.PPOActor.rollout, ppo_agent.PPOLearner.update

    def recorded_rollout(self, num_steps):
        piece, episodes = rollout(self, num_steps)
        rollouts.append(piece["obs"].copy())
        return piece, episodes

    def recorded_update(self, batch):
        minibatches.append(batch["obs"].numpy().copy())
        return update(self, batch)

    monkeypatch.setattr(ppo_agent.PPOActor, "rollout", recorded_rollout)
    monkeypatch.setattr(ppo_agent.PPOLearner, "update", recorded_update)
    return rollouts, minibatches


def time_steps(rollout: np.ndarray, minibatch: np.ndarray) -> np.ndarray:
    """The time index in ``rollout`` (``[T, num_envs, obs]``) of each row of ``minibatch``."""
    steps, envs = rollout.shape[:2]
    flat = rollout.reshape(steps * envs, -1)
    index = [np.flatnonzero((flat == row).all(axis=1)) for row in minibatch]
    assert all(len(i) == 1 for i in index), "each minibatch row is one transition of the rollout"
    return np.concatenate(index) // envs


def test_every_epoch_draws_each_minibatch_from_the_whole_rollout(monkeypatch):
    rollouts, minibatches = record_training(monkeypatch)
    cfg = resolve(from_dict({"seed": 0, "runtime": {"backend": "local"},
                             "workload": {"env": "CartPole-v1", "total_env_steps": 1024}},
                            base=from_dict(algorithm("ppo").preset)))  # the preset's overlaps and granularity
    w = cfg.workload
    run_runtime(cfg, timeout_s=300)
    per_rollout = cfg.janus.num_minibatches * w.num_epochs
    assert len(rollouts) == 2 and len(minibatches) == 2 * per_rollout
    quarters = w.rollout_length // 4
    for r, rollout in enumerate(rollouts):
        assert rollout.shape[:2] == (w.rollout_length, w.envs_per_actor)
        for k, minibatch in enumerate(minibatches[r * per_rollout:(r + 1) * per_rollout]):
            covered = set(time_steps(rollout, minibatch) // quarters)
            # 128 of 512 transitions drawn at random miss a whole quarter of the rollout with p < 1e-15
            assert covered == {0, 1, 2, 3}, f"rollout {r}, minibatch {k} (epoch {k // cfg.janus.num_minibatches}): " \
                                            f"only quarters {sorted(covered)} of the rollout"


def test_queue_says_when_an_item_is_written_whole():
    """What the first epoch's shuffle asks: a rollout written in pieces is whole only after its last
    piece, and stays so while it is served."""
    q = QueueLimiter(item_size=8, batches_per_item=2, serve_times=2)
    for n, whole in ((4, False), (4, True)):
        q.await_insert(n, time.perf_counter() + 5)
        q.commit_insert(n)
        assert q.item_written(0) is whole
    assert not q.item_written(1)
    for _ in range(4):  # two serves of two batches: the item is released after the last
        grant = q.await_sample(1, time.perf_counter() + 5)
        assert q.item_written(0)
        q.sample_done(grant)
    assert q.head == 1 and q.item_written(0) and not q.item_written(1)
