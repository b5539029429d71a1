"""What DQN and PPO share as runtime algorithms: the ``algorithm:`` section, its checks, the adapters.

The data-path knobs are the one place of what they name, read from the run's config where used:
``batch_size`` and ``buffer_capacity`` (DQN, SAC), ``num_minibatches`` (PPO),
``workload.envs_per_actor`` (envs per worker), ``workload.rollout_length`` (steps per piece),
``workload.num_epochs`` (PPO epochs). Everything else is a field of the algorithm's config
dataclass, set in the ``algorithm:`` section.
"""

from __future__ import annotations

import functools
import json
import math
from dataclasses import asdict, fields
from typing import Any, ClassVar

from janus.algorithms.base import ActingPolicy, Algorithm, Budget, BufferSpec, Hyperparameter
from janus.config.schema import RunConfig, field_docs
from janus.envs.reward_scaling import DISCOUNTED_RETURN
from janus.errors import ConfigError, invalid, one_of

MAPPED = {  # a key an algorithm: section may not set -> where the data-path config sets it
    "num_envs": "workload.envs_per_actor", "rollout_steps": "workload.rollout_length",
    "batch_size": "batch_size (top level)", "buffer_size": "buffer_capacity (top level)",
    "num_minibatches": "num_minibatches (top level)", "update_epochs": "workload.num_epochs",
}
UNIT_INTERVAL = {"gamma", "gae_lambda", "eps_start", "eps_end", "clip_coef", "per_alpha", "per_beta", "per_beta_final", "tau",
                  "priority_eta"}
NOT_FLAGS = {"hidden", "critic_hidden"}  # set through --net_arch (--hidden_size, --num_layers) and --critic_net_arch
NETWORK_KEYS = ("hidden", "critic_hidden", "activation")
"""The keys that shape the MLP of vector observations (image observations get a fixed CNN torso)."""
EMPTY_OK = {"critic_hidden"}  # a list of widths that may be empty (then: as hidden)
ZERO_OK = {"learning_starts", "exploration_steps", "burn_in", "seq_len"}  # integers that may be 0
POSITIVE = {"lr", "train_frequency", "init_alpha"}  # numbers that must be > 0
SIGNED = {"init_log_std"}  # any finite number


