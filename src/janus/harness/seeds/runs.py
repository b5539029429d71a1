"""``janus train --seeds 0 1 2 3 4``: one run folder per seed under OUT/seed-<s>/, then an aggregate.

Each seed is its own ``janus train`` process with ``--seed s --out OUT/seed-s`` (the same files a
single run writes), started by :mod:`janus.harness.seeds.child`: its request travels as data, never
rebuilt as command-line text, and it stops (cleanly, as on SIGTERM) when this process dies. Every
seed's configuration is checked before the first one runs. They run in parallel only where the CPUs allow it without oversubscribing:
a run of the ``process`` or ``ray`` backend uses a CPU per worker and one for the learner, any other
run one; the seeds run one after another when this machine has fewer than twice what one run uses,
else at most ``cpus // per_run`` at once. OUT/aggregate.json and OUT/aggregate.png
(:mod:`janus.harness.seeds.aggregate`) hold the per-seed results and their statistics.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import IO, TYPE_CHECKING

from janus import stopping
from janus.config import SEED_LIMIT, RunConfig, resolve, usable_cpus, validate
from janus.config.resources import check_resources
from janus.errors import ConfigError
from janus.harness import run_folder
from janus.harness.seeds.aggregate import write_aggregate
from janus.harness.seeds.payload import payload_error, send_payload

if TYPE_CHECKING:
    from janus.config.request import RunRequest

POLL_S = 0.5


def check_seeds(request: RunRequest) -> list[int]:
    """``seeds`` as given, checked: two or more distinct integers in [0, 2^32), and neither ``seed``
    nor ``resume`` beside it (named as the caller names them)."""
    n, given = request.naming, request.seeds
    if isinstance(given, (str, bytes)) or not isinstance(given, Sequence):
        raise ConfigError(f"invalid {n('seeds')}: got {given!r}; accepted: two or more distinct integers >= 0")
    seeds = list(given)
    if request.seed is not None:
        raise ConfigError(f"{n('seeds')} with {n('seed')} {request.seed}: {n('seeds')} gives each run its own seed; "
                          f"drop {n('seed')}")
    if request.resume is not None:
        again = "janus train --resume OUT/seed-<s>" if n.style == "flag" else "resume='OUT/seed-<s>'"
        raise ConfigError(f"{n('seeds')} with {n('resume')}: resume each seed's run on its own ({again}); "
                          f"drop {n('seeds')}")
    for s in seeds:
        if isinstance(s, bool) or not isinstance(s, int) or not 0 <= s < SEED_LIMIT:
            raise ConfigError(f"invalid {n('seeds')}: got {s!r}; accepted: integers in [0, {SEED_LIMIT - 1:,}]")
    repeated = sorted({s for s in seeds if seeds.count(s) > 1})
    if repeated:
        raise ConfigError(f"invalid {n('seeds')}: seed {', '.join(map(str, repeated))} given twice; accepted: "
                          "distinct seeds")
    if len(seeds) < 2:
        raise ConfigError(f"invalid {n('seeds')}: got {len(seeds)} seed; accepted: two or more (one run: {n('seed')})")
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


def seed_request(request: RunRequest, seed: int, out: Path) -> RunRequest:
    """The request of one seed's run: ``request`` as given (data, not text) with its own ``seed`` and
    ``out``, no ``seeds`` and no ``force`` (OUT was made fresh for the seeds)."""
    from janus.harness.outputs import command_line

    return replace(request, settings={**request.settings, "seed": seed}, seeds=None, out=out, force=False,
                   invocation=f"{command_line('train', request)} [seed {seed}]")


def seed_inputs(request: RunRequest, seeds: list[int], out_dir: Path, cfg: RunConfig) -> dict[int, tuple[RunRequest, RunConfig]]:
    """Each seed's request (:func:`seed_request`, into ``out_dir/seed-<s>``) and configuration
    (``cfg``, the command's, read once: a ``--config`` FIFO is not read again, with the seed's ``seed``)."""
    return {seed: (seed_request(request, seed, out_dir / f"seed-{seed}"), replace(cfg, seed=seed)) for seed in seeds}


def check_seed_inputs(inputs: dict[int, tuple[RunRequest, RunConfig]]) -> None:
    """Every seed's configuration validated and its inputs able to travel to its process, all before
    the first seed runs (where OUT will be is no part of the check)."""
    for seed, (seed_req, seed_cfg) in inputs.items():
        validate(seed_cfg)
        why = payload_error(seed_req, seed_cfg)
        if why is not None:
            raise ConfigError(f"{seed_req.naming('seeds')}: the arguments of seed {seed} cannot be passed to its "
                              f"process ({why})")


@dataclass
class SeedRun:
    """One seed's process: its folder, its log (parallel runs), its exit code once it ended."""

    seed: int
    out: Path
    request: RunRequest
    """Its request (:func:`seed_request`), sent to it as data."""
    cfg: RunConfig
    """Its checked configuration, sent with them."""
    process: subprocess.Popen[bytes] | None = None
    log: IO[bytes] | None = None
    code: int | None = None

    def start(self, log_dir: Path | None) -> None:
        if log_dir is not None:
            self.log = (log_dir / f"seed-{self.seed}.log").open("wb")
        # its own session: a Ctrl-C at the terminal reaches janus alone, which passes one signal on to each
        # run; its stdin is a pipe from this process, whose end (this process gone) stops it
        self.process = subprocess.Popen([sys.executable, "-m", "janus.harness.seeds.child"], stdin=subprocess.PIPE,
                                        stdout=self.log, stderr=subprocess.STDOUT if self.log else None,
                                        start_new_session=True)
        assert self.process.stdin is not None
        try:
            send_payload(self.process.stdin, self.request, self.cfg, os.getpid())
        except (BrokenPipeError, OSError):  # it ended at once: poll() records its exit code
            pass

    def poll(self) -> bool:
        """Whether it has ended (its exit code recorded, its pipe and log closed)."""
        if self.process is None or self.code is not None:
            return self.code is not None
        self.code = self.process.poll()
        if self.code is not None:
            if self.process.stdin is not None:
                self.process.stdin.close()
            if self.log is not None:
                self.log.close()
        return self.code is not None

    def stop(self, sig: int) -> None:
        if self.process is not None and self.code is None:
            self.process.send_signal(sig)

    def wait(self) -> None:
        if self.process is not None:
            self.process.wait()
            self.poll()


