"""``janus tune --objective time_to_solve --target_return R``: the search of
:mod:`janus.harness.tune.solve_search`, then the confirming runs, the table and the files.

The confirming runs measure the search's best setting (or, where the defaults led, the best other
one) against the defaults on ``--confirm_seeds`` seeds the search did not use (``--seed`` + 1, + 2,
...: a setting is not judged on the seed it was chosen on), interleaved (defaults s1, best s1,
defaults s2, ...), each capped as a search run is. The best wins only where the two ranges of
times to solve (an unsolved run: infinite) are apart, as the throughput tune's paired rounds are
read; otherwise best.yaml holds the defaults and its header says why.
"""

from __future__ import annotations

import json
import math
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from janus import fileio, stopping
from janus.algorithms.base import algorithm
from janus.config import RunConfig, recorded, resolve
from janus.errors import ConfigError, JanusError, invalid
from janus.harness import run_folder
from janus.harness.experiments.repeats import ranges_overlap
from janus.harness.tune.joint_space import JointSpace, Setting
from janus.harness.tune.objective import run_solving_trial
from janus.harness.tune.solve_search import (
    CONFIRM_FRACTION,
    RUNGS,
    SearchState,
    SolveBudget,
    SolveRunner,
    SolveTrial,
    challenger,
    halving_search,
    require_optuna,
    run_setting,
    stage_rank,
    tpe_search,
)
from janus.harness.tune.space import search_space

if TYPE_CHECKING:
    from janus.config.request import RunRequest

SEARCHES = ("tpe", "halving", "plain")
VERDICTS = {
    "gain": "the best solves faster than the defaults: {gain} (medians of the confirming runs, ranges apart): best.yaml holds it",
    "within_spread": ("the best and the defaults are within each other's spread (their ranges of times to solve overlap): "
                      "not a measured difference, best.yaml holds the defaults"),
    "lost": "the best did not beat the defaults in the confirming runs: best.yaml holds the defaults",
    "not_measured": "the confirming runs did not all fit in the budget (or failed): best.yaml holds the defaults",
    "defaults": "no other setting ran: best.yaml holds the defaults",
}
"""What :attr:`Confirmation.verdict` means, as the table and best.yaml's header say it."""


@dataclass
class Confirmation:
    """The confirming runs: times to solve by role (``best``, ``defaults``; unsolved: inf) and the verdict."""

    challenger: Setting | None
    times: dict[str, list[float]] = field(default_factory=dict)
    verdict: str = ""

    def median(self, role: str) -> float | None:
        values = self.times.get(role)
        return statistics.median(values) if values else None

    def solved_fraction(self, role: str) -> float | None:
        values = self.times.get(role)
        return sum(math.isfinite(v) for v in values) / len(values) if values else None

    @property
    def gain(self) -> float | None:
        """The defaults' median time to solve over the best's (> 1: the best is faster); None where
        either median is unsolved or missing."""
        best, base = self.median("best"), self.median("defaults")
        if best is None or base is None or not (math.isfinite(best) and math.isfinite(base)) or best <= 0:
            return None
        return base / best

    def summary(self, role: str) -> str:
        """``solved 3/3, median 8.1 s (7.9, 8.1, 9.0)``."""
        values = self.times.get(role, [])
        if not values:
            return "not run"
        shown = ", ".join(f"{v:.1f}" if math.isfinite(v) else "unsolved" for v in values)
        median = self.median(role)
        med = f"{median:.1f} s" if median is not None and math.isfinite(median) else "unsolved"
        return f"solved {sum(math.isfinite(v) for v in values)}/{len(values)}, median {med} ({shown})"


def verdict_line(result: Confirmation) -> str:
    """The verdict as the table and best.yaml's header say it."""
    gain = result.gain
    shown = f"{gain:.2f}x" if gain is not None else "the defaults' median run did not solve"
    return VERDICTS[result.verdict].format(gain=shown)


def check_request(request: RunRequest, cfg: RunConfig) -> tuple[float, str, int]:
    """The target, the search and the confirming seeds of a time-to-solve tune; clear errors first."""
    name = cfg.workload.algo
    algo = algorithm(name)
    if not (algo.has_policy and algo.acts_in_gymnasium):
        raise ConfigError(f"--objective time_to_solve tunes an algorithm with a policy acting in Gymnasium "
                          f"environments (dqn, ppo, sac, appo, impala, r2d2); --algo {name} has none to evaluate")
    target = cfg.runtime.target_return
    if target is None:
        raise ConfigError("--objective time_to_solve needs --target_return R: the evaluations' mean return that "
                          "counts as solved (e.g. --target_return 475 on CartPole-v1)")
    search = request.search or "tpe"
    if search not in SEARCHES:
        raise invalid("--search", search, "tpe, halving or plain")
    seeds = request.confirm_seeds
    if isinstance(seeds, bool) or not isinstance(seeds, int) or seeds < 1:
        raise invalid("--confirm_seeds", seeds, "an integer >= 1 (seeds the best and the defaults are compared on)")
    return float(target), search, seeds


