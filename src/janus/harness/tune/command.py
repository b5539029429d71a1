"""``janus tune``: the command around :mod:`janus.harness.tune.search` (progress, table, files), and the
choice of objective (``--objective time_to_solve``: :mod:`janus.harness.tune.solve_command`)."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from janus import fileio, stopping
from janus.algorithms.base import algorithm
from janus.config import RunConfig, recorded, resolve
from janus.errors import ConfigError, JanusError, invalid
from janus.harness import run_folder
from janus.harness.tune.search import VERDICTS, Trial, TuneResult, successive_halving
from janus.harness.tune.space import BACKENDS, acts_in_environment, defaults_of, search_space
from janus.harness.tune.trials import (  # re-exported: the trial's parts were defined here first
    FORKSERVER_PRELOAD as FORKSERVER_PRELOAD,
    TrialDeadline as TrialDeadline,
    TrialTimedOut as TrialTimedOut,
    deadline as deadline,
    is_deadline as is_deadline,
    run_trial,
    trial_backend as trial_backend,
)

if TYPE_CHECKING:
    from janus.config.request import RunRequest

BAR = 24
KEPT_BECAUSE = {
    "within_spread": "was within the paired runs' spread of them: not a measured difference",
    "lost": "lost the paired rounds to them",
    "not_measured": "could not be measured against them (the paired rounds did not fit in the budget, or failed)",
}
"""best.yaml's header where the defaults were kept, by :attr:`TuneResult.verdict`."""


def run_tune(request: RunRequest, cfg: RunConfig) -> int:
    """Tune ``cfg``'s knobs within ``--budget_s``; write ``best.yaml`` and ``tune.json`` into the run folder
    (``tune.json`` after every trial; status ``stopped`` on a stop signal, ``failed`` when the tune itself
    fails or no trial could run, which is one error line)."""
    start = time.monotonic()  # the budget counts from here: the checks and the folder included
    budget_s = float(request.budget_s)
    if not budget_s > 0:
        raise invalid("--budget_s", request.budget_s, "a number of seconds > 0")
    backends = tune_backends(request.backends)
    if request.objective == "time_to_solve":
        from janus.harness.tune.solve_command import run_solve_tune

        return run_solve_tune(request, cfg, backends, start)
    if request.objective != "throughput":
        raise invalid("--objective", request.objective, "throughput or time_to_solve")
    if request.search not in (None, "halving", "plain"):
        raise invalid("--search", request.search, "halving or plain for --objective throughput (tpe searches "
                      "hyperparameters: --objective time_to_solve)")
    if cfg.runtime.target_return is not None:
        raise ConfigError("--target_return is for --objective time_to_solve: the throughput tune measures env steps/s "
                          "over a share of the budget, not the time to a return")
    resolve(cfg)  # a bad configuration fails before anything runs
    space = search_space(cfg, backends)
    out_dir, lock = run_folder.open_out_dir(request, "tune")
    with lock:
        metric_key = algorithm(cfg.workload.algo).throughput_metric
        metric = metric_key.removesuffix("_per_s").replace("_", " ") + "/s"  # env steps/s, samples/s
        print(f"janus tune: {cfg.workload.algo}{' on ' + cfg.workload.env if acts_in_environment(cfg) else ''}, "
              f"{len(space)} settings this machine can run, budget {budget_s:.0f} s (a quarter of it for the paired "
              f"rounds), comparing {metric}; output in {out_dir}", flush=True)
        so_far = [TuneResult(defaults=defaults_of(cfg), metric=metric_key, budget_s=budget_s)]
        write_json(out_dir, so_far[0], "running")  # from the start: a stop during the warm-up keeps it too

        def progress(trial: Trial, count: int, total: int) -> None:
            done = min(1.0, (time.monotonic() - start) / budget_s)
            bar = "#" * round(done * BAR) + "." * (BAR - round(done * BAR))
            got = (f"{trial.throughput:,.0f}{' (cut at its deadline)' if trial.cut else ''}"
                   if trial.throughput is not None else f"failed ({trial.error[:80]})")
            print(f"  [{bar}] {time.monotonic() - start:5.0f}s  {stage(trial)} ({trial.share:.1%} of the workload)  "
                  f"{trial.candidate.label()}: {got}", flush=True)

        def snapshot(result: TuneResult) -> None:
            so_far[:] = [result]
            write_json(out_dir, result, "running")

        try:
            result = successive_halving(cfg, space, run_trial, budget_s, progress, seed=cfg.seed,
                                        plain=request.search == "plain", start=start, snapshot=snapshot)
        except BaseException as exc:  # a stop signal, or a failure of the tune's own: tune.json says so
            with stopping.saving():
                status = "stopped" if isinstance(exc, KeyboardInterrupt) else "failed"
                path = write_json(out_dir, so_far[0], status, error=_error_of(exc))
            print(f"\njanus tune: {status}; the trials so far and the best so far are in {path}",
                  file=sys.stderr, flush=True)
            raise
        with stopping.saving():  # a stop signal now waits until the files are written
            failed = [t for t in result.trials if t.throughput is None]
            if failed and len(failed) == len(result.trials):
                path = write_json(out_dir, result, "failed", error=f"every trial failed; the first: {failed[0].error}")
                raise JanusError(f"no trial ran: all {len(failed)} failed (the first, the "
                                 f"{stage(failed[0])}: {failed[0].error[:300]}); every trial is in {path}")
            print()
            print(format_tune(result))
            paths = write_tune(out_dir, cfg, result)
        print(f"\nwrote {', '.join(str(p) for p in paths)} ({time.monotonic() - start:.0f}s of a {budget_s:.0f}s "
              f"budget)", flush=True)
    return 0


