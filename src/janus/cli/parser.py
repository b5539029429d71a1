"""The ``janus`` command's parser: its commands, one flag per setting (the table of
:mod:`janus.config.flags`: a flag's type follows its setting's kind), and help text whose defaults are
those a run without ``--config`` resolves.

No prefix matching (``--envs`` is not ``--envs_per_actor``); Stable-Baselines3's names are flags too,
hidden from the per-flag help and listed in one line.
"""

from __future__ import annotations

import argparse
import functools
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from janus.config import BACKENDS, VECTOR_ENVS, JanusConfig, RuntimeConfig, SyntheticConfig, WorkloadConfig, default_config_file, sb3
from janus.config.build import base_config
from janus.config.flags import (
    GYM_ONLY,
    JANUS_FLAGS,
    NETWORK_FLAGS,
    NUM_WORKERS,
    RAY_ONLY,
    RUNTIME_FLAGS,
    SYNTHETIC_ONLY,
    WORKLOAD_FLAGS,
    acts_in_gymnasium,
    hyperparameter_docs,
    hyperparameters,
    reads,
    setting_kinds,
    value_of,
)
from janus.config.schema import field_docs
from janus.errors import shown as errors_shown

DEFAULT_CONFIG = default_config_file()
"""The configuration of a run without ``--config`` (and without an ``--algo`` preset): package data."""
NUM_WORKERS_DEST = "num_actors_alias"
"""The destination of ``--num_workers`` (``--num_actors``'s other name)."""


def sb3_dest(name: str) -> str:
    """The argparse destination of Stable-Baselines3's flag ``name``."""
    return f"sb3__{name}"


def is_sb3_dest(destination: str) -> bool:
    """Whether an argparse destination is an SB3 name's (left out of close-match hints: those name janus's flags)."""
    return destination.startswith("sb3__")


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



CONVERTERS: dict[str, Callable[[str], Any]] = {"bool": _bool, "number": _number, "str": str, "int": int, "float": float}
"""A setting's kind (:func:`janus.config.flags.setting_kinds`) -> the type its flag parses text to."""


# ---- help text and the defaults it shows ---------------------------------------------------------
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
    default = base_config(None, None, None)
    bases[default.workload.algo] = default
    for name in algorithms:
        if name not in bases and algorithm(name).preset:
            bases[name] = base_config(name, None, None)
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

    gym = [n for n in names() if acts_in_gymnasium(n)]
    only = {
        **{f: f" ({', '.join(gym)} only)" for f in GYM_ONLY}, **{f: " (synthetic only)" for f in SYNTHETIC_ONLY},
        **{f: " (--backend ray only)" for f in RAY_ONLY},
    }
    kinds = setting_kinds()  # the type of each flag: its setting's kind
    group = parser.add_argument_group("data-path knobs (the artifact's names)")
    docs = field_docs(JanusConfig)
    for name in JANUS_FLAGS:
        group.add_argument(f"--{name}", type=CONVERTERS[kinds[name]], default=None, metavar=name.upper(),
                           help=_help(docs.get(name, ""), defaults[name], only.get(name, "")))
    wgroup = parser.add_argument_group("workload")
    docs = {**field_docs(WorkloadConfig), **field_docs(SyntheticConfig),
            "hidden_size": "Width of every hidden layer of the learner's network (the Gymnasium algorithms: of "
                           "algorithm.hidden, as --net_arch).",
            "num_layers": "Hidden layers of the learner's network (the Gymnasium algorithms: of algorithm.hidden, as "
                          "--net_arch).",
            "env_kwargs": 'Keyword arguments of gymnasium.make for every environment, as a JSON object, e.g. '
                          '\'{"max_episode_steps": 50}\' (saved in config.yaml).'}
    for name in WORKLOAD_FLAGS:
        extra: dict[str, Any] = {"type": CONVERTERS.get(kinds[name])}
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
    wgroup.add_argument(f"--{NUM_WORKERS}", type=CONVERTERS[kinds[NUM_WORKERS]], default=None, dest=NUM_WORKERS_DEST,
                        metavar="N",
                        help="Workers (actors); same as --num_actors.")
    rgroup = parser.add_argument_group("runtime")
    docs = field_docs(RuntimeConfig)
    for name in RUNTIME_FLAGS:
        extra = {"choices": BACKENDS} if name == "backend" else {}
        if kinds[name] == "bool":  # --allow_oversubscribe alone is true
            extra = {"nargs": "?", "const": True, "metavar": "BOOL"}
        rgroup.add_argument(f"--{name}", type=CONVERTERS[kinds[name]], default=None, **{"metavar": name.upper(), **extra},
                            help=_help(docs.get(name, ""), defaults[name], only.get(name, "")))
    parser.add_argument("--seed", type=CONVERTERS[kinds["seed"]], default=None, help=_help("Random seed.", defaults["seed"]))
    hgroup = parser.add_argument_group("algorithm hyperparameters (the algorithm: section)")
    docs = hyperparameter_docs()
    for name, by_algo in hyperparameters().items():
        defaults[name] = defaults[name] or by_algo  # an algorithm without a preset: its own defaults
        if kinds[name] == "bool":
            extra = {"type": _bool, "nargs": "?", "const": True, "metavar": "BOOL"}
        else:
            extra = {"type": CONVERTERS[kinds[name]], "metavar": name.upper()}
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
    _add_sb3_flags(parser)




