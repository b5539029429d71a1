"""``janus train --seeds 0 1 2 3 4``: one run folder per seed under OUT/seed-<s>/, then an aggregate.

Each seed is its own ``python -m janus train ... --seed s --out OUT/seed-s`` process (the same files
a single run writes). They run in parallel only where the CPUs allow it without oversubscribing:
a run of the ``process`` or ``ray`` backend uses a CPU per worker and one for the learner, any other
run one; the seeds run one after another when this machine has fewer than twice what one run uses,
else at most ``cpus // per_run`` at once. OUT/aggregate.json and OUT/aggregate.png
(:mod:`janus.harness.seed_aggregate`) hold the per-seed results and their statistics.
"""

from __future__ import annotations

import argparse
import json
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from janus import stopping
from janus.config import RunConfig, resolve, usable_cpus
from janus.errors import ConfigError
from janus.harness import run_folder
from janus.harness.seed_aggregate import write_aggregate
from janus.resources import check_resources

NOT_PASSED = {"help", "seeds", "seed", "out", "force", "invocation"}
"""Destinations never passed on to a seed's run: each gets its own ``--seed`` and ``--out``."""
POLL_S = 0.5


def check_seeds(args: argparse.Namespace) -> list[int]:
    """``--seeds`` as given, checked: two or more distinct integers >= 0, and neither ``--seed``
    nor ``--resume`` beside it."""
    if isinstance(args.seeds, (str, bytes)) or not isinstance(args.seeds, Sequence):
        raise ConfigError(f"invalid --seeds: got {args.seeds!r}; accepted: two or more distinct integers >= 0")
    seeds = list(args.seeds)
    if getattr(args, "seed", None) is not None:
        raise ConfigError(f"--seeds with --seed {args.seed}: --seeds gives each run its own seed; drop --seed")
    if getattr(args, "resume", None) is not None:
        raise ConfigError("--seeds with --resume: resume each seed's run on its own "
                          "(janus train --resume OUT/seed-<s>); drop --seeds")
    for s in seeds:
        if isinstance(s, bool) or not isinstance(s, int) or s < 0:
            raise ConfigError(f"invalid --seeds: got {s!r}; accepted: integers >= 0")
    repeated = sorted({s for s in seeds if seeds.count(s) > 1})
    if repeated:
        raise ConfigError(f"invalid --seeds: seed {', '.join(map(str, repeated))} given twice; accepted: distinct seeds")
    if len(seeds) < 2:
        raise ConfigError(f"invalid --seeds: got {len(seeds)} seed; accepted: two or more (one run: --seed)")
    return seeds


def cpus_per_run(cfg: RunConfig) -> int:
    """The CPUs one run of ``cfg`` keeps busy: a worker process each and the learner on the
    ``process`` and ``ray`` backends, else one (the local backend's threads share the interpreter)."""
    resolved = resolve(cfg)
    if resolved.runtime.backend in ("process", "ray"):
        return resolved.workload.num_actors + 1
    return 1


@dataclass(frozen=True)
class Schedule:
    """How many seeds run at once, and why."""

    at_once: int
    per_run: int
    cpus: int

    def describe(self) -> str:
        each = f"one run uses ~{self.per_run} CPU{'s' if self.per_run != 1 else ''} of the {self.cpus} usable here"
        if self.at_once == 1:
            return f"one after another ({each}; parallel runs would oversubscribe them)"
        return f"in parallel, up to {self.at_once} at once ({each})"