def tune_backends(given: str) -> list[str]:
    """``--backends``: the comma-separated backends to try, each one of :data:`BACKENDS`."""
    backends = [b.strip() for b in given.split(",") if b.strip()]
    for b in backends:
        if b not in BACKENDS:
            raise invalid("--backends", given, f"a comma-separated list of {', '.join(BACKENDS)}")
    return backends


def stage(trial: Trial) -> str:
    """The trial's place in the search, as the progress line and the table say it."""
    return "warm-up" if trial.warmup else "paired" if trial.final else f"rung {trial.rung}"


def format_tune(result: TuneResult) -> str:
    """The trials by rung (the fastest first), the final paired rounds and the verdict."""
    lines = [f"{'stage':>7}  {'share':>6}  {result.metric:>17}  setting"]
    for t in sorted(result.trials, key=lambda t: (not t.warmup, t.final, t.rung, -(t.throughput or -1.0))):
        got = (f"{t.throughput:,.0f}{'*' if t.cut else ''}" if t.throughput is not None else "failed")
        mark = "  <- defaults" if t.candidate == result.defaults else ""
        lines.append(f"{stage(t):>7}  {t.share:>6.1%}  {got:>17}  {t.candidate.label()}{mark}")
    if any(t.cut for t in result.trials):
        lines.append("* cut at its deadline, measured on what it did (ranked behind the trials that finished)")
    assert result.best is not None and result.defaults is not None
    lines.append("")
    if result.runner_up is not None:
        lines.append(f"challenger: {result.runner_up.label()}")
    lines.append(f"best:       {result.best.label()}")
    lines.append(f"defaults:   {result.defaults.label()}")
    for name in ("best", "defaults"):
        values = result.final.get(name, [])
        if values:
            who = "challenger" if name == "best" else name
            lines.append(f"  {who}: {', '.join(f'{v:,.0f}' for v in values)} ({result.metric}, paired rounds)")
    gain = result.gain
    lines.append(VERDICTS.get(result.verdict, "").format(gain=gain if gain is not None else float("nan")))
    if result.stopped_early:
        lines.append("the time budget ran out before successive halving finished: the best so far is reported")
    return "\n".join(lines)


def best_config(cfg: RunConfig, result: TuneResult) -> RunConfig:
    """``cfg`` (its whole budget) with the best candidate's knobs."""
    assert result.best is not None
    return result.best.apply(cfg)


def _error_of(exc: BaseException) -> str | None:
    """What stopped a tune, for tune.json: None for a stop signal, else the exception in one line."""
    return None if isinstance(exc, KeyboardInterrupt) else f"{type(exc).__name__}: {exc}"


def write_json(out_dir: Path, result: TuneResult, status: str, error: str | None = None) -> Path:
    """``tune.json``: every trial so far, the best so far and ``status`` (running, stopped, failed
    (``error`` says why) or finished); written whole (atomically), so a stop at any moment leaves the
    last complete one."""
    leader = result.leader()
    data: dict[str, Any] = {
        "command": "janus " + " ".join(sys.argv[1:]),
        "status": status,
        **({"error": error} if error else {}),
        "metric": result.metric,
        "budget_s": result.budget_s,
        "elapsed_s": result.elapsed_s,
        "best": vars(leader) if leader else None,
        "defaults": vars(result.defaults) if result.defaults else None,
        "runner_up": vars(result.runner_up) if result.runner_up else None,
        "final": result.final,
        "gain": result.gain,
        "verdict": result.verdict or None,
        "stopped_early": result.stopped_early,
        "trials": [{**vars(t.candidate), "rung": t.rung, "share": t.share, "throughput": t.throughput,
                    "wall_s": t.wall_s, "run_s": t.run_s, "error": t.error, "final_return": t.final_return,
                    "final": t.final, "warmup": t.warmup, "cut": t.cut}
                   for t in result.trials],
    }
    path = out_dir / "tune.json"
    fileio.write_text(path, json.dumps(data, indent=2))
    return path


def write_tune(out_dir: Path, cfg: RunConfig, result: TuneResult) -> list[Path]:
    """``best.yaml`` (what ``janus train --config`` takes) and ``tune.json`` (every trial)."""
    best = recorded(resolve(best_config(cfg, result)))
    if result.runner_up is not None:
        header = (f"# written by janus tune: the defaults; the challenger ({result.runner_up.label()}) "
                  f"{KEPT_BECAUSE[result.verdict]}\n")
    elif result.verdict == "gain" and result.gain is not None and result.best is not None:
        header = (f"# written by janus tune: {result.best.label()}; gain over the defaults {result.gain:.2f}x "
                  f"({result.metric})\n")
    else:
        header = "# written by janus tune: the defaults (no other setting could be measured against them)\n"
    path = out_dir / "best.yaml"
    fileio.write_text(path, header + yaml.safe_dump(best, sort_keys=False))
    return [path, write_json(out_dir, result, "finished")]