class GymAlgorithm(Algorithm):
    """An algorithm acting in Gymnasium environments, configured by a dataclass (``config_class``)."""

    config_class: type = object
    """The algorithm's hyperparameter dataclass (the ``algorithm:`` section's field names)."""
    action_spaces: tuple[type, ...] = ()
    """Gymnasium action spaces it supports."""
    action_space_hint = ""
    """Appended to the error for an unsupported action space (what to use instead)."""
    image_observations = True
    """Whether it has a CNN for image observations (see :mod:`janus.algorithms.networks`)."""
    variant_defaults: ClassVar[dict[str, Any]] = {}
    """Defaults of this algorithm over its config dataclass's, for a variant sharing the dataclass
    (``appo`` sets IMPALA's ``clip_coef``): what its runs, flags and ``--help`` start from."""
    has_policy = True
    acts_in_gymnasium = True

    def config(self, cfg: RunConfig) -> Any:
        """The algorithm's config dataclass of a run: its defaults with the ``algorithm:`` overrides."""
        overrides = {**self.variant_defaults, **dict(cfg.algorithm)}
        for key in ("hidden", "critic_hidden"):
            if isinstance(overrides.get(key), list):
                overrides[key] = tuple(overrides[key])
        return self.config_class(**overrides)

    def buffer_spec(self, cfg: RunConfig) -> BufferSpec:
        return BufferSpec(on_policy=self.on_policy, checkpoint_replay=not self.on_policy, checkpoint_learner=True)

    def flags(self) -> dict[str, Hyperparameter]:
        """Every field of its config dataclass except the widths (``--net_arch``, ``--critic_net_arch``)."""
        defaults, docs = self.config_class(**self.variant_defaults), field_docs(self.config_class)
        return {f.name: Hyperparameter(getattr(defaults, f.name), docs.get(f.name, ""))
                for f in fields(self.config_class) if f.name not in NOT_FLAGS}

    def check_hyperparameter(self, key: str, value: Any) -> None:
        check_value(key, value, getattr(self.config_class(), key))

    def hyperparameter(self, cfg: RunConfig, key: str) -> Any:
        return getattr(self.config(cfg), key)

    def hidden_layers(self, cfg: RunConfig) -> tuple[int, ...]:
        return tuple(self.config(cfg).hidden)

    def defaults(self) -> dict[str, Any]:
        values = asdict(self.config_class(**self.variant_defaults))
        return {k: list(v) if isinstance(v, tuple) else v for k, v in values.items()}

    def policy(self, cfg: RunConfig, learner: Any) -> ActingPolicy:
        """The learner's network (a :class:`GymLearnerSide`'s, or, as the runtime's evaluator gives
        it, the bare learner), acting through the learner's ``act``."""
        return LearnerPolicy(learner.learner if isinstance(learner, GymLearnerSide) else learner)

    def hyperparameters(self, cfg: RunConfig) -> dict[str, Any]:
        """Every field of the run's config dataclass, defaults included, except, for image
        observations, the MLP's :data:`NETWORK_KEYS` (the CNN torso is fixed; they are refused for them)."""
        values = asdict(self.config(cfg))
        out = {k: list(v) if isinstance(v, tuple) else v for k, v in values.items()}
        if NETWORK_KEYS[0] in out and image_observations(cfg.workload.env, cfg.workload.env_kwargs):
            out = {k: v for k, v in out.items() if k not in NETWORK_KEYS}
        return out

    def validate(self, cfg: RunConfig) -> None:
        """Clear errors for the ``algorithm:`` keys, on/off-policy and the environment's spaces."""
        from janus.envs.vector import env_spaces

        names = {f.name for f in fields(self.config_class)}
        defaults = self.config_class()
        for key in cfg.algorithm:
            if key in MAPPED:
                raise ConfigError(f"algorithm.{key} is set by the data-path config for {self.name}: set {MAPPED[key]} instead")
            if key not in names:
                raise ConfigError(f"unknown key {key!r} in algorithm; accepted keys for {self.name}: "
                                  f"{', '.join(sorted(names))}")
            check_value(key, cfg.algorithm[key], getattr(defaults, key))
        obs_space, action_space = env_spaces(cfg.workload.env, cfg.workload.env_kwargs)
        try:
            self.check_actions(action_space)
        except ConfigError as exc:
            raise ConfigError(f"--env {cfg.workload.env!r}: {exc}{self.action_space_hint}") from None
        self.check_observations(cfg, obs_space)

    def check_actions(self, action_space: Any) -> None:
        """Raise :class:`ConfigError` unless the algorithm supports ``action_space``."""
        from janus.algorithms.shared import check_action_space

        check_action_space(self.name, action_space, self.action_spaces)

    def check_observations(self, cfg: RunConfig, obs_space: Any) -> None:
        """Image observations: only for an algorithm with a CNN, with no ``algorithm.hidden`` (the
        CNN torso is fixed; ``hidden`` sizes the MLP of vector observations) and no ``normalize_obs``."""
        from janus.algorithms.networks import has_images, image_layout, torso_kind

        if not has_images(obs_space):
            return
        layout = image_layout(obs_space)
        what = (f"--env {cfg.workload.env!r} has image observations {tuple(obs_space.shape)} ({layout}, {obs_space.dtype})"
                if layout is not None else f"--env {cfg.workload.env!r} has observations with images ({obs_space})")
        if getattr(self.config(cfg), "normalize_obs", False):
            raise ConfigError(f"{what}: algorithm.normalize_obs (--normalize_obs) is for vector observations; images "
                              "are scaled to [0, 1] by the network already: leave it false")
        if not self.image_observations:
            raise ConfigError(f"{what}; --algo {self.name} takes vector observations only (it has no CNN torso; "
                              f"--algo ppo and dqn have one)")
        given = [key for key in NETWORK_KEYS if key in cfg.algorithm]
        if given:
            kind = torso_kind(obs_space) if layout is not None else "multi-input"
            flag = {"hidden": "--net_arch, --hidden_size/--num_layers", "critic_hidden": "--critic_net_arch",
                    "activation": "--activation"}[given[0]]
            raise ConfigError(f"{what}, which get the fixed {kind} CNN torso: algorithm.{given[0]} ({flag}) shapes "
                              f"the MLP of vector observations only; leave it unset")

    def learner(self, cfg: RunConfig) -> GymLearnerSide:
        from janus.envs.vector import env_spaces

        obs_space, action_space = env_spaces(cfg.workload.env, cfg.workload.env_kwargs)
        return GymLearnerSide(self.make_learner(self.config(cfg), obs_space, action_space, cfg.seed), self.budget(cfg).total_updates)

    def make_learner(self, config: Any, obs_space: Any, action_space: Any, seed: int) -> Any:
        raise NotImplementedError


