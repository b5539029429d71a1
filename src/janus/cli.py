"""Command line: ``janus compare | train | eval --sweep placement|granularity|overlap | rollout``.

Every command takes ``--config FILE`` (default: the packaged ``janus/configs/default.yaml``, the same
from any folder), and one flag
per configuration field with the field's own name: data-path knobs (``--overlap_collect 1``),
workload (``--iterations 100``, ``--env CartPole-v1``), runtime (``--backend process``) and the
hyperparameters each algorithm declares (``--lr``, ``--gamma``, ``--clip_coef`` ...,
its ``flags()``: the Gymnasium algorithms from their config dataclasses). Layers: algorithm preset < its environment
family preset (``--preset``, :mod:`janus.algorithms.presets`) < YAML < ``--quick`` < flags.

A flag is never silently ignored: no prefix matching (``--envs`` is not ``--envs_per_actor``), and a
flag the run's algorithm or backend does not read is an error naming it. Help text and the defaults
it shows come from the config dataclasses' field docs and the configuration a run resolves.
"""

from __future__ import annotations

import argparse
import contextlib
import difflib
import functools
import json
import os
import sys
import threading
import traceback
from collections.abc import Callable, Iterator, Sequence
from dataclasses import fields
from pathlib import Path
from typing import Any, TextIO

from janus.config import (
    BACKENDS,
    VECTOR_ENVS,
    JanusConfig,
    RunConfig,
    RuntimeConfig,
    WorkloadConfig,
    default_config_file,
    from_dict,
    read_default_config,
    read_yaml,
    sb3,
    validate,
)
from janus.config.schema import field_docs as field_docs
from janus.errors import ConfigError, JanusError, shown as errors_shown
from janus.stopping import Aborted, StopSignals, Terminated

DEFAULT_CONFIG = default_config_file()
"""The configuration of a run without ``--config`` (and without an ``--algo`` preset): package data."""
BOOL_FIELDS = {"is_on_policy"}
PER_INVOCATION = {"resume", "checkpoint_dir", "best_dir"}  # set by `janus train` itself (RUN_DIR/checkpoint, best, --resume)

JANUS_FLAGS = tuple(f.name for f in fields(JanusConfig))
WORKLOAD_FLAGS = tuple(f.name for f in fields(WorkloadConfig))
RUNTIME_FLAGS = tuple(f.name for f in fields(RuntimeConfig) if f.name not in PER_INVOCATION)
SYNTHETIC_ONLY = {"obs_shape", "obs_dtype", "env_step_ms", "env_compute_ms", "num_actions", "iterations",
                  "updates_per_iteration", "is_on_policy", "samples_per_param_load"}
"""Flags only the synthetic workload reads (a Gymnasium run takes them from the env and its budget;
it publishes parameters once per round of pieces, or per rollout on-policy)."""
GYM_ONLY = {"env", "env_kwargs", "vector_env", "preset", "total_env_steps", "eval_interval_steps", "eval_episodes"}
"""Flags only the algorithms acting in Gymnasium environments read (``Algorithm.acts_in_gymnasium``)."""
ON_POLICY_ONLY = {"num_epochs", "num_minibatches"}  # of the algorithms acting in Gymnasium environments
OFF_POLICY_ONLY = {"batch_size"}
RAY_ONLY = {"address", "max_calls_in_flight"}
NETWORK_FLAGS = sb3.NETWORK_FLAGS
"""``--net_arch``/``--critic_net_arch`` -> the ``algorithm:`` key of widths each sets."""


def _bool(text: str) -> bool:
    lowered = text.lower()
    if lowered in ("1", "true", "yes", "on"):
        return True
    if lowered in ("0", "false", "no", "off"):
        return False
    raise argparse.ArgumentTypeError(f"expected true/false or 1/0, got {text!r}")


def _path(text: str) -> Path:
    """A path flag's value: an empty one is refused (``Path("")`` is the current folder: ``--out ""`` wrote there)."""
    if not text.strip():
        raise argparse.ArgumentTypeError(f"an empty path ({text!r}); give a folder or file, e.g. runs/dqn")
    return Path(text)


def _number(text: str) -> Any:
    """Ints stay ints, ``k/M`` fractions stay strings (parsed by config), else float."""
    try:
        return int(text)
    except ValueError:
        pass
    try:
        return float(text)
    except ValueError:
        return text


def _algo_name(text: str) -> str:
    """``--algo``: a built-in or registered name in any case (``PPO``); ``package.module:Name`` as given."""
    from janus.algorithms.base import canonical_name

    return str(canonical_name(text))


def _mapping(text: str) -> dict[str, Any]:
    """A JSON object, e.g. ``{"max_episode_steps": 50}``."""
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise argparse.ArgumentTypeError(f"expected a JSON object such as '{{\"max_episode_steps\": 50}}': {exc}") from None
    except (ValueError, RecursionError) as exc:  # an integer over Python's digit limit, nesting too deep
        raise argparse.ArgumentTypeError(f"cannot read this JSON: {errors_shown(str(exc), 200)}") from None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError(f"expected a JSON object such as '{{\"max_episode_steps\": 50}}', got {text!r}")
    return value


