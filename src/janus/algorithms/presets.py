"""Presets by environment family: the RL Zoo's tuned hyperparameters, mapped onto janus's knobs.

An algorithm's own ``preset`` is tuned for CartPole-v1 / Pendulum-v1. A run on an Atari, Box2D or
MuJoCo environment starts from that preset with the family's overlay on top (and the user's config
file and flags above both): :func:`preset_for`. The family comes from the env id
(:func:`family_of`); ``--preset none`` keeps the algorithm's own preset, ``--preset FAMILY`` forces one.

Sources: rl-baselines3-zoo ``hyperparams/dqn.yml`` (commit 019107eb), ``ppo.yml`` and ``sac.yml``
(commit 00128b5d). How SB3's names map onto janus's:

- ``n_envs`` -> ``workload.envs_per_actor`` (one worker), ``n_steps`` -> ``workload.rollout_length``,
  ``n_epochs`` -> ``workload.num_epochs``, ``batch_size`` (PPO) -> ``num_minibatches = n_envs * n_steps / batch_size``,
  ``n_timesteps`` -> ``workload.total_env_steps``, ``buffer_size`` -> ``buffer_capacity``.
- DQN/SAC ``train_freq`` / ``gradient_steps`` -> ``train_frequency`` (env steps per update);
  ``target_update_interval`` counts env steps in SB3 and updates in janus: divided by ``train_frequency``;
  ``exploration_fraction x n_timesteps`` -> ``exploration_steps``; ``exploration_final_eps`` -> ``eps_end``.
- A ``lin_X`` learning rate is ``lr X`` (PPO anneals linearly with ``anneal_lr``; janus's SAC does not anneal).
- PPO's ``vf_coef`` is doubled: SB3 weighs the mean squared error, janus (as CleanRL) half of it;
  SB3's ``clip_range_vf`` is None unless set (no entry here sets it): ``clip_vloss`` false.
- ``normalize: true`` -> ``normalize_obs`` and ``normalize_reward`` (SB3's ``VecNormalize`` defaults: both).
- Not mapped (janus has no such knob, or keeps its own): SB3's ``use_sde``, ``clip_range``
  annealing, policy activation; janus's DQN keeps its double Q and 3-step returns.
Classic control keeps each algorithm's own preset: janus's tuned and benchmarked CartPole/Pendulum
defaults (docs/benchmarks.md), not the Zoo's per-env entries.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from janus.errors import invalid, one_of

FAMILIES = ("atari", "classic_control", "box2d", "mujoco")
CHOICES = ("auto", "none", *FAMILIES)
"""``workload.preset`` / ``--preset``: by the env id (auto), the algorithm's own (none), or a family."""

# Names of the environments of each family, for ids the Gymnasium registry does not hold (an older
# version, "HalfCheetah-v3", or a package not imported): the name before "-v".
_KNOWN = {
    "classic_control": ("CartPole", "Acrobot", "MountainCar", "MountainCarContinuous", "Pendulum"),
    "box2d": ("LunarLander", "LunarLanderContinuous", "BipedalWalker", "BipedalWalkerHardcore", "CarRacing"),
    "mujoco": ("HalfCheetah", "Hopper", "Walker2d", "Ant", "Humanoid", "HumanoidStandup", "Swimmer", "Reacher",
               "Pusher", "InvertedPendulum", "InvertedDoublePendulum"),
}


@dataclass(frozen=True)
class FamilyPreset:
    """One algorithm's overlay for one family, and where its values come from."""

    values: dict[str, Any] = field(default_factory=dict)
    """Config keys as :func:`janus.config.from_dict` reads them, layered over the algorithm's preset."""
    source: str = "janus defaults"
    """Shown at the start of ``janus train``: ``RL Zoo dqn.yml, atari``."""


_OWN = FamilyPreset({}, "janus defaults, tuned on CartPole-v1/Pendulum-v1")

