"""Stable-Baselines3's names for janus's settings, and the network flags (``--net_arch``, ``--activation``).

One table (:data:`ALIASES`, :data:`CONVERTED`, :data:`REFUSED`; the README's "SB3 -> janus")
serves ``janus train --learning_rate 3e-4`` and ``janus.train(..., learning_rate=3e-4)`` alike:

* an alias means the same value in the same unit, and is taken as janus's flag;
* a converted name is turned into janus's setting once the run's configuration is known
  (``n_envs``: SB3 counts every environment copy, janus ``num_actors x envs_per_actor``);
* a refused name is an error naming what janus has instead: never a silent different run.

Each flag's parser entry has the destination ``sb3__<name>`` (hidden from ``--help``, listed in one line).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Mapping
from typing import Any

from janus.errors import ConfigError, shown

ALIASES: dict[str, str] = {
    "learning_rate": "lr",
    "total_timesteps": "total_env_steps",
    "n_epochs": "num_epochs",
    "clip_range": "clip_coef",
    "buffer_size": "buffer_capacity",
    "exploration_initial_eps": "eps_start",
    "exploration_final_eps": "eps_end",
    "normalize_advantage": "norm_adv",
    "log_std_init": "init_log_std",
}
"""SB3 name -> janus flag of the same meaning and unit."""

CONVERTED: dict[str, str] = {
    "n_envs": "envs_per_actor = n_envs / num_actors (the environment copies of all workers together)",
    "n_steps": "rollout_length (env steps per environment per rollout; ppo, appo, impala)",
    "exploration_fraction": "exploration_steps = exploration_fraction x total_env_steps (dqn)",
    "train_freq": "train_frequency = train_freq x n_envs (SB3 counts vector steps of n_envs envs; janus env steps)",
    "policy_kwargs": "its net_arch and activation_fn (log_std_init: init_log_std)",
}
"""SB3 name -> the janus setting it becomes with the run's configuration. Also converted: an
on-policy ``batch_size`` (SB3's minibatch size) becomes ``num_minibatches`` = rollout
transitions / batch_size."""

REFUSED: dict[str, str] = {
    "gradient_steps": "janus sets the updates by --train_frequency, env steps per gradient update (SB3's "
                      "train_freq / gradient_steps)",
    "policy": "janus picks the network from the observation space (an MLP, a CNN for images); shape the MLP "
              "with --net_arch and --activation",
    "target_kl": "janus's ppo has no KL early stop; --clip_coef bounds each update",
    "clip_range_vf": "janus clips the value loss by --clip_coef with --clip_vloss true (false: no clip)",
    "use_sde": "janus has no state-dependent exploration; --init_log_std sets the Gaussian's initial spread",
    "sde_sample_freq": "janus has no state-dependent exploration; --init_log_std sets the Gaussian's initial spread",
    "tensorboard_log": "use --tensorboard (it writes OUT/tensorboard)",
    "target_entropy": "janus's is --target_entropy_scale: the target entropy is -scale x the action dims "
                      "(SB3's 'auto' is scale 1)",
    "action_noise": "janus's sac explores by its entropy bonus and has no added action noise",
}
"""SB3 name -> what janus has instead (an error names it)."""

NOT_READ_HINTS: dict[str, str] = {
    "ent_coef": "sac's entropy temperature is --init_alpha, tuned by --autotune_alpha (SB3's ent_coef='auto')",
    "n_step": "ppo's rollout length is --rollout_length (SB3's n_steps)",
    "batch_size": "ppo's minibatches are --num_minibatches (SB3's batch_size is converted where it divides the rollout)",
}
"""Hints for a janus flag an algorithm does not read, where SB3 gives it another meaning."""

NETWORK_FLAGS = {"net_arch": "hidden", "critic_net_arch": "critic_hidden"}
"""Flag -> the ``algorithm:`` key of widths it sets."""
POLICY_KWARGS = {"net_arch": "net_arch", "activation_fn": "activation", "log_std_init": "init_log_std"}
"""Keys of SB3's ``policy_kwargs`` janus reads -> the flag each becomes."""
CRITIC_KEYS = {"vf", "qf"}


def dest(name: str) -> str:
    """The argparse destination of SB3 flag ``name``."""
    return f"sb3__{name}"


def add_flags(parser: argparse.ArgumentParser, number: Callable[[str], Any], boolean: Callable[[str], bool],
              mapping: Callable[[str], dict[str, Any]]) -> None:
    """SB3's names as flags of ``parser``, hidden from the per-flag help and listed in one group."""
    names = [*ALIASES, *CONVERTED, *REFUSED]
    group = parser.add_argument_group(
        "Stable-Baselines3 names", "Accepted as flags (and janus.train keywords): " + ", ".join(
            f"{n} (--{ALIASES[n]})" for n in ALIASES) + "; converted: " + ", ".join(CONVERTED)
        + "; refused, naming janus's equivalent: " + ", ".join(REFUSED) + " (the README's SB3 -> janus table).")
    for name in names:
        kind: Callable[[str], Any] = boolean if ALIASES.get(name) == "norm_adv" else (
            mapping if name == "policy_kwargs" else str if name == "policy" else number)
        group.add_argument(f"--{name}", dest=dest(name), type=kind, default=None, help=argparse.SUPPRESS)


def is_alias(destination: str) -> bool:
    """Whether an argparse destination is an SB3 name's (left out of close-match hints: those name janus's flags)."""
    return destination.startswith("sb3__")


def given(args: argparse.Namespace) -> dict[str, Any]:
    """The SB3 names given: name -> value."""
    return {n: getattr(args, dest(n)) for n in (*ALIASES, *CONVERTED, *REFUSED)
            if getattr(args, dest(n), None) is not None}


def aliased(args: argparse.Namespace, typed: dict[str, Any]) -> dict[str, Any]:
    """``typed`` with the aliases given as janus's flags (never raises: :func:`check` does)."""
    out = dict(typed)
    for name, value in given(args).items():
        if name in ALIASES and ALIASES[name] not in out:
            out[ALIASES[name]] = value
    return out


def check(args: argparse.Namespace, typed: dict[str, Any]) -> None:
    """A refused SB3 name, or one given with its janus flag, is a :class:`ConfigError`."""
    for name in given(args):
        if name in REFUSED:
            raise ConfigError(f"--{name} (a Stable-Baselines3 setting) has no janus equivalent: {REFUSED[name]}")
        if name in ALIASES and ALIASES[name] in typed:
            raise ConfigError(f"--{name} and --{ALIASES[name]} both given: --{name} is SB3's name of "
                              f"--{ALIASES[name]}; give one")


def converted(args: argparse.Namespace, typed: dict[str, Any], cfg: Any, reads: Callable[[str, str], bool],
              policy: str, quick: Callable[[Any], Any] | None) -> dict[str, Any]:
    """``typed`` with SB3's converted names (:data:`CONVERTED`) as janus's flags, given the run's
    configuration so far ``cfg`` (``quick``: the ``--quick`` cap, when asked for); ``policy``:
    ``"on"`` or ``"off"`` for an algorithm acting in Gymnasium on- or off-policy (on-policy, its
    ``batch_size`` is SB3's minibatch size), ``""`` for the synthetic workload."""
    sb3 = {k: v for k, v in given(args).items() if k in CONVERTED}
    out = dict(typed)
    algo = cfg.workload.algo

    def put(flag: str, value: Any, name: str) -> None:
        if flag in out:
            raise ConfigError(f"--{name} and --{flag} both given: --{name} (SB3's) sets --{flag}; give one")
        if not reads(algo, flag):
            raise ConfigError(f"--{name} (SB3's) sets --{flag}, which --algo {algo} does not read")
        out[flag] = value

    kwargs = sb3.pop("policy_kwargs", None)
    if kwargs is not None:
        unknown = sorted(set(kwargs) - set(POLICY_KWARGS))
        if unknown:
            raise ConfigError(f"policy_kwargs key {unknown[0]!r} has no janus equivalent; janus reads "
                              f"{', '.join(POLICY_KWARGS)} of it (the network: --net_arch, --activation)")
        for key, value in kwargs.items():
            put(POLICY_KWARGS[key], value, f"policy_kwargs {key!r} (--{POLICY_KWARGS[key]})")
    if "n_envs" in sb3:
        n_envs, actors = sb3["n_envs"], out.get("num_actors", cfg.workload.num_actors)
        if isinstance(n_envs, bool) or not isinstance(n_envs, int) or n_envs < 1:
            raise ConfigError(f"invalid --n_envs: got {shown(n_envs)}; accepted: an integer >= 1")
        if isinstance(actors, int) and n_envs % actors:
            raise ConfigError(f"--n_envs {n_envs} with --num_actors {actors}: SB3's n_envs counts every environment "
                              f"copy, janus's are num_actors x envs_per_actor; give a multiple of {actors}")
        put("envs_per_actor", n_envs // actors if isinstance(actors, int) else n_envs, "n_envs")
    if "n_steps" in sb3:
        if policy == "off":
            steps = " and --n_step (n-step returns)" if reads(algo, "n_step") else ""
            raise ConfigError(f"--n_steps is SB3's rollout length of on-policy algorithms; --algo {algo} reads "
                              f"--rollout_length (env steps per piece){steps}")
        put("rollout_length", sb3["n_steps"], "n_steps")
    if "train_freq" in sb3:
        freq, n_envs = sb3["train_freq"], sb3.get("n_envs", 1)
        if isinstance(freq, bool) or not isinstance(freq, (int, float)) or freq <= 0:
            raise ConfigError(f"invalid --train_freq: got {shown(freq)}; accepted: a number > 0 (vector steps per "
                              f"gradient update; SB3's (4, 'episode') form has no janus equivalent)")
        put("train_frequency", freq * n_envs if isinstance(n_envs, int) else freq, "train_freq")
    if "exploration_fraction" in sb3:
        fraction = sb3["exploration_fraction"]
        if isinstance(fraction, bool) or not isinstance(fraction, (int, float)) or not 0 <= fraction <= 1:
            raise ConfigError(f"invalid --exploration_fraction: got {shown(fraction)}; accepted: a number in [0, 1]")
        total = out.get("total_env_steps", (quick(cfg) if quick is not None else cfg).workload.total_env_steps)
        put("exploration_steps", round(fraction * total) if isinstance(total, int) else total, "exploration_fraction")
    if policy == "on" and "batch_size" in out:
        out = minibatches(out, cfg)
    if "activation" in out:
        from janus.algorithms.networks import activation_name

        out["activation"] = activation_name(out["activation"])
    return out


def minibatches(typed: dict[str, Any], cfg: Any) -> dict[str, Any]:
    """An on-policy ``batch_size`` (SB3's minibatch size, in transitions) as ``num_minibatches``."""
    out = dict(typed)
    size = out.pop("batch_size")
    if "num_minibatches" in out:
        raise ConfigError("--batch_size and --num_minibatches both given: on-policy, batch_size (SB3's minibatch "
                          "size) sets num_minibatches = rollout transitions / batch_size; give one")
    w = cfg.workload
    transitions = (out.get("num_actors", w.num_actors) * out.get("envs_per_actor", w.envs_per_actor)
                   * out.get("rollout_length", w.rollout_length))
    if isinstance(size, bool) or not isinstance(size, int) or size < 1 or transitions % size:
        raise ConfigError(f"invalid --batch_size: got {shown(size)}; on-policy it is SB3's minibatch size, a divisor of "
                          f"the rollout's {transitions} transitions (num_actors x envs_per_actor x rollout_length); "
                          f"or give --num_minibatches")
    out["num_minibatches"] = transitions // size
    return out


def network(typed: dict[str, Any], algo: str) -> dict[str, Any]:
    """The ``algorithm:`` keys of ``--net_arch`` (a list, or SB3's ``{"pi": [...], "vf"|"qf": [...]}``)
    and ``--critic_net_arch``."""
    out: dict[str, Any] = {}
    arch = typed.get("net_arch")
    if isinstance(arch, Mapping):
        if "critic_net_arch" in typed:
            raise ConfigError("net_arch as a dict and --critic_net_arch both given: give the critic's widths once")
        critic = sorted(set(arch) & CRITIC_KEYS)
        unknown = sorted(set(arch) - CRITIC_KEYS - {"pi"})
        if unknown or len(critic) > 1:
            raise ConfigError(f"invalid net_arch: got keys {sorted(arch)}; accepted: a list of widths, or a dict with "
                              f"'pi' (the policy) and 'vf' (ppo, appo, impala: the value network) or 'qf' (sac)")
        if "pi" in arch:
            out["hidden"] = widths("net_arch", arch["pi"], algo)
        if critic:
            out["critic_hidden"] = widths("net_arch", arch[critic[0]], algo)
    elif arch is not None:
        out["hidden"] = widths("net_arch", arch, algo)
    if "critic_net_arch" in typed:
        out["critic_hidden"] = widths("critic_net_arch", typed["critic_net_arch"], algo)
    if "hidden" in out and {"hidden_size", "num_layers"} & set(typed):
        raise ConfigError("--net_arch with --hidden_size/--num_layers: give the widths once (--net_arch 64 64 is "
                          "--hidden_size 64 --num_layers 2)")
    return out


def widths(flag: str, value: Any, algo: str) -> list[int]:
    """``value`` as a list of layer widths (integers >= 1), else a ConfigError naming ``flag``."""
    if isinstance(value, int) and not isinstance(value, bool):
        value = [value]
    if (not isinstance(value, (list, tuple)) or not value
            or any(isinstance(v, bool) or not isinstance(v, int) or not 1 <= v <= 1 << 20 for v in value)):
        raise ConfigError(f"invalid --{flag}: got {shown(value)}; accepted: a non-empty list of layer widths "
                          f"(integers >= 1) for --algo {algo}, e.g. [64, 64]")
    return list(value)
