"""The seam between janus and an algorithm (in the spirit of Acme's builders).

An :class:`Algorithm` says, in one place, everything janus asks of an algorithm: its preset and
validation, what a Worker runs (:meth:`~Algorithm.actor`), what the Trainer runs
(:meth:`~Algorithm.learner`), its buffer (:meth:`~Algorithm.buffer_spec`), its budget
(:meth:`~Algorithm.budget`), its rates (:meth:`~Algorithm.rates`, :meth:`~Algorithm.pacing`), the
policy evaluation, ``janus rollout`` and ``load_policy`` act with (:meth:`~Algorithm.policy`), its
command-line flags (:meth:`~Algorithm.flags`) and what a run of it records
(:meth:`~Algorithm.hyperparameters`, :attr:`~Algorithm.acts_in_gymnasium`). Nothing outside
``janus.algorithms`` asks which algorithm it has.

``dqn``, ``ppo``, ``sac``, ``appo``, ``impala``, ``r2d2`` and ``synthetic`` register by name (``--algo`` in any case);
:func:`algorithm` looks one up, importing its module lazily (so ``janus.config`` and ``janus.runtime``
never import an algorithm module themselves), and imports a custom one named ``package.module:Name`` (see
docs/custom-algorithm.md); :func:`register` adds one from Python.
"""

from __future__ import annotations

import importlib
import math
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol

import numpy as np

from janus.algorithms.pacing import Pacing, default_error_buffer, largest_insert
from janus.algorithms.tunable import TunableRange
from janus.buffer.pacing.collection import piece_steps as rollout_piece_steps
from janus.config.schema import RunConfig
from janus.errors import ConfigError, invalid, one_of, shown
from janus.user_code import call_user_code, import_user_module


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
    (:class:`~janus.buffer.frames.replay.FrameStackReplay`); pieces carry a ``stream`` field."""
    queue_depth: int = 1
    """On-policy: items (rounds of one piece per worker) the queue holds admitted and not yet served;
    1 for lockstep PPO, more for an asynchronous algorithm whose workers run ahead of the learner."""
    max_staleness: int | None = None
    """On-policy: parameter versions an item may lag the learner's before it is dropped (None: no bound)."""
    row_steps: int = 1
    """Env steps per row the replay stores: 1 for transitions, ``rollout_length`` where each row is a
    whole trajectory (IMPALA/APPO: the replay's shuffles then move trajectories, never split one)."""


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


class ActingPolicy(Protocol):
    """What evaluation, ``janus rollout`` and :func:`janus.load_policy` act with (:meth:`Algorithm.policy`)."""

    def act(self, obs: np.ndarray, deterministic: bool) -> np.ndarray:
        """Actions for a batch of observations (float32, ``[batch, *obs_shape]``); the caller fits
        them to the environment's action space (clips a Box, offsets a Discrete's ``start``)."""

    def load_params(self, params: Mapping[str, Any]) -> None:
        """Act with ``params``, as :meth:`LearnerSide.params` published them (numpy arrays or tensors)."""


class RecurrentActingPolicy(ActingPolicy, Protocol):
    """An acting policy with memory: it acts on an observation and the recurrent state it carries
    per env (:mod:`janus.algorithms.recurrent`)."""

    state_size: int
    """Floats of state per env (> 0); the state at an episode's start is zeros ``[batch, state_size]``."""

    def act_with_state(self, obs: np.ndarray, state: np.ndarray, deterministic: bool) -> tuple[np.ndarray, np.ndarray]:
        """Actions and the next state (float32 ``[batch, state_size]``) for a batch of observations and
        states. The caller zeroes the state rows of envs whose episode ended before their next step."""


def is_recurrent(policy: Any) -> bool:
    """Whether ``policy`` carries a recurrent state (a :class:`RecurrentActingPolicy`: ``state_size > 0``)."""
    size = getattr(policy, "state_size", 0)
    return isinstance(size, int) and size > 0 and callable(getattr(policy, "act_with_state", None))


class CheckpointedLearnerSide(LearnerSide, Protocol):
    """A learner side whose state a checkpoint holds (:attr:`BufferSpec.checkpoint_learner`)."""

    def state_dict(self) -> dict[str, Any]:
        """Everything needed to continue training (parameters, optimiser, counters)."""

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue from a :meth:`state_dict`."""


@dataclass(frozen=True)
class Hyperparameter:
    """One key of an algorithm's ``algorithm:`` section, and its ``--flag``: its default and help."""

    default: bool | int | float | str
    """What a run uses when the key is not set (its type is the flag's type)."""
    doc: str = ""
    """The flag's help text."""