_PRESETS: dict[str, dict[str, FamilyPreset]] = {
    "dqn": {
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
        "classic_control": _OWN,
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
    },
    "ppo": {
        # ppo.yml `atari`: n_envs 8, n_steps 128, n_epochs 4, batch_size 256 (8 x 128 / 256 = 4 minibatches),
        # n_timesteps 1e7, learning_rate lin_2.5e-4, clip_range lin_0.1 (janus clips at 0.1 without annealing),
        # vf_coef 0.5 (of the MSE: janus's 1.0 of half of it), ent_coef 0.01.
        "atari": FamilyPreset({
            "num_minibatches": 4,
            "workload": {"envs_per_actor": 8, "rollout_length": 128, "num_epochs": 4, "total_env_steps": 10_000_000},
            "algorithm": {"lr": 2.5e-4, "anneal_lr": True, "clip_coef": 0.1, "vf_coef": 1.0, "ent_coef": 0.01,
                          "clip_vloss": False},
        }, "RL Zoo ppo.yml, atari"),
        "classic_control": _OWN,
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
    },
    "sac": {
        # Atari has discrete actions only: sac refuses them; no overlay.
        "classic_control": _OWN,
        # sac.yml `LunarLanderContinuous-v2`: n_timesteps 5e5, batch_size 256, learning_rate lin_7.3e-4 (janus:
        # constant), buffer_size 1e6, gamma 0.99, tau 0.01, train_freq 1, gradient_steps 1, learning_starts 1e4,
        # net_arch [400, 300].
        "box2d": FamilyPreset({
            "batch_size": 256, "buffer_capacity": 1_000_000,
            "workload": {"envs_per_actor": 1, "total_env_steps": 500_000},
            "algorithm": {"lr": 7.3e-4, "gamma": 0.99, "tau": 0.01, "train_frequency": 1.0, "learning_starts": 10_000,
                          "hidden": [400, 300]},
        }, "RL Zoo sac.yml, LunarLanderContinuous-v2"),
        # sac.yml `HalfCheetah-v3: &mujoco-defaults` (Ant, Hopper, Walker2d, Humanoid, Swimmer): n_timesteps 1e6,
        # learning_starts 1e4, the rest SB3's SAC defaults: buffer_size 1e6, batch_size 256, learning_rate 3e-4,
        # tau 0.005, gamma 0.99, train_freq 1, gradient_steps 1, net [256, 256].
        "mujoco": FamilyPreset({
            "batch_size": 256, "buffer_capacity": 1_000_000,
            "workload": {"envs_per_actor": 1, "total_env_steps": 1_000_000},
            "algorithm": {"learning_starts": 10_000, "lr": 3e-4, "tau": 0.005, "gamma": 0.99, "train_frequency": 1.0},
        }, "RL Zoo sac.yml, HalfCheetah-v3 (mujoco-defaults)"),
    },
}


@dataclass(frozen=True)
class Choice:
    """The preset a run gets: its name (``dqn/atari``, ``none``), overlay and source."""

    family: str
    """A family of :data:`FAMILIES`, or ``none``."""
    algo: str
    preset: FamilyPreset

    @property
    def name(self) -> str:
        return "none" if self.family == "none" else f"{self.algo}/{self.family}"

    def describe(self) -> str:
        """``preset: dqn/atari (RL Zoo dqn.yml, atari)``, as ``janus train`` prints it."""
        return f"preset: {self.name} ({self.preset.source})"


def family_of(env_id: str) -> str | None:
    """The family of a Gymnasium id: ``ALE/...`` is atari; else the registry entry point's module
    (``gymnasium.envs.box2d...``; no package of the family need be installed), else the env's name.
    None for any other environment (toy text, a custom one)."""
    name = env_id.rpartition(":")[2]  # "module:EnvId" imports module first; the id is after the colon
    if name.startswith("ALE/"):
        return "atari"
    import gymnasium

    spec = gymnasium.envs.registry.get(name)
    entry = spec.entry_point if spec is not None else None
    if isinstance(entry, str):
        module = entry.partition(":")[0]
        for family in ("classic_control", "box2d", "mujoco"):
            if f".{family}." in f".{module}.":
                return family
    base = name.rpartition("/")[2].partition("-v")[0]
    return next((family for family, names in _KNOWN.items() if base in names), None)


def preset_for(algo: str, env_id: str, requested: str = "auto") -> Choice:
    """The overlay of ``algo`` on ``env_id``: by its family (``requested`` auto), the algorithm's own
    preset (``none``, an algorithm or family without an entry), or ``requested`` family."""
    if requested not in CHOICES:
        raise invalid("workload.preset", requested, one_of(CHOICES))
    family = family_of(env_id) if requested == "auto" else requested
    by_family = _PRESETS.get(algo, {})
    if family is None or family == "none" or family not in by_family:
        return Choice("none", algo, FamilyPreset({}, f"the {algo} defaults: no {family} preset" if family and family != "none"
                                                 else f"the {algo} defaults"))
    return Choice(family, algo, by_family[family])
