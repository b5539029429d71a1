"""``janus tune``: the command around :mod:`janus.harness.tune` (progress, table, files)."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import yaml

from janus import fileio
from janus.config import RunConfig, recorded, resolve
from janus.errors import invalid
from janus.harness import run_folder
from janus.harness.sync_loop import run_configuration
from janus.harness.tune import BACKENDS, Trial, TuneResult, search_space, successive_halving

BAR = 24


def run_tune(args: argparse.Namespace, cfg: RunConfig) -> int:
    """Tune ``cfg``'s knobs within ``--budget_s``; write ``best.yaml`` and ``tune.json`` into the run folder."""
    budget_s = float(args.budget_s)
    if not budget_s > 0:
        raise invalid("--budget_s", args.budget_s, "a number of seconds > 0")
    backends = [b.strip() for b in args.backends.split(",") if b.strip()]
    for b in backends:
        if b not in BACKENDS:
            raise invalid("--backends", args.backends, f"a comma-separated list of {', '.join(BACKENDS)}")
    resolve(cfg)  # a bad configuration fails before anything runs
    space = search_space(cfg, backends)
    out_dir, lock = run_folder.open_out_dir(args, "tune")
    with lock:
        metric = "env steps/s" if cfg.workload.algo != "synthetic" else "samples/s"
        print(f"janus tune: {cfg.workload.algo}{' on ' + cfg.workload.env if cfg.workload.algo != 'synthetic' else ''}, "
              f"{len(space)} settings this machine can run, budget {budget_s:.0f} s, comparing {metric}; output in "
              f"{out_dir}", flush=True)
        start = time.monotonic()

        def progress(trial: Trial, count: int, total: int) -> None:
            done = min(1.0, (time.monotonic() - start) / budget_s)
            bar = "#" * round(done * BAR) + "." * (BAR - round(done * BAR))
            got = f"{trial.throughput:,.0f}" if trial.throughput is not None else f"refused ({trial.error[:80]})"
            print(f"  [{bar}] {time.monotonic() - start:5.0f}s  rung {trial.rung} ({trial.share:.0%} of the workload)  "
                  f"{trial.candidate.label()}: {got}", flush=True)

        result = successive_halving(cfg, space, lambda c: run_configuration(c, None, None), budget_s, progress,
                                    seed=cfg.seed, plain=args.search == "plain")
        print()
        print(format_tune(result))
        paths = write_tune(out_dir, cfg, result)
        print("\nwrote " + ", ".join(str(p) for p in paths), flush=True)
    return 0


def format_tune(result: TuneResult) -> str:
    """The best candidate of each rung's trials, the final paired rounds and the gain."""
    lines = [f"{'rung':>5}  {'share':>6}  {result.metric:>17}  setting"]
    for t in sorted(result.trials, key=lambda t: (t.final, t.rung, -(t.throughput or -1.0))):
        got = f"{t.throughput:,.0f}" if t.throughput is not None else "refused"
        mark = "  <- defaults" if t.candidate == result.defaults else ""
        lines.append(f"{'final' if t.final else t.rung:>5}  {t.share:>6.1%}  {got:>17}  {t.candidate.label()}{mark}")
    assert result.best is not None and result.defaults is not None
    lines.append("")
    lines.append(f"best:     {result.best.label()}")
    lines.append(f"defaults: {result.defaults.label()}")
    for name in ("best", "defaults"):
        values = result.final.get(name, [])
        if values:
            lines.append(f"  {name}: {', '.join(f'{v:,.0f}' for v in values)} ({result.metric}, paired rounds)")
    gain = result.gain
    if result.runner_up is not None:
        lines.append(f"the search's winner ({result.runner_up.label()}) lost the paired rounds to the defaults "
                     f"({gain:.2f}x): best.yaml holds the defaults")
    elif result.best == result.defaults:
        lines.append("no setting beat the defaults: best.yaml holds them")
    else:
        lines.append(f"gain over the defaults: {gain:.2f}x (medians of the paired rounds)" if gain is not None
                     else "gain over the defaults: not measured")
    if result.stopped_early:
        lines.append("the time budget ran out before successive halving finished: the best so far is reported")
    return "\n".join(lines)


def best_config(cfg: RunConfig, result: TuneResult) -> RunConfig:
    """``cfg`` (its whole budget) with the best candidate's knobs."""
    assert result.best is not None
    return result.best.apply(cfg)


def write_tune(out_dir: Path, cfg: RunConfig, result: TuneResult) -> list[Path]:
    """``best.yaml`` (what ``janus train --config`` takes) and ``tune.json`` (every trial)."""
    best = recorded(resolve(best_config(cfg, result)))
    if result.runner_up is not None:
        header = (f"# written by janus tune: the defaults; the search's winner ({result.runner_up.label()}) lost "
                  f"the paired rounds to them\n")
    elif result.gain is not None and result.best is not None:
        header = (f"# written by janus tune: {result.best.label()}; gain over the defaults {result.gain:.2f}x "
                  f"({result.metric})\n")
    else:
        header = "# written by janus tune\n"
    paths = [out_dir / "best.yaml", out_dir / "tune.json"]
    fileio.write_text(paths[0], header + yaml.safe_dump(best, sort_keys=False))
    data: dict[str, Any] = {
        "command": "janus " + " ".join(sys.argv[1:]),
        "metric": result.metric,
        "best": vars(result.best) if result.best else None,
        "defaults": vars(result.defaults) if result.defaults else None,
        "runner_up": vars(result.runner_up) if result.runner_up else None,
        "final": result.final,
        "gain": result.gain,
        "stopped_early": result.stopped_early,
        "trials": [{**vars(t.candidate), "rung": t.rung, "share": t.share, "throughput": t.throughput,
                    "wall_s": t.wall_s, "error": t.error, "final_return": t.final_return, "final": t.final}
                   for t in result.trials],
    }
    fileio.write_text(paths[1], json.dumps(data, indent=2))
    return paths
