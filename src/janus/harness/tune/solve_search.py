"""The searches of ``janus tune --objective time_to_solve``, all on one objective (the seconds to the
target, :mod:`janus.harness.tune.objective`) and one budget (:class:`SolveBudget`). They are:

- ``tpe`` (the default): Optuna's TPE sampler (seeded by ``--seed``) proposes settings of the joint
  space one at a time, the defaults first; each run reports its evaluations (step: env steps, value:
  what is left to the target, ``target - mean return``, minimised as the objective is), and Optuna's
  median pruner stops a trial whose best so far is worse than the median of the finished trials at the
  same env step. The median pruner, not successive halving's: the trials that solve stop early, so
  each step holds a different set of finished trials, and the median needs no rung sizes to fit them.
- ``halving``: successive halving (:mod:`janus.harness.tune.search`'s rule, with time as the
  resource): the defaults and random settings of the same space each run capped at a ninth of the
  run cap, the best third (by the objective at that cap) goes on at three times the cap, and so on.
- ``plain``: the same random settings, each at the full cap, until the search's time is spent.

``janus tune ... --search tpe`` against ``--search halving`` (same task, same budget) is how the two
are compared (docs/design.md).
"""

from __future__ import annotations

import math
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from janus.config import RunConfig, resolve
from janus.errors import ConfigError
from janus.harness.tune.joint_space import JointSpace, Setting
from janus.harness.tune.objective import OnEvaluation, Outcome
from janus.harness.tune.search import ETA

CONFIRM_FRACTION = 0.4
"""Of the budget, set aside up front for the confirming runs (best and defaults on each seed); it also
sizes the cap of every run: the confirming runs' slot."""
TPE_STARTUP = 5
"""Trials TPE samples at random (the defaults first) before it models the good and the poor ones."""
PRUNER_STARTUP = 3
"""Finished trials before the median pruner prunes anything."""
RUNGS = 3
FAILURES_IN_A_ROW = 10
"""TPE stops after this many runs in a row fail (a workload no setting runs): the error is in each."""
"""Successive halving's rungs: caps of 1/9, 1/3 and 1 of the run cap."""

SolveRunner = Callable[[RunConfig, float, "OnEvaluation | None"], Outcome]
"""``run(config, allowed_s, on_evaluation)``: one time-to-solve run (:func:`~janus.harness.tune.objective.run_solving_trial`)."""
Clock = Callable[[], float]


def require_optuna() -> Any:
    """The ``optuna`` module, or a ConfigError saying how to install it."""
    try:
        import optuna
    except ImportError:
        raise ConfigError("janus tune --objective time_to_solve searches with Optuna, which is not installed: "
                          "pip install 'janus-rl[tune]' (or pip install optuna)") from None
    optuna.logging.set_verbosity(optuna.logging.WARNING)  # the tune prints its own progress
    return optuna


@dataclass
class SolveTrial:
    """One time-to-solve run of a setting: in the search (``stage``: ``search``, ``rung N``) or the
    confirming runs (``confirm``)."""

    setting: Setting
    stage: str
    seed: int
    cap_s: float
    outcome: Outcome | None  # None: the run failed (``error`` says why)
    value: float | None = None  # the objective (None: failed)
    error: str = ""
    role: str = ""  # confirm: best or defaults
    allowed_s: float = 0.0  # its deadline: the cap, or less where the time left was less

    @property
    def solved(self) -> bool:
        return self.outcome is not None and self.outcome.solved_at_s is not None

    @property
    def complete(self) -> bool:
        """Its score is the objective's: it solved, ran to its budget, or ran its whole cap unsolved
        (not pruned, not cut short by the end of the search's time)."""
        o = self.outcome
        return o is not None and not o.pruned and not (o.cut and self.allowed_s < self.cap_s)


@dataclass
class SolveBudget:
    """How a time-to-solve tune spends ``budget_s`` from ``start``: the search until :attr:`search_end`,
    then ``2 x confirm_seeds`` confirming runs, each (and each search run) capped at :attr:`cap_s`."""

    start: float
    budget_s: float
    confirm_seeds: int
    clock: Clock = time.monotonic

    @property
    def end(self) -> float:
        return self.start + self.budget_s

    @property
    def search_end(self) -> float:
        return self.end - CONFIRM_FRACTION * self.budget_s

    @property
    def cap_s(self) -> float:
        return CONFIRM_FRACTION * self.budget_s / (2 * self.confirm_seeds)

    def left(self, until: float) -> float:
        return until - self.clock()


@dataclass
class SearchState:
    """A time-to-solve tune so far: every run, and once the search ended its best setting."""

    target: float
    budget: SolveBudget
    trials: list[SolveTrial] = field(default_factory=list)
    best: Setting | None = None
    stopped_early: bool = False


def trial_config(cfg: RunConfig, setting: Setting, seed: int) -> RunConfig:
    """``cfg`` with ``setting`` and ``seed``, resolved (a setting this workload refuses raises)."""
    return resolve(replace(setting.apply(cfg), seed=seed))


def run_setting(cfg: RunConfig, state: SearchState, setting: Setting, stage: str, seed: int, cap_s: float,
                allowed_s: float, run: SolveRunner, on_evaluation: OnEvaluation | None = None) -> SolveTrial:
    """One run of ``setting``, scored at ``cap_s``; a run that fails is recorded, not raised."""
    try:
        outcome = run(trial_config(cfg, setting, seed), allowed_s, on_evaluation)
    except Exception as exc:  # noqa: BLE001 - a setting this workload refuses or that fails: recorded, not fatal
        return SolveTrial(setting, stage, seed, cap_s, None, error=f"{type(exc).__name__}: {exc}", allowed_s=allowed_s)
    return SolveTrial(setting, stage, seed, cap_s, outcome, value=outcome.value(state.target, cap_s), allowed_s=allowed_s)