def schedule(per_run: int, seeds: int, cpus: int | None = None) -> Schedule:
    """Sequential when ``cpus`` < 2 x ``per_run``, else ``cpus // per_run`` runs at once (no more than ``seeds``)."""
    cpus = usable_cpus() if cpus is None else cpus
    at_once = 1 if cpus < 2 * per_run else min(seeds, cpus // per_run)
    return Schedule(at_once, per_run, cpus)


def run_argv(args: argparse.Namespace, seed: int, out: Path, parser: argparse.ArgumentParser) -> list[str]:
    """The ``janus train`` arguments of one seed's run: every flag given (as typed, rebuilt from
    ``args`` with the command's ``parser``), then ``--seed`` and ``--out``."""
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    argv = ["train"]
    for action in sub.choices["train"]._actions:
        flags = [o for o in action.option_strings if o.startswith("--")]
        value = getattr(args, action.dest, None)
        if not flags or action.dest in NOT_PASSED or value is None or value is False or value == action.default:
            continue
        if isinstance(action, argparse._StoreTrueAction):
            argv.append(flags[0])
        elif isinstance(value, (list, tuple)):
            argv += [flags[0], *map(str, value)]
        elif isinstance(value, dict):
            argv += [flags[0], json.dumps(value)]
        else:
            argv += [flags[0], str(value).lower() if isinstance(value, bool) else str(value)]
    return [*argv, "--seed", str(seed), "--out", str(out)]


@dataclass
class SeedRun:
    """One seed's process: its folder, its log (parallel runs), its exit code once it ended."""

    seed: int
    out: Path
    argv: list[str]
    """Its ``janus train`` arguments (:func:`run_argv`)."""
    process: subprocess.Popen[bytes] | None = None
    log: IO[bytes] | None = None
    code: int | None = None

    def start(self, log_dir: Path | None) -> None:
        if log_dir is not None:
            self.log = (log_dir / f"seed-{self.seed}.log").open("wb")
        # its own session: a Ctrl-C at the terminal reaches janus alone, which passes one signal on to each run
        self.process = subprocess.Popen([sys.executable, "-m", "janus", *self.argv],
                                        stdout=self.log, stderr=subprocess.STDOUT if self.log else None,
                                        start_new_session=True)

    def poll(self) -> bool:
        """Whether it has ended (its exit code recorded, its log closed)."""
        if self.process is None or self.code is not None:
            return self.code is not None
        self.code = self.process.poll()
        if self.code is not None and self.log is not None:
            self.log.close()
        return self.code is not None

    def stop(self, sig: int) -> None:
        if self.process is not None and self.code is None:
            self.process.send_signal(sig)

    def wait(self) -> None:
        if self.process is not None:
            self.process.wait()
            self.poll()


def run_seeds(args: argparse.Namespace, configured: Callable[[argparse.Namespace], RunConfig],
              parser: argparse.ArgumentParser) -> int:
    """``janus train --seeds``: every seed's run into OUT/seed-<s>, then OUT/aggregate.json and .png
    and a table. Exit code 0 when every seed's run finished, else 1 (the aggregate covers those that ran).
    ``configured`` and ``parser`` are the command line's (passed in: the CLI imports this module)."""
    _, failed = run_seed_processes(args, configured, parser)
    return 1 if failed else 0


def run_seed_processes(args: argparse.Namespace, configured: Callable[[argparse.Namespace], RunConfig],
                       parser: argparse.ArgumentParser) -> tuple[Path, bool]:
    """:func:`run_seeds`' work: the folder OUT it wrote, and whether any seed's run did not finish."""
    seeds = check_seeds(args)  # before the configuration: --seed and --resume are refused as such
    cfg = configured(args)
    check_resources(resolve(cfg))  # this machine's bounds, before any seed's run starts
    plan = schedule(cpus_per_run(cfg), len(seeds))
    out_dir, lock = run_folder.open_out_dir(args, "train")
    with lock:
        log_dir = None
        if plan.at_once > 1:
            log_dir = out_dir / "logs"
            log_dir.mkdir(exist_ok=True)
        print(f"janus train --seeds {' '.join(map(str, seeds))}: {len(seeds)} runs into {out_dir}/seed-<s>, "
              f"{plan.describe()}" + (f"; each run's output in {log_dir}" if log_dir else ""), flush=True)
        runs = [SeedRun(s, out_dir / f"seed-{s}", run_argv(args, s, out_dir / f"seed-{s}", parser)) for s in seeds]
        try:
            _run_all(runs, plan.at_once, log_dir)
        except KeyboardInterrupt as exc:  # the signal janus got (SIGINT, SIGTERM, SIGHUP) goes to each run once
            sig = signal.Signals[exc.args[0] if isinstance(exc, stopping.Terminated) and exc.args else "SIGINT"]
            print(f"janus train --seeds: stopping the runs still going ({sig.name}); each writes what it ran",
                  file=sys.stderr, flush=True)
            with stopping.saving():
                try:
                    for run in runs:
                        run.stop(sig)
                    for run in runs:
                        run.wait()
                except stopping.Aborted:  # signalled twice more: abort without saving, the runs too
                    for run in runs:
                        run.stop(signal.SIGKILL)
                    raise
                _aggregate(args, out_dir, runs, plan)
            raise
        with stopping.saving():
            failed = _aggregate(args, out_dir, runs, plan)
    return out_dir, failed


def _run_all(runs: list[SeedRun], at_once: int, log_dir: Path | None) -> None:
    """Start the runs in order, never more than ``at_once`` going; return once all have ended."""
    waiting, going = list(runs), list[SeedRun]()
    while waiting or going:
        while waiting and len(going) < at_once:
            run = waiting.pop(0)
            gap = "" if log_dir else "\n"  # one after another: the run's own output follows this line
            print(f"{gap}seed {run.seed} ({runs.index(run) + 1} of {len(runs)}): started", flush=True)
            run.start(log_dir)
            going.append(run)
        time.sleep(POLL_S)
        for run in [r for r in going if r.poll()]:
            going.remove(run)
            if log_dir is not None or run.code:
                print(f"seed {run.seed}: {'finished' if run.code == 0 else f'failed (exit code {run.code})'}", flush=True)


def _aggregate(args: argparse.Namespace, out_dir: Path, runs: list[SeedRun], plan: Schedule) -> bool:
    """Write the aggregate of the runs and print its table; whether any run did not finish."""
    from janus.harness.commands import command_line

    codes = {r.seed: r.code for r in runs}
    table, paths, failed = write_aggregate(out_dir, {r.seed: r.out for r in runs}, codes,
                                           {"schedule": plan.describe(), "runs_at_once": plan.at_once,
                                            "cpus_per_run": plan.per_run, "usable_cpus": plan.cpus,
                                            "command": command_line("train", args)})
    print("\n" + table, flush=True)
    print("\nwrote " + ", ".join(str(p) for p in paths), flush=True)
    return failed

