"""Tests for janus.harness.reports.table on hand-made run dicts (no runner needed)."""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

import pytest

from janus.harness.reports.table import annotate, default_out_dir, format_table, ideal_bound, write_results


def make_run(name: str, sps: float, wall: float, stages: tuple[float, ...], **knobs: Any) -> dict[str, Any]:
    """A run dict in the runner's schema; ``stages`` = (rollout, collect, select, update, wait, blocked)."""
    config = {"name": name, "placement": "cpu_pageable", "overlap_collect": 0, "overlap_select": 0,
              "g_collect": 1.0, "g_select": 1.0, "is_on_policy": False, "batch_size": 256,
              "workload": {"num_actors": 2}, "synthetic": {"obs_shape": [64]}}
    config.update(knobs)
    keys = ("rollout", "collect", "select", "update", "learner_wait", "actor_blocked")
    return {"name": name, "config": config, "samples_per_s": sps, "env_steps_per_s": sps / 2,
            "wall_s": wall, "stage_s": dict(zip(keys, stages)), "counts": {"updates": 100}}


@pytest.fixture
def runs() -> list[dict[str, Any]]:
    return [
        make_run("baseline", 1000.0, 10.0, (4.0, 2.0, 1.0, 3.0, 0.5, 0.25)),
        make_run("overlap_collect", 1500.0, 7.0, (4.0, 2.0, 1.0, 3.0, 0.5, 0.25), overlap_collect=1),
        make_run("janus", 2000.0, 5.0, (4.0, 2.0, 1.0, 3.0, 0.5, 0.25), overlap_collect=1, overlap_select=1),
    ]


def test_ideal_bound_hand_computed() -> None:
    # R=4, C=2, S=1, U=3: serial 10, bound 4 (rollout), ideal 2.5x; wall 5: achieved 2x, efficiency 0.8.
    ideal = ideal_bound(make_run("janus", 2000.0, 5.0, (4.0, 2.0, 1.0, 3.0, 9.0, 9.0)))
    assert ideal["serial_s"] == pytest.approx(10.0)  # waiting times are not part of the sum
    assert ideal["bound_s"] == pytest.approx(4.0)
    assert ideal["bottleneck"] == "rollout"
    assert ideal["ideal_speedup"] == pytest.approx(2.5)
    assert ideal["achieved_speedup"] == pytest.approx(2.0)
    assert ideal["efficiency"] == pytest.approx(0.8)
    assert ideal["efficiency"] == pytest.approx(ideal["achieved_speedup"] / ideal["ideal_speedup"])


def test_ideal_bound_guards_zero_divisions() -> None:
    ideal = ideal_bound(make_run("empty", 0.0, 0.0, (0.0, 0.0, 0.0, 0.0, 0.0, 0.0)))
    assert ideal["serial_s"] == 0.0 and ideal["bound_s"] == 0.0
    assert ideal["ideal_speedup"] is None and ideal["achieved_speedup"] is None
    assert ideal["efficiency"] is None and ideal["bottleneck"] is None


@pytest.mark.parametrize("extra", [0.0, 0.01, 1.0, 100.0])
def test_efficiency_at_most_one_when_wall_exceeds_bound(extra: float) -> None:
    stages = (1.5, 3.25, 0.5, 2.0, 0.0, 0.0)
    ideal = ideal_bound(make_run("r", 1.0, 3.25 + extra, stages))
    assert 0.0 < ideal["efficiency"] <= 1.0
    assert ideal["achieved_speedup"] <= ideal["ideal_speedup"] + 1e-12


def test_speedup_vs_baseline(runs: list[dict[str, Any]]) -> None:
    out = {r["name"]: r for r in annotate(runs)}
    assert out["baseline"]["speedup_vs_baseline"] == pytest.approx(1.0)
    assert out["overlap_collect"]["speedup_vs_baseline"] == pytest.approx(1.5)
    assert out["janus"]["speedup_vs_baseline"] == pytest.approx(2.0)
    assert out["janus"]["ideal"]["efficiency"] == pytest.approx(0.8)
    assert "ideal" not in runs[0], "annotate must not mutate its input"