class ReplayGymAlgorithm(GymAlgorithm):
    """An off-policy algorithm learning from replay: its config has ``batch_size``, ``buffer_size``,
    ``learning_starts`` and ``train_frequency`` (env steps per gradient update)."""

    on_policy = False

    def budget(self, cfg: RunConfig) -> Budget:
        """``total_env_steps`` in whole rounds of one piece from every worker (the smallest multiple of
        ``num_actors x envs_per_actor x rollout_length`` at or above it); the updates the ratio
        allows after the sampling minimum (:meth:`rates`): one per ``train_frequency`` env steps after
        ``learning_starts``, or ``runtime.samples_per_insert / batch_size`` per env step where the
        runtime sets the ratio (so an override changes the update count, not only the pace)."""
        a = self.config(cfg)
        rounds = max(1, math.ceil(cfg.workload.total_env_steps / cfg.rollout_transitions))
        min_size, spi = self.rates(cfg)
        steps_per_update = cfg.minibatch_size / spi if cfg.runtime.samples_per_insert else a.train_frequency
        updates = max(1, int((cfg.workload.total_env_steps - min_size) / steps_per_update))
        return Budget(updates, rounds, env_steps=rounds * cfg.rollout_transitions)

    def rates(self, cfg: RunConfig) -> tuple[int, float]:
        """``learning_starts`` and the replay ratio ``batch_size / train_frequency``, unless the
        runtime section sets them."""
        a, r = self.config(cfg), cfg.runtime
        return r.min_inserts or a.learning_starts or cfg.minibatch_size, r.samples_per_insert or cfg.janus.batch_size / a.train_frequency

    def publish_every(self, cfg: RunConfig) -> int:
        """One version per round of one piece from every worker (the updates the ratio allots it)."""
        w = cfg.workload
        return max(1, round(w.num_actors * w.envs_per_actor * w.rollout_length / self.config(cfg).train_frequency))


FASTEST_TO_SOLVE: dict[tuple[str | None, bool], str] = {
    ("classic_control", True): "ppo", ("box2d", True): "ppo", ("classic_control", False): "sac",
    ("memory", True): "ppo", ("memory", False): "ppo",
}
"""(family, discrete actions) -> the algorithm ``--env`` alone runs, where the time-to-solve suite
(docs/benchmarks.md, issue 48) found one first from the command: PPO on CartPole and Acrobot (cheap
env steps: a lockstep learner that needs few of them), SAC on Pendulum (replay: a few thousand steps);
on the memory tasks, PPO (its memory preset is recurrent: RL Zoo ppo_lstm).
Elsewhere dqn for a Discrete action space (Atari: samples are dear), ppo for the rest."""


def default_algorithm(env: str, env_kwargs: dict[str, Any] | None) -> str:
    """The algorithm ``--env`` alone runs: by the env's family and action space (:data:`FASTEST_TO_SOLVE`),
    else dqn for a Discrete action space and ppo for the rest."""
    from gymnasium import spaces

    from janus.algorithms.presets import family_of
    from janus.envs.vector import env_spaces

    _, action_space = env_spaces(env, env_kwargs)
    discrete = isinstance(action_space, spaces.Discrete)
    chosen = FASTEST_TO_SOLVE.get((family_of(env), discrete))
    return chosen or ("dqn" if discrete else "ppo")


def image_observations(env: str, env_kwargs: dict[str, Any]) -> bool:
    """Whether ``env`` (made with ``env_kwargs``) has image observations (looked up once per env)."""
    return _image_observations(env, json.dumps(env_kwargs, sort_keys=True, default=repr))


@functools.lru_cache(maxsize=32)
def _image_observations(env: str, env_kwargs_json: str) -> bool:
    from janus.algorithms.networks import has_images
    from janus.envs.vector import env_spaces

    return has_images(env_spaces(env, json.loads(env_kwargs_json))[0])


def check_value(key: str, value: Any, default: Any) -> None:
    """``algorithm.<key>`` has the default's type and a sensible range: see the sets above."""
    name = f"algorithm.{key}"
    if isinstance(default, bool):
        if not isinstance(value, bool):
            raise invalid(name, value, "true or false")
    elif isinstance(default, str):
        check_text(key, value)
    elif isinstance(default, tuple):
        bad = any(isinstance(v, bool) or not isinstance(v, int) or v < 1 for v in value) if isinstance(value, (list, tuple)) else True
        if bad or (not value and key not in EMPTY_OK):
            raise invalid(name, value, "a list of layer widths (integers >= 1)" if key in EMPTY_OK
                          else "a non-empty list of layer widths (integers >= 1)")
    elif isinstance(default, int):
        low = 0 if key in ZERO_OK else 1
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise invalid(name, value, f"an integer >= {low}")
    elif isinstance(default, float):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise invalid(name, value, "a finite number")
        if key in UNIT_INTERVAL and not 0 <= value <= 1:
            raise invalid(name, value, "a number in [0, 1]")
        if key in POSITIVE and value <= 0:
            raise invalid(name, value, "a number > 0")
        if key not in SIGNED and value < 0:
            raise invalid(name, value, "a number >= 0")


