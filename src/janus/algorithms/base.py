"""The seam between the runtime and an algorithm (in the spirit of Acme's builders).

An :class:`Algorithm` says, in one place, everything the runtime needs to host it: its preset and
validation, what a Worker runs (:meth:`~Algorithm.actor`), what the Trainer runs
(:meth:`~Algorithm.learner`), its buffer (:meth:`~Algorithm.buffer_spec`), its budget
(:meth:`~Algorithm.budget`) and its pacing (:meth:`~Algorithm.pacing`). ``dqn``, ``ppo`` and
``synthetic`` register by name; :func:`algorithm` looks one up, importing its module lazily, so
``janus.config`` and ``janus.runtime`` never import an algorithm module themselves.
"""

from __future__ import annotations

import importlib
import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

import numpy as np

from janus.errors import invalid, one_of

if TYPE_CHECKING:
    from janus.config import RunConfig


class ActorSide(Protocol):
    """What a Worker runs: rolls out with the parameters it was given."""

    def rollout(self) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
        """One piece ``[T, envs, ...]`` of numpy arrays, and episode info (e.g. finished returns)."""

    def load_params(self, snapshot: Any) -> None:
        """Load a :class:`~janus.runtime.messages.ParamsSnapshot`."""


class LearnerSide(Protocol):
    """What the Trainer runs."""

    def update(self, batch: dict[str, Any]) -> Any:
        """One update; returns an object with ``priorities`` (or None) and ``metrics``."""

    def params(self) -> dict[str, np.ndarray]:
        """The policy's parameters as numpy arrays (published to the workers)."""


@dataclass(frozen=True)
class BufferSpec:
    """How the JanusBuffer of a run is built and what of it is checkpointed."""

    on_policy: bool
    sampler: str = "uniform"
    sampler_kwargs: dict[str, Any] = field(default_factory=dict)
    beta_final: float | None = None
    """Prioritized: the importance exponent is annealed linearly from ``sampler_kwargs["beta"]``
    to this over the run's updates (None: fixed)."""
    checkpoint_replay: bool = False
    """The replay buffer is part of a checkpoint (off-policy RL: it cannot be rebuilt)."""
    checkpoint_learner: bool = False
    """The learner is checkpointed (it has a policy worth resuming)."""
    frame_stack: bool = False
    """Off-policy: ``obs``/``next_obs`` are stacks of frames, stored once per frame
    (:class:`~janus.buffer.frames.FrameStackReplay`); pieces carry a ``stream`` field."""


@dataclass(frozen=True)
class Budget:
    """How long a run lasts."""

    total_updates: int
    """Learner batches the run trains for; the Orchestrator stops at this count."""
    iterations: int
    """Rollouts per worker (0: until stopped)."""
    env_steps: int = 0
    """Env steps the run takes exactly (0: not counted in env steps). When set, the run ends only
    once every worker sent all its ``iterations`` pieces and ``total_updates`` batches were trained."""


@dataclass(frozen=True)
class Pacing:
    """Rates and piece sizes: what the replay's rate limiter and the Workers are built from.

    Sizes are in transitions; ``error_buffer`` is in sampled transitions (see
    :class:`~janus.buffer.rate_limiter.RatioLimiter`).
    """

    samples_per_insert: float
    """Sampled transitions per inserted transition (0: no ratio, sampling bounded by in-flight only)."""
    min_size_to_sample: int
    """Transitions inserted before the first batch is sampled."""
    error_buffer: float
    """How far the sample/insert difference may drift either side of its target."""
    publish_every: int
    """Trained batches between parameter versions (not a ratio: how fresh the actors' policy is)."""
    piece_steps: int
    """Vector-env steps per piece a Worker sends."""
    pieces_per_rollout: int
    """Pieces per rollout (on-policy lockstep: a new version is needed every rollout)."""
    max_pieces: int
    """Pieces a Worker produces in all (0: until stopped)."""
    lockstep: bool
    """On-policy: rollout ``i`` acts with the parameters trained on rollout ``i-1`` (correctness)."""