def test_speedup_without_baseline_is_none(runs: list[dict[str, Any]]) -> None:
    out = annotate(runs[1:])
    assert all(r["speedup_vs_baseline"] is None for r in out)
    assert annotate(runs, baseline="janus")[0]["speedup_vs_baseline"] == pytest.approx(0.5)


def test_table_has_every_run_and_header(runs: list[dict[str, Any]]) -> None:
    table = format_table(runs)
    lines = table.splitlines()
    for header in ("config", "samples/s", "env-steps/s", "wall", "rollout", "collect", "select",
                   "update", "l.wait", "blocked", "speedup", "ideal", "eff"):
        assert header in lines[0]
    for run in runs:
        assert sum(line.startswith(run["name"] + " ") for line in lines) == 1
    janus_row = next(line for line in lines if line.startswith("janus "))
    assert "2.00x" in janus_row and "2.50x" in janus_row and "80%" in janus_row
    assert max(map(len, lines)) <= 120


def test_table_says_why_a_speedup_beats_its_ideal(runs: list[dict[str, Any]]) -> None:
    assert "above its ideal" not in format_table(runs)  # none does here
    slow = [dict(r) for r in runs]
    slow[0] = {**slow[0], "wall_s": 4 * slow[0]["wall_s"], "samples_per_s": slow[0]["samples_per_s"] / 4}
    serial = sum(slow[0]["stage_s"][s] for s in ("rollout", "collect", "select", "update"))
    table = format_table(slow)
    assert "8.00x" in next(line for line in table.splitlines() if line.startswith("janus "))  # ideal 2.50x
    outside = 1 - serial / slow[0]["wall_s"]
    assert f"a speedup above its ideal: 'baseline' spent {outside:.0%} of its wall outside the four stages" in table


def test_a_baseline_that_overlaps_its_stages_gets_no_negative_share_outside_them() -> None:
    """An eval sweep whose baseline runs with overlap on: its stage times add up to more than its
    wall, and the note said it "spent -10% of its wall outside the four stages"."""
    base = make_run("g=1", 1000.0, 1.0, (0.5, 0.2, 0.1, 0.5, 0.0, 0.0))  # 1.3 s of stages in 1.0 s
    fast = make_run("g=8", 3000.0, 1.0, (0.5, 0.1, 0.1, 0.5, 0.0, 0.0))  # 3.00x against an ideal of 2.40x
    table = format_table([base, fast], baseline="g=1")
    note = next(line for line in table.splitlines() if line.startswith("a speedup above its ideal"))
    assert "-" not in note.split("'g=1'")[1], note
    assert "'g=1' overlapped its stages (their times add up to 130% of its wall)" in note


def test_write_results_files(tmp_path: Path, runs: list[dict[str, Any]]) -> None:
    out = tmp_path / "nested" / "out"
    skipped = [{"name": "cuda", "reason": "CUDA is not available", "extra": 1}]
    paths = write_results(out, "compare", runs, skipped=skipped, meta={"note": "test"})
    assert set(paths) == {"json", "csv", "chart"}
    assert sorted(p.name for p in out.iterdir()) == ["chart.png", "results.csv", "results.json"]
    assert all(p.parent == out for p in paths.values())

    doc = json.loads(paths["json"].read_text())
    assert doc["command"] == "compare" and doc["created"]
    assert doc["meta"]["note"] == "test" and "torch" in doc["meta"] and "janus" in doc["meta"]
    assert doc["skipped"] == [{"name": "cuda", "reason": "CUDA is not available"}]
    assert [r["name"] for r in doc["runs"]] == ["baseline", "overlap_collect", "janus"]
    for run, orig in zip(doc["runs"], runs):
        assert run["config"] == orig["config"]
        assert run["samples_per_s"] == orig["samples_per_s"]
        assert run["stage_s"] == orig["stage_s"]
    assert doc["runs"][2]["speedup_vs_baseline"] == pytest.approx(2.0)
    assert doc["runs"][2]["ideal"]["ideal_speedup"] == pytest.approx(2.5)

    with paths["csv"].open(newline="") as fh:
        rows = list(csv.reader(fh))
    header, body = rows[0], rows[1:]
    assert len(body) == len(runs)
    for col in ("name", "placement", "overlap_collect", "overlap_select", "g_collect", "g_select",
                "is_on_policy", "batch_size", "samples_per_s", "env_steps_per_s", "wall_s",
                "rollout_s", "collect_s", "select_s", "update_s", "learner_wait_s", "actor_blocked_s",
                "speedup_vs_baseline", "ideal_speedup", "efficiency"):
        assert col in header
    janus = dict(zip(header, body[2]))
    assert janus["name"] == "janus" and janus["overlap_select"] == "1"
    assert float(janus["efficiency"]) == pytest.approx(0.8)

    png = paths["chart"].read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    assert len(png) > 10_000