def confirm(cfg: RunConfig, state: SearchState, defaults: Setting, run: SolveRunner,
            done: Callable[[SolveTrial], None]) -> Confirmation:
    """The confirming runs (see the module), within the time set aside for them."""
    budget = state.budget
    other = challenger(state, defaults)
    out = Confirmation(other)
    if other is None:
        out.verdict = "defaults"
        return out
    seeds = [cfg.seed + 1 + i for i in range(budget.confirm_seeds)]
    left = 2 * len(seeds)
    for seed in seeds:
        for role, setting in (("defaults", defaults), ("best", other)):
            allowed = min(budget.cap_s, budget.left(budget.end) / left)
            left -= 1
            if allowed <= 0:
                continue
            trial = run_setting(cfg, state, setting, "confirm", seed, budget.cap_s, allowed, run)
            trial.role = role
            done(trial)
            solved = trial.outcome.solved_at_s if trial.outcome is not None else None
            out.times.setdefault(role, []).append(solved if solved is not None else math.inf)
    mine, theirs = out.times.get("best", []), out.times.get("defaults", [])
    if len(mine) < len(seeds) or len(theirs) < len(seeds):
        out.verdict = "not_measured"
    elif ranges_overlap(mine, theirs) or (not any(map(math.isfinite, mine)) and not any(map(math.isfinite, theirs))):
        out.verdict = "within_spread"
    else:
        out.verdict = "gain" if max(mine) < min(theirs) else "lost"
    return out


def run_solve_tune(request: RunRequest, cfg: RunConfig, backends: list[str], start: float) -> int:
    """The time-to-solve tune within ``--budget_s`` from ``start``: best.yaml and tune.json in the run folder."""
    target, search, seeds = check_request(request, cfg)
    require_optuna()  # before anything runs: its error names the extra to install
    interval = resolve(cfg).runtime.eval_interval_steps  # a bad configuration fails here
    space = JointSpace(cfg, search_space(cfg, backends))
    state = SearchState(target, SolveBudget(start, float(request.budget_s), seeds))
    out_dir, lock = run_folder.open_out_dir(request, "tune")
    with lock:
        print(f"janus tune: time to solve {cfg.workload.algo} on {cfg.workload.env} (mean return >= {target:g}, "
              f"evaluated every {interval:,} env steps), {len(space.ranges)} hyperparameters and the data-path knobs, "
              f"search {search}, budget {state.budget.budget_s:.0f} s ({CONFIRM_FRACTION:.0%} of it for the confirming runs, "
              f"each run capped at {state.budget.cap_s:.0f} s); output in {out_dir}", flush=True)
        confirmation = [Confirmation(None)]
        write_json(out_dir, state, space.defaults, confirmation[0], search, "running")

        def done(trial: SolveTrial) -> None:
            state.trials.append(trial)
            print(f"  {time.monotonic() - start:5.0f}s  {trial_line(trial, space.defaults)}", flush=True)
            write_json(out_dir, state, space.defaults, confirmation[0], search, "running")

        try:
            if search == "tpe":
                tpe_search(cfg, space, state, run_solving_trial, interval, done)
            else:
                halving_search(cfg, space, state, run_solving_trial, search == "plain", done)
            confirmation[0] = confirm(cfg, state, space.defaults, run_solving_trial, done)
        except BaseException as exc:  # a stop signal, or a failure of the tune's own: tune.json says so
            with stopping.saving():
                status = "stopped" if isinstance(exc, KeyboardInterrupt) else "failed"
                error = None if isinstance(exc, KeyboardInterrupt) else f"{type(exc).__name__}: {exc}"
                path = write_json(out_dir, state, space.defaults, confirmation[0], search, status, error)
            print(f"\njanus tune: {status}; the trials so far and the best so far are in {path}", file=sys.stderr, flush=True)
            raise
        with stopping.saving():
            failed = [t for t in state.trials if t.outcome is None]
            if state.trials and len(failed) == len(state.trials):
                path = write_json(out_dir, state, space.defaults, confirmation[0], search, "failed",
                                  f"every trial failed; the first: {failed[0].error}")
                raise JanusError(f"no trial ran: all {len(failed)} failed (the first: {failed[0].error[:300]}); "
                                 f"every trial is in {path}")
            print()
            print(format_solve(state, space.defaults, confirmation[0]))
            paths = [write_best(out_dir, cfg, space.defaults, confirmation[0]),
                     write_json(out_dir, state, space.defaults, confirmation[0], search, "finished")]
        print(f"\nwrote {', '.join(str(p) for p in paths)} ({time.monotonic() - start:.0f}s of a "
              f"{state.budget.budget_s:.0f}s budget)", flush=True)
    return 0


