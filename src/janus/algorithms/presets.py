"""Presets by environment family: the family of an env id, and the overlay an algorithm declares for it.

An algorithm's own ``preset`` is tuned for CartPole-v1 / Pendulum-v1. A run on an Atari, Box2D or
MuJoCo environment starts from that preset with the family's overlay on top (and the user's config
file and flags above both): :func:`preset_for`. The family comes from the env id
(:func:`family_of`); ``--preset none`` keeps the algorithm's own preset, ``--preset FAMILY`` forces one.

Each algorithm declares its overlays beside its own preset
(:attr:`~janus.algorithms.base.Algorithm.family_presets`: dqn.py, ppo.py, sac.py; a custom algorithm
the same way); this module only detects the family and looks the overlay up.

The built-in overlays' sources: rl-baselines3-zoo ``hyperparams/dqn.yml`` (commit 019107eb), ``ppo.yml``
and ``sac.yml`` (commit 00128b5d). How SB3's names map onto janus's:

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

from dataclasses import dataclass

from janus.algorithms.base import FamilyPreset, algorithm
from janus.errors import invalid, one_of

FAMILIES = ("atari", "classic_control", "box2d", "mujoco", "memory")
CHOICES = ("auto", "none", *FAMILIES)
"""``workload.preset`` / ``--preset``: by the env id (auto), the algorithm's own (none), or a family."""

# Names of the environments of each family, for ids the Gymnasium registry does not hold (an older
# version, "HalfCheetah-v3", or a package not imported): the name before "-v".
_KNOWN = {
    "classic_control": ("CartPole", "Acrobot", "MountainCar", "MountainCarContinuous", "Pendulum"),
    "box2d": ("LunarLander", "LunarLanderContinuous", "BipedalWalker", "BipedalWalkerHardcore", "CarRacing"),
    "mujoco": ("HalfCheetah", "Hopper", "Walker2d", "Ant", "Humanoid", "HumanoidStandup", "Swimmer", "Reacher",
               "Pusher", "InvertedPendulum", "InvertedDoublePendulum"),
    "memory": ("CartPoleNoVel", "PendulumNoVel", "LunarLanderNoVel", "MountainCarNoVel", "MountainCarContinuousNoVel",
               "AcrobotNoVel"),
}
MEMORY_MODULES = ("janus.envs.memory",)
"""Entry-point modules of the memory family (besides POPGym's ``popgym-`` ids and the RL Zoo's ``NoVel`` names)."""


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
    ``memory``: the partially observed tasks (:mod:`janus.envs.memory`, the RL Zoo's ``NoVel`` ids,
    POPGym's ``popgym-`` ids), whose presets are recurrent.
    None for any other environment (toy text, a custom one)."""
    name = env_id.rpartition(":")[2]  # "module:EnvId" imports module first; the id is after the colon
    if name.startswith("ALE/"):
        return "atari"
    if name.startswith("popgym-"):
        return "memory"
    import gymnasium

    spec = gymnasium.envs.registry.get(name)
    entry = spec.entry_point if spec is not None else None
    if isinstance(entry, str):
        module = entry.partition(":")[0]
        if module in MEMORY_MODULES:
            return "memory"
        for family in ("classic_control", "box2d", "mujoco"):
            if f".{family}." in f".{module}.":
                return family
    base = name.rpartition("/")[2].partition("-v")[0]
    return next((family for family, names in _KNOWN.items() if base in names), None)


def preset_for(algo: str, env_id: str, requested: str = "auto") -> Choice:
    """The overlay of ``algo`` on ``env_id``: by its family (``requested`` auto), the algorithm's own
    preset (``none``, a family the algorithm declares no overlay for), or ``requested`` family (the
    algorithm's :attr:`~janus.algorithms.base.Algorithm.family_presets`)."""
    if requested not in CHOICES:
        raise invalid("workload.preset", requested, one_of(CHOICES))
    family = family_of(env_id) if requested == "auto" else requested
    by_family = algorithm(algo).family_presets
    if family is None or family == "none" or family not in by_family:
        return Choice("none", algo, FamilyPreset({}, f"the {algo} defaults: no {family} preset" if family and family != "none"
                                                 else f"the {algo} defaults"))
    return Choice(family, algo, by_family[family])
