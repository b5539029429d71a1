"""Run one configuration of the synthetic workload through a JanusBuffer and measure it.

Actors run in threads (``num_actors``), the learner in the calling thread. Each run does a fixed
amount of work — ``iterations`` rollouts per actor and ``iterations x updates_per_iteration``
learner updates — so stage times of different configurations are comparable. On-policy, actors
start rollout ``i+1`` only once the learner has finished the updates of rollout ``i`` (the policy
they act with must be the new one); off-policy they run freely.
"""

from __future__ import annotations

import threading
import time
from typing import Any, Callable

import torch

from janus.buffer.janus import JanusBuffer
from janus.config import RunConfig
from janus.workload.synthetic import SyntheticActor, SyntheticLearner

Progress = Callable[[int, int], None]  # (updates done, updates total)
GET_TIMEOUT_S = 120.0


class PolicyVersion:
    """On-policy barrier: the learner publishes a version per iteration; actors wait for it."""

    def __init__(self) -> None:
        self._version = 0
        self._cond = threading.Condition()
        self._stopped = False

    def publish(self, version: int) -> None:
        with self._cond:
            self._version = version
            self._cond.notify_all()

    def wait_for(self, version: int) -> bool:
        """Block until ``version`` is published; False if the run was stopped."""
        with self._cond:
            self._cond.wait_for(lambda: self._version >= version or self._stopped)
            return not self._stopped

    def stop(self) -> None:
        with self._cond:
            self._stopped = True
            self._cond.notify_all()


def run_synthetic(cfg: RunConfig, progress: Progress | None = None) -> dict[str, Any]:
    """Run ``cfg`` (already resolved) and return the measured run dict (see harness.report)."""
    torch.set_num_threads(1)
    j, w = cfg.janus, cfg.workload
    on_policy = j.is_on_policy
    piece_steps = round(w.rollout_length * j.g_collect) if on_policy else w.rollout_length
    buffer = JanusBuffer(
        j, rollout_size=cfg.rollout_transitions if on_policy else None, num_epochs=w.num_epochs, seed=cfg.seed
    )
    learner = SyntheticLearner(w, torch.device(j.learner_device), cfg.seed)
    actors = [
        SyntheticActor(w, torch.device(j.actor_device), cfg.seed * 1000 + i, not on_policy, piece_steps)
        for i in range(w.num_actors)
    ]
    version = PolicyVersion()
    errors: list[BaseException] = []
    running = [len(actors)]
    running_lock = threading.Lock()

    def act(actor: SyntheticActor) -> None:
        torch.set_num_threads(1)
        try:
            for it in range(w.iterations):
                if on_policy and not version.wait_for(it):
                    return
                for piece in actor.rollout():
                    buffer.put(piece, timeout=GET_TIMEOUT_S)
            with running_lock:
                running[0] -= 1
                last = running[0] == 0
            if last and not on_policy:
                buffer.flush()  # pieces below the collection granularity must not be stranded
        except BaseException as exc:  # noqa: BLE001 - surfaced by the learner loop below
            errors.append(exc)

    threads = [threading.Thread(target=act, args=(a,), name=f"actor-{i}", daemon=True) for i, a in enumerate(actors)]
    total = w.iterations * cfg.updates_per_iteration
    update_s, done = 0.0, 0
    start = time.perf_counter()
    for t in threads:
        t.start()
    try:
        for it in range(w.iterations):
            for _ in range(cfg.updates_per_iteration):
                if errors:
                    raise errors[0]
                batch = buffer.get(timeout=GET_TIMEOUT_S)
                t0 = time.perf_counter()
                learner.update(batch)
                update_s += time.perf_counter() - t0
                done += 1
                if progress is not None:
                    progress(done, total)
            version.publish(it + 1)
        for t in threads:
            t.join()
        if errors:
            raise errors[0]
        wall = time.perf_counter() - start
    finally:
        version.stop()
        buffer.close()
        for t in threads:
            t.join(timeout=10)
    stats = buffer.stats
    steps = sum(a.steps for a in actors) * w.envs_per_actor
    return {
        "name": cfg.name,
        "config": cfg.to_dict(),
        "samples_per_s": done * cfg.minibatch_size / wall,
        "actor_steps_per_s": steps / wall,
        "wall_s": wall,
        "stage_s": {
            "rollout": sum(a.step_s for a in actors) / len(actors),
            "collect": stats.collect_s,
            "select": stats.select_s,
            "update": update_s,
            "learner_wait": stats.learner_wait_s,
            "actor_blocked": stats.actor_blocked_s,
        },
        "counts": {
            "updates": done,
            "transitions_produced": steps,
            "transitions_collected": stats.transitions_collected,
            "collect_calls": stats.collect_calls,
            "select_calls": stats.select_calls,
            "batches_selected": stats.batches_selected,
        },
    }
