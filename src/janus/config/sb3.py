"""Stable-Baselines3's names for janus's settings, and the network flags (``--net_arch``, ``--activation``).

One table (:data:`ALIASES`, :data:`CONVERTED`, :data:`REFUSED`; the README's "SB3 -> janus")
serves ``janus train --learning_rate 3e-4`` and ``janus.train(..., learning_rate=3e-4)`` alike:

* an alias means the same value in the same unit, and is taken as janus's flag;
* a converted name is turned into janus's setting once the run's configuration is known
  (``n_envs``: SB3 counts every environment copy, janus ``num_actors x envs_per_actor``);
* a refused name is an error naming what janus has instead: never a silent different run.

The command line adds each name as a flag (hidden from ``--help``, listed in one line: :mod:`janus.cli.parser`);
messages name settings as the caller does (``--lr`` or ``lr``: :class:`janus.config.request.Naming`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from janus.errors import ConfigError, shown

if TYPE_CHECKING:
    from janus.config.request import Naming

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
    "gradient_steps": "janus sets the updates by {train_frequency}, env steps per gradient update (SB3's "
                      "train_freq / gradient_steps)",
    "policy": "janus picks the network from the observation space (an MLP, a CNN for images); shape the MLP "
              "with {net_arch} and {activation}",
    "target_kl": "janus's ppo has no KL early stop; {clip_coef} bounds each update",
    "clip_range_vf": "janus clips the value loss by {clip_coef} with {clip_vloss} true (false: no clip)",
    "use_sde": "janus has no state-dependent exploration; {init_log_std} sets the Gaussian's initial spread",
    "sde_sample_freq": "janus has no state-dependent exploration; {init_log_std} sets the Gaussian's initial spread",
    "tensorboard_log": "use {tensorboard} (it writes OUT/tensorboard)",
    "target_entropy": "janus's is {target_entropy_scale}: the target entropy is -scale x the action dims "
                      "(SB3's 'auto' is scale 1)",
    "action_noise": "janus's sac explores by its entropy bonus and has no added action noise",
}
"""SB3 name -> what janus has instead (an error names it; ``{name}``: a janus setting, named as the caller
names it, :meth:`janus.config.request.Naming.render`)."""

NOT_READ_HINTS: dict[str, str] = {
    "ent_coef": "sac's entropy temperature is {init_alpha}, tuned by {autotune_alpha} (SB3's ent_coef='auto')",
    "n_step": "ppo's rollout length is {rollout_length} (SB3's n_steps)",
    "batch_size": "ppo's minibatches are {num_minibatches} (SB3's batch_size is converted where it divides the "
                  "rollout)",
}
"""Hints for a janus setting an algorithm does not read, where SB3 gives it another meaning (templates as
:data:`REFUSED`'s)."""

NAMES = (*ALIASES, *CONVERTED, *REFUSED)
"""Every Stable-Baselines3 name janus answers."""

NETWORK_FLAGS = {"net_arch": "hidden", "critic_net_arch": "critic_hidden"}
"""Flag -> the ``algorithm:`` key of widths it sets."""
POLICY_KWARGS = {"net_arch": "net_arch", "activation_fn": "activation", "log_std_init": "init_log_std"}
"""Keys of SB3's ``policy_kwargs`` janus reads -> the setting each becomes."""
CRITIC_KEYS = {"vf", "qf"}


def given(settings: Mapping[str, Any]) -> dict[str, Any]:
    """The SB3 names among the ``settings`` given (name -> value; None is not given)."""
    return {n: settings[n] for n in NAMES if settings.get(n) is not None}


def aliased(settings: Mapping[str, Any], typed: dict[str, Any]) -> dict[str, Any]:
    """``typed`` with the aliases given as janus's settings (never raises: :func:`check` does)."""
    out = dict(typed)
    for name, value in given(settings).items():
        if name in ALIASES and ALIASES[name] not in out:
            out[ALIASES[name]] = value
    return out


def check(settings: Mapping[str, Any], typed: dict[str, Any], naming: Naming) -> None:
    """A refused SB3 name, or one given with its janus setting, is a :class:`ConfigError`."""
    for name in given(settings):
        if name in REFUSED:
            raise ConfigError(f"{naming(name)} (a Stable-Baselines3 setting) has no janus equivalent: "
                              f"{naming.render(REFUSED[name])}")
        if name in ALIASES and ALIASES[name] in typed:
            raise ConfigError(f"{naming(name)} and {naming(ALIASES[name])} both given: {naming(name)} is SB3's name "
                              f"of {naming(ALIASES[name])}; give one")


def converted(settings: Mapping[str, Any], typed: dict[str, Any], cfg: Any, reads: Callable[[str, str], bool],
              policy: str, quick: Callable[[Any], Any] | None, naming: Naming) -> dict[str, Any]:
    """``typed`` with SB3's converted names (:data:`CONVERTED`) as janus's settings, given the run's
    configuration so far ``cfg`` (``quick``: the ``quick`` cap, when asked for); ``policy``:
    ``"on"`` or ``"off"`` for an algorithm acting in Gymnasium on- or off-policy (on-policy, its
    ``batch_size`` is SB3's minibatch size), ``""`` for the synthetic workload."""
    sb3 = {k: v for k, v in given(settings).items() if k in CONVERTED}
    out = dict(typed)
    algo = cfg.workload.algo
    n = naming

    def put(flag: str, value: Any, name: str) -> None:
        if flag in out:
            raise ConfigError(f"{name} and {n(flag)} both given: {name} (SB3's) sets {n(flag)}; give one")
        if not reads(algo, flag):
            raise ConfigError(f"{name} (SB3's) sets {n(flag)}, which {n('algo')} {algo} does not read")
        out[flag] = value

    kwargs = sb3.pop("policy_kwargs", None)
    if kwargs is not None:
        unknown = sorted(set(kwargs) - set(POLICY_KWARGS))
        if unknown:
            raise ConfigError(f"policy_kwargs key {unknown[0]!r} has no janus equivalent; janus reads "
                              f"{', '.join(POLICY_KWARGS)} of it (the network: {n('net_arch')}, {n('activation')})")
        for key, value in kwargs.items():
            put(POLICY_KWARGS[key], value, f"policy_kwargs {key!r} ({n(POLICY_KWARGS[key])})")
    if "n_envs" in sb3:
        n_envs, actors = sb3["n_envs"], out.get("num_actors", cfg.workload.num_actors)
        if isinstance(n_envs, bool) or not isinstance(n_envs, int) or n_envs < 1:
            raise ConfigError(f"invalid {n('n_envs')}: got {shown(n_envs)}; accepted: an integer >= 1")
        if isinstance(actors, int) and n_envs % actors:
            raise ConfigError(f"{n('n_envs')} {n_envs} with {n('num_actors')} {actors}: SB3's n_envs counts every "
                              f"environment copy, janus's are num_actors x envs_per_actor; give a multiple of {actors}")
        put("envs_per_actor", n_envs // actors if isinstance(actors, int) else n_envs, n("n_envs"))
    if "n_steps" in sb3:
        if policy == "off":
            steps = f" and {n('n_step')} (n-step returns)" if reads(algo, "n_step") else ""
            raise ConfigError(f"{n('n_steps')} is SB3's rollout length of on-policy algorithms; {n('algo')} {algo} "
                              f"reads {n('rollout_length')} (env steps per piece){steps}")
        put("rollout_length", sb3["n_steps"], n("n_steps"))
    if "train_freq" in sb3:
        freq, n_envs = sb3["train_freq"], sb3.get("n_envs", 1)
        if isinstance(freq, bool) or not isinstance(freq, (int, float)) or freq <= 0:
            raise ConfigError(f"invalid {n('train_freq')}: got {shown(freq)}; accepted: a number > 0 (vector steps "
                              f"per gradient update; SB3's (4, 'episode') form has no janus equivalent)")
        put("train_frequency", freq * n_envs if isinstance(n_envs, int) else freq, n("train_freq"))
    if "exploration_fraction" in sb3:
        fraction = sb3["exploration_fraction"]
        if isinstance(fraction, bool) or not isinstance(fraction, (int, float)) or not 0 <= fraction <= 1:
            raise ConfigError(f"invalid {n('exploration_fraction')}: got {shown(fraction)}; accepted: a number in "
                              f"[0, 1]")
        total = out.get("total_env_steps", (quick(cfg) if quick is not None else cfg).workload.total_env_steps)
        put("exploration_steps", round(fraction * total) if isinstance(total, int) else total,
            n("exploration_fraction"))
    if policy == "on" and "batch_size" in out:
        out = minibatches(out, cfg, naming)
    if "activation" in out:
        from janus.algorithms.networks import activation_name

        out["activation"] = activation_name(out["activation"])
    return out


def minibatches(typed: dict[str, Any], cfg: Any, naming: Naming) -> dict[str, Any]:
    """An on-policy ``batch_size`` (SB3's minibatch size, in transitions) as ``num_minibatches``."""
    out = dict(typed)
    size = out.pop("batch_size")
    n = naming
    if "num_minibatches" in out:
        raise ConfigError(f"{n('batch_size')} and {n('num_minibatches')} both given: on-policy, batch_size (SB3's "
                          "minibatch size) sets num_minibatches = rollout transitions / batch_size; give one")
    w = cfg.workload
    transitions = (out.get("num_actors", w.num_actors) * out.get("envs_per_actor", w.envs_per_actor)
                   * out.get("rollout_length", w.rollout_length))
    if isinstance(size, bool) or not isinstance(size, int) or size < 1 or transitions % size:
        raise ConfigError(f"invalid {n('batch_size')}: got {shown(size)}; on-policy it is SB3's minibatch size, a "
                          f"divisor of the rollout's {transitions} transitions (num_actors x envs_per_actor x "
                          f"rollout_length); or give {n('num_minibatches')}")
    out["num_minibatches"] = transitions // size
    return out


def network(typed: dict[str, Any], algo: str, naming: Naming) -> dict[str, Any]:
    """The ``algorithm:`` keys of ``net_arch`` (a list, or SB3's ``{"pi": [...], "vf"|"qf": [...]}``)
    and ``critic_net_arch``."""
    out: dict[str, Any] = {}
    arch = typed.get("net_arch")
    n = naming
    if isinstance(arch, Mapping):
        if "critic_net_arch" in typed:
            raise ConfigError(f"net_arch as a dict and {n('critic_net_arch')} both given: give the critic's widths once")
        critic = sorted(set(arch) & CRITIC_KEYS)
        unknown = sorted(set(arch) - CRITIC_KEYS - {"pi"})
        if unknown or len(critic) > 1:
            raise ConfigError(f"invalid net_arch: got keys {sorted(arch)}; accepted: a list of widths, or a dict with "
                              f"'pi' (the policy) and 'vf' (ppo, appo, impala: the value network) or 'qf' (sac)")
        if "pi" in arch:
            out["hidden"] = widths("net_arch", arch["pi"], algo, naming)
        if critic:
            out["critic_hidden"] = widths("net_arch", arch[critic[0]], algo, naming)
    elif arch is not None:
        out["hidden"] = widths("net_arch", arch, algo, naming)
    if "critic_net_arch" in typed:
        out["critic_hidden"] = widths("critic_net_arch", typed["critic_net_arch"], algo, naming)
    if "hidden" in out and {"hidden_size", "num_layers"} & set(typed):
        raise ConfigError(f"{n('net_arch')} with {n('hidden_size')}/{n('num_layers')}: give the widths once "
                          f"({n.given('net_arch', '64 64', '[64, 64]')} is {n.given('hidden_size', '64', '64')} "
                          f"{n.given('num_layers', '2', '2')})")
    return out


def widths(flag: str, value: Any, algo: str, naming: Naming) -> list[int]:
    """``value`` as a list of layer widths (integers >= 1), else a ConfigError naming ``flag``."""
    if isinstance(value, int) and not isinstance(value, bool):
        value = [value]
    if (not isinstance(value, (list, tuple)) or not value
            or any(isinstance(v, bool) or not isinstance(v, int) or not 1 <= v <= 1 << 20 for v in value)):
        raise ConfigError(f"invalid {naming(flag)}: got {shown(value)}; accepted: a non-empty list of layer widths "
                          f"(integers >= 1) for {naming('algo')} {algo}, e.g. [64, 64]")
    return list(value)