# ---- help text and the defaults it shows ---------------------------------------------------------
def hyperparameters() -> dict[str, dict[str, Any]]:
    """Every hyperparameter flag: name -> {algorithm: its default}, from the algorithms' :meth:`flags`
    (every registered one: the built-in ones and the custom ones registered so far)."""
    from janus.algorithms.base import algorithm, names

    out: dict[str, dict[str, Any]] = {}
    for name in names():
        for flag, hp in algorithm(name).flags().items():
            out.setdefault(flag, {})[name] = hp.default
    return out


def _hyperparameter_docs() -> dict[str, str]:
    from janus.algorithms.base import algorithm, names

    docs: dict[str, str] = {}
    for name in names():
        docs = {**{flag: hp.doc for flag, hp in algorithm(name).flags().items() if hp.doc}, **docs}
    return docs


def _acts_in_gymnasium(name: str) -> bool:
    from janus.algorithms.base import algorithm

    return algorithm(name).acts_in_gymnasium


def reads(algo_name: str, flag: str) -> bool:
    """Whether a run of ``algo_name`` reads the config field behind ``--flag``."""
    from janus.algorithms.base import algorithm

    gym = _acts_in_gymnasium(algo_name)
    if flag in SYNTHETIC_ONLY:
        return not gym
    if flag in GYM_ONLY:
        return gym
    if gym and flag in ON_POLICY_ONLY | OFF_POLICY_ONLY:
        return algorithm(algo_name).on_policy == (flag in ON_POLICY_ONLY)
    if flag in hyperparameters():
        return algo_name in hyperparameters()[flag]
    if flag in NETWORK_FLAGS:
        return NETWORK_FLAGS[flag] in algorithm(algo_name).defaults()
    return True


def value_of(cfg: RunConfig, flag: str) -> Any:
    """The value behind ``--flag`` in ``cfg`` (``--hidden_size``/``--num_layers``: the network's, for an
    algorithm that sizes it by ``algorithm.hidden``)."""
    from janus.algorithms.base import algorithm

    algo = algorithm(cfg.workload.algo)
    if flag in algo.flags():
        return algo.hyperparameter(cfg, flag)
    if flag in NETWORK_FLAGS:
        return list(algo.hyperparameter(cfg, NETWORK_FLAGS[flag])) or "as --net_arch"
    hidden = algo.hidden_layers(cfg) if flag in ("hidden_size", "num_layers") else None
    if hidden is not None:
        if flag == "hidden_size":
            return hidden[0] if hidden else 0
        return len(hidden)
    if flag == "seed":
        return cfg.seed
    for section in (cfg.janus, cfg.workload, cfg.runtime):
        if flag in {f.name for f in fields(section)}:
            return getattr(section, flag)
    raise KeyError(flag)


def shown(value: Any) -> str:
    """A default as help shows it."""
    if isinstance(value, (tuple, list)):
        return " ".join(map(str, value))
    if isinstance(value, dict):
        return json.dumps(value)
    return str(value)


def flag_defaults() -> dict[str, dict[str, Any]]:
    """``flag -> {algorithm: default}``: what a run without ``--config`` resolves, for the runs that read it.

    Without ``--algo`` a run starts from the packaged default (:data:`DEFAULT_CONFIG`, the synthetic
    workload); with ``--algo NAME`` from that algorithm's preset. Computed once per process and
    content of the default file (an edited file, as in an editable install, is read anew).
    """
    stamp = DEFAULT_CONFIG.read_text(encoding="utf-8")
    from janus.algorithms.base import names

    per_flag = _flag_defaults(stamp, names())
    return {flag: dict(per_algo) for flag, per_algo in per_flag.items()}  # callers may edit theirs


@functools.lru_cache(maxsize=8)
def _flag_defaults(stamp: str, algorithms: tuple[str, ...]) -> dict[str, dict[str, Any]]:
    from janus.algorithms.base import algorithm

    bases = {}
    default = _base_config(None, None, None)
    bases[default.workload.algo] = default
    for name in algorithms:
        if name not in bases and algorithm(name).preset:
            bases[name] = _base_config(name, None, None)
    flags = [*JANUS_FLAGS, *WORKLOAD_FLAGS, *RUNTIME_FLAGS, "seed", *hyperparameters(), *NETWORK_FLAGS]
    out = {flag: {name: value_of(cfg, flag) for name, cfg in bases.items() if reads(name, flag)} for flag in flags}
    out["algo"] = {default.workload.algo: default.workload.algo}  # --algo NAME is its own preset
    return out


def _help(doc: str, defaults: dict[str, Any], applies: str = "") -> str:
    values = {shown(v) for v in defaults.values()}
    if not values:
        text = ""
    elif len(values) == 1:
        text = f"[default {values.pop()}]"
    else:
        text = "[default " + "; ".join(f"{shown(v)} for {name}" for name, v in defaults.items()) + "]"
    return f"{doc} {text}{applies}".strip().replace("%", "%%")


