"""R2D2 as janus hosts it (``--algo r2d2``): the declaration (preset, memory-family overlay, budget,
replay of sequences, rates); its Workers run DQN's adapter (it reports epsilon). The network and actor are
:mod:`janus.algorithms.r2d2_agent`, the learner and acting policy :mod:`janus.algorithms.r2d2_learner`.

The replay stores one row per sequence (:class:`~janus.buffer.sequence_writer.SequenceWriter`): a
piece of a worker is ``envs_per_actor`` rows, each ``workload.rollout_length`` new env steps
(:attr:`~janus.algorithms.base.BufferSpec.row_steps`), so the replay's counts convert to env steps
as IMPALA's trajectories do. Its units are rows:

* ``batch_size``: sequences per learner batch;
* ``buffer_capacity``: sequences the replay holds (``x seq_len`` stored steps);
* the sampling minimum ``ceil(learning_starts / rollout_length)`` sequences, and the ratio
  ``batch_size x rollout_length / train_frequency`` sequences sampled per sequence inserted (one
  update per ``train_frequency`` env steps), unless ``runtime.min_inserts`` /
  ``runtime.samples_per_insert`` set them (then in sequences too).
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any, ClassVar

import gymnasium as gym

from janus.algorithms.base import OWN_PRESET, Budget, BufferSpec, FamilyPreset, register
from janus.algorithms.dqn import DQNActorSide
from janus.algorithms.gym_algorithm import ReplayGymAlgorithm
from janus.algorithms.pacing import Pacing, default_error_buffer, largest_insert
from janus.algorithms.r2d2_agent import R2D2Actor, R2D2Config
from janus.algorithms.r2d2_learner import R2D2Learner, R2D2Policy
from janus.algorithms.recurrent import RECURRENT_KINDS, check_recurrent
from janus.algorithms.seeding import stream_seeds
from janus.config.schema import RunConfig
from janus.errors import ConfigError, invalid, one_of


class R2D2(ReplayGymAlgorithm):
    """Recurrent replay DQN (Kapturowski et al., 2019): sequences with stored states, burn-in,
    double-Q n-step targets with value rescaling and priorities mixed per sequence."""

    name = "r2d2"
    config_class = R2D2Config
    action_spaces = (gym.spaces.Discrete,)
    action_space_hint = "; r2d2 is a Q-learner: use --algo ppo --recurrent lstm for continuous actions"
    quick_env_steps = 2048
    # Learns janus/CartPoleNoVel-v1 (docs/benchmarks.md, benchmarks/r2d2_memory.py): 8 envs, a sequence
    # of 20 steps per env every 10 (overlap 10, burn-in 5), 32 sequences a batch, one update per 8 env steps.
    preset: ClassVar[dict[str, Any]] = {
        "batch_size": 32, "buffer_capacity": 10_000, "overlap_collect": 1, "overlap_select": 1,
        "g_collect": 1, "g_select": 1, "prefetch": 2,
        "workload": {"algo": "r2d2", "num_actors": 1, "envs_per_actor": 8, "rollout_length": 10,
                     "total_env_steps": 100_000, "hidden_size": 64, "num_layers": 1},
        "runtime": {"max_in_flight": 4, "backend": "auto"},
    }
    # The memory family (janus/CartPoleNoVel-v1, POPGym) is what the preset is tuned for; classic control too.
    family_presets: ClassVar[dict[str, FamilyPreset]] = {
        "memory": FamilyPreset({}, "janus defaults, tuned on janus/CartPoleNoVel-v1"),
        "classic_control": OWN_PRESET,
    }

    def validate(self, cfg: RunConfig) -> None:
        super().validate(cfg)
        a, period = self.config(cfg), cfg.workload.rollout_length
        check_recurrent("algorithm.recurrent", a.recurrent, a.recurrent_size)
        if not a.recurrent:
            raise invalid("algorithm.recurrent", a.recurrent, f"{one_of(RECURRENT_KINDS)} (r2d2 is recurrent)")
        if period > a.seq_len:
            raise ConfigError(f"invalid workload.rollout_length: got {period} new steps per sequence for "
                              f"algorithm.seq_len={a.seq_len}; accepted: at most seq_len (r2d2 stores one sequence per "
                              f"env every rollout_length steps; a longer one would skip steps)")
        min_size = self.rates(cfg)[0]
        if min_size > cfg.janus.buffer_capacity:
            raise ConfigError(f"invalid buffer_capacity: got {cfg.janus.buffer_capacity:,} sequences, fewer than the "
                              f"{min_size:,} sampling starts after (algorithm.learning_starts={a.learning_starts:,} env "
                              f"steps / rollout_length={period}); r2d2's buffer_capacity counts sequences")
        if a.burn_in + a.n_step >= a.seq_len:
            raise ConfigError(f"invalid algorithm.seq_len: got {a.seq_len} with burn_in={a.burn_in} and "
                              f"n_step={a.n_step}; accepted: more than burn_in + n_step (else no step of a sequence "
                              f"has an n-step target inside it)")

    def buffer_spec(self, cfg: RunConfig) -> BufferSpec:
        a = self.config(cfg)
        spec = BufferSpec(on_policy=False, checkpoint_replay=True, checkpoint_learner=True,
                          row_steps=cfg.workload.rollout_length)
        if a.prioritized:
            spec = replace(spec, sampler="prioritized", sampler_kwargs={"alpha": a.per_alpha, "beta": a.per_beta},
                           beta_final=a.per_beta_final)
        return spec

    def rates(self, cfg: RunConfig) -> tuple[int, float]:
        """``(min sequences to sample, sequences sampled per sequence inserted)``: see the module doc."""
        a, r, period = self.config(cfg), cfg.runtime, cfg.workload.rollout_length
        min_size = r.min_inserts or max(1, math.ceil(a.learning_starts / period))
        return min_size, r.samples_per_insert or cfg.janus.batch_size * period / a.train_frequency

    def budget(self, cfg: RunConfig) -> Budget:
        """``total_env_steps`` in whole rounds of one piece from every worker; one update per
        ``train_frequency`` env steps after ``learning_starts`` (or as ``runtime.samples_per_insert`` sets)."""
        w = cfg.workload
        rounds = max(1, math.ceil(w.total_env_steps / cfg.rollout_transitions))
        min_size, spi = self.rates(cfg)
        steps_per_update = cfg.janus.batch_size * w.rollout_length / spi
        updates = max(1, int((w.total_env_steps - min_size * w.rollout_length) / steps_per_update))
        return Budget(updates, rounds, env_steps=rounds * cfg.rollout_transitions)

    def pacing(self, cfg: RunConfig) -> Pacing:
        """DQN's pacing counted in sequences: a piece is ``envs_per_actor`` rows."""
        w = cfg.workload
        min_size, spi = self.rates(cfg)
        rows = w.envs_per_actor
        return Pacing(samples_per_insert=spi, min_size_to_sample=min_size,
                      error_buffer=default_error_buffer(spi, rows, w.num_actors, cfg.janus.batch_size,
                                                        largest_insert=largest_insert(cfg, rows)),
                      publish_every=self.publish_every(cfg), piece_steps=w.rollout_length, pieces_per_rollout=1,
                      max_pieces=self.budget(cfg).iterations, lockstep=False)

    def actor(self, cfg: RunConfig, index: int, initial_env_steps: int = 0, instance: int = 0,
              session: int = 0) -> DQNActorSide:
        """Worker ``index``'s actor; DQN's adapter reports the epsilon of its next piece."""
        w = cfg.workload
        seeds = stream_seeds(cfg.seed, index, w.envs_per_actor, instance=instance, session=session)
        actor = R2D2Actor(self.config(cfg), w.env, seeds, w.envs_per_actor, w.rollout_length, w.env_kwargs,
                          vector_env=w.vector_env)
        return DQNActorSide(actor, w.rollout_length, w.num_actors, initial_env_steps)

    def make_learner(self, config: R2D2Config, obs_space: Any, action_space: Any, seed: int) -> R2D2Learner:
        return R2D2Learner(config, obs_space, action_space, seed)

    def policy(self, cfg: RunConfig, learner: Any) -> R2D2Policy:
        """Greedy actions of the online network, carrying the caller's recurrent state."""
        return R2D2Policy(getattr(learner, "learner", learner))


register(R2D2())