def test_write_results_json_is_strict(tmp_path: Path) -> None:
    run = make_run("baseline", float("nan"), 1.0, (1.0, 0.0, 0.0, 0.0, 0.0, 0.0))
    run["config"]["synthetic"]["obs_shape"] = (4, 84, 84)
    paths = write_results(tmp_path, "compare", [run])
    doc = json.loads(paths["json"].read_text(), parse_constant=lambda c: pytest.fail(f"non-JSON {c}"))
    assert doc["runs"][0]["samples_per_s"] is None
    assert doc["runs"][0]["config"]["synthetic"]["obs_shape"] == [4, 84, 84]


def test_default_out_dir_is_unique(tmp_path: Path) -> None:
    first = default_out_dir("compare", root=tmp_path)
    assert first.parent == tmp_path and first.name.startswith("compare-")
    assert len(first.name) == len("compare-YYYYmmdd-HHMMSS")
    assert not first.exists(), "default_out_dir must not create the directory"
    first.mkdir()
    second = default_out_dir("compare", root=tmp_path)
    assert second != first and not second.exists()


def test_progress_rates_count_from_where_a_resumed_run_started() -> None:
    import io

    from janus.harness.reports.progress import ProgressLine
    from janus.runtime.summary import rl_note

    line = ProgressLine("train", stream=io.StringIO())
    line.start -= 4.0  # four seconds of start-up (spawning workers) before the first report
    line(9_000, 10_000)  # a resumed run starts at 9,000 of 10,000 updates
    assert line.first_at is not None
    text = line._text(9_100, 10_000, line.first_at + 10.0)  # ten seconds later, 100 more updates
    assert "10.0 updates/s" in text and "14.0s" in text, text
    assert rl_note([(0.0, 20_000, 1.0), (5.0, 21_000, 2.0)]) == "return 1.5" and rl_note([]) == ""


def test_progress_in_a_log_is_written_at_least_every_log_interval() -> None:
    """Not on a terminal a line came only every quarter of the work: hours of silence in the log
    of a long batch job."""
    import io

    from janus.harness.reports.progress import ProgressLine

    stream = io.StringIO()
    line = ProgressLine("train", stream=stream, log_interval=60.0)
    line(10, 1_000)
    assert stream.getvalue() == ""  # 1%, a moment after the start
    line._last_line -= 61.0  # a minute without a line
    line(20, 1_000)
    assert stream.getvalue().count("\n") == 1 and "20/1000" in stream.getvalue()
    line(30, 1_000)
    assert stream.getvalue().count("\n") == 1  # just written
    line(250, 1_000)
    assert stream.getvalue().count("\n") == 2 and "250/1000" in stream.getvalue()  # the quarter, as before


def test_a_finished_count_is_logged_once_while_the_run_winds_down() -> None:
    """The env steps can be all done while the learner still updates: the log said 100% at every poll."""
    import io

    from janus.harness.reports.progress import EnvStepProgress

    stream = io.StringIO()
    line = EnvStepProgress("train", stream=stream, log_interval=60.0)
    line(500, 1_000)
    for _ in range(5):
        line(1_000, 1_000)
    line._last_line -= 61.0
    line(1_000, 1_000)
    assert stream.getvalue().count("1,000/1,000") == 1 and stream.getvalue().count("\n") == 2