def _add_overrides(parser: argparse.ArgumentParser) -> None:
    defaults = flag_defaults()
    from janus.algorithms.base import names

    gym = [n for n in names() if _acts_in_gymnasium(n)]
    only = {
        **{f: f" ({', '.join(gym)} only)" for f in GYM_ONLY}, **{f: " (synthetic only)" for f in SYNTHETIC_ONLY},
        **{f: " (--backend ray only)" for f in RAY_ONLY},
    }
    group = parser.add_argument_group("data-path knobs (the artifact's names)")
    docs = field_docs(JanusConfig)
    for name in JANUS_FLAGS:
        kind: Callable[[str], Any] = _bool if name in BOOL_FIELDS else _number
        group.add_argument(f"--{name}", type=kind, default=None, metavar=name.upper(),
                           help=_help(docs.get(name, ""), defaults[name], only.get(name, "")))
    wgroup = parser.add_argument_group("workload")
    docs = {**field_docs(WorkloadConfig),
            "hidden_size": "Width of every hidden layer of the learner's network (the Gymnasium algorithms: of "
                           "algorithm.hidden, as --net_arch).",
            "num_layers": "Hidden layers of the learner's network (the Gymnasium algorithms: of algorithm.hidden, as "
                          "--net_arch).",
            "env_kwargs": 'Keyword arguments of gymnasium.make for every environment, as a JSON object, e.g. '
                          '\'{"max_episode_steps": 50}\' (saved in config.yaml).'}
    wtypes = {f.name: f.type for f in fields(WorkloadConfig)}
    for name in WORKLOAD_FLAGS:
        extra: dict[str, Any] = {"type": str if wtypes[name] == "str" else _number}
        if name == "obs_shape":
            extra = {"type": int, "nargs": "+"}
        elif name == "env_kwargs":
            extra = {"type": _mapping, "metavar": "JSON"}
        elif name == "vector_env":
            extra = {"type": str, "choices": VECTOR_ENVS}
        elif name == "preset":
            from janus.algorithms.presets import CHOICES as PRESETS

            extra = {"type": str, "choices": PRESETS}
        elif name == "algo":
            extra = {"type": _algo_name}
            docs["algo"] = (f"Workload: {', '.join(names())} (any case), or package.module:Name of a custom algorithm "
                            "(docs/custom-algorithm.md). Without it, --env picks dqn for Discrete and ppo for Box "
                            "action spaces.")
        wgroup.add_argument(f"--{name}", default=None, **{"metavar": name.upper(), **extra},
                            help=_help(docs.get(name, ""), defaults[name], only.get(name, "")))
    wgroup.add_argument("--num_workers", type=_number, default=None, dest="num_actors_alias", metavar="N",
                        help="Workers (actors); same as --num_actors.")
    rgroup = parser.add_argument_group("runtime")
    docs = field_docs(RuntimeConfig)
    rtypes = {f.name: f.type for f in fields(RuntimeConfig)}
    for name in RUNTIME_FLAGS:
        kind = str if rtypes[name] in ("str", "str | None") else _bool if rtypes[name] == "bool" else _number
        extra = {"choices": BACKENDS} if name == "backend" else {}
        if rtypes[name] == "bool":  # --allow_oversubscribe alone is true
            extra = {"nargs": "?", "const": True, "metavar": "BOOL"}
        rgroup.add_argument(f"--{name}", type=kind, default=None, **{"metavar": name.upper(), **extra},
                            help=_help(docs.get(name, ""), defaults[name], only.get(name, "")))
    parser.add_argument("--seed", type=int, default=None, help=_help("Random seed.", defaults["seed"]))
    hgroup = parser.add_argument_group("algorithm hyperparameters (the algorithm: section)")
    docs = _hyperparameter_docs()
    for name, by_algo in hyperparameters().items():
        defaults[name] = defaults[name] or by_algo  # an algorithm without a preset: its own defaults
        example = next(iter(by_algo.values()))
        if isinstance(example, bool):
            extra = {"type": _bool, "nargs": "?", "const": True, "metavar": "BOOL"}
        elif isinstance(example, str):
            extra = {"type": str, "metavar": name.upper()}
        else:
            extra = {"type": int if isinstance(example, int) else float, "metavar": name.upper()}
        owners = f" ({', '.join(by_algo)} only)" if set(by_algo) != set(gym) else ""  # "dqn, sac only"
        hgroup.add_argument(f"--{name}", default=None, **extra, help=_help(docs.get(name, ""), defaults[name], owners))
    network_docs = {
        "net_arch": "Widths of the hidden layers of the network (ppo, appo, impala, sac: of the policy, and of the "
                    "value/Q-networks unless --critic_net_arch sizes them), e.g. --net_arch 128 64: algorithm.hidden.",
        "critic_net_arch": "Widths of the hidden layers of the value network (sac: of each Q-network): "
                           "algorithm.critic_hidden.",
    }
    for name in NETWORK_FLAGS:
        readers = {n: v for n, v in defaults[name].items() if reads(n, name)}
        hgroup.add_argument(f"--{name}", type=int, nargs="+", default=None, metavar="W",
                            help=_help(network_docs[name], readers, f" ({', '.join(readers)} only)"))
    sb3.add_flags(parser, _number, _bool, _mapping)


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", type=_path, default=None,
                        help="YAML config whose values replace the defaults shown here "
                             "[default: the packaged janus/configs/default.yaml (a copy is configs/default.yaml in the "
                             "repository), or the --algo preset]")
    parser.add_argument("--out", type=_path, default=None, help="Output folder [default runs/<command>-<timestamp>].")
    parser.add_argument("--quick", action="store_true",
                        help="A tiny workload that finishes in seconds (caps iterations and total_env_steps; "
                             "values given as flags are kept).")
    parser.add_argument("--force", action="store_true",
                        help="If --out already holds a run, move it aside to OUT.old-<time> (never deleted).")
    _add_overrides(parser)