def trial_line(t: SolveTrial, defaults: Setting) -> str:
    """One run as the progress and the table show it."""
    o = t.outcome
    if o is None:
        got = f"failed ({t.error[:80]})"
    elif o.solved_at_s is not None:
        got = f"solved in {o.solved_at_s:.1f} s at {o.env_steps:,} env steps"
    else:
        why = "pruned" if o.pruned else "cut at its cap" if o.cut else "budget spent"
        best = f"best {o.best_return:.1f}" if o.best_return is not None else "no evaluation"
        got = f"unsolved, {why} at {o.env_steps:,} env steps ({best})"
    stage = f"confirm {t.role} s{t.seed}" if t.stage == "confirm" else t.stage
    mark = "  <- defaults" if t.setting == defaults and t.stage != "confirm" else ""
    return f"{stage:<22} {got:<58} {t.setting.label()}{mark}"


def format_solve(state: SearchState, defaults: Setting, result: Confirmation) -> str:
    """Every run, the best setting against the defaults and the verdict."""
    order = {"warm-up": -1, "search": 0, "confirm": RUNGS}
    ranked = sorted(state.trials, key=lambda t: (order.get(t.stage, stage_rank(t.stage)), t.stage == "confirm" or t.value is None,
                                                 0.0 if t.stage == "confirm" else t.value or 0.0))
    lines = [trial_line(t, defaults) for t in ranked]
    lines.append("")
    if result.challenger is not None:
        lines.append(f"best:       {result.challenger.label()}")
    lines.append(f"defaults:   {defaults.label()}")
    for role in ("best", "defaults"):
        if result.times.get(role):
            lines.append(f"  {role}: {result.summary(role)} (time to solve, confirming runs)")
    lines.append(verdict_line(result))
    if state.stopped_early:
        lines.append("the time budget ran out before the search finished: the best so far is reported")
    return "\n".join(lines)


def chosen(defaults: Setting, result: Confirmation) -> Setting:
    """What best.yaml holds: the challenger where it won the confirming runs, else the defaults."""
    return result.challenger if result.verdict == "gain" and result.challenger is not None else defaults


def write_best(out_dir: Path, cfg: RunConfig, defaults: Setting, result: Confirmation) -> Path:
    """``best.yaml`` (what ``janus train --config`` takes), its header the confirming runs' figures."""
    best = recorded(resolve(chosen(defaults, result).apply(cfg)))
    header = [f"# written by janus tune --objective time_to_solve: {verdict_line(result)}"]
    if result.challenger is not None:
        header.append(f"# best:     {result.challenger.label()}: {result.summary('best')}")
    header.append(f"# defaults: {defaults.label()}: {result.summary('defaults')}")
    path = out_dir / "best.yaml"
    fileio.write_text(path, "\n".join(header) + "\n" + yaml.safe_dump(best, sort_keys=False))
    return path


def write_json(out_dir: Path, state: SearchState, defaults: Setting, result: Confirmation, search: str,
               status: str, error: str | None = None) -> Path:
    """``tune.json``: every run so far and, once measured, the confirming runs and the verdict; written
    whole after every run, so a stop at any moment leaves the last complete one."""
    budget = state.budget
    confirmed = {role: {"solved_at_s": [v if math.isfinite(v) else None for v in values],
                        "median_s": _finite(result.median(role)), "solved_fraction": result.solved_fraction(role)}
                 for role, values in result.times.items()}
    data: dict[str, Any] = {
        "command": "janus " + " ".join(sys.argv[1:]), "status": status, **({"error": error} if error else {}),
        "objective": "time_to_solve", "target_return": state.target, "search": search,
        "budget_s": budget.budget_s, "cap_s": budget.cap_s, "elapsed_s": budget.clock() - budget.start,
        "best": state.best.to_dict() if state.best else None, "defaults": defaults.to_dict(),
        "challenger": result.challenger.to_dict() if result.challenger else None,
        "confirm": confirmed, "gain": result.gain, "verdict": result.verdict or None,
        "chosen": chosen(defaults, result).to_dict() if result.verdict else None, "stopped_early": state.stopped_early,
        "trials": [{"stage": t.stage, "role": t.role or None, "seed": t.seed, "cap_s": t.cap_s, "value": t.value,
                    "error": t.error, **(vars(t.outcome) if t.outcome else {}), **t.setting.to_dict()}
                   for t in state.trials],
    }
    path = out_dir / "tune.json"
    fileio.write_text(path, json.dumps(data, indent=2))
    return path


def _finite(value: float | None) -> float | None:
    return value if value is not None and math.isfinite(value) else None
