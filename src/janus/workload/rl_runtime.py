"""DQN and PPO hosted by the runtime: presets, config mapping, Worker/Trainer adapters, budgets.

The data-path knobs stay the source of truth for what they name: ``batch_size`` and
``buffer_capacity`` (DQN), ``num_minibatches`` (PPO), ``workload.envs_per_actor`` (envs per worker),
``workload.rollout_length`` (steps per rollout), ``workload.num_epochs`` (PPO epochs). Everything
else is a ``DQNConfig`` / ``PPOConfig`` field, set in the ``algorithm:`` section.
"""

from __future__ import annotations

import math
from dataclasses import fields, replace
from typing import Any

from janus.errors import ConfigError, invalid

# Defaults that solve CartPole-v1 (see docs/benchmarks.md); a user's config and flags override them.
PRESETS: dict[str, dict[str, Any]] = {
    "dqn": {
        "is_on_policy": False, "batch_size": 128, "buffer_capacity": 50_000, "overlap_collect": 1,
        "overlap_select": 1, "g_collect": 1, "g_select": 1,
        "workload": {"algo": "dqn", "num_actors": 1, "envs_per_actor": 4, "rollout_length": 8, "total_env_steps": 60_000},
    },
    "ppo": {
        "is_on_policy": True, "num_minibatches": 4, "buffer_capacity": 100_000, "overlap_collect": 1,
        "overlap_select": 1, "g_collect": 1, "g_select": 0.25,
        "workload": {"algo": "ppo", "num_actors": 1, "envs_per_actor": 4, "rollout_length": 128, "num_epochs": 4,
                     "total_env_steps": 300_000},
    },
}
MAPPED = {  # algorithm field -> where the data-path config sets it
    "num_envs": "workload.envs_per_actor", "rollout_steps": "workload.rollout_length",
    "batch_size": "batch_size (top level)", "buffer_size": "buffer_capacity (top level)",
    "num_minibatches": "num_minibatches (top level)", "update_epochs": "workload.num_epochs",
}


def _config_class(algo: str) -> type:
    if algo == "dqn":
        from janus.workload.dqn import DQNConfig

        return DQNConfig
    from janus.workload.ppo import PPOConfig

    return PPOConfig


def algorithm_config(cfg: Any) -> Any:
    """The ``DQNConfig`` / ``PPOConfig`` of a run: overrides + the mapped data-path knobs."""
    w, j = cfg.workload, cfg.janus
    klass = _config_class(w.algo)
    overrides = dict(cfg.algorithm)
    if "hidden" in overrides and isinstance(overrides["hidden"], list):
        overrides["hidden"] = tuple(overrides["hidden"])
    algo = klass(**overrides)
    mapped: dict[str, Any] = {"num_envs": w.envs_per_actor, "rollout_steps": w.rollout_length}
    if w.algo == "dqn":
        mapped.update(batch_size=j.batch_size, buffer_size=j.buffer_capacity)
    else:
        mapped.update(num_minibatches=j.num_minibatches, update_epochs=w.num_epochs)
    return replace(algo, **mapped)


def validate_rl(cfg: Any) -> None:
    """Clear errors for a DQN/PPO run: algorithm keys, on/off-policy, environment and spaces."""
    w, j = cfg.workload, cfg.janus
    names = {f.name for f in fields(_config_class(w.algo))}
    for key in cfg.algorithm:
        if key in MAPPED:
            raise ConfigError(f"algorithm.{key} is set by the data-path config for {w.algo}: set {MAPPED[key]} instead")
        if key not in names:
            raise ConfigError(f"unknown key {key!r} in algorithm; accepted keys for {w.algo}: {', '.join(sorted(names - set(MAPPED)))}")
        _check_algorithm_value(key, cfg.algorithm[key], getattr(_config_class(w.algo)(), key))
    wants_on_policy = w.algo == "ppo"
    if bool(j.is_on_policy) != wants_on_policy:
        raise invalid("is_on_policy", j.is_on_policy, f"{str(wants_on_policy).lower()} for --algo {w.algo}")
    from janus.workload.envs import check_action_space, env_spaces

    _, action_space = env_spaces(w.env)
    try:
        check_action_space(w.algo, action_space)
    except ConfigError as exc:
        hint = "; use --algo ppo for continuous actions" if w.algo == "dqn" else ""
        raise ConfigError(f"--env {w.env!r}: {exc}{hint}") from None
    if w.algo == "dqn" and w.rollout_length < algorithm_config(cfg).n_step:
        raise invalid("workload.rollout_length", w.rollout_length, "at least algorithm.n_step for dqn")


UNIT_INTERVAL = {"gamma", "gae_lambda", "eps_start", "eps_end", "clip_coef", "per_alpha", "per_beta", "tau"}
ZERO_OK = {"learning_starts", "exploration_steps"}  # integers that may be 0
POSITIVE = {"lr", "train_frequency"}  # numbers that must be > 0
SIGNED = {"init_log_std"}  # any finite number


def _check_algorithm_value(key: str, value: Any, default: Any) -> None:
    """``algorithm.<key>`` has the default's type and a sensible range: see the sets above."""
    name = f"algorithm.{key}"
    if isinstance(default, bool):
        if not isinstance(value, bool):
            raise invalid(name, value, "true or false")
    elif isinstance(default, tuple):
        if not isinstance(value, (list, tuple)) or not value or any(isinstance(v, bool) or not isinstance(v, int) or v < 1 for v in value):
            raise invalid(name, value, "a non-empty list of layer widths (integers >= 1)")
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