def _repeats(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--repeats", type=int, default=None, metavar="N",
                        help="Runs of each configuration, interleaved (round by round); the table shows each one's "
                             "median run and its range [default 3; 1 with --quick]. A warm-up run comes first.")


def package_version() -> str:
    """The installed distribution's version (``janus-rl``), else the source tree's ``__version__``."""
    from importlib import metadata

    try:
        return metadata.version("janus-rl")
    except metadata.PackageNotFoundError:
        from janus import __version__

        return __version__


DEFAULTS_NOTE = ("Defaults in [brackets] are those of a run without --config: the packaged janus/configs/default.yaml "
                 "(the synthetic workload; the same from any folder), or the --algo preset; a --config file's values "
                 "replace them, and flags replace both. A key a synthetic --config file leaves out takes the dataclass "
                 "default: the bracketed one, except overlap_collect, overlap_select 0 and g_collect, g_select 1 "
                 "(the baseline data path).")


def build_parser() -> argparse.ArgumentParser:
    """The ``janus`` parser: no abbreviations anywhere (``--envs`` is an error, not ``--envs_per_actor``)."""
    parser = argparse.ArgumentParser(prog="janus", description="Dual-End Staging for the RL data path.", allow_abbrev=False)
    parser.add_argument("--version", action="version", version=f"janus {package_version()}",
                        help="Print the installed version and exit.")
    sub = parser.add_subparsers(dest="command", required=True)
    cmp = sub.add_parser("compare", help="baseline vs overlap vs granularity vs janus on one workload",
                         description=DEFAULTS_NOTE, allow_abbrev=False)
    _common(cmp)
    _repeats(cmp)
    train = sub.add_parser("train", help="one run of one configuration", description=DEFAULTS_NOTE, allow_abbrev=False)
    _common(train)
    train.add_argument("--name", default=None, help="Run name in the report [default train].")
    train.add_argument("--verbose", action="store_true",
                       help="Also print the data-path table (samples/s, stage times, speedup) and the runtime's message "
                            "counts at the end (results.json holds them either way).")
    train.add_argument("--tensorboard", action="store_true",
                       help="Also write TensorBoard scalars to OUT/tensorboard as the run goes (every 2 s).")
    train.add_argument("--wandb", action="store_true",
                       help="Also log the TensorBoard scalars and the resolved config to Weights & Biases (pip install "
                            "'janus-rl[wandb]'; WANDB_MODE=offline writes OUT/wandb with no network).")
    train.add_argument("--wandb_project", default=None, metavar="PROJECT", help="W&B project of --wandb [default janus].")
    train.add_argument("--resume", type=_path, default=None, metavar="RUN_DIR",
                       help="Continue an interrupted run of a Gymnasium algorithm from its checkpoints (policy, optimiser, "
                            "counters; dqn/sac: replay).")
    train.add_argument("--seeds", type=int, nargs="+", default=None, metavar="SEED",
                       help="Run each seed into OUT/seed-<s> (in parallel where the CPUs allow) and write "
                            "OUT/aggregate.json and .png: mean, median and IQM of the final return with bootstrap 95%% CIs.")
    train.epilog = ("every command runs through the actor-model runtime (--backend local|process|ray|auto; "
                    "--algo dqn's default is auto: process where a spare CPU lets acting overlap the update, "
                    "local for the serial --seed recipe; the others' default is local).")
    ro = sub.add_parser("rollout", help="run a trained policy from a checkpoint and print its mean return",
                        allow_abbrev=False)
    ro.add_argument("--checkpoint", type=_path, required=True, help="RUN_DIR of janus train, or its checkpoint file.")
    ro.add_argument("--episodes", type=int, default=10, help="Greedy episodes to run [default 10].")
    ro.add_argument("--seed", type=int, default=0, help="Seed of the environment [default 0].")
    ro.add_argument("--video", type=_path, default=None, metavar="FILE.gif",
                    help="Also record the first episode as an animated GIF (the environment must render rgb_array).")
    ro.add_argument("--trust", action="store_true",
                    help="Import the modules the run folder's config.yaml names (module:EnvId, package.module:Name) "
                         "even when they are not installed packages: only for a folder whose code you trust.")
    tu = sub.add_parser("tune", help="search the data-path knobs for a workload (successive halving); writes best.yaml",
                        description=DEFAULTS_NOTE, allow_abbrev=False)
    _common(tu)
    tu.add_argument("--budget_s", type=float, default=600.0, metavar="SECONDS",
                    help="The tune's wall time, all of it: the warm-up, every trial (each cut at its deadline) and "
                         "the final paired runs (a quarter of it, set aside up front) [default 600].")
    tu.add_argument("--search", choices=("halving", "plain"), default="halving",
                    help="halving: successive halving (short runs first, the best third goes on); plain: every "
                         "candidate at the full trial budget until the time is spent (for comparison) [default halving].")
    tu.add_argument("--backends", default="local,process", metavar="LIST",
                    help="Backends to try, comma-separated from local, process, ray [default local,process].")
    ev = sub.add_parser("eval", help="sweep one knob", description=DEFAULTS_NOTE, allow_abbrev=False)
    _common(ev)
    _repeats(ev)
    ev.add_argument("--sweep", required=True, choices=("placement", "granularity", "overlap"),
                    help="The knob to sweep: placement, granularity (g_collect = g_select) or overlap (both flags).")
    return parser