def check_text(key: str, value: Any) -> None:
    """``algorithm.<key>`` of a text hyperparameter: ``activation`` is one of the activations' names."""
    from janus.algorithms.networks import ACTIVATIONS

    if key == "activation" and (not isinstance(value, str) or value not in ACTIVATIONS):
        raise invalid(f"algorithm.{key}", value, one_of(tuple(ACTIVATIONS)))
    if not isinstance(value, str):
        raise invalid(f"algorithm.{key}", value, "a string")


class GymActorSide:
    """A Worker's payload: an algorithm's actor over ``envs_per_actor`` vectorised environments."""

    def __init__(self, actor: Any, piece_steps: int, initial_env_steps: int = 0) -> None:
        import torch

        torch.set_num_threads(1)
        self.actor = actor
        self.piece_steps = piece_steps
        self.actor.env_steps = initial_env_steps  # a resumed run continues its exploration schedule

    def act(self) -> tuple[dict, Any]:
        """One piece and the episodes it finished (subclasses add schedule arguments)."""
        return self.actor.rollout(self.piece_steps)

    def rollout(self) -> tuple[dict, dict]:
        piece, episodes = self.act()
        info = {
            "episode_returns": [float(r) for r in episodes.returns],
            "episode_lengths": [int(n) for n in episodes.lengths],
            "env_steps": self.piece_steps * self.actor.num_envs,
        }
        return piece, info

    def load_params(self, snapshot: Any) -> None:
        self.actor.load_params(dict(snapshot.arrays), snapshot.version)

    def close(self) -> None:
        """Close the environments (an ``async`` vector env's subprocesses end here)."""
        self.actor.close()


class GlobalStepActorSide(GymActorSide):
    """An actor whose schedule (exploration, random warm-up) follows the global env-step count,
    estimated as this worker's steps times the number of workers."""

    def __init__(self, actor: Any, piece_steps: int, num_workers: int, initial_env_steps: int = 0) -> None:
        super().__init__(actor, piece_steps, initial_env_steps)
        self.num_workers = num_workers

    def act(self) -> tuple[dict, Any]:
        return self.actor.rollout(self.piece_steps, global_step=self.actor.env_steps * self.num_workers)


class GymLearnerSide:
    """The Trainer's payload: a learner told its progress through the run (PPO anneals its rate)."""

    def __init__(self, learner: Any, total_updates: int) -> None:
        import torch

        torch.set_num_threads(1)
        self.learner = learner
        self.total = total_updates
        self.updates = 0

    def update(self, batch: dict) -> Any:
        if hasattr(self.learner, "set_progress"):
            self.learner.set_progress(self.updates / self.total)
        norm = getattr(self.learner, "obs_norm", None)  # normalize_obs: the raw observations trained on
        if norm is not None:
            norm.observe(batch["obs"])
        returns = getattr(self.learner, "reward_norm", None)  # normalize_reward: the actors' discounted returns
        if returns is not None:
            returns.observe(batch[DISCOUNTED_RETURN])
        self.updates += 1
        return self.learner.update(batch)

    def params(self) -> dict:
        """The learner's parameters for a new version; with ``normalize_obs`` (``normalize_reward``),
        the observation (discounted-return) statistics of the batches trained on since the last
        version join the running ones first."""
        for name in ("obs_norm", "reward_norm"):
            norm = getattr(self.learner, name, None)
            if norm is not None:
                norm.commit()
        return self.learner.params()

    def state_dict(self) -> dict:
        return {"learner": self.learner.state_dict(), "updates": self.updates}

    def load_state_dict(self, state: dict) -> None:
        self.learner.load_state_dict(state["learner"])
        self.updates = int(state["updates"])


class LearnerPolicy:
    """The :class:`~janus.algorithms.base.ActingPolicy` of a Gymnasium algorithm: its learner's
    network (``policy_network()``, in eval mode), acting through the learner's ``act``."""

    def __init__(self, learner: Any) -> None:
        self.learner = learner
        self.network = learner.policy_network()
        self.network.eval()

    def act(self, obs: Any, deterministic: bool) -> Any:
        import torch

        with torch.no_grad():
            return self.learner.act(torch.as_tensor(obs, dtype=torch.float32), deterministic)

    def load_params(self, params: Any) -> None:
        from janus.algorithms.shared import load_snapshot

        load_snapshot(self.network, dict(params))