# ---------------------------------------------------------------- RL runs (issue 12 items 6, 10)
def make_rl_run(returns: list[float]) -> dict[str, Any]:
    """An RL run dict: ``returns`` one episode each, 100 env steps apart."""
    from janus.config import from_dict
    from janus.result import reported_config

    config = reported_config(from_dict({"is_on_policy": True, "workload": {"algo": "ppo"}}))
    run = make_run("train", 1000.0, 10.0, (4.0, 2.0, 1.0, 3.0, 0.5, 0.25))
    run["config"] = {**config, "name": "train"}
    run["learning_curve"] = {"env_steps": [100 * (i + 1) for i in range(len(returns))],
                             "wall_s": [0.1 * (i + 1) for i in range(len(returns))], "return": returns}
    run["episodes"] = len(returns)
    run["final_mean_return"] = sum(returns[-20:]) / len(returns[-20:])
    return run


def test_rl_results_leave_out_the_synthetic_workload_fields() -> None:
    from janus.config import GYM_ONLY, SYNTHETIC_ONLY, RunConfig, from_dict
    from janus.result import reported_config

    def workload_fields(paths: tuple[str, ...]) -> set[str]:
        return {p.partition(".")[2] for p in paths if p.startswith("workload.")}

    full = RunConfig().to_dict()
    synthetic = reported_config(RunConfig())["workload"]
    rl_config = reported_config(from_dict({"workload": {"algo": "dqn"}}))
    rl = rl_config["workload"]
    assert not workload_fields(SYNTHETIC_ONLY) & set(rl) and {"algo", "env", "total_env_steps", "num_actors"} <= set(rl)
    assert "synthetic" not in rl_config  # the synthetic workload's own section
    assert not workload_fields(GYM_ONLY) & set(synthetic) and {"iterations"} <= set(synthetic)
    assert {"obs_shape", "env_step_ms"} <= set(reported_config(RunConfig())["synthetic"])
    assert full["synthetic"]["obs_shape"] == [1024]  # RunConfig.to_dict keeps every field (config.yaml does not)


def test_results_csv_has_return_columns_for_rl_runs(tmp_path: Path, runs: list[dict[str, Any]]) -> None:
    returns = [float(i % 7) for i in range(30)] + [100.0]
    paths = write_results(tmp_path, "train", [make_rl_run(returns), runs[0]], baseline="train")
    with paths["csv"].open(newline="") as fh:
        rl, synthetic = list(csv.DictReader(fh))
    assert rl["algo"] == "ppo" and rl["env"] == "CartPole-v1" and rl["episodes"] == "31" and rl["env_steps"] == "3100"
    assert float(rl["final_mean_return"]) == pytest.approx(sum(returns[-20:]) / 20)
    assert float(rl["best_return"]) == 100.0
    best_window = max(sum(returns[i - 19:i + 1]) / 20 for i in range(19, len(returns)))
    assert float(rl["best_mean_return"]) == pytest.approx(max(best_window, *[sum(returns[:i + 1]) / (i + 1) for i in range(19)]))
    assert synthetic["episodes"] == synthetic["final_mean_return"] == synthetic["best_return"] == ""
    (doc_run, _) = json.loads(paths["json"].read_text())["runs"]
    assert "synthetic" not in doc_run["config"] and "iterations" not in doc_run["config"]["workload"]