# ---- from flags to a configuration ---------------------------------------------------------------
def _base_config(algo: str | None, path: Path | None, resume: Path | None,
                 family: dict[str, Any] | None = None) -> RunConfig:
    """Algorithm preset < its ``family`` preset (:mod:`janus.algorithms.presets`) < YAML (``--resume``
    RUN_DIR's config.yaml, ``--config``, else the default YAML)."""
    from janus.algorithms.base import algorithm

    raw: dict[str, Any] = {}
    if resume is not None:
        from janus.fileio import checking_path

        with checking_path("--resume", resume):
            found = (Path(resume) / "config.yaml").is_file()
        if not found:
            raise ConfigError(f"invalid --resume: {str(resume)!r} is not a janus train run folder (no config.yaml)")
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


def _typed(args: argparse.Namespace, aliases: bool = True) -> dict[str, Any]:
    """The configuration flags given on the command line (name -> value), with ``aliases`` SB3's
    names of them too (:data:`janus.config.sb3.ALIASES`)."""
    names = {*JANUS_FLAGS, *WORKLOAD_FLAGS, *RUNTIME_FLAGS, "seed", *hyperparameters(), *NETWORK_FLAGS}
    typed = {k: v for k, v in vars(args).items() if k in names and v is not None}
    if getattr(args, "num_actors_alias", None) is not None:
        typed["num_actors"] = args.num_actors_alias
    return sb3.aliased(args, typed) if aliases else typed


def named_by_flag(exc: JanusError, args: argparse.Namespace) -> JanusError:
    """An invalid value the command line gave is named by the flag typed (``invalid --num_actors``),
    not by its config key (``workload.num_actors``); a config file's value keeps its key."""
    text = str(exc)
    if not isinstance(exc, ConfigError) or not text.startswith("invalid "):
        return exc
    typed_as = {sb3.ALIASES[n]: n for n in sb3.given(args) if n in sb3.ALIASES}  # SB3's name, where it was typed
    for flag in _typed(args):
        for key in (flag, f"--{flag}", f"workload.{flag}", f"runtime.{flag}", f"algorithm.{flag}"):
            if text.startswith(f"invalid {key}:"):
                return ConfigError(f"invalid --{typed_as.get(flag, flag)}:{text[len(f'invalid {key}:'):]}")
    return exc


def _algo_for_env(env: str, env_kwargs: dict[str, Any] | None) -> str:
    """``--env`` without ``--algo``: the algorithm picked by the environment's action space."""
    from janus.algorithms.gym_algorithm import default_algorithm

    name = default_algorithm(env, env_kwargs)
    print(f"janus: --env {env}: running --algo {name} for its action space (give --algo to choose)", flush=True)
    return name


def _check_applies(typed: dict[str, Any], cfg: RunConfig, from_file: bool) -> None:
    """Every typed flag is read by this run: else an error naming it and who reads it."""
    from janus.algorithms.base import names

    algo = cfg.workload.algo
    where = " (the workload of the config file)" if from_file else ""
    for flag in typed:
        if not reads(algo, flag):
            readers = [n for n in names() if reads(n, flag)]
            hint = "; add --algo dqn or --algo ppo" if flag == "env" and not _acts_in_gymnasium(algo) else (
                f"; {sb3.NOT_READ_HINTS[flag]}" if flag in sb3.NOT_READ_HINTS else "")
            raise ConfigError(f"--{flag} does not apply to --algo {algo}{where}: it is read by "
                              f"--algo {' and '.join(readers)} only{hint}")
        if flag in RAY_ONLY and cfg.runtime.backend != "ray":
            picks = " (local or process, never ray)" if cfg.runtime.backend == "auto" else ""
            raise ConfigError(f"--{flag} applies to --backend ray only (this run uses --backend {cfg.runtime.backend}{picks})")