def total_updates(cfg: Any) -> int:
    """Learner batches a run trains for."""
    w = cfg.workload
    if w.algo == "dqn":
        a = algorithm_config(cfg)
        return max(1, int((w.total_env_steps - a.learning_starts) / a.train_frequency))
    if w.algo == "ppo":
        return iterations(cfg) * cfg.updates_per_iteration
    return w.iterations * cfg.updates_per_iteration


def iterations(cfg: Any) -> int:
    """Rollouts per worker: synthetic ``iterations``; PPO ``total_env_steps`` / rollout size."""
    if cfg.workload.algo == "ppo":
        return max(1, cfg.workload.total_env_steps // cfg.rollout_transitions)
    return cfg.workload.iterations


def rates(cfg: Any) -> tuple[int, float]:
    """``(min_inserts, samples_per_insert)``: the runtime's, or DQN's learning_starts / replay ratio."""
    r = cfg.runtime
    if cfg.workload.algo != "dqn":
        return r.min_inserts, r.samples_per_insert
    a = algorithm_config(cfg)
    return r.min_inserts or a.learning_starts, r.samples_per_insert or a.batch_size / a.train_frequency


class RLActorSide:
    """A Worker's payload: a DQN/PPO actor over ``envs_per_actor`` vectorised environments."""

    def __init__(self, cfg: Any, index: int, piece_steps: int, initial_env_steps: int = 0) -> None:
        import torch

        torch.set_num_threads(1)
        w = cfg.workload
        self.algo = w.algo
        self.piece_steps = piece_steps
        self.num_workers = w.num_actors
        a = algorithm_config(cfg)
        if self.algo == "dqn":
            from janus.workload.dqn import DQNActor

            self.actor: Any = DQNActor(a, w.env, cfg.seed * 1000 + index, w.envs_per_actor)
        else:
            from janus.workload.ppo import PPOActor

            self.actor = PPOActor(a, w.env, cfg.seed * 1000 + index, w.envs_per_actor)
        self.actor.env_steps = initial_env_steps  # a resumed run continues its exploration schedule

    def rollout(self) -> tuple[dict, dict]:
        before = self.actor.env_steps if hasattr(self.actor, "env_steps") else 0
        if self.algo == "dqn":  # epsilon follows the (estimated) global step count
            piece, episodes = self.actor.rollout(self.piece_steps, global_step=before * self.num_workers)
        else:
            piece, episodes = self.actor.rollout(self.piece_steps)
        info = {
            "episode_returns": [float(r) for r in episodes.returns],
            "episode_lengths": [int(n) for n in episodes.lengths],
            "env_steps": self.piece_steps * self.actor.num_envs,
        }
        return piece, info

    def load_params(self, snapshot: Any) -> None:
        self.actor.load_params(dict(snapshot.arrays), snapshot.version)


class RLLearnerSide:
    """The Trainer's payload: a DQN/PPO learner (PPO anneals its learning rate over the run)."""

    def __init__(self, cfg: Any) -> None:
        import torch

        torch.set_num_threads(1)
        from janus.workload.envs import env_spaces

        w = cfg.workload
        a = algorithm_config(cfg)
        obs_space, action_space = env_spaces(w.env)
        if w.algo == "dqn":
            from janus.workload.dqn import DQNLearner

            self.learner: Any = DQNLearner(a, obs_space, action_space, cfg.seed)
        else:
            from janus.workload.ppo import PPOLearner

            self.learner = PPOLearner(a, obs_space, action_space, cfg.seed)
        self.total = total_updates(cfg)
        self.updates = 0

    def update(self, batch: dict) -> Any:
        if hasattr(self.learner, "set_progress"):
            self.learner.set_progress(self.updates / self.total)
        self.updates += 1
        return self.learner.update(batch)

    def params(self) -> dict:
        return self.learner.params()

    def state_dict(self) -> dict:
        return {"learner": self.learner.state_dict(), "updates": self.updates}

    def load_state_dict(self, state: dict) -> None:
        self.learner.load_state_dict(state["learner"])
        self.updates = int(state["updates"])


def worker_pieces(cfg: Any) -> tuple[int, int, int]:
    """``(piece_steps, pieces_per_rollout, max_pieces)`` for a worker (max 0: until stopped)."""
    w, j = cfg.workload, cfg.janus
    if j.is_on_policy:
        piece_steps = round(w.rollout_length * j.g_collect)
        pieces = math.ceil(w.rollout_length / piece_steps)
        return piece_steps, pieces, iterations(cfg) * pieces
    return w.rollout_length, 1, (0 if w.algo == "dqn" else iterations(cfg))


VERSION_LAG = 2  # DQN: versions a worker may run ahead of the learner


def publish_every(cfg: Any) -> int:
    """Trained batches between parameter versions (the runtime's "samples per parameter load").

    On-policy: one version per rollout. DQN: one version per round of one piece from every worker,
    i.e. the updates the replay ratio allots to those transitions. Otherwise the runtime setting.
    """
    if cfg.janus.is_on_policy:
        return cfg.updates_per_iteration
    if cfg.workload.algo == "dqn":
        a = algorithm_config(cfg)
        round_transitions = cfg.workload.num_actors * cfg.workload.envs_per_actor * cfg.workload.rollout_length
        return max(1, round(round_transitions / a.train_frequency))
    return cfg.runtime.samples_per_param_load


def pacing(cfg: Any) -> tuple[int, int, int]:
    """``(pieces_per_version, free_pieces, version_lag)`` for off-policy workers (see Worker)."""
    if cfg.workload.algo != "dqn" or cfg.janus.is_on_policy:
        return 0, 0, 0
    a = algorithm_config(cfg)
    w = cfg.workload
    free = math.ceil(a.learning_starts / (w.num_actors * w.envs_per_actor * w.rollout_length))
    return 1, free, VERSION_LAG