def run_seeds(request: RunRequest) -> int:
    """``janus train --seeds``: every seed's run into OUT/seed-<s>, then OUT/aggregate.json and .png
    and a table. Exit code 0 when every seed's run finished, else 1 (the aggregate covers those that ran)."""
    _, failed = run_seed_processes(request)
    return 1 if failed else 0


def run_seed_processes(request: RunRequest) -> tuple[Path, bool]:
    """:func:`run_seeds`' work: the folder OUT it wrote, and whether any seed's run did not finish."""
    from janus.harness.configured import configured

    seeds = check_seeds(request)  # before the configuration: seed and resume are refused as such
    cfg = configured(request)
    check_resources(resolve(cfg))  # this machine's bounds, before any seed's run starts
    plan = schedule(cpus_per_run(cfg), len(seeds))
    check_seed_inputs(seed_inputs(request, seeds, request.out if request.out is not None else Path("runs", "train"), cfg))
    out_dir, lock = run_folder.open_out_dir(request, "train")
    with lock:
        log_dir = None
        if plan.at_once > 1:
            log_dir = out_dir / "logs"
            log_dir.mkdir(exist_ok=True)
        runs = [SeedRun(s, seed_req.out or out_dir / f"seed-{s}", seed_req, seed_cfg)
                for s, (seed_req, seed_cfg) in seed_inputs(request, seeds, out_dir, cfg).items()]
        print(f"janus train --seeds {' '.join(map(str, seeds))}: {len(seeds)} runs into {out_dir}/seed-<s>, "
              f"{plan.describe()}" + (f"; each run's output in {log_dir}" if log_dir else ""), flush=True)
        try:
            _run_all(runs, plan.at_once, log_dir)
        except BaseException as exc:  # a stop signal (SIGINT, SIGTERM, SIGHUP) goes to each run once; any
            # other failure here stops them as SIGTERM does; the aggregate covers what ran, whatever happened
            sig = signal.SIGTERM
            if isinstance(exc, KeyboardInterrupt):
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
                _aggregate(request, out_dir, runs, plan)
            raise
        with stopping.saving():
            failed = _aggregate(request, out_dir, runs, plan)
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


def _aggregate(request: RunRequest, out_dir: Path, runs: list[SeedRun], plan: Schedule) -> bool:
    """Write the aggregate of the runs and print its table; whether any run did not finish."""
    from janus.harness.outputs import command_line

    codes = {r.seed: r.code for r in runs}
    table, paths, failed = write_aggregate(out_dir, {r.seed: r.out for r in runs}, codes,
                                           {"schedule": plan.describe(), "runs_at_once": plan.at_once,
                                            "cpus_per_run": plan.per_run, "usable_cpus": plan.cpus,
                                            "command": command_line("train", request)})
    print("\n" + table, flush=True)
    print("\nwrote " + ", ".join(str(p) for p in paths), flush=True)
    return failed