@dataclass(frozen=True)
class FamilyPreset:
    """An algorithm's overlay for one environment family (:attr:`Algorithm.family_presets`), and
    where its values come from."""

    values: dict[str, Any] = field(default_factory=dict)
    """Config keys as :func:`janus.config.from_dict` reads them, layered over the algorithm's preset."""
    source: str = "janus defaults"
    """Shown at the start of ``janus train``: ``RL Zoo dqn.yml, atari``."""


OWN_PRESET = FamilyPreset({}, "janus defaults, tuned on CartPole-v1/Pendulum-v1")
"""The overlay of a family an algorithm's own :attr:`~Algorithm.preset` is tuned for: none."""


class Algorithm(ABC):
    """One algorithm as janus hosts it: subclasses define :meth:`actor` and :meth:`learner` and
    override what differs from these defaults."""

    name: str = ""
    """The name ``--algo`` / ``workload.algo`` gives (a custom algorithm: its ``package.module:Name``)."""
    on_policy: bool = False
    """Whether it learns on-policy: stated here only; the data path's ``is_on_policy`` follows it."""
    preset: ClassVar[dict[str, Any]] = {}
    """Config defaults (``from_dict`` shape) that ``--algo NAME`` starts from."""
    family_presets: ClassVar[Mapping[str, FamilyPreset]] = {}
    """Environment family (:data:`janus.algorithms.presets.FAMILIES`) -> the overlay a run on an
    environment of that family layers over :attr:`preset` (``--preset``; a family not here: none)."""
    tunable_ranges: ClassVar[Mapping[str, TunableRange]] = {}
    """Config path (``algorithm.lr``, ``batch_size``) -> the range ``janus tune --objective time_to_solve``
    searches (:mod:`janus.algorithms.tunable`); none: that tune searches the data-path knobs only."""
    quick_env_steps: int | None = None
    """``--quick``: at most this many env steps (None: the workload's ``iterations`` bound it)."""
    has_policy: bool = False
    """It has a policy worth keeping: ``janus train`` checkpoints it and can resume, evaluation,
    ``janus rollout`` and ``load_policy`` act with it (:meth:`policy`)."""
    acts_in_gymnasium: bool = False
    """It acts in Gymnasium environments (reads ``workload.env`` and the env-step budget), not in the
    synthetic workload (its ``synthetic:`` section, ``workload.iterations`` ...)."""
    simulates_environments: bool = False
    """Its environments are simulated, their work fixed by the run's workers and envs (the synthetic
    workload): ``janus tune`` keeps those and compares learner samples/s (:attr:`throughput_metric`)."""

    @property
    def throughput_metric(self) -> str:
        """What its throughput is counted in: ``env_steps_per_s``, or ``samples_per_s`` (learner
        samples) where :attr:`simulates_environments`."""
        return "samples_per_s" if self.simulates_environments else "env_steps_per_s"

    def is_on_policy(self, cfg: RunConfig) -> bool:
        """Whether a run of ``cfg`` is on-policy: :attr:`on_policy` (the synthetic workload reads its config)."""
        return self.on_policy

    # ---- configuration: flags, checks, what a run records ---------------------------------------
    def flags(self) -> dict[str, Hyperparameter]:
        """Its hyperparameters: the keys of the ``algorithm:`` section, each also a ``--flag`` of
        ``janus train`` (none by default)."""
        return {}

    def check_hyperparameter(self, key: str, value: Any) -> None:
        """Raise ConfigError unless ``value`` suits ``algorithm.<key>`` (by default: the type of its default)."""
        default = self.flags()[key].default
        if isinstance(default, bool):
            ok = isinstance(value, bool)
        elif isinstance(default, str):
            ok = isinstance(value, str)
        elif isinstance(default, int):
            ok = isinstance(value, int) and not isinstance(value, bool)
        else:
            ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
        if not ok:
            raise invalid(f"algorithm.{key}", value, "true or false" if isinstance(default, bool) else "a string"
                          if isinstance(default, str) else "an integer" if isinstance(default, int) else "a finite number")

    def validate(self, cfg: RunConfig) -> None:
        """Raise :class:`~janus.errors.ConfigError` for settings this algorithm cannot run (by default:
        an ``algorithm:`` key that is not one of :meth:`flags`, or a value of the wrong type)."""
        known = self.flags()
        for key, value in cfg.algorithm.items():
            if key not in known:
                accepted = ", ".join(sorted(known)) or "none"
                raise ConfigError(f"unknown key {key!r} in algorithm; accepted keys for {self.name}: {accepted}")
            self.check_hyperparameter(key, value)

    def defaults(self) -> dict[str, Any]:
        """Every key of its ``algorithm:`` section at its default (what a config.yaml left unset means)."""
        return {key: h.default for key, h in self.flags().items()}

    def hyperparameter(self, cfg: RunConfig, key: str) -> Any:
        """The value of hyperparameter ``key`` in a run of ``cfg`` (its default when not set)."""
        return cfg.algorithm.get(key, self.flags()[key].default)

    def hyperparameters(self, cfg: RunConfig) -> dict[str, Any]:
        """Every hyperparameter a run of ``cfg`` uses, defaults included, as the ``algorithm:``
        section of its config.yaml records it (none: the data-path config is the whole configuration)."""
        return {key: self.hyperparameter(cfg, key) for key in self.flags()}

    def hidden_layers(self, cfg: RunConfig) -> tuple[int, ...] | None:
        """The widths of its network's hidden layers where ``--hidden_size``/``--num_layers`` set
        them as ``algorithm.hidden``; None where those flags are the workload's own fields."""
        return None

    def network_widths(self, cfg: RunConfig) -> tuple[int, ...] | None:
        """The widths of its network's hidden layers, for the memory estimate of
        :mod:`janus.config.resources` (None: unknown; by default :meth:`hidden_layers`)."""
        return self.hidden_layers(cfg)

    def observations(self, cfg: RunConfig) -> tuple[tuple[int, ...], int, bool] | None:
        """Where it does not act in Gymnasium (whose spaces say it): the shape of one observation,
        its bytes per element and whether it is a frame stack; None (the default) when unknown."""
        return None

    # ---- what the runtime hosts -------------------------------------------------------------------
    @abstractmethod
    def actor(self, cfg: RunConfig, index: int, initial_env_steps: int = 0, instance: int = 0,
              session: int = 0) -> ActorSide:
        """What worker ``index`` runs. Its experience stream (environment and exploration seeds) is
        named by ``(cfg.seed, index, session, instance)``: see :mod:`janus.algorithms.seeding`.
        ``instance``: 0 for the worker's first instance, +1 per restart; ``session``: 0 for a fresh
        run, ``1 + env steps resumed from`` for a ``--resume`` session; ``initial_env_steps``:
        where this worker's schedules (exploration) continue from."""

    @abstractmethod
    def learner(self, cfg: RunConfig) -> LearnerSide:
        """What the Trainer runs (with :attr:`has_policy`, a :class:`CheckpointedLearnerSide`)."""

    def policy(self, cfg: RunConfig, learner: Any) -> ActingPolicy:
        """What evaluation, ``janus rollout`` and ``load_policy`` act with, from a learner side of
        :meth:`learner` (an algorithm with :attr:`has_policy` defines it)."""
        raise ConfigError(f"--algo {self.name} has no acting policy: {type(self).__name__} does not define "
                          f"policy(cfg, learner) (and has_policy is {self.has_policy})")

    def buffer_spec(self, cfg: RunConfig) -> BufferSpec:
        """How its replay is built and checkpointed (by default: uniform, its learner checkpointed
        with :attr:`has_policy`, and an off-policy replay with it)."""
        on_policy = self.is_on_policy(cfg)
        return BufferSpec(on_policy=on_policy, checkpoint_learner=self.has_policy,
                          checkpoint_replay=self.has_policy and not on_policy)

    def budget(self, cfg: RunConfig) -> Budget:
        """How long a run lasts (by default: ``workload.iterations`` rollouts per worker)."""
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
        if on_policy:  # pieces tile the rollout, g_collect (k/M) of it whole pieces: the collection unit's
            piece_steps = rollout_piece_steps(w.rollout_length, j.g_collect)
            pieces = w.rollout_length // piece_steps
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


