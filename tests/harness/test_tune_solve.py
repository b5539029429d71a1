"""janus tune --objective time_to_solve: each algorithm's declared ranges, the joint space, the objective,
Optuna's TPE with its pruner (a real run pruned), the confirming runs, best.yaml, and the errors."""

from __future__ import annotations

import builtins
import json
import math
import time
from pathlib import Path
from typing import Any

import optuna
import pytest
import yaml

from janus.algorithms.base import algorithm
from janus.cli import build_parser, config_from_args, main
from janus.config import from_dict, resolve
from janus.harness.tune.joint_space import JointSpace, Setting, value_of
from janus.harness.tune.objective import Outcome, objective_value, run_solving_trial
from janus.harness.tune.solve_command import VERDICTS, Confirmation, confirm, format_solve, write_best
from janus.harness.tune.solve_search import (
    SearchState,
    SolveBudget,
    halving_search,
    require_optuna,
    tpe_search,
    trial_config,
)
from janus.harness.tune.space import defaults_of, search_space

ALGOS = {"dqn": "CartPole-v1", "ppo": "CartPole-v1", "sac": "Pendulum-v1", "appo": "CartPole-v1", "impala": "CartPole-v1"}


def _cfg(*flags: str):
    return config_from_args(build_parser().parse_args(["tune", *flags]))


def _ppo(*flags: str):
    return _cfg("--algo", "ppo", "--env", "CartPole-v1", "--target_return", "60", "--total_env_steps", "20000",
                "--backend", "local", *flags)


@pytest.mark.parametrize("algo", sorted(ALGOS))
def test_each_algorithm_declares_ranges_that_hold_its_defaults_and_run(algo: str) -> None:
    cfg = _cfg("--algo", algo, "--env", ALGOS[algo])
    ranges = algorithm(algo).tunable_ranges
    assert "algorithm.lr" in ranges and len(ranges) >= 4
    for key, rng in ranges.items():
        assert rng.contains(value_of(cfg, key)), f"{algo}: {key}={value_of(cfg, key)} outside its declared range {rng}"
    # the ends of every range make a configuration the algorithm runs
    for end in ("low", "high"):
        hyper = tuple((key, rng.choices[0 if end == "low" else -1] if rng.choices else
                       (int(getattr(rng, end)) if rng.integer else getattr(rng, end))) for key, rng in ranges.items())
        resolve(Setting(hyper, JointSpace(cfg, []).defaults.knobs).apply(cfg))


def test_the_joint_space_suggests_settings_that_resolve_and_holds_the_defaults() -> None:
    cfg = _ppo()
    space = JointSpace(cfg, search_space(cfg, ["local", "process"], cpus=2))
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
    settings = [space.suggest(study.ask()) for _ in range(30)]
    assert len(set(settings)) == 30
    for s in settings:  # the granularity follows the minibatches each setting picks
        resolved = trial_config(cfg, s, 0)
        assert resolved.runtime.target_return == 60.0 and resolved.runtime.eval_interval_steps == 1000
    study.enqueue_trial(space.params_of(space.defaults))
    assert space.suggest(study.ask()) == space.defaults
    applied, own = resolve(space.defaults.apply(cfg)), resolve(cfg)  # the defaults are the run's own setting
    assert all(value_of(applied, key) == value_of(own, key) for key in space.ranges)
    assert defaults_of(applied) == defaults_of(own)


def test_the_objective_ranks_every_unsolved_trial_after_every_solved_one() -> None:
    cap = 20.0
    solved = [objective_value(t, None, 475.0, cap) for t in (0.5, 10.0, 20.0)]
    unsolved = [objective_value(None, r, 475.0, cap) for r in (470.0, 300.0, 9.0, -1e9, None)]
    assert solved == [0.5, 10.0, 20.0]
    assert max(solved) < min(unsolved) and unsolved == sorted(unsolved), "closer to the target ranks first"
    assert objective_value(None, -150.0, -100.0, cap) < objective_value(None, -500.0, -100.0, cap)  # Acrobot


class FakeRuns:
    """Time-to-solve runs on a made-up clock: a higher lr solves faster; lr < 2e-4 never solves, and
    its evaluations (reported to the pruner) stay far below the target."""

    def __init__(self) -> None:
        self.now = 0.0
        self.allowed: list[float] = []
        self.pruned = 0

    def clock(self) -> float:
        return self.now

    def __call__(self, cfg: Any, allowed_s: float, on_evaluation: Any) -> Outcome:
        self.allowed.append(allowed_s)
        lr = cfg.algorithm["lr"]
        solve_s = 2.0 + 1e-3 / lr
        ret = None
        for k in range(1, 20):
            if k > solve_s or k > allowed_s:
                break
            step, ret = k * 1000, (10.0 if lr < 2e-4 else 60.0 * k / solve_s)
            if on_evaluation is not None and on_evaluation(step, ret):
                self.now += k
                self.pruned += 1
                return Outcome(None, ret, step, float(k), evaluations=k, pruned=True)
        if lr >= 2e-4 and solve_s <= allowed_s:
            self.now += solve_s
            return Outcome(solve_s, 60.0, int(solve_s * 1000), solve_s, evaluations=int(solve_s))
        self.now += allowed_s
        return Outcome(None, ret, 5000, allowed_s, cut=True)  # scored by its best evaluation


