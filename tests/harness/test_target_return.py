"""``--target_return`` / ``janus.train(target_return=)``: real CartPole runs stop at the first evaluation
that reaches the target and record when (``solved_at_*``); the rest of the run's life around it."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest

import janus
from janus.config import RunConfig, from_dict, target_eval_interval, validate
from janus.errors import ConfigError, RunFolderError
from janus.harness.reports.train import solved_line
from janus.harness.resume_checks import check_target
from janus.harness.seeds.aggregate import format_table, time_to_solve
from janus.runtime import command_clock

BUDGET = 60_000
TARGET = 45.0  # a random CartPole policy scores ~22; PPO passes 45 within a few rollouts


def results(out: Path) -> dict:
    return json.loads((out / "results.json").read_text())["runs"][0]


@pytest.mark.parametrize("backend", ["local", "process"])
def test_a_run_stops_at_the_first_evaluation_that_reaches_the_target(tmp_path: Path, backend: str) -> None:
    before = time.time()
    run = janus.train("ppo", env="CartPole-v1", total_env_steps=BUDGET, target_return=TARGET, eval_interval_steps=2048,
                      out=tmp_path / "run", seed=0, backend=backend)
    took = time.time() - before
    r = run.result
    assert r.status == "finished" and r.solved is True and r.target_return == TARGET
    evaluations = r.evaluations or []
    first = next(e for e in evaluations if e["mean_return"] >= TARGET)
    assert all(e["mean_return"] < TARGET for e in evaluations if e["env_steps"] < first["env_steps"])
    assert r.solved_at_env_steps == first["env_steps"]
    assert r.solved_at_train_s == pytest.approx(first["wall_s"])
    assert r.counts["env_steps"] < BUDGET  # stopped early, not at the budget
    # from the call: start-up counts, so it is past the run's own clock, and within the call's time
    assert r.solved_at_train_s < r.solved_at_s < took
    assert r.stop_reason.startswith("target return reached") and f"{first['env_steps']:,} env steps" in r.stop_reason
    on_disk = results(run.out)
    for key in ("target_return", "solved", "solved_at_s", "solved_at_env_steps", "solved_at_train_s"):
        assert on_disk[key] == getattr(r, key)
    assert on_disk["config"]["runtime"]["target_return"] == TARGET


def test_a_target_never_reached_runs_the_budget_and_says_so(tmp_path: Path) -> None:
    run = janus.train("ppo", env="CartPole-v1", total_env_steps=4096, target_return=10_000, eval_interval_steps=2048,
                      out=tmp_path / "run", seed=0)
    r = run.result
    assert r.solved is False and r.solved_at_s is None and r.solved_at_env_steps is None
    assert r.stop_reason.startswith("budget reached")
    assert len(r.evaluations or []) >= 1
    on_disk = results(run.out)
    assert on_disk["solved"] is False and "solved_at_s" not in on_disk
    assert solved_line(on_disk).startswith("not solved: no evaluation reached the target return 10000 (the best ")


def test_the_command_prints_the_solved_line_and_times_from_the_process_start(tmp_path: Path) -> None:
    started = time.time()
    proc = subprocess.run([sys.executable, "-m", "janus", "train", "--algo", "ppo", "--env", "CartPole-v1",
                           "--total_env_steps", str(BUDGET), "--target_return", str(TARGET), "--out", str(tmp_path / "run"),
                           "--eval_interval_steps", "2048"],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    line = next(x for x in proc.stdout.splitlines() if x.startswith("janus: train: solved: mean return"))
    r = results(tmp_path / "run")
    assert f"at {r['solved_at_env_steps']:,} env steps, {r['solved_at_s']:.1f} s after the command" in line
    # the interpreter's start and the imports count: more than the run's own clock, less than the command's time
    assert r["solved_at_train_s"] < r["solved_at_s"] < time.time() - started


def test_with_a_target_and_no_interval_the_run_evaluates_on_its_own() -> None:
    cfg = validate(from_dict({"workload": {"algo": "ppo", "env": "CartPole-v1", "total_env_steps": 200_000},
                              "runtime": {"target_return": 475}}))
    assert cfg.runtime.eval_interval_steps == target_eval_interval(200_000) == 4_000
    assert isinstance(cfg.runtime.target_return, float)
    given = validate(from_dict({"workload": {"algo": "ppo", "env": "CartPole-v1"},
                                "runtime": {"target_return": 475, "eval_interval_steps": 7_000}}))
    assert given.runtime.eval_interval_steps == 7_000
    assert target_eval_interval(10_000) == 1_000  # never more often than every 1,000 env steps
    plain = validate(from_dict({"workload": {"algo": "ppo", "env": "CartPole-v1"}}))
    assert plain.runtime.eval_interval_steps == 0 and plain.runtime.target_return is None


@pytest.mark.parametrize("value", [float("nan"), float("inf"), "high", True])
def test_a_target_that_is_no_finite_number_is_refused(value: object) -> None:
    with pytest.raises(ConfigError, match="target_return"):
        validate(from_dict({"workload": {"algo": "ppo", "env": "CartPole-v1"}, "runtime": {"target_return": value}}))


def test_a_target_for_an_algorithm_without_a_policy_is_refused() -> None:
    with pytest.raises(ConfigError, match="no policy to evaluate"):
        validate(from_dict({"workload": {"algo": "synthetic"}, "runtime": {"target_return": 1.0}}))


def test_the_keyword_takes_numbers_only(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="target_return"):
        janus.train("ppo", env="CartPole-v1", target_return="475", out=tmp_path / "run")


def test_a_resume_past_a_reached_target_is_refused(tmp_path: Path) -> None:
    cfg = replace(RunConfig(), runtime=replace(RunConfig().runtime, target_return=100.0))
    state = {"trained": 5, "env_steps": 8192, "evaluations": [{"env_steps": 4096, "mean_return": 50.0},
                                                              {"env_steps": 8192, "mean_return": 120.0}]}
    with pytest.raises(RunFolderError, match=r"already reached its target: the evaluation at 8,192 env steps"):
        check_target(tmp_path, cfg, state)
    check_target(tmp_path, replace(cfg, runtime=replace(cfg.runtime, target_return=200.0)), state)  # higher: trains on
    check_target(tmp_path, RunConfig(), state)  # no target: trains on


def test_seeds_aggregate_the_time_to_solve() -> None:
    records = [{"seed": s, "status": "finished", "target_return": 475.0, "solved": s < 3,
                "solved_at_s": 10.0 + s if s < 3 else None, "solved_at_env_steps": 1000 * (s + 1) if s < 3 else None}
               for s in range(4)]
    tts = time_to_solve(records)
    assert tts is not None and tts["solved"] == 3 and tts["seeds"] == 4
    assert tts["seconds_q25_median_q75"] == [10.5, 11.0, 11.5]
    assert tts["env_steps_q25_median_q75"][1] == 2000
    table = format_table({"per_seed": records, "final_return": None, "time_to_solve": tts})
    assert "target return 475: solved by 3 of 4 seeds; median 11.0 s after the command (IQR 10.5-11.5)" in table
    assert time_to_solve([{"seed": 0, "status": "finished"}]) is None


def test_the_command_clock_is_the_process_start_unless_a_call_marks_its_own() -> None:
    start = command_clock.process_start()
    assert start is not None and start <= time.time()  # this test's process started before this line
    assert command_clock.command_start() == start
    with command_clock.command_started_here(at=123.0):
        assert command_clock.command_start() == 123.0
        with command_clock.command_started_here() as inner:
            assert inner > start and command_clock.seconds_since_command() < 5
        assert command_clock.command_start() == 123.0
    assert command_clock.command_start() == start