class Algorithm:
    """One algorithm as the runtime hosts it. Subclasses override what differs from these defaults."""

    name: str = ""
    on_policy: bool = False
    preset: ClassVar[dict[str, Any]] = {}
    """Config defaults (``from_dict`` shape) that ``--algo NAME`` starts from."""
    quick_env_steps: int | None = None
    """``--quick``: at most this many env steps (None: the workload's ``iterations`` bound it)."""
    has_policy: bool = False
    """``janus rollout`` can run its checkpointed policy; ``janus train`` checkpoints it."""
    acts_in_gymnasium: bool = False
    """It acts in Gymnasium environments (reads ``workload.env`` and the env-step budget), not in the
    synthetic workload (``workload.obs_shape``, ``iterations`` ...)."""

    def is_on_policy(self, cfg: RunConfig) -> bool:
        """Whether a run of this algorithm is on-policy (fixed, except for the synthetic workload)."""
        return self.on_policy

    def validate(self, cfg: RunConfig) -> None:
        """Raise :class:`~janus.errors.ConfigError` for settings this algorithm cannot run."""

    def hyperparameters(self, cfg: RunConfig) -> dict[str, Any]:
        """Every hyperparameter a run of ``cfg`` uses, as the ``algorithm:`` section of its
        config.yaml records it (none: the data-path config is the whole configuration)."""
        return {}

    def actor(self, cfg: RunConfig, index: int, initial_env_steps: int = 0, instance: int = 0,
              session: int = 0) -> ActorSide:
        """What worker ``index`` runs. Its experience stream (environment and exploration seeds) is
        named by ``(cfg.seed, index, session, instance)``: see :mod:`janus.algorithms.seeding`.
        ``instance``: 0 for the worker's first instance, +1 per restart; ``session``: 0 for a fresh
        run, ``1 + env steps resumed from`` for a ``--resume`` session; ``initial_env_steps``:
        where this worker's schedules (exploration) continue from."""
        raise NotImplementedError

    def learner(self, cfg: RunConfig) -> LearnerSide:
        raise NotImplementedError

    def buffer_spec(self, cfg: RunConfig) -> BufferSpec:
        return BufferSpec(on_policy=self.is_on_policy(cfg))

    def budget(self, cfg: RunConfig) -> Budget:
        return Budget(cfg.workload.iterations * cfg.updates_per_iteration, cfg.workload.iterations)

    def rates(self, cfg: RunConfig) -> tuple[int, float]:
        """``(min_size_to_sample, samples_per_insert)``: the runtime's settings by default."""
        r = cfg.runtime
        return r.min_inserts or cfg.minibatch_size, r.samples_per_insert

    def publish_every(self, cfg: RunConfig) -> int:
        """Trained batches between parameter versions: one per rollout on-policy."""
        return cfg.updates_per_iteration if self.is_on_policy(cfg) else cfg.runtime.samples_per_param_load

    def pacing(self, cfg: RunConfig) -> Pacing:
        w, j = cfg.workload, cfg.janus
        iterations = self.budget(cfg).iterations
        on_policy = self.is_on_policy(cfg)
        if on_policy:
            piece_steps = round(w.rollout_length * j.g_collect)
            pieces = math.ceil(w.rollout_length / piece_steps)
        else:
            piece_steps, pieces = w.rollout_length, 1
        min_size, spi = self.rates(cfg)
        piece = piece_steps * w.envs_per_actor
        return Pacing(
            samples_per_insert=spi, min_size_to_sample=min_size,
            error_buffer=default_error_buffer(spi, piece, w.num_actors, cfg.minibatch_size,
                                              largest_insert=largest_insert(cfg, piece)),
            publish_every=self.publish_every(cfg), piece_steps=piece_steps, pieces_per_rollout=pieces,
            max_pieces=iterations * pieces, lockstep=on_policy,
        )


def default_error_buffer(samples_per_insert: float, piece: int, workers: int, batch: int,
                         largest_insert: int = 0) -> float:
    """Two rounds of one piece from every worker (in sampled transitions), and at least the
    replay's largest insert, plus one batch: workers keep a round in flight while the learner
    works through the previous one, and the replay can always admit its next collection."""
    return samples_per_insert * max(2 * piece * workers, largest_insert) + batch


def largest_insert(cfg: RunConfig, piece: int) -> int:
    """The most transitions the replay's collection writes at once, off-policy: ``g_collect``
    puts of the node with the most workers (its proxy merges one piece of each)."""
    per_node = min(cfg.runtime.workers_per_node or cfg.workload.num_actors, cfg.workload.num_actors)
    return max(1, round(cfg.janus.g_collect)) * per_node * piece


# ---- the registry ------------------------------------------------------------------------------
MODULES = {
    "synthetic": "janus.algorithms.synthetic",
    "dqn": "janus.algorithms.dqn",
    "ppo": "janus.algorithms.ppo",
    "sac": "janus.algorithms.sac",
}
"""Name -> module that registers it when imported (looked up lazily)."""
_REGISTRY: dict[str, Algorithm] = {}


def register(algo: Algorithm) -> Algorithm:
    """Make ``algo`` available under ``algo.name`` (called by its module on import)."""
    _REGISTRY[algo.name] = algo
    return algo


def names() -> tuple[str, ...]:
    """Every algorithm ``workload.algo`` / ``--algo`` accepts."""
    return tuple(sorted(set(MODULES) | set(_REGISTRY)))


def algorithm(name: str) -> Algorithm:
    """The algorithm registered as ``name``; raises ConfigError naming the accepted values."""
    if not isinstance(name, str):
        raise invalid("workload.algo", name, one_of(names()))
    if name not in _REGISTRY and name in MODULES:
        importlib.import_module(MODULES[name])
    if name not in _REGISTRY:
        raise invalid("workload.algo", name, one_of(names()))
    return _REGISTRY[name]