@pytest.mark.parametrize("search", ["tpe", "halving", "plain"])
def test_the_search_and_the_confirming_runs_keep_the_budget_and_find_a_faster_setting(search: str) -> None:
    cfg = _ppo()
    space = JointSpace(cfg, search_space(cfg, ["local"], cpus=2))
    runs = FakeRuns()
    state = SearchState(60.0, SolveBudget(0.0, 300.0, 3, clock=runs.clock))
    if search == "tpe":
        tpe_search(cfg, space, state, runs, 1000, state.trials.append)
    else:
        halving_search(cfg, space, state, runs, search == "plain", state.trials.append)
    assert state.trials[0].stage == "warm-up" and state.trials[0].setting == space.defaults
    assert runs.now <= state.budget.search_end - state.budget.start + 1e-9
    result = confirm(cfg, state, space.defaults, runs, state.trials.append)
    assert runs.now <= 300.0 + 1e-9, "the search and the confirming runs together keep the budget"
    assert max(runs.allowed) <= max(state.budget.cap_s, 300.0 * 0.6 / 2)  # the warm-up aside, each run is capped
    confirming = [t for t in state.trials if t.stage == "confirm"]
    assert [t.role for t in confirming] == ["defaults", "best"] * 3 and [t.seed for t in confirming][::2] == [1, 2, 3]
    assert result.challenger is not None and result.challenger.values()["algorithm.lr"] > 2.5e-4
    assert result.verdict == "gain" and result.gain is not None and result.gain > 1
    assert "faster than the defaults" in format_solve(state, space.defaults, result)


def test_tpe_prunes_a_trial_whose_evaluations_trail_and_never_picks_it() -> None:
    cfg = _ppo()
    space = JointSpace(cfg, search_space(cfg, ["local"], cpus=2))
    runs = FakeRuns()
    state = SearchState(60.0, SolveBudget(0.0, 600.0, 3, clock=runs.clock))
    tpe_search(cfg, space, state, runs, 1000, state.trials.append)
    pruned = [t for t in state.trials if t.outcome is not None and t.outcome.pruned]
    never = [t for t in state.trials if t.setting.values()["algorithm.lr"] < 2e-4]
    assert runs.pruned == len(pruned) > 0 and any(t in pruned for t in never)
    assert all(t.outcome is not None and (t.outcome.pruned or t.outcome.cut) for t in never), "none ran to its end"
    assert all(t.outcome is not None and t.outcome.wall_s < state.budget.cap_s for t in pruned), "each stopped early"
    assert state.best is not None and state.best.values()["algorithm.lr"] >= 2e-4


