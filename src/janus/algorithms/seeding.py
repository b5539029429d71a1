"""Seeds of the experience streams: every worker instance acts in a stream of its own.

A stream is named by ``(run seed, worker index, session, instance)``: ``session`` is 0 for a run
started afresh and ``1 + env steps resumed from`` for a ``--resume`` session, ``instance`` is 0 for a
worker's first instance and +1 per restart. Numpy's :class:`~numpy.random.SeedSequence` derives
from that name, by spawn keys, the reset seed of each sub-environment, the numpy generator of
exploration draws (DQN's epsilon, SAC's warm-up) and the seed of torch sampling (PPO, SAC). Two
distinct names never share a derivation, so no two workers, no restarted worker and its
predecessor, and no two sessions of a resumed run replay each other's episodes or draws (the old
``seed * 1000 + index``, with sub-env ``i`` at ``+ i``, gave actors 0 and 1 three of four env seeds
in common and a restarted worker its predecessor's). The same name always gives the same seeds:
a ``--seed`` run on the serial scheduler stays reproducible.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from janus.buffer.arguments import check_int


@dataclass(frozen=True)
class StreamSeeds:
    """The seeds of one worker instance's experience (see the module doc)."""

    envs: tuple[int, ...]
    """One reset seed per sub-environment (32-bit: any environment accepts it)."""
    explore: np.random.SeedSequence
    """Seeds the numpy generator of exploration draws (:meth:`numpy`)."""
    torch_seed: int
    """Seeds the torch generator of sampled actions (64-bit)."""
    spaces: int
    """Seeds the vector env's action and observation spaces (32-bit)."""

    def numpy(self) -> np.random.Generator:
        """A fresh numpy generator of this stream's exploration draws."""
        return np.random.default_rng(self.explore)


def _check(name: str, value: int) -> int:
    check_int(name, value, 0)
    return int(value)  # a numpy integer as a Python int


def stream_seeds(run_seed: int, worker: int, num_envs: int, *, instance: int = 0, session: int = 0) -> StreamSeeds:
    """The seeds of worker ``worker``'s instance ``instance`` in session ``session`` of the run
    seeded ``run_seed``, for ``num_envs`` sub-environments. Raises ``ConfigError`` naming the
    argument for a negative or non-integer one."""
    key = tuple(_check(n, v) for n, v in (("worker", worker), ("session", session), ("instance", instance)))
    num_envs = _check("num_envs", num_envs)
    root = np.random.SeedSequence(_check("seed", run_seed), spawn_key=key)
    envs, explore, torch_seq, spaces = root.spawn(4)
    env_seeds = tuple(int(child.generate_state(1, np.uint32)[0]) for child in envs.spawn(num_envs))
    return StreamSeeds(envs=env_seeds, explore=explore, torch_seed=int(torch_seq.generate_state(1, np.uint64)[0]),
                       spaces=int(spaces.generate_state(1, np.uint32)[0]))


def as_stream_seeds(seed: int | StreamSeeds, num_envs: int) -> StreamSeeds:
    """``seed`` itself, or for a plain integer the stream of worker 0 of a run seeded ``seed``
    (an actor built directly, outside the runtime)."""
    return seed if isinstance(seed, StreamSeeds) else stream_seeds(seed, 0, num_envs)