def test_learning_curve_names_its_moving_mean_and_axes(tmp_path: Path, runs: list[dict[str, Any]],
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    from janus import fileio
    from janus.harness.reports.curves import write_learning_curve

    assert write_learning_curve(tmp_path / "none.png", runs) is None and not (tmp_path / "none.png").exists()
    figures: list[Any] = []
    save = fileio.save_figure
    monkeypatch.setattr(fileio, "save_figure", lambda fig, path, **kw: (figures.append(fig), save(fig, path, **kw)))
    path = write_learning_curve(tmp_path / "curve.png", [make_rl_run([float(i) for i in range(50)])])
    assert path is not None and path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    by_steps, by_time = figures[0].axes
    for ax, xlabel in ((by_steps, "environment steps"), (by_time, "wall time (s)")):
        assert "20-episode moving mean" in ax.get_title()
        assert ax.get_xlabel() == xlabel and ax.get_ylabel() == "episode return"
        labels = [t.get_text() for t in ax.get_legend().get_texts()]
        assert "each episode" in labels and any("mean of last 20" in t for t in labels)
        (line,) = ax.get_lines()
        assert list(line.get_ydata())[-1] == pytest.approx(sum(range(30, 50)) / 20)


def test_runtime_summary_names_counts_payload_and_stalls() -> None:
    from janus.harness.outputs import runtime_summary

    rt = {"backend": "local", "stalls": 2, "param_versions_published": 7, "param_fetches_per_node": {"proxy-0": 3},
          "worker_restarts": {"worker-0": 1, "worker-1": 0},
          "messages": {"InsertTransitionMsg": {"messages": 4, "bytes": 2_500_000}, "dropped": 0}}
    text = runtime_summary(rt)
    assert "runtime (local)" in text
    assert "InsertTransitionMsg: 4 (2.5 MB payload)" in text
    assert "dropped" not in text  # a count, not a message type
    assert "parameter versions published: 7; fetches per node: proxy-0=3" in text
    assert "worker restarts: 1; stalls: 2" in text
    assert "could not be written" not in text  # a clean run: no line about it
    rt["pacing"] = {"pieces_dropped_at_stop": 2}
    assert "2 pieces that reached the replay at the stop could not be written" in runtime_summary(rt)


def test_each_runtime_summary_of_a_compare_names_its_run(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """compare and eval print one summary per configuration: they were four unnamed 'runtime (local)' blocks."""
    from janus.config.request import RunRequest
    from janus.harness.outputs import write_outputs

    rt = {"backend": "local", "stalls": 0, "param_versions_published": 1, "param_fetches_per_node": {},
          "worker_restarts": {}, "messages": {}}
    both = [{**make_run(name, 1000.0 * (i + 1), 10.0 / (i + 1), (4.0, 2.0, 1.0, 3.0, 0.5, 0.25)), "runtime": rt}
            for i, name in enumerate(("baseline", "overlap"))]
    write_outputs(RunRequest(command="compare"), "compare", tmp_path, both, [], "baseline")
    out = capsys.readouterr().out
    assert "runtime of baseline (local): messages" in out and "runtime of overlap (local): messages" in out
    assert out.index("runtime of baseline") < out.index("runtime of overlap")


def with_work(run: dict[str, Any], env_steps: int, updates: int) -> dict[str, Any]:
    return {**run, "counts": {"env_steps": env_steps, "updates": updates}}


def test_table_says_the_work_every_configuration_did(runs: list[dict[str, Any]]) -> None:
    assert "work:" not in format_table(runs)  # results that count no env steps: nothing to say
    same = [with_work(r, 153_600, 1_200) for r in runs]
    assert "work: every configuration took 153,600 env steps and trained 1,200 updates" in format_table(same)
    assert "NOT" not in format_table(same)


def test_table_warns_loudly_when_the_work_differs(runs: list[dict[str, Any]]) -> None:
    unequal = [with_work(runs[0], 153_600, 1_200), with_work(runs[1], 107_008, 1_200), with_work(runs[2], 153_600, 1_100)]
    note = format_table(unequal).splitlines()[-1]
    assert note.startswith("WARNING: the configurations did NOT do the same work")
    for part in ("baseline 153,600 env steps, 1,200 updates", "overlap_collect 107,008 env steps, 1,200 updates",
                 "janus 153,600 env steps, 1,100 updates"):
        assert part in note


def test_a_synchronous_baseline_beaten_past_ideal_names_its_actors_taking_turns(runs: list[dict[str, Any]]) -> None:
    base = {**runs[0], "runtime": {"loop": "synchronous"}}  # stages 10 s of its 10 s wall
    fast = {**runs[2], "samples_per_s": 4000.0}  # 4.00x against an ideal of 2.50x
    note = next(line for line in format_table([base, fast]).splitlines() if line.startswith("a speedup above its ideal"))
    assert "'baseline' ran the synchronous loop, its 2 actors taking turns" in note