# ---- the registry ------------------------------------------------------------------------------
MODULES = {
    "synthetic": "janus.algorithms.synthetic",
    "dqn": "janus.algorithms.dqn",
    "ppo": "janus.algorithms.ppo",
    "sac": "janus.algorithms.sac",
    "impala": "janus.algorithms.impala",
    "appo": "janus.algorithms.impala",
    "r2d2": "janus.algorithms.r2d2",
}
"""Name -> module that registers it when imported (looked up lazily)."""
_REGISTRY: dict[str, Algorithm] = {}
CUSTOM = "package.module:Name of a custom algorithm (docs/custom-algorithm.md)"


def register(algo: Algorithm | type[Algorithm], name: str | None = None) -> Algorithm:
    """Make ``algo`` (an :class:`Algorithm`, or a subclass: instantiated) available to ``--algo`` and
    ``workload.algo`` under ``name`` (default: its :attr:`~Algorithm.name`) in this process."""
    where = name or getattr(algo, "name", "") or repr(algo)
    if isinstance(algo, type) and issubclass(algo, Algorithm):
        algo = _instantiate(algo, where)
    if not isinstance(algo, Algorithm):
        raise ConfigError(f"cannot register {shown(repr(algo), 100)} as an algorithm: it is a {type(algo).__name__}, "
                          f"not a janus Algorithm (an instance or subclass of janus.algorithms.Algorithm)")
    key = name or algo.name
    if not isinstance(key, str) or not key:
        raise ConfigError(f"cannot register {type(algo).__name__}: it has no name; set its class attribute "
                          f"`name` or pass register(algo, name=...)")
    if not algo.name:
        algo.name = key
    _REGISTRY[key] = algo
    return algo