def _network_override(typed: dict[str, Any], cfg: RunConfig) -> list[int] | None:
    """``--hidden_size``/``--num_layers`` as ``algorithm.hidden`` (the other one from the current network),
    for an algorithm that sizes its network so (:meth:`~janus.algorithms.base.Algorithm.hidden_layers`)."""
    from janus.algorithms.base import algorithm

    current = algorithm(cfg.workload.algo).hidden_layers(cfg) if {"hidden_size", "num_layers"} & set(typed) else None
    if current is None:
        return None
    width, layers = typed.get("hidden_size", current[0] if current else 64), typed.get("num_layers", len(current))
    for flag, value in (("hidden_size", width), ("num_layers", layers)):
        if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 1 << 20:
            raise ConfigError(f"invalid --{flag}: got {value!r}; accepted: an integer >= 1 for --algo {cfg.workload.algo}")
    return [width] * layers


def _sb3_converted(args: argparse.Namespace, typed: dict[str, Any], cfg: RunConfig) -> dict[str, Any]:
    """``typed`` with SB3's converted names as janus's flags (:func:`janus.config.sb3.converted`)."""
    from janus.algorithms.base import algorithm
    from janus.harness.experiments.sweeps import quick

    algo = algorithm(cfg.workload.algo)
    policy = ("on" if algo.on_policy else "off") if algo.acts_in_gymnasium else ""
    return sb3.converted(args, typed, cfg, reads, policy, quick if args.quick else None)


def _check_hyperparameters(typed: dict[str, Any], algo_name: str) -> None:
    """Range checks of the hyperparameter flags, naming the flag (not the YAML key)."""
    from janus.algorithms.base import algorithm

    algo = algorithm(algo_name)
    for name in algo.flags():
        if name in typed:
            try:
                algo.check_hyperparameter(name, typed[name])
            except ConfigError as exc:
                raise ConfigError(str(exc).replace(f"algorithm.{name}", f"--{name}")) from None


def config_from_args(args: argparse.Namespace) -> RunConfig:
    """Algorithm preset < environment family preset < YAML config < ``--quick`` < command-line flags;
    not yet resolved.

    Without ``--config``, the packaged default (:data:`DEFAULT_CONFIG`) is the base of the synthetic
    workload; ``--algo NAME`` starts from that algorithm's preset instead; ``--env`` alone picks
    dqn or ppo by the environment's action space. The family preset is chosen by the run's env id
    (``--preset``: auto, none or a family; :func:`janus.algorithms.presets.preset_for`), printed by
    ``janus train`` and recorded as ``workload.preset``. A flag the run does not read is a
    :class:`ConfigError` naming it.
    """
    from janus.algorithms.presets import preset_for
    from janus.harness.experiments.sweeps import check_flags_not_overridden, compare_granularity

    sb3.check(args, _typed(args, aliases=False))
    typed = _typed(args)
    check_flags_not_overridden(args.command, getattr(args, "sweep", None), set(typed))
    typed = compare_granularity(args.command, typed)
    cfg, algo = _layered(args, typed, args.algo, None)
    if not _acts_in_gymnasium(cfg.workload.algo):
        return cfg
    choice = preset_for(cfg.workload.algo, cfg.workload.env, cfg.workload.preset)
    if choice.preset.values:  # the env and --preset are known only now: layer again, the family under the YAML
        cfg, _ = _layered(args, typed, algo, choice.preset.values)
    if args.command == "train":
        print(f"janus: {choice.describe()}", flush=True)
    return from_dict({"workload": {"preset": choice.family}}, base=cfg)  # what config.yaml records


