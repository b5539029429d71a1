"""The one place a run's configuration is built from what its caller asked (a :class:`RunRequest`).

Layers, each over the one before: the algorithm's preset < its environment family's preset
(:mod:`janus.algorithms.presets`) < the YAML file (``config``; a resumed run's config.yaml) <
``quick`` < the settings given. Without a file the packaged default (the synthetic workload) is the
base; ``algo`` starts from that algorithm's preset instead, and ``env`` alone picks dqn or ppo by the
environment's action space. A setting the run does not read is an error naming it, as the caller
named it (:class:`~janus.config.request.Naming`). :func:`janus.config.validate` checks the result.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from janus.config import RunConfig, WorkloadConfig, from_dict, read_default_config, read_yaml, sb3
from janus.config.flags import (
    JANUS_FLAGS,
    NETWORK_FLAGS,
    NUM_WORKERS,
    RAY_ONLY,
    RUNTIME_FLAGS,
    WORKLOAD_FLAGS,
    acts_in_gymnasium,
    config_settings,
    hyperparameters,
    reads,
)
from janus.config.request import Naming, RunRequest
from janus.errors import ConfigError, JanusError


def base_config(algo: str | None, path: Path | None, resume: Path | None, family: dict[str, Any] | None = None,
                naming: Naming | None = None) -> RunConfig:
    """Algorithm preset < its ``family`` preset (:mod:`janus.algorithms.presets`) < YAML (``resume``
    RUN_DIR's config.yaml, ``path``, else the default YAML)."""
    from janus.algorithms.base import algorithm
    from janus.config.request import FLAGS

    raw: dict[str, Any] = {}
    if resume is not None:
        from janus.fileio import checking_path

        said = (naming or FLAGS)("resume")
        with checking_path(said, resume):
            found = (Path(resume) / "config.yaml").is_file()
        if not found:
            raise ConfigError(f"invalid {said}: {str(resume)!r} is not a janus train run folder (no config.yaml)")
        raw = read_yaml(Path(resume) / "config.yaml")
        workload = raw.get("workload")
        if isinstance(workload, dict) and "preset" not in workload:  # a run from before family presets had none
            raw = {**raw, "workload": {**workload, "preset": "none"}}
    elif path is not None:
        raw = read_yaml(path)
    elif algo is None or not algorithm(algo).preset:
        raw = read_default_config()
    section = raw.get("workload")  # anything but a mapping is refused by from_dict below, naming the key
    default = WorkloadConfig().algo
    name = algo or (section.get("algo", default) if isinstance(section, dict) else default)
    preset = algorithm(name).preset if isinstance(name, str) else {}
    base = from_dict(preset) if preset else RunConfig()
    if family:
        base = from_dict(family, base=base)
    cfg = from_dict(raw, base=base) if raw else base
    return from_dict({"workload": {"algo": algo}}, base=cfg) if algo else cfg


def given_settings(request: RunRequest, aliases: bool = True) -> dict[str, Any]:
    """The configuration settings ``request`` gives (name -> value, ``algo`` included), in the order the
    command line lists them; ``num_workers`` as ``num_actors``, and with ``aliases`` SB3's names of janus's
    settings as those (:data:`janus.config.sb3.ALIASES`)."""
    given = {**request.settings, **({"algo": request.algo} if request.algo is not None else {})}
    names = config_settings()
    order = [*JANUS_FLAGS, *WORKLOAD_FLAGS, *RUNTIME_FLAGS, "seed", *hyperparameters(), *NETWORK_FLAGS]
    typed = {k: given[k] for k in dict.fromkeys(order) if k in names and given.get(k) is not None}
    if given.get(NUM_WORKERS) is not None:
        typed["num_actors"] = given[NUM_WORKERS]
    return sb3.aliased(request.settings, typed) if aliases else typed


def _algo_for_env(env: str, env_kwargs: dict[str, Any] | None, naming: Naming) -> str:
    """``env`` without ``algo``: the algorithm picked by the environment's action space."""
    from janus.algorithms.gym_algorithm import default_algorithm

    name = default_algorithm(env, env_kwargs)
    print(f"janus: {naming('env')} {env}: running {naming('algo')} {name} for its family and action space (give "
          f"{naming('algo')} to choose)", flush=True)
    return name


def _check_applies(typed: dict[str, Any], cfg: RunConfig, from_file: bool, naming: Naming) -> None:
    """Every setting given is read by this run: else an error naming it and who reads it."""
    from janus.algorithms.base import names

    algo, n = cfg.workload.algo, naming
    where = " (the workload of the config file)" if from_file else ""
    for flag in typed:
        if not reads(algo, flag):
            readers = [name for name in names() if reads(name, flag)]
            hint = f"; add {n('algo')} dqn or {n('algo')} ppo" if flag == "env" and not acts_in_gymnasium(algo) else (
                f"; {n.render(sb3.NOT_READ_HINTS[flag])}" if flag in sb3.NOT_READ_HINTS else "")
            raise ConfigError(f"{n(flag)} does not apply to {n('algo')} {algo}{where}: it is read by "
                              f"{n('algo')} {' and '.join(readers)} only{hint}")
        if flag in RAY_ONLY and cfg.runtime.backend != "ray":
            picks = " (local or process, never ray)" if cfg.runtime.backend == "auto" else ""
            raise ConfigError(f"{n(flag)} applies to {n('backend')} ray only (this run uses {n('backend')} "
                              f"{cfg.runtime.backend}{picks})")


def _network_override(typed: dict[str, Any], cfg: RunConfig, naming: Naming) -> list[int] | None:
    """``hidden_size``/``num_layers`` as ``algorithm.hidden`` (the other one from the current network),
    for an algorithm that sizes its network so (:meth:`~janus.algorithms.base.Algorithm.hidden_layers`)."""
    from janus.algorithms.base import algorithm

    current = algorithm(cfg.workload.algo).hidden_layers(cfg) if {"hidden_size", "num_layers"} & set(typed) else None
    if current is None:
        return None
    width, layers = typed.get("hidden_size", current[0] if current else 64), typed.get("num_layers", len(current))
    for flag, value in (("hidden_size", width), ("num_layers", layers)):
        if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 1 << 20:
            raise ConfigError(f"invalid {naming(flag)}: got {value!r}; accepted: an integer >= 1 for "
                              f"{naming('algo')} {cfg.workload.algo}")
    return [width] * layers


def _sb3_converted(request: RunRequest, typed: dict[str, Any], cfg: RunConfig) -> dict[str, Any]:
    """``typed`` with SB3's converted names as janus's settings (:func:`janus.config.sb3.converted`)."""
    from janus.algorithms.base import algorithm
    from janus.config.command_settings import quick

    algo = algorithm(cfg.workload.algo)
    policy = ("on" if algo.on_policy else "off") if algo.acts_in_gymnasium else ""
    return sb3.converted(request.settings, typed, cfg, reads, policy, quick if request.quick else None,
                         request.naming)


def _check_hyperparameters(typed: dict[str, Any], algo_name: str, naming: Naming) -> None:
    """Range checks of the hyperparameter settings, naming the setting (not the YAML key)."""
    from janus.algorithms.base import algorithm

    algo = algorithm(algo_name)
    for name in algo.flags():
        if name in typed:
            try:
                algo.check_hyperparameter(name, typed[name])
            except ConfigError as exc:
                raise ConfigError(str(exc).replace(f"algorithm.{name}", naming(name))) from None


def build_config(request: RunRequest) -> RunConfig:
    """The configuration ``request`` asks for, layered (see the module); not yet validated.

    The family preset is chosen by the run's env id (``preset``: auto, none or a family;
    :func:`janus.algorithms.presets.preset_for`), printed for ``train`` and recorded as ``workload.preset``.
    """
    from janus.algorithms.presets import preset_for
    from janus.config.command_settings import check_flags_not_overridden, compare_granularity

    sb3.check(request.settings, given_settings(request, aliases=False), request.naming)
    typed = given_settings(request)
    check_flags_not_overridden(request.command, request.sweep, set(typed))
    typed = compare_granularity(request.command, typed)
    cfg, algo = _layered(request, typed, request.algo, None)
    if not acts_in_gymnasium(cfg.workload.algo):
        return cfg
    choice = preset_for(cfg.workload.algo, cfg.workload.env, cfg.workload.preset)
    if choice.preset.values:  # the env and the preset are known only now: layer again, the family under the YAML
        cfg, _ = _layered(request, typed, algo, choice.preset.values)
    if request.command == "train":
        print(f"janus: {choice.describe()}", flush=True)
    return from_dict({"workload": {"preset": choice.family}}, base=cfg)  # what config.yaml records


def _layered(request: RunRequest, typed: dict[str, Any], algo: str | None,
             family: dict[str, Any] | None) -> tuple[RunConfig, str | None]:
    """The layers of :func:`build_config` with ``family`` over the algorithm preset, and the
    algorithm (``env`` alone picks it)."""
    resume, path, naming = request.resume, request.config, request.naming
    cfg = base_config(algo, path, resume, family, naming)
    if algo is None and resume is None and path is None and "env" in typed and not acts_in_gymnasium(cfg.workload.algo):
        algo = _algo_for_env(typed["env"], typed.get("env_kwargs"), naming)
        cfg = base_config(algo, None, None, family, naming)
    runtime = {k: v for k, v in typed.items() if k in RUNTIME_FLAGS}
    if runtime:
        cfg = from_dict({"runtime": runtime}, base=cfg)
    typed = _sb3_converted(request, typed, cfg)
    _check_applies(typed, cfg, request.algo is None and (path is not None or resume is not None), naming)
    if request.quick:
        from janus.config.command_settings import quick

        cfg = quick(cfg)
    overrides: dict[str, Any] = {k: v for k, v in typed.items() if k in JANUS_FLAGS}
    workload = {k: v for k, v in typed.items() if k in WORKLOAD_FLAGS}
    if workload:
        overrides["workload"] = workload
    if "seed" in typed:
        overrides["seed"] = typed["seed"]
    _check_hyperparameters(typed, cfg.workload.algo, naming)
    hyper = {k: v for k, v in typed.items() if k in hyperparameters()}
    hidden = _network_override(typed, cfg, naming)
    if hidden is not None:
        hyper["hidden"] = hidden
    network = sb3.network(typed, cfg.workload.algo, naming)
    if "critic_hidden" in network and not reads(cfg.workload.algo, "critic_net_arch"):
        raise ConfigError(f"{naming('algo')} {cfg.workload.algo} has one network: give net_arch as a list of widths "
                          f"(a 'vf' or 'qf' entry is for ppo, appo, impala and sac)")
    hyper.update(network)
    if hyper:
        overrides["algorithm"] = hyper
    cfg = from_dict(overrides, base=cfg) if overrides else cfg
    if "num_minibatches" in overrides and "g_select" not in overrides:
        cfg = _selection_in_minibatches(cfg)
    return cfg, algo


def _selection_in_minibatches(cfg: RunConfig) -> RunConfig:
    """On-policy, ``g_select`` is a fraction k/M of a rollout (M = ``num_minibatches``). Where the settings
    changed M and left ``g_select`` to the preset (0.25: one minibatch of 4), it becomes the nearest
    k/M (1/M at least), so ``--num_minibatches 1`` (or SB3's ``batch_size`` of a whole rollout) runs
    rather than fails on a knob the user never set."""
    from janus.algorithms.base import learns_on_policy

    m = cfg.janus.num_minibatches
    g = cfg.janus.g_select
    if not learns_on_policy(cfg):
        return cfg
    if not isinstance(m, int) or isinstance(m, bool) or m < 1 or not isinstance(g, (int, float)) or isinstance(g, bool):
        return cfg  # validation names the bad value
    if abs(g * m - round(g * m)) < 1e-9 and round(g * m) >= 1:
        return cfg
    return from_dict({"g_select": max(1, round(g * m)) / m}, base=cfg)


def in_callers_words(exc: JanusError, request: RunRequest) -> JanusError:
    """An invalid value the caller gave named as the caller named it (``invalid --num_actors``, ``invalid
    num_actors``), not by its configuration key (``workload.num_actors``); a config file's value keeps its key."""
    text = str(exc)
    if not isinstance(exc, ConfigError) or not text.startswith("invalid "):
        return exc
    typed_as = {sb3.ALIASES[n]: n for n in sb3.given(request.settings) if n in sb3.ALIASES}  # SB3's name, where used
    for flag in given_settings(request):
        for key in (flag, f"--{flag}", f"workload.{flag}", f"runtime.{flag}", f"algorithm.{flag}"):
            if text.startswith(f"invalid {key}:"):
                return ConfigError(f"invalid {request.naming(typed_as.get(flag, flag))}:{text[len(f'invalid {key}:'):]}")
    return exc
