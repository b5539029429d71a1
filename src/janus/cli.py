"""Command line: ``janus compare | train | eval --sweep placement|granularity|overlap``.

Every command takes ``--config FILE`` (default ``configs/default.yaml`` when present), data-path
overrides with the artifact's flag names (``--placement cuda --overlap_collect 1 --g_collect 4``),
workload overrides (``--iterations 100``), ``--quick`` and ``--out DIR``; it shows progress, prints a
table and writes ``results.json``, ``results.csv`` and ``chart.png`` into the output folder.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from dataclasses import fields
from pathlib import Path
from typing import Any, Sequence

from janus.config import BACKENDS, JanusConfig, RunConfig, RuntimeConfig, WorkloadConfig, from_dict, read_yaml, validate
from janus.errors import ConfigError, JanusError

DEFAULT_CONFIG = Path("configs/default.yaml")
BOOL_FIELDS = {"is_on_policy"}
PER_INVOCATION = {"resume", "checkpoint_dir"}  # set by `janus train` itself (RUN_DIR/checkpoint, --resume)


def _bool(text: str) -> bool:
    lowered = text.lower()
    if lowered in ("1", "true", "yes", "on"):
        return True
    if lowered in ("0", "false", "no", "off"):
        return False
    raise argparse.ArgumentTypeError(f"expected true/false or 1/0, got {text!r}")


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


def _add_overrides(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("data-path overrides (the artifact's names)")
    for f in fields(JanusConfig):
        kind = _bool if f.name in BOOL_FIELDS else (str if f.type == "str" else _number)
        group.add_argument(f"--{f.name}", type=kind, default=None, metavar=f.name.upper(), help=_doc(JanusConfig, f.name))
    wgroup = parser.add_argument_group("workload overrides")
    for f in fields(WorkloadConfig):
        if f.name == "obs_shape":
            wgroup.add_argument("--obs_shape", type=int, nargs="+", default=None, help="observation shape, e.g. 4 84 84")
            continue
        kind = str if f.type == "str" else _number
        wgroup.add_argument(f"--{f.name}", type=kind, default=None, metavar=f.name.upper())
    wgroup.add_argument("--num_workers", type=_number, default=None, dest="num_actors_alias", metavar="N",
                        help="workers (actors); same as --num_actors")
    rgroup = parser.add_argument_group("runtime (janus train)")
    for f in fields(RuntimeConfig):
        if f.name in PER_INVOCATION:
            continue
        kind = str if f.type in ("str", "str | None") else _number
        text = _doc(RuntimeConfig, f.name)
        if f.name == "backend":
            text = f"{'|'.join(BACKENDS)}: threads in this process, worker processes, or Ray actors {text}"
        rgroup.add_argument(f"--{f.name}", type=kind, default=None, metavar=f.name.upper(), help=text)
    parser.add_argument("--seed", type=int, default=None, help="random seed (default from the config, else 0)")


def _doc(cls: type, name: str) -> str:
    return f"(default {getattr(cls(), name)!r})"


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", type=Path, default=None, help="YAML config (default: configs/default.yaml)")
    parser.add_argument("--out", type=Path, default=None, help="output folder (default: runs/<command>-<timestamp>)")
    parser.add_argument("--quick", action="store_true", help="a tiny workload that finishes in seconds")
    parser.add_argument("--force", action="store_true",
                        help="if --out already holds a run, move it aside to OUT.old-<time> (never deleted)")
    _add_overrides(parser)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="janus", description="Dual-End Staging for the RL data path.")
    sub = parser.add_subparsers(dest="command", required=True)
    _common(sub.add_parser("compare", help="baseline vs overlap vs granularity vs janus on one workload"))
    train = sub.add_parser("train", help="one run of one configuration")
    _common(train)
    train.add_argument("--name", default=None, help="run name in the report (default: train)")
    train.add_argument("--prioritized", action="store_true", default=None,
                       help="dqn: proportional prioritized replay (algorithm.prioritized)")
    train.add_argument("--n_step", type=int, default=None, help="dqn: n-step returns (algorithm.n_step)")
    train.add_argument("--tensorboard", action="store_true",
                       help="also write TensorBoard scalars to OUT/tensorboard (needs the tensorboard package)")
    train.add_argument("--resume", type=Path, default=None, metavar="RUN_DIR",
                       help="continue an interrupted run from its checkpoints (policy, optimiser, counters, DQN replay)")
    train.epilog = "every command runs through the actor-model runtime (--backend local|process|ray; local by default)."
    ro = sub.add_parser("rollout", help="run a trained policy from a checkpoint and print its mean return")
    ro.add_argument("--checkpoint", type=Path, required=True, help="RUN_DIR of janus train, or its checkpoint file")
    ro.add_argument("--episodes", type=int, default=10)
    ro.add_argument("--seed", type=int, default=0)
    ev = sub.add_parser("eval", help="sweep one knob")
    _common(ev)
    ev.add_argument("--sweep", required=True, choices=("placement", "granularity", "overlap"))
    return parser


def config_from_args(args: argparse.Namespace) -> RunConfig:
    """Algorithm preset < YAML config < command-line flags; not yet resolved.

    Without ``--config``, ``configs/default.yaml`` is the base of the synthetic workload; ``--algo
    dqn|ppo`` starts from that algorithm's preset instead.
    """
    from janus.algorithms.base import algorithm

    path = args.config
    raw: dict[str, Any] = {}
    resume = getattr(args, "resume", None)
    if resume is not None:
        if not (Path(resume) / "config.yaml").is_file():
            raise ConfigError(f"invalid --resume: {str(resume)!r} is not a janus train run folder (no config.yaml)")
        raw = read_yaml(Path(resume) / "config.yaml")
    elif path is not None:
        raw = read_yaml(path)
    elif args.algo is None or not algorithm(args.algo).preset:
        raw = read_yaml(DEFAULT_CONFIG) if DEFAULT_CONFIG.is_file() else {}
    name = args.algo or (raw.get("workload") or {}).get("algo", "synthetic")
    preset = algorithm(name).preset if isinstance(name, str) else {}
    base = from_dict(preset) if preset else RunConfig()
    cfg = from_dict(raw, base=base) if raw else base
    janus_names = {f.name for f in fields(JanusConfig)}
    workload_names = {f.name for f in fields(WorkloadConfig)}
    overrides: dict[str, Any] = {k: v for k, v in vars(args).items() if k in janus_names and v is not None}
    workload = {k: v for k, v in vars(args).items() if k in workload_names and v is not None}
    if getattr(args, "num_actors_alias", None) is not None:
        workload["num_actors"] = args.num_actors_alias
    if workload:
        overrides["workload"] = workload
    runtime_names = {f.name for f in fields(RuntimeConfig)}
    runtime = {k: v for k, v in vars(args).items() if k in runtime_names - PER_INVOCATION and v is not None}
    if runtime:
        overrides["runtime"] = runtime
    if args.seed is not None:
        overrides["seed"] = args.seed
    flags = {k: getattr(args, k, None) for k in ("prioritized", "n_step")}
    flags = {k: v for k, v in flags.items() if v is not None}
    if flags:
        overrides["algorithm"] = flags
    return from_dict(overrides, base=cfg) if overrides else cfg


class Terminated(KeyboardInterrupt):
    """SIGTERM or SIGHUP: stop like Ctrl-C (clean shutdown, final checkpoint), then exit."""


def _stop_on_signal(signum: int, frame: object) -> None:
    raise Terminated(signal.Signals(signum).name)


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGTERM, signal.SIGHUP):
            signal.signal(sig, _stop_on_signal)
    try:
        from janus.harness.commands import run_command, run_rollout

        if args.command == "rollout":
            return run_rollout(args)

        cfg = config_from_args(args)
        if getattr(args, "resume", None) is not None:  # before validate: a refused change is named as such
            from janus.harness.run_folder import check_resume_request

            check_resume_request(args, cfg)
        validate(cfg)  # fail on a bad config before any work starts; placements resolve per run
        return run_command(args, cfg)
    except JanusError as exc:
        print(f"janus {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as exc:
        why = f" by {exc.args[0]}" if isinstance(exc, Terminated) and exc.args else ""
        print(f"janus {args.command}: interrupted{why}", file=sys.stderr)
        return 143 if isinstance(exc, Terminated) else 130


if __name__ == "__main__":
    sys.exit(main())