def _layered(args: argparse.Namespace, typed: dict[str, Any], algo: str | None,
             family: dict[str, Any] | None) -> tuple[RunConfig, str | None]:
    """The layers of :func:`config_from_args` with ``family`` over the algorithm preset, and the
    algorithm (``--env`` alone picks it)."""
    resume, path = getattr(args, "resume", None), args.config
    cfg = _base_config(algo, path, resume, family)
    if algo is None and resume is None and path is None and "env" in typed and not _acts_in_gymnasium(cfg.workload.algo):
        algo = _algo_for_env(typed["env"], typed.get("env_kwargs"))
        cfg = _base_config(algo, None, None, family)
    runtime = {k: v for k, v in typed.items() if k in RUNTIME_FLAGS}
    if runtime:
        cfg = from_dict({"runtime": runtime}, base=cfg)
    typed = _sb3_converted(args, typed, cfg)
    _check_applies(typed, cfg, from_file=args.algo is None and (path is not None or resume is not None))
    if args.quick:
        from janus.harness.experiments.sweeps import quick

        cfg = quick(cfg)
    overrides: dict[str, Any] = {k: v for k, v in typed.items() if k in JANUS_FLAGS}
    workload = {k: v for k, v in typed.items() if k in WORKLOAD_FLAGS}
    if workload:
        overrides["workload"] = workload
    if "seed" in typed:
        overrides["seed"] = typed["seed"]
    _check_hyperparameters(typed, cfg.workload.algo)
    hyper = {k: v for k, v in typed.items() if k in hyperparameters()}
    hidden = _network_override(typed, cfg)
    if hidden is not None:
        hyper["hidden"] = hidden
    network = sb3.network(typed, cfg.workload.algo)
    if "critic_hidden" in network and not reads(cfg.workload.algo, "critic_net_arch"):
        raise ConfigError(f"--algo {cfg.workload.algo} has one network: give net_arch as a list of widths (a 'vf' or "
                          f"'qf' entry is for ppo, appo, impala and sac)")
    hyper.update(network)
    if hyper:
        overrides["algorithm"] = hyper
    return (from_dict(overrides, base=cfg) if overrides else cfg), algo


def configured(args: argparse.Namespace) -> RunConfig:
    """The validated configuration of a parsed command (:func:`config_from_args`, the ``--resume``
    checks, :func:`janus.config.validate`): what ``janus`` and :func:`janus.train` run."""
    cfg = config_from_args(args)
    if getattr(args, "resume", None) is not None:  # before validate: a refused change is named as such
        from janus.harness.resume_checks import check_resume_request

        check_resume_request(args, cfg)
    validate(cfg)  # fail on a bad config before any work starts; placements resolve per run
    return cfg


class UnreadOutput:
    """A text stream (stdout, stderr) that drops what it is given once nobody reads it: a closed
    pipe (``janus train | head``, or a ``| tee log`` killed by the same Ctrl-C or SIGTERM as janus).
    Printing there raised BrokenPipeError, which ended the run and lost its results; now the run
    goes on (or stops as signalled) and writes its files as ever."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream
        self.unread = False

    def write(self, text: str) -> int:
        if not self.unread:
            try:
                return self.stream.write(text)
            except BrokenPipeError:
                self._drop()
        return len(text)

    def flush(self) -> None:
        if not self.unread:
            try:
                self.stream.flush()
            except BrokenPipeError:
                self._drop()

    def _drop(self) -> None:
        """From now on write nothing; point the descriptor at /dev/null so the bytes still buffered
        do not fail again when the interpreter flushes at exit."""
        self.unread = True
        with contextlib.suppress(OSError, ValueError):
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, self.stream.fileno())
            os.close(devnull)

    def __getattr__(self, name: str) -> Any:  # isatty, fileno, encoding ...: the stream's own
        return getattr(self.stream, name)


@contextlib.contextmanager
def output_that_may_go_unread() -> Iterator[None]:
    """sys.stdout and sys.stderr as :class:`UnreadOutput` while a command runs."""
    saved = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = UnreadOutput(sys.stdout), UnreadOutput(sys.stderr)
    try:
        yield
    finally:
        sys.stdout, sys.stderr = saved


def close_flags(flag: str, known: Sequence[str], n: int = 3) -> list[str]:
    """Up to ``n`` of ``known`` flags a mistyped ``flag`` may have meant: those whose name holds
    it (``--steps``: ``--total_env_steps``), shortest first, then spelling look-alikes."""
    name = flag.split("=", 1)[0]
    word = name.lstrip("-")
    holding = sorted((k for k in known if len(word) >= 3 and word in k.lstrip("-") and k != name), key=len)
    alike = difflib.get_close_matches(name, known, n=n, cutoff=0.7)
    return list(dict.fromkeys(holding + alike))[:n]


def register_custom_algorithm(argv: Sequence[str]) -> None:
    """``--algo package.module:Name``: import and register it before the parser is built, so its
    hyperparameters are flags too. A name that does not load is left for the config's validation,
    which names what is wrong."""
    from janus.algorithms.base import algorithm

    for i, arg in enumerate(argv):
        value = arg.partition("=")[2] if arg.startswith("--algo=") else argv[i + 1] if arg == "--algo" and i + 1 < len(argv) else ""
        if ":" in value:
            with contextlib.suppress(ConfigError):
                algorithm(value)


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """Parse ``argv``; an unknown flag exits 2 with ``janus <cmd>: error:`` naming it (and close matches)."""
    register_custom_algorithm(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    from janus.cli_help import FlagCatalogue, algo_asked, algo_help

    algo = algo_asked(sys.argv[1:] if argv is None else argv)
    if algo is not None:  # janus train --algo X --help: X's flags first
        command = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices["train"]
        catalogue = FlagCatalogue(JANUS_FLAGS, WORKLOAD_FLAGS, RUNTIME_FLAGS, tuple(NETWORK_FLAGS), hyperparameters,
                                  _hyperparameter_docs, reads)
        print(algo_help(command, algo, catalogue), end="")
        raise SystemExit(0)
    args, unknown = parser.parse_known_args(argv)
    if unknown:
        command = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices[args.command]
        known = [o for a in command._actions for o in a.option_strings if o.startswith("--") and not sb3.is_alias(a.dest)]
        close = close_flags(next((u for u in unknown if u.startswith("-")), ""), known)
        hint = f" (did you mean {' or '.join(close)}?)" if close else ""
        command.error(f"unrecognized arguments: {' '.join(unknown)}{hint}")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``janus`` with ``argv`` (default: the command line); returns the exit code."""
    with output_that_may_go_unread():
        return _main(argv)