def names() -> tuple[str, ...]:
    """Every algorithm ``workload.algo`` / ``--algo`` accepts by name (custom ones once registered)."""
    return tuple(sorted(set(MODULES) | set(_REGISTRY)))


def canonical_name(name: Any) -> Any:
    """``name`` as the registry spells it: a built-in or registered name in any case (``PPO`` is
    ``ppo``); a custom ``package.module:Name`` and anything unknown are returned as given."""
    if not isinstance(name, str) or ":" in name or name in MODULES or name in _REGISTRY:
        return name
    matches = [n for n in names() if n.lower() == name.lower()]
    return matches[0] if len(matches) == 1 else name


def algorithm(name: str) -> Algorithm:
    """The algorithm registered as ``name`` (in any case: :func:`canonical_name`), importing a
    built-in one's module or a custom ``package.module:Name`` on first use; raises ConfigError
    naming the accepted values."""
    if not isinstance(name, str):
        raise invalid("workload.algo", name, f"{one_of(names())}, or a {CUSTOM}")
    name = canonical_name(name)
    if name not in _REGISTRY and name in MODULES:
        importlib.import_module(MODULES[name])
    if name not in _REGISTRY and ":" in name:
        register(_imported(name), name)
    if name not in _REGISTRY:
        raise invalid("workload.algo", name, f"{one_of(names())}, or a {CUSTOM}")
    return _REGISTRY[name]


def learns_on_policy(cfg: RunConfig) -> bool:
    """Whether a run of ``cfg`` learns on-policy, as its algorithm says (:meth:`Algorithm.is_on_policy`,
    which the validated config's ``janus.is_on_policy`` copies): the one place it is decided, for a
    config validated or not."""
    return algorithm(cfg.workload.algo).is_on_policy(cfg)


def _imported(spec: str) -> Algorithm | type[Algorithm]:
    """The attribute ``Name`` of module ``package.module`` that ``spec`` names (an Algorithm or a subclass)."""
    module_name, _, attr = spec.partition(":")
    what = f"workload.algo {shown(spec, 200)}"
    if not module_name or not attr.isidentifier():
        raise ConfigError(f"invalid {what}: a custom algorithm is named package.module:Name (Name an attribute "
                          f"of the module)")
    try:
        module = import_user_module(module_name, what)
    except ConfigError as exc:  # ImportError, or whatever the module raised as it ran (sys.exit too)
        raise ConfigError(f"{exc}; a custom algorithm's module must be importable (on PYTHONPATH) wherever a run of "
                          f"it starts, resumes, is rolled out or loaded") from exc.__cause__
    found = getattr(module, attr, None)
    if found is None:
        raise ConfigError(f"{what}: module {module_name!r} has no attribute {attr!r}")
    if not (isinstance(found, Algorithm) or (isinstance(found, type) and issubclass(found, Algorithm))):
        raise ConfigError(f"{what}: {module_name}.{attr} is a {type(found).__name__}, not a janus Algorithm "
                          f"(an instance or subclass of janus.algorithms.Algorithm)")
    return found


def _instantiate(cls: type[Algorithm], where: str) -> Algorithm:
    """``cls()``; a ConfigError naming the methods a subclass left undefined."""
    missing = sorted(getattr(cls, "__abstractmethods__", ()))
    if missing:
        raise ConfigError(f"algorithm {where}: {cls.__name__} does not define {', '.join(missing)}; an Algorithm "
                          f"defines actor(cfg, index, ...) and learner(cfg) (see docs/custom-algorithm.md)")
    return call_user_code(cls, f"algorithm {where}: {cls.__name__}()")
