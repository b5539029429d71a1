"""PPO as janus hosts it: the algorithm's declaration (its preset, the overlays by environment
family, its budget: whole rollouts in lockstep). The actor, the networks and the clipped-objective
update are :mod:`janus.algorithms.ppo_agent`.
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

import gymnasium as gym

from janus.algorithms.base import OWN_PRESET, ActingPolicy, Budget, BufferSpec, FamilyPreset, register
from janus.algorithms.gym_algorithm import GymActorSide, GymAlgorithm
from janus.algorithms.ppo_agent import PPOActor, PPOConfig, PPOLearner
from janus.algorithms.recurrent import check_recurrent
from janus.algorithms.recurrent_agent import RecurrentPPOActor, RecurrentPPOLearner, recurrent_policy
from janus.algorithms.seeding import stream_seeds
from janus.algorithms.tunable import TunableRange, integers, log_uniform, one_of, uniform
from janus.buffer.pacing.collection import piece_steps
from janus.config.schema import RunConfig
from janus.errors import invalid


class PPO(GymAlgorithm):
    """On-policy: each rollout is trained ``num_epochs`` x ``num_minibatches`` times, in lockstep."""

    name = "ppo"
    on_policy = True
    config_class = PPOConfig
    action_spaces = (gym.spaces.Discrete, gym.spaces.Box)
    quick_env_steps = 4096
    # Defaults that solve CartPole-v1 (see docs/benchmarks.md); a user's config and flags override them.
    preset: ClassVar[dict[str, Any]] = {
        "num_minibatches": 4, "buffer_capacity": 100_000, "overlap_collect": 1,
        "overlap_select": 1, "g_collect": 1, "g_select": 0.25,
        "workload": {"algo": "ppo", "hidden_size": 64, "num_layers": 2,  # the network (PPOConfig.hidden)
                     "num_actors": 1, "envs_per_actor": 4, "rollout_length": 128, "num_epochs": 4,
                     "total_env_steps": 300_000},
    }
    # Overlays by environment family, layered over `preset` by the env id or --preset: rl-baselines3-zoo
    # hyperparams/ppo.yml, commit 00128b5d, its names mapped onto janus's as janus.algorithms.presets says.
    family_presets: ClassVar[dict[str, FamilyPreset]] = {
        # ppo.yml `atari`: n_envs 8, n_steps 128, n_epochs 4, batch_size 256 (8 x 128 / 256 = 4 minibatches),
        # n_timesteps 1e7, learning_rate lin_2.5e-4, clip_range lin_0.1 (janus clips at 0.1 without annealing),
        # vf_coef 0.5 (of the MSE: janus's 1.0 of half of it), ent_coef 0.01.
        "atari": FamilyPreset({
            "num_minibatches": 4,
            "workload": {"envs_per_actor": 8, "rollout_length": 128, "num_epochs": 4, "total_env_steps": 10_000_000},
            "algorithm": {"lr": 2.5e-4, "anneal_lr": True, "clip_coef": 0.1, "vf_coef": 1.0, "ent_coef": 0.01,
                          "clip_vloss": False},
        }, "RL Zoo ppo.yml, atari"),
        "classic_control": OWN_PRESET,
        # ppo.yml `LunarLander-v2` (and LunarLanderContinuous-v2, the same): n_envs 16, n_steps 1024,
        # batch_size 64 (16 x 1024 / 64 = 256 minibatches), gae_lambda 0.98, gamma 0.999, n_epochs 4,
        # ent_coef 0.01, n_timesteps 1e6; learning rate: SB3's constant 3e-4; SB3's vf_coef 0.5 (janus 1.0).
        "box2d": FamilyPreset({
            "num_minibatches": 256,
            "workload": {"envs_per_actor": 16, "rollout_length": 1024, "num_epochs": 4, "total_env_steps": 1_000_000},
            "algorithm": {"lr": 3e-4, "anneal_lr": False, "gae_lambda": 0.98, "gamma": 0.999, "ent_coef": 0.01,
                          "vf_coef": 1.0, "clip_vloss": False},
        }, "RL Zoo ppo.yml, LunarLander-v2"),
        # ppo.yml `Ant-v3: &mujoco-defaults` (also Swimmer-v3): normalize true, n_timesteps 1e6,
        # the rest SB3's PPO defaults: n_envs 1, n_steps 2048, batch_size 64 (32 minibatches), n_epochs 10,
        # learning_rate 3e-4 (constant), gae_lambda 0.95, clip_range 0.2, ent_coef 0.0, vf_coef 0.5 (janus 1.0),
        # net [64, 64] tanh.
        "mujoco": FamilyPreset({
            "num_minibatches": 32,
            "workload": {"envs_per_actor": 1, "rollout_length": 2048, "num_epochs": 10, "total_env_steps": 1_000_000},
            "algorithm": {"lr": 3e-4, "anneal_lr": False, "gae_lambda": 0.95, "clip_coef": 0.2, "ent_coef": 0.0,
                          "vf_coef": 1.0, "clip_vloss": False, "normalize_obs": True, "normalize_reward": True},
        }, "RL Zoo ppo.yml, Ant-v3 (mujoco-defaults)"),
        # ppo_lstm.yml `CartPoleNoVel-v1`: normalize true (obs and reward), n_envs 8, n_steps 32, batch_size 256
        # (8 x 32 / 256 = 1 minibatch), gae_lambda 0.8, gamma 0.98, n_epochs 20, ent_coef 0.0, learning_rate
        # lin_0.001, clip_range lin_0.2 (janus clips at 0.2 without annealing), n_timesteps 1e5, lstm_hidden_size 64,
        # net_arch pi [64] vf [64], activation ReLU; SB3's vf_coef 0.5 (janus 1.0), no value clipping. Sequences are
        # the whole piece (seq_len 0), as RecurrentPPO trains on its n_steps rollouts.
        "memory": FamilyPreset({
            "num_minibatches": 1, "g_select": 1,
            "workload": {"envs_per_actor": 8, "rollout_length": 32, "num_epochs": 20, "total_env_steps": 100_000},
            "algorithm": {"recurrent": "lstm", "recurrent_size": 64, "hidden": [64], "activation": "relu",
                          "lr": 1e-3, "anneal_lr": True, "gae_lambda": 0.8, "gamma": 0.98, "clip_coef": 0.2,
                          "ent_coef": 0.0, "vf_coef": 1.0, "clip_vloss": False, "normalize_obs": True,
                          "normalize_reward": True},
        }, "RL Zoo ppo_lstm.yml, CartPoleNoVel-v1"),
    }

    # What `janus tune --objective time_to_solve` searches (with the data-path knobs): the RL Zoo's PPO
    # ranges (rl_zoo3/hyperparams_opt.py), minibatch counts that divide the preset's rollouts.
    tunable_ranges: ClassVar[dict[str, TunableRange]] = {
        "algorithm.lr": log_uniform(1e-4, 3e-3), "num_minibatches": one_of(1, 2, 4, 8),
        "workload.num_epochs": integers(1, 10), "algorithm.gamma": uniform(0.95, 0.999),
        "algorithm.gae_lambda": uniform(0.8, 0.99), "algorithm.clip_coef": uniform(0.1, 0.3),
        "algorithm.ent_coef": uniform(0.0, 0.05),
    }

    def validate(self, cfg: RunConfig) -> None:
        """:meth:`GymAlgorithm.validate`, and a recurrent core's sequences (:func:`check_sequences`)."""
        super().validate(cfg)
        check_sequences(self.config(cfg), cfg)

    def buffer_spec(self, cfg: RunConfig) -> BufferSpec:
        """Feed-forward: rows are steps. Recurrent: rows are sequences of ``seq_len`` steps (minibatches of
        whole sequences, never split)."""
        spec = super().buffer_spec(cfg)
        if not self.config(cfg).recurrent:
            return spec
        return BufferSpec(on_policy=True, checkpoint_learner=spec.checkpoint_learner, row_steps=sequence_steps(self.config(cfg), cfg))

    def policy(self, cfg: RunConfig, learner: Any) -> ActingPolicy:
        return recurrent_policy(learner) if self.config(cfg).recurrent else super().policy(cfg, learner)

    def budget(self, cfg: RunConfig) -> Budget:
        """``total_env_steps`` in whole rollouts of every worker: the smallest multiple of
        ``num_actors x envs_per_actor x rollout_length`` at or above it."""
        iterations = max(1, math.ceil(cfg.workload.total_env_steps / cfg.rollout_transitions))
        return Budget(iterations * cfg.updates_per_iteration, iterations)

    def actor(self, cfg: RunConfig, index: int, initial_env_steps: int = 0, instance: int = 0, session: int = 0) -> GymActorSide:
        w = cfg.workload
        seeds = stream_seeds(cfg.seed, index, w.envs_per_actor, instance=instance, session=session)
        config = self.config(cfg)
        kind = RecurrentPPOActor if config.recurrent else PPOActor
        actor = kind(config, w.env, seeds, w.envs_per_actor, w.env_kwargs, vector_env=w.vector_env)
        return GymActorSide(actor, self.pacing(cfg).piece_steps, initial_env_steps)

    def make_learner(self, config: PPOConfig, obs_space: Any, action_space: Any, seed: int) -> PPOLearner:
        return (RecurrentPPOLearner if config.recurrent else PPOLearner)(config, obs_space, action_space, seed)


