"""RunResult: the one result type, serialised to results.json by one function."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from janus.harness.reports.table import annotate, write_results
from janus.result import RunResult, as_dict, env_steps_rate


def result(**kw) -> RunResult:
    base = dict(name="r", config={"placement": "cpu_pageable", "workload": {"algo": "synthetic"}}, samples_per_s=10.0,
                env_steps_per_s=5.0, wall_s=2.0,
                stage_s={"rollout": 1.0, "collect": 0.5, "select": 0.25, "update": 1.5, "learner_wait": 0.1, "actor_blocked": 0.0},
                counts={"updates": 4}, runtime={"learner_utilization": 0.75, "learner_wait_s": 0.1})
    return RunResult(**{**base, **kw})


def test_to_dict_leaves_out_what_a_run_did_not_measure() -> None:
    synthetic = result()
    assert "learning_curve" not in synthetic.to_dict() and "final_mean_return" not in synthetic
    rl = result(learning_curve={"env_steps": [8], "wall_s": [0.1], "return": [9.0]}, episodes=1, final_mean_return=9.0)
    assert rl.to_dict()["final_mean_return"] == 9.0 and rl["learning_curve"]["return"] == [9.0]


def test_reads_like_the_results_json_dict() -> None:
    r = result()
    assert r["counts"]["updates"] == 4 and r.get("episodes", 0) == 0 and "runtime" in r
    with pytest.raises(KeyError):
        r["final_mean_return"]
    assert as_dict(r) == r.to_dict() and as_dict({"name": "x"}) == {"name": "x"}


def test_results_json_holds_the_runtime_figures(tmp_path: Path) -> None:
    write_results(tmp_path, "janus compare", [result(name="baseline")], baseline="baseline")
    run = json.loads((tmp_path / "results.json").read_text())["runs"][0]
    assert run["runtime"] == {"learner_utilization": 0.75, "learner_wait_s": 0.1}
    assert run["ideal"]["bound_s"] == 1.5 and run["speedup_vs_baseline"] == 1.0
    assert annotate([result(name="baseline")])[0] == annotate([result(name="baseline").to_dict()])[0]


def test_a_result_written_before_the_rename_reads_its_rate_as_env_steps_per_s(tmp_path: Path) -> None:
    """results.json said ``actor_steps_per_s`` before it said ``env_steps_per_s``: both read as one rate."""
    old = {k: v for k, v in result().to_dict().items() if k != "env_steps_per_s"}
    old["actor_steps_per_s"] = 7.0
    assert RunResult.from_dict(old).env_steps_per_s == 7.0
    assert env_steps_rate(old) == 7.0 and env_steps_rate(result()) == 5.0
    write_results(tmp_path, "janus compare", [old], baseline="r")
    assert "7.0" in (tmp_path / "results.csv").read_text().splitlines()[1].split(",")
