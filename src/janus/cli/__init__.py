"""Command line: ``janus compare | train | eval --sweep placement|granularity|overlap | tune | rollout``.

A thin layer over the Python API's core: the flags are parsed (:mod:`janus.cli.parser`) into the same
:class:`~janus.config.request.RunRequest` that :func:`janus.train` builds from keywords
(:func:`request_from_args`), which :func:`janus.harness.launch.run_request` configures and runs.

Every command takes ``--config FILE`` (default: the packaged ``janus/configs/default.yaml``, the same
from any folder), and one flag per configuration field with the field's own name: data-path knobs
(``--overlap_collect 1``), workload (``--iterations 100``, ``--env CartPole-v1``), runtime (``--backend
process``) and the hyperparameters each algorithm declares (``--lr``, ``--gamma``, ``--clip_coef`` ...,
its ``flags()``). Layers: algorithm preset < its environment family preset (``--preset``,
:mod:`janus.algorithms.presets`) < YAML < ``--quick`` < flags (:mod:`janus.config.build`).

A flag is never silently ignored: no prefix matching (``--envs`` is not ``--envs_per_actor``), and a
flag the run's algorithm or backend does not read is an error naming it. Help text and the defaults
it shows come from the config dataclasses' field docs and the configuration a run resolves.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import threading
from collections.abc import Sequence
from pathlib import Path

from janus.cli.parser import NUM_WORKERS_DEST, build_parser, is_sb3_dest, sb3_dest
from janus.config import RunConfig
from janus.config.build import build_config
from janus.config.flags import NUM_WORKERS, RUN_SETTINGS, close_names, config_settings
from janus.config.request import FLAGS, RunRequest
from janus.config.sb3 import NAMES as SB3_NAMES
from janus.errors import ConfigError
from janus.stopping import StopSignals


def request_from_args(args: argparse.Namespace) -> RunRequest:
    """The request of a parsed command (not ``rollout``): its configuration settings by their flags'
    names (``--num_workers``, SB3's names as typed), the run's own settings as the request's fields."""
    names = config_settings() - {"algo"}
    settings = {name: value for name, value in vars(args).items() if name in names and value is not None}
    if getattr(args, NUM_WORKERS_DEST, None) is not None:
        settings[NUM_WORKERS] = getattr(args, NUM_WORKERS_DEST)
    settings |= {n: getattr(args, sb3_dest(n)) for n in SB3_NAMES if getattr(args, sb3_dest(n), None) is not None}
    run = {name: getattr(args, name) for name in (*RUN_SETTINGS, "repeats", "sweep", "budget_s", "search", "backends",
                                                  "objective", "confirm_seeds", "invocation")
           if getattr(args, name, None) is not None}
    return RunRequest(command=args.command, algo=getattr(args, "algo", None), settings=settings, naming=FLAGS, **run)


def config_from_args(args: argparse.Namespace) -> RunConfig:
    """The configuration of a parsed command, not yet validated (:func:`janus.config.build.build_config`)."""
    return build_config(request_from_args(args))


def configured(args: argparse.Namespace) -> RunConfig:
    """The validated configuration of a parsed command (:func:`janus.harness.configured.configured`)."""
    from janus.harness.configured import configured as configured_request

    return configured_request(request_from_args(args))


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


def _subcommand(parser: argparse.ArgumentParser, name: str) -> argparse.ArgumentParser:
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return sub.choices[name]


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """Parse ``argv``; an unknown flag exits 2 with ``janus <cmd>: error:`` naming it (and close matches)."""
    register_custom_algorithm(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    from janus.cli.help import algo_asked, algo_help

    algo = algo_asked(sys.argv[1:] if argv is None else argv)
    if algo is not None:  # janus train --algo X --help: X's flags first
        print(algo_help(_subcommand(parser, "train"), algo), end="")
        raise SystemExit(0)
    args, unknown = parser.parse_known_args(argv)
    if unknown:
        command = _subcommand(parser, args.command)
        known = [o for a in command._actions for o in a.option_strings if o.startswith("--") and not is_sb3_dest(a.dest)]
        close = close_names(next((u for u in unknown if u.startswith("-")), ""), known)
        hint = f" (did you mean {' or '.join(close)}?)" if close else ""
        command.error(f"unrecognized arguments: {' '.join(unknown)}{hint}")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``janus`` with ``argv`` (default: the command line); returns the exit code."""
    from janus.harness.console import output_that_may_go_unread

    with output_that_may_go_unread():
        return _main(argv)


def _main(argv: Sequence[str] | None = None) -> int:
    from janus.harness.launch import exit_code, exit_code_of, run_request, stopped_by

    # first of all (parsing the flags takes seconds on a loaded machine): a stop signal in the first
    # second ended the process with -15 and no word before the handler was in place
    signals = StopSignals().install() if threading.current_thread() is threading.main_thread() else None
    try:
        args = parse_args(argv)
    except KeyboardInterrupt as exc:  # a stop signal before anything started
        by = stopped_by(exc)
        print(f"janus: interrupted{'' if by == 'SIGINT' else f' by {by}'} before the command started", file=sys.stderr)
        return exit_code(by)
    if args.command == "rollout":
        return exit_code_of("rollout", lambda: _rollout(args), signals)
    return run_request(request_from_args(args), signals)


def _rollout(args: argparse.Namespace) -> int:
    from janus.harness.rollout import report_rollout

    return report_rollout(Path(args.checkpoint), args.episodes, args.seed, args.video, trust=args.trust)