def sequence_steps(a: PPOConfig, cfg: RunConfig) -> int:
    """Env steps per sequence of a recurrent PPO run: ``seq_len``, or (0) the whole piece."""
    return a.seq_len or piece_steps(cfg.workload.rollout_length, cfg.janus.g_collect)


def check_sequences(a: PPOConfig, cfg: RunConfig) -> None:
    """``recurrent``/``recurrent_size`` valid; ``seq_len`` only with a core, dividing the piece's steps; and
    ``num_minibatches`` dividing the sequences of a rollout (minibatches are whole sequences)."""
    check_recurrent("algorithm.recurrent", a.recurrent, a.recurrent_size)
    if not a.recurrent:
        if a.seq_len:
            raise invalid("algorithm.seq_len", a.seq_len, "0 without algorithm.recurrent (--recurrent lstm|gru): "
                          "sequences are for a recurrent core")
        return
    steps = piece_steps(cfg.workload.rollout_length, cfg.janus.g_collect)
    if a.seq_len and steps % a.seq_len:
        raise invalid("algorithm.seq_len", a.seq_len, f"a divisor of the {steps} steps of a piece (workload.rollout_length "
                      f"{cfg.workload.rollout_length} x g_collect {cfg.janus.g_collect}), or 0 for the whole piece")
    sequences = cfg.rollout_transitions // (a.seq_len or steps)
    if sequences % cfg.janus.num_minibatches:
        raise invalid("num_minibatches", cfg.janus.num_minibatches,
                      f"a divisor of the {sequences} sequences of {a.seq_len or steps} steps a rollout holds "
                      f"(num_actors x envs_per_actor x rollout_length / seq_len): a recurrent PPO's minibatches "
                      f"are whole sequences")


register(PPO())