def warm_up(cfg: RunConfig, space: JointSpace, state: SearchState, run: SolveRunner,
            done: Callable[[SolveTrial], None]) -> None:
    """The defaults' first run (kernel compilation, first allocations, the fork server's imports), given
    up to half the search's time (at least the cap): recorded as ``warm-up``, never ranked."""
    budget = state.budget
    allowed = min(budget.left(budget.search_end), max(budget.cap_s, budget.left(budget.search_end) / 2))
    if allowed > 0:
        done(run_setting(cfg, state, space.defaults, "warm-up", cfg.seed, budget.cap_s, allowed, run))


def tpe_search(cfg: RunConfig, space: JointSpace, state: SearchState, run: SolveRunner, interval: int,
               done: Callable[[SolveTrial], None]) -> None:
    """Optuna's TPE with a median pruner over ``space`` until the search's time is spent (see the module)."""
    optuna = require_optuna()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # an enqueued default outside a range is widened into it already
        sampler = optuna.samplers.TPESampler(seed=cfg.seed, n_startup_trials=TPE_STARTUP)
    pruner = optuna.pruners.MedianPruner(n_startup_trials=PRUNER_STARTUP, n_warmup_steps=interval + 1)
    study = optuna.create_study(direction="minimize", sampler=sampler, pruner=pruner)
    study.enqueue_trial(space.params_of(space.defaults))
    warm_up(cfg, space, state, run, done)
    budget = state.budget
    while budget.left(budget.search_end) > budget.cap_s / ETA:  # never start a run with too little time to solve
        trial = study.ask()
        setting = space.suggest(trial)

        def on_evaluation(env_steps: int, mean_return: float, trial: Any = trial) -> bool:
            trial.report(state.target - mean_return, env_steps // interval * interval)
            return bool(trial.should_prune())

        allowed = min(budget.cap_s, budget.left(budget.search_end))
        result = run_setting(cfg, state, setting, "search", cfg.seed, budget.cap_s, allowed, run, on_evaluation)
        if result.outcome is None:
            study.tell(trial, state=optuna.trial.TrialState.FAIL)
        elif not result.complete:  # pruned, or cut short: ranked by its evaluations so far, as TPE ranks pruned trials
            study.tell(trial, state=optuna.trial.TrialState.PRUNED)
        else:  # solved, or unsolved at its cap: its score, the shortfall ranking it after every solved one
            study.tell(trial, result.value)
        done(result)
        if len(state.trials) >= FAILURES_IN_A_ROW and all(t.outcome is None for t in state.trials[-FAILURES_IN_A_ROW:]):
            state.stopped_early = True
            break
    finished = [t for t in state.trials if t.stage == "search" and t.complete]
    state.best = min(finished, key=_value).setting if finished else space.defaults


def random_settings(space: JointSpace, count: int, seed: int) -> list[Setting]:
    """The defaults and ``count - 1`` settings of ``space`` drawn at random (Optuna's RandomSampler, seeded)."""
    optuna = require_optuna()
    study = optuna.create_study(direction="minimize", sampler=optuna.samplers.RandomSampler(seed=seed))
    drawn = [space.defaults]
    while len(drawn) < count:
        drawn.append(space.suggest(study.ask()))
    return list(dict.fromkeys(drawn))


def halving_search(cfg: RunConfig, space: JointSpace, state: SearchState, run: SolveRunner, plain: bool,
                   done: Callable[[SolveTrial], None]) -> None:
    """Successive halving on the objective with time as the resource, or (``plain``) every setting at
    the full cap (see the module)."""
    budget = state.budget
    warm_up(cfg, space, state, run, done)
    search_s = budget.left(budget.search_end)
    rungs = 1 if plain else RUNGS
    caps = [budget.cap_s / ETA ** (rungs - 1 - k) for k in range(rungs)]
    # each rung costs about as much (1/ETA as many runs at ETA times the cap): the first gets 1/rungs of the time
    count = max(ETA, math.floor(search_s / rungs / caps[0])) if not plain else max(1, math.ceil(search_s / caps[0]))
    alive = random_settings(space, count, cfg.seed)
    for rung, cap in enumerate(caps):
        ranked: list[SolveTrial] = []
        for setting in alive:
            if budget.left(budget.search_end) < cap / ETA:
                state.stopped_early = state.stopped_early or rung < rungs - 1 or not plain
                break
            result = run_setting(cfg, state, setting, "search" if plain else f"rung {rung}", cfg.seed, cap,
                                 min(cap, budget.left(budget.search_end)), run)
            done(result)
            if result.value is not None:
                ranked.append(result)
        ranked.sort(key=_value)
        if not ranked:
            break
        state.best = ranked[0].setting
        alive = [t.setting for t in ranked[: max(1, math.ceil(len(ranked) / ETA))]]
        if len(alive) == 1:  # decided
            break
    if state.best is None:
        state.best = space.defaults


def _value(t: SolveTrial) -> float:
    return t.value if t.value is not None else math.inf


def challenger(state: SearchState, defaults: Setting) -> Setting | None:
    """The setting measured against the defaults: the search's best, or, where the defaults led, the best
    other setting of the search's last stage (None: no other setting ran)."""
    if state.best is not None and state.best != defaults:
        return state.best
    searched = [t for t in state.trials if t.stage not in ("confirm", "warm-up") and t.value is not None
                and t.setting != defaults]
    if not searched:
        return None
    last = max(stage_rank(t.stage) for t in searched)
    return min((t for t in searched if stage_rank(t.stage) == last), key=_value).setting


def stage_rank(stage: str) -> int:
    return int(stage.split()[1]) if stage.startswith("rung ") else 0
