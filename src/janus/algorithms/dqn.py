"""DQN as janus hosts it: the algorithm's declaration (its preset, the overlays by environment
family, its budget and replay) and the Worker's adapter. The actor, the Q network and the
double-Q n-step update are :mod:`janus.algorithms.dqn_agent`.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, ClassVar

import gymnasium as gym

from janus.algorithms.base import OWN_PRESET, BufferSpec, FamilyPreset, register
from janus.algorithms.dqn_agent import DQNActor, DQNConfig, DQNLearner
from janus.algorithms.gym_algorithm import GlobalStepActorSide, ReplayGymAlgorithm
from janus.algorithms.seeding import stream_seeds
from janus.algorithms.tunable import TunableRange, integers, log_uniform, one_of, uniform
from janus.config.schema import RunConfig
from janus.envs.vector import env_spaces, is_frame_stack
from janus.errors import invalid


class DQNActorSide(GlobalStepActorSide):
    """Reports the exploration ``epsilon`` the next piece acts with (``info["metrics"]``)."""

    def rollout(self) -> tuple[dict, dict]:
        piece, info = super().rollout()
        info["metrics"] = {"epsilon": self.actor.cfg.epsilon(self.actor.env_steps * self.num_workers)}
        return piece, info


class DQN(ReplayGymAlgorithm):
    """Off-policy replay with the ratio ``batch_size / train_frequency`` after ``learning_starts``."""

    name = "dqn"
    config_class = DQNConfig
    action_spaces = (gym.spaces.Discrete,)
    action_space_hint = "; use --algo ppo for continuous actions"
    quick_env_steps = 2048
    # Defaults that solve CartPole-v1 (see docs/benchmarks.md); a user's config and flags override them.
    # Selection in bundles of 4 batches, 16 batches in flight: the learner's process wakes its other
    # threads about 4x less often per update, and every wake-up costs the update GIL hand-offs
    # (1.3x env-steps/s on CartPole; "DQN after the hand-written backward" in docs/benchmarks-log.md).
    # Backend "auto": worker processes where a spare CPU lets acting overlap the update (1.25x
    # env-steps/s on CartPole here), local threads for the serial --seed recipe or on one CPU
    # (docs/benchmarks.md, "The engine: local vs process backend").
    preset: ClassVar[dict[str, Any]] = {
        "batch_size": 128, "buffer_capacity": 50_000, "overlap_collect": 1,
        "overlap_select": 1, "g_collect": 1, "g_select": 4, "prefetch": 4,
        "workload": {"algo": "dqn", "num_actors": 1, "envs_per_actor": 4, "rollout_length": 8, "total_env_steps": 60_000,
                     "hidden_size": 128, "num_layers": 2},  # the network (DQNConfig.hidden), as config.yaml records it
        "runtime": {"max_in_flight": 16, "backend": "auto"},
    }
    # Overlays by environment family, layered over `preset` by the env id or --preset: rl-baselines3-zoo
    # hyperparams/dqn.yml, commit 019107eb, its names mapped onto janus's as janus.algorithms.presets says.
    family_presets: ClassVar[dict[str, FamilyPreset]] = {
        # dqn.yml `atari`: n_timesteps 1e7, buffer_size 1e6, learning_rate 1e-4, batch_size 32, learning_starts
        # 1e5, target_update_interval 1e4 (env steps = 2500 updates at train_freq 4), train_freq 4,
        # gradient_steps 1, exploration_fraction 0.1 (x 1e7 = 1e6 steps), exploration_final_eps 0.1.
        # The replay holds ~7 GB of 84x84 frames at 1e6 (frame-stack dedup): --buffer_capacity to shrink it.
        "atari": FamilyPreset({
            "batch_size": 32, "buffer_capacity": 1_000_000,
            "workload": {"total_env_steps": 10_000_000},
            "algorithm": {"lr": 1e-4, "learning_starts": 100_000, "train_frequency": 4.0,
                          "target_update_interval": 2_500, "exploration_steps": 1_000_000, "eps_end": 0.1},
        }, "RL Zoo dqn.yml, atari"),
        "classic_control": OWN_PRESET,
        # dqn.yml `LunarLander-v2` (tuned): n_timesteps 1.5e5, learning_rate 8.8e-4, batch_size 32, buffer_size
        # 1e6, learning_starts 0, train_freq 16 with gradient_steps -1 (one update per env step),
        # target_update_interval 1e4 (env steps = updates here), exploration_fraction 0.2 (x 1.5e5 = 3e4),
        # exploration_final_eps 0.1, net_arch [256, 256].
        "box2d": FamilyPreset({
            "batch_size": 32, "buffer_capacity": 1_000_000,
            "workload": {"total_env_steps": 150_000, "hidden_size": 256, "num_layers": 2},
            "algorithm": {"lr": 8.8e-4, "learning_starts": 0, "train_frequency": 1.0, "target_update_interval": 10_000,
                          "exploration_steps": 30_000, "eps_end": 0.1, "hidden": [256, 256]},
        }, "RL Zoo dqn.yml, LunarLander-v2"),
        # MuJoCo has continuous actions only: dqn refuses them; no overlay.
    }

    # What `janus tune --objective time_to_solve` searches (with the data-path knobs): around the preset's
    # values, the ranges the RL Zoo's DQN search samples (rl_zoo3/hyperparams_opt.py), narrowed to what
    # janus runs (n_step <= rollout_length 8).
    tunable_ranges: ClassVar[dict[str, TunableRange]] = {
        "algorithm.lr": log_uniform(1e-4, 3e-3), "batch_size": one_of(32, 64, 128, 256),
        "algorithm.n_step": integers(1, 5), "algorithm.gamma": uniform(0.95, 0.999),
        "algorithm.train_frequency": one_of(1.0, 2.0, 4.0), "algorithm.target_update_interval": integers(50, 2_000, log=True),
        "algorithm.exploration_steps": integers(1_000, 30_000, log=True),
        "algorithm.learning_starts": integers(100, 5_000, log=True),
    }

    def validate(self, cfg: RunConfig) -> None:
        super().validate(cfg)
        if cfg.workload.rollout_length < self.config(cfg).n_step:
            raise invalid("workload.rollout_length", cfg.workload.rollout_length, "at least algorithm.n_step for dqn")

    def buffer_spec(self, cfg: RunConfig) -> BufferSpec:
        a = self.config(cfg)
        spec = super().buffer_spec(cfg)
        if a.prioritized:
            spec = replace(spec, sampler="prioritized", sampler_kwargs={"alpha": a.per_alpha, "beta": a.per_beta},
                           beta_final=a.per_beta_final)
        if a.frame_stack_dedup and is_frame_stack(env_spaces(cfg.workload.env, cfg.workload.env_kwargs)[0]):
            spec = replace(spec, frame_stack=True)
        return spec

    def actor(self, cfg: RunConfig, index: int, initial_env_steps: int = 0, instance: int = 0, session: int = 0) -> DQNActorSide:
        w = cfg.workload
        seeds = stream_seeds(cfg.seed, index, w.envs_per_actor, instance=instance, session=session)
        actor = DQNActor(self.config(cfg), w.env, seeds, w.envs_per_actor, w.env_kwargs, vector_env=w.vector_env)
        if self.config(cfg).frame_stack_dedup and is_frame_stack(actor.envs.single_observation_space):
            actor.stream_base = index * actor.num_envs
        return DQNActorSide(actor, self.pacing(cfg).piece_steps, w.num_actors, initial_env_steps)

    def make_learner(self, config: DQNConfig, obs_space: Any, action_space: Any, seed: int) -> DQNLearner:
        return DQNLearner(config, obs_space, action_space, seed)


register(DQN())