def _add_sb3_flags(parser: argparse.ArgumentParser) -> None:
    """SB3's names as flags of ``parser``, hidden from the per-flag help and listed in one group."""
    group = parser.add_argument_group(
        "Stable-Baselines3 names", "Accepted as flags (and janus.train keywords): " + ", ".join(
            f"{n} (--{sb3.ALIASES[n]})" for n in sb3.ALIASES) + "; converted: " + ", ".join(sb3.CONVERTED)
        + "; refused, naming janus's equivalent: " + ", ".join(sb3.REFUSED) + " (the README's SB3 -> janus table).")
    kinds = setting_kinds()
    for name in sb3.NAMES:
        kind: Callable[[str], Any] = _bool if kinds[name] == "bool" else (
            _mapping if name == "policy_kwargs" else str if name == "policy" else _number)
        group.add_argument(f"--{name}", dest=sb3_dest(name), type=kind, default=None, help=argparse.SUPPRESS)


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
    tu = sub.add_parser("tune", help="search the data-path knobs for a workload (successive halving), or with "
                        "--objective time_to_solve the algorithm's hyperparameters too (Optuna's TPE); writes best.yaml",
                        description=DEFAULTS_NOTE, allow_abbrev=False)
    _common(tu)
    tu.add_argument("--objective", choices=("throughput", "time_to_solve"), default="throughput",
                    help="throughput: the data-path knobs by env steps/s (or samples/s); time_to_solve: the algorithm's "
                         "declared hyperparameters and the knobs by the seconds from a trial's start to an evaluation's "
                         "mean return >= --target_return (needs it; pip install 'janus-rl[tune]') [default throughput].")
    tu.add_argument("--budget_s", type=float, default=600.0, metavar="SECONDS",
                    help="The tune's wall time, all of it: the warm-up, every trial (each cut at its deadline) and "
                         "the final paired runs (throughput: a quarter of it; time_to_solve: 40%%, which also sets each "
                         "run's cap) [default 600].")
    tu.add_argument("--search", choices=("halving", "plain", "tpe"), default=None,
                    help="halving: successive halving (short runs first, the best third goes on); plain: every "
                         "candidate at the full trial budget until the time is spent (for comparison); tpe: Optuna's "
                         "TPE sampler with a median pruner (time_to_solve only) [default halving; time_to_solve: tpe].")
    tu.add_argument("--confirm_seeds", type=int, default=3, metavar="N",
                    help="time_to_solve: the best setting and the defaults are run on N further seeds each, "
                         "interleaved, at the end: their median time to solve and solved fraction decide which "
                         "best.yaml holds [default 3].")
    tu.add_argument("--backends", default="local,process", metavar="LIST",
                    help="Backends to try, comma-separated from local, process, ray [default local,process].")
    ev = sub.add_parser("eval", help="sweep one knob", description=DEFAULTS_NOTE, allow_abbrev=False)
    _common(ev)
    _repeats(ev)
    ev.add_argument("--sweep", required=True, choices=("placement", "granularity", "overlap"),
                    help="The knob to sweep: placement, granularity (g_collect = g_select) or overlap (both flags).")
    return parser