def _stopped_by(exc: KeyboardInterrupt) -> str:
    """The signal behind an interrupt: SIGINT for Ctrl-C, else the one :class:`Terminated` names."""
    return exc.args[0] if isinstance(exc, (Terminated, Aborted)) and exc.args else "SIGINT"


def _exit_code(signal_name: str) -> int:
    return 130 if signal_name == "SIGINT" else 143


def _main(argv: Sequence[str] | None = None) -> int:
    # first of all (parsing the flags takes seconds on a loaded machine): a stop signal in the first
    # second ended the process with -15 and no word before the handler was in place
    signals = StopSignals().install() if threading.current_thread() is threading.main_thread() else None
    try:
        args = parse_args(argv)
    except KeyboardInterrupt as exc:  # a stop signal before anything started
        by = _stopped_by(exc)
        print(f"janus: interrupted{'' if by == 'SIGINT' else f' by {by}'} before the command started", file=sys.stderr)
        return _exit_code(by)
    return run_parsed(args, signals)


def run_parsed(args: argparse.Namespace, signals: StopSignals | None, cfg: RunConfig | None = None) -> int:
    """Run the parsed command ``args`` under the stop-signal handler ``signals`` (installed by the
    caller; None in another thread); returns the exit code. A seed's run of ``janus train --seeds``
    starts here with its arguments and its checked configuration ``cfg`` as data
    (:mod:`janus.harness.seeds.child`); without ``cfg`` it is made from ``args``."""
    try:
        code = _run(args, cfg)
    except KeyboardInterrupt as exc:
        by = _stopped_by(exc)
        if by == "SIGINT" and signals is not None and signals.first is not None:
            by = signals.first  # the signal itself: Ray turns a Terminated raised inside ray.get into a KeyboardInterrupt
        what = "aborted without saving" if isinstance(exc, Aborted) else "interrupted"
        print(f"janus {args.command}: {what}{'' if by == 'SIGINT' else f' by {by}'}", file=sys.stderr)
        return _exit_code(by)
    late = signals.late() if signals is not None else None
    if late is None or code != 0:
        return code
    what = ("the run had reached its budget: its results (status finished) and its final checkpoint are written"
            if args.command == "train" else "every configuration had finished: the results (status finished) are written")
    print(f"janus {args.command}: {late} came as the run ended; {what}; exit code {_exit_code(late)} as for any "
          f"{late}", file=sys.stderr)
    return _exit_code(late)


def _run(args: argparse.Namespace, cfg: RunConfig | None = None) -> int:
    """Run the parsed command; a :class:`JanusError` is printed and exits 2."""
    try:
        from janus.harness.commands import run_command, run_rollout

        if args.command == "rollout":
            return run_rollout(args)
        if getattr(args, "seeds", None) is not None:  # janus train --seeds: a run per seed, then their aggregate
            from janus.harness.seeds.runs import run_seeds

            return run_seeds(args, configured, build_parser())

        return run_command(args, configured(args) if cfg is None else cfg)
    except JanusError as exc:
        if exc.__cause__ is not None and wants_traceback(args):  # the user's code behind it (an --algo module ...)
            traceback.print_exception(exc.__cause__)
        print(f"janus {args.command}: error: {named_by_flag(exc, args)}", file=sys.stderr)
        return 2
    except Exception as exc:  # noqa: BLE001 - the user's code (an algorithm's learner, an env) or a bug: one line
        if wants_traceback(args):
            traceback.print_exception(exc)
        from janus.user_code import described

        print(f"janus {args.command}: error: {described(exc)} (an unexpected error; its traceback: "
              f"{'' if args.command != 'train' else '--verbose or '}{DEBUG_ENV}=1)", file=sys.stderr)
        return 2


DEBUG_ENV = "JANUS_DEBUG"
"""Set to 1: an error's traceback is printed above its one line (``janus train --verbose`` too)."""


def wants_traceback(args: argparse.Namespace) -> bool:
    """Whether the error's traceback is printed: ``--verbose`` or ``JANUS_DEBUG=1``."""
    return bool(getattr(args, "verbose", False)) or os.environ.get(DEBUG_ENV, "") not in ("", "0")


if __name__ == "__main__":
    sys.exit(main())