def test_a_real_trial_whose_evaluations_trail_the_finished_ones_is_pruned_and_stops() -> None:
    """A real PPO run on CartPole against a study whose one finished trial was at the target at every
    evaluation: the median pruner stops it at its first evaluation, cleanly, long before its budget."""
    cfg = resolve(_ppo("--target_return", "100000", "--total_env_steps", "200000"))
    study = optuna.create_study(direction="minimize", pruner=optuna.pruners.MedianPruner(n_startup_trials=1))
    study.add_trial(optuna.trial.create_trial(value=1.0, intermediate_values={s: 0.0 for s in range(1000, 200001, 1000)}))
    trial = study.ask()
    reported: list[int] = []

    def on_evaluation(steps: int, mean_return: float) -> bool:
        reported.append(steps)
        trial.report(100000 - mean_return, steps // cfg.runtime.eval_interval_steps * cfg.runtime.eval_interval_steps)
        return bool(trial.should_prune())

    outcome = run_solving_trial(cfg, 120.0, on_evaluation)
    assert outcome.pruned and not outcome.cut and outcome.solved_at_s is None
    assert len(reported) == 1 and outcome.env_steps < 200_000, "stopped at its first evaluation"
    assert outcome.best_return is not None and outcome.value(100000.0, 10.0) > 10.0


def test_best_yaml_holds_the_best_only_where_it_won_the_confirming_runs(tmp_path: Path) -> None:
    cfg = _ppo()
    space = JointSpace(cfg, [])
    fast = Setting((("algorithm.lr", 1e-3),), space.defaults.knobs)
    won = Confirmation(fast, {"best": [2.0, 2.5, 3.0], "defaults": [5.0, 6.0, math.inf]}, "gain")
    loaded = resolve(from_dict(yaml.safe_load(write_best(tmp_path, cfg, space.defaults, won).read_text())))
    assert loaded.algorithm["lr"] == 1e-3
    text = (tmp_path / "best.yaml").read_text()
    assert "2.40x" in text and "solved 3/3, median 2.5 s" in text and "solved 2/3, median 6.0 s" in text
    never = Confirmation(fast, {"best": [2.0, 2.5, 3.0], "defaults": [math.inf] * 3}, "gain")
    loaded = resolve(from_dict(yaml.safe_load(write_best(tmp_path, cfg, space.defaults, never).read_text())))
    assert loaded.algorithm["lr"] == 1e-3 and "the defaults' median run did not solve" in (tmp_path / "best.yaml").read_text()
    close = Confirmation(fast, {"best": [2.0, 5.5, 3.0], "defaults": [5.0, 6.0, 4.0]}, "within_spread")
    loaded = resolve(from_dict(yaml.safe_load(write_best(tmp_path, cfg, space.defaults, close).read_text())))
    assert loaded.algorithm["lr"] == 2.5e-4 and "within each other's spread" in (tmp_path / "best.yaml").read_text()
    assert set(VERDICTS) >= {"gain", "within_spread", "lost", "not_measured", "defaults"}


def test_a_time_to_solve_tune_on_cartpole_keeps_its_budget_and_writes_a_best_yaml_train_loads(tmp_path: Path) -> None:
    out, budget = tmp_path / "t", 40.0
    start = time.monotonic()
    assert main(["tune", "--objective", "time_to_solve", "--algo", "ppo", "--env", "CartPole-v1", "--target_return", "60",
                 "--total_env_steps", "20000", "--budget_s", str(budget), "--confirm_seeds", "1", "--backends", "local",
                 "--out", str(out)]) == 0
    assert time.monotonic() - start < budget + 30, "within its budget, but for the last run's shutdown"
    data = json.loads((out / "tune.json").read_text())
    assert data["status"] == "finished" and data["objective"] == "time_to_solve" and data["target_return"] == 60.0
    assert data["verdict"] in VERDICTS and data["elapsed_s"] <= budget + 15
    searched = [t for t in data["trials"] if t["stage"] == "search"]
    assert searched and all(t["value"] is not None or t["error"] for t in searched), "every run scored or failed"
    assert any(t.get("solved_at_s") is not None for t in data["trials"]), "a return of 60 is solved in seconds"
    assert {t["role"] for t in data["trials"] if t["stage"] == "confirm"} <= {"best", "defaults"}
    best = out / "best.yaml"
    assert best.read_text().startswith("# written by janus tune --objective time_to_solve")
    train = config_from_args(build_parser().parse_args(["train", "--config", str(best)]))
    assert resolve(train).runtime.target_return == 60.0 and train.workload.algo == "ppo"


@pytest.mark.parametrize(("flags", "says"), [
    (["--objective", "time_to_solve"], "needs --target_return"),
    (["--objective", "time_to_solve", "--target_return", "60", "--confirm_seeds", "0"], "--confirm_seeds"),
    (["--target_return", "60"], "--target_return is for --objective time_to_solve"),
    (["--search", "tpe"], "--search"),
])
def test_bad_time_to_solve_flags_are_refused_before_anything_runs(flags: list[str], says: str, tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out"
    assert main(["tune", "--algo", "ppo", "--env", "CartPole-v1", "--out", str(out), *flags]) == 2
    assert says in capsys.readouterr().err and not out.exists()


def test_an_algorithm_without_a_policy_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["tune", "--objective", "time_to_solve", "--quick", "--out", str(tmp_path / "o"),
                 "--config", str(Path(__file__).resolve().parents[2] / "configs" / "default.yaml")]) == 2
    assert "has none to evaluate" in capsys.readouterr().err


def test_without_optuna_the_error_names_the_extra_to_install(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    real_import = builtins.__import__

    def no_optuna(name: str, *args: Any, **kwargs: Any) -> Any:
        if name == "optuna" or name.startswith("optuna."):
            raise ImportError("No module named 'optuna'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_optuna)
    with pytest.raises(Exception, match=r"pip install 'janus-rl\[tune\]'"):
        require_optuna()
    out = tmp_path / "out"
    assert main(["tune", "--objective", "time_to_solve", "--target_return", "60", "--algo", "ppo", "--env", "CartPole-v1",
                 "--out", str(out)]) == 2
    assert "pip install 'janus-rl[tune]'" in capsys.readouterr().err and not out.exists()
