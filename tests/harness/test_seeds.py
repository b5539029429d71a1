"""janus train --seeds: the statistics (pure), the aggregate of seed folders, the flag's errors, and a
real two-seed CartPole run in subprocesses."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

import janus
from janus.cli import configured, main, parse_args, request_from_args
from janus.harness.seeds import statistics as stats
from janus.harness.seeds.aggregate import write_aggregate
from janus.harness.seeds.runs import cpus_per_run, schedule, seed_request

CARTPOLE = ["--algo", "dqn", "--env", "CartPole-v1", "--backend", "local"]


# ---- the statistics --------------------------------------------------------------------------------
def test_iqm_is_the_mean_of_the_middle_half() -> None:
    assert stats.iqm([8, 1, 7, 2, 6, 3, 5, 4]) == pytest.approx(np.mean([3, 4, 5, 6]))
    assert stats.iqm([1, 2, 3, 4, 1000]) == pytest.approx(3.0)  # one cut from each end of five; the outlier goes
    assert stats.iqm([2.0, 4.0]) == pytest.approx(3.0)  # too few to cut: the mean
    with pytest.raises(ValueError, match="no values"):
        stats.iqm([])


def test_bootstrap_ci_contains_the_estimate_and_narrows_with_more_samples() -> None:
    rng = np.random.default_rng(1)
    widths = []
    for n in (10, 1000):
        x = rng.normal(100.0, 15.0, size=n)
        for name, statistic in stats.STATISTICS.items():
            low, high = stats.bootstrap_ci(x, statistic)
            assert low <= statistic(x) <= high, name
            if name == "mean":
                widths.append(high - low)
    assert widths[1] < widths[0] / 3  # ~ 1/sqrt(n): 10x narrower for 100x the samples
    assert stats.bootstrap_ci([5.0], np.mean) == (5.0, 5.0)


def test_bootstrap_ci_is_reproducible_and_checks_its_confidence() -> None:
    x = [3.0, 9.0, 4.0, 7.0, 1.0]
    assert stats.bootstrap_ci(x, stats.iqm) == stats.bootstrap_ci(x, stats.iqm)  # the fixed RNG seed
    assert stats.bootstrap_ci(x, stats.iqm) != stats.bootstrap_ci(x, stats.iqm, seed=7)
    with pytest.raises(ValueError, match="confidence"):
        stats.bootstrap_ci(x, np.mean, confidence=95)


def test_curves_on_grid_interpolates_onto_the_range_every_curve_covers() -> None:
    a = ([0, 10, 20, 30], [0.0, 10.0, 20.0, 30.0])  # return = steps
    b = ([5, 25, 40], [10.0, 50.0, 80.0])  # return = 2 * steps
    grid, rows = stats.curves_on_grid([a, b], points=5)
    assert grid.tolist() == [5.0, 11.25, 17.5, 23.75, 30.0]  # from the latest first point to the earliest last one
    np.testing.assert_allclose(rows[0], grid)
    np.testing.assert_allclose(rows[1], 2 * grid)
    with pytest.raises(ValueError, match="no env-step range"):
        stats.curves_on_grid([([0, 5], [1.0, 1.0]), ([10, 20], [1.0, 1.0])])
    np.testing.assert_allclose(stats.moving_mean([1, 3, 5, 7], 2), [1, 2, 4, 6])


# ---- how the seeds are run -------------------------------------------------------------------------
def test_seeds_run_in_parallel_only_where_the_cpus_allow() -> None:
    assert schedule(per_run=1, seeds=5, cpus=1).at_once == 1
    assert schedule(per_run=2, seeds=5, cpus=3).at_once == 1  # fewer than twice what one run uses
    assert schedule(per_run=2, seeds=5, cpus=4).at_once == 2
    assert schedule(per_run=1, seeds=3, cpus=16).at_once == 3  # never more than the seeds
    assert "one after another" in schedule(per_run=3, seeds=2, cpus=4).describe()
    assert "in parallel, up to 2" in schedule(per_run=1, seeds=2, cpus=2).describe()


def test_a_run_uses_a_cpu_per_worker_process_and_one_for_the_learner() -> None:
    local = configured(parse_args(["train", *CARTPOLE]))
    process = configured(parse_args(["train", "--algo", "dqn", "--env", "CartPole-v1", "--backend", "process",
                                     "--num_workers", "3"]))
    assert cpus_per_run(local) == 1
    assert cpus_per_run(process) == 4


def test_each_seeds_run_gets_every_flag_given_and_its_own_seed_and_out(tmp_path: Path) -> None:
    given = ["train", *CARTPOLE, "--total_env_steps", "1500", "--quick", "--env_kwargs", '{"max_episode_steps": 50}',
             "--lr", "0.001", "--tensorboard", "--wandb_project", "seeds", "--force", "--seeds", "0", "1",
             "--out", str(tmp_path)]
    request = request_from_args(parse_args(given))
    seed = seed_request(request, 7, tmp_path / "seed-7")
    assert seed.invocation is not None and seed.invocation.endswith("[seed 7]")
    assert replace(seed, invocation=None) == replace(request, settings={**request.settings, "seed": 7}, seeds=None,
                                                     out=tmp_path / "seed-7", force=False)


# ---- the aggregate, from seed folders --------------------------------------------------------------
def _seed_folder(folder: Path, final: float, slope: float) -> None:
    steps = list(range(10, 1010, 10))
    run = {"name": "train", "status": "finished", "final_mean_return": final, "env_steps_per_s": 1000.0 + final,
           "episodes": len(steps), "learning_curve": {"env_steps": steps, "return": [slope * s for s in steps]}}
    folder.mkdir(parents=True)
    (folder / "results.json").write_text(json.dumps({"runs": [run]}))


def test_the_aggregate_holds_each_seed_and_the_statistics_with_cis(tmp_path: Path) -> None:
    finals = {0: 10.0, 1: 20.0, 2: 30.0, 3: 40.0, 4: 500.0}
    for seed, final in finals.items():
        _seed_folder(tmp_path / f"seed-{seed}", final, slope=seed + 1)
    folders = {s: tmp_path / f"seed-{s}" for s in finals}
    table, paths, failed = write_aggregate(tmp_path, folders, dict.fromkeys(finals, 0), {"schedule": "test"})
    assert not failed and paths == [tmp_path / "aggregate.json", tmp_path / "aggregate.png"]
    assert (tmp_path / "aggregate.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    data = json.loads((tmp_path / "aggregate.json").read_text())
    final = data["final_return"]
    assert final["mean"]["estimate"] == pytest.approx(120.0)
    assert final["median"]["estimate"] == pytest.approx(30.0)
    assert final["iqm"]["estimate"] == pytest.approx(30.0)  # 20, 30, 40: the outlier seed is cut
    for s in final.values():
        assert s["ci95"][0] <= s["estimate"] <= s["ci95"][1]
    assert [r["env_steps_per_s"] for r in data["per_seed"]] == [1010.0, 1020.0, 1030.0, 1040.0, 1500.0]
    curves = data["curves"]
    assert set(curves["per_seed"]) == {"0", "1", "2", "3", "4"} and len(curves["mean"]) == len(curves["env_steps"])
    assert "iqm" in table and "500.0" in table


def test_a_seed_without_results_is_reported_and_the_rest_aggregated(tmp_path: Path) -> None:
    _seed_folder(tmp_path / "seed-0", 10.0, 1.0)
    _seed_folder(tmp_path / "seed-1", 30.0, 1.0)
    folders = {s: tmp_path / f"seed-{s}" for s in (0, 1, 2)}
    table, _, failed = write_aggregate(tmp_path, folders, {0: 0, 1: 0, 2: 3}, {})
    data = json.loads((tmp_path / "aggregate.json").read_text())
    assert failed and data["per_seed"][2]["status"] == "failed (exit code 3)"
    assert data["bootstrap"]["samples"] == 2 and data["final_return"]["mean"]["estimate"] == pytest.approx(20.0)
    assert "failed (exit code 3)" in table


def test_three_seeds_say_the_iqm_is_the_mean_the_ci_is_the_range_and_is_not_meaningful(tmp_path: Path) -> None:
    finals = {0: 10.0, 1: 25.0, 2: 70.0}
    for seed, final in finals.items():
        _seed_folder(tmp_path / f"seed-{seed}", final, slope=1.0)
    table, _, _ = write_aggregate(tmp_path, {s: tmp_path / f"seed-{s}" for s in finals}, dict.fromkeys(finals, 0), {})
    data = json.loads((tmp_path / "aggregate.json").read_text())
    final = data["final_return"]
    assert final["iqm"]["estimate"] == final["mean"]["estimate"]
    assert final["mean"]["ci95"] == [10.0, 70.0], "with 3 seeds the percentile bootstrap gives [min, max]"
    notes = data["final_return_caveats"]
    assert len(notes) == 3 and all(n in table for n in notes), "printed as recorded"
    assert notes[0].startswith("WARNING: 3 seeds: below 5 seeds these 95% CIs are not meaningful")
    assert notes[1].startswith("IQM = mean: with 3 seeds")
    assert "95% CI of the mean, median, iqm is just [min, max]" in notes[2] and "[10.0, 70.0]" in notes[2]
    boot = data["bootstrap"]
    assert boot["meaningful"] is False
    assert boot["description"].startswith("percentile bootstrap") and "2,000 times" in boot["description"]
    assert "percentile bootstrap, 2,000 resamples" in table


def test_enough_spread_seeds_get_no_caveat() -> None:
    values = [10.0, 12.0, 13.0, 15.0, 18.0, 20.0, 21.0, 25.0, 30.0, 31.0]
    aggregated = stats.aggregate(values)
    assert stats.caveats(values, aggregated) == []
    five = [1.0, 2.0, 3.0, 4.0, 5.0]
    notes = stats.caveats(five, stats.aggregate(five))
    assert not any(n.startswith(("WARNING", "IQM = mean")) for n in notes), notes  # 5 seeds: IQM trims one each end
    assert stats.caveats([4.0], stats.aggregate([4.0]))[0].startswith("WARNING: 1 seed:")


# ---- the flag's errors -----------------------------------------------------------------------------
@pytest.mark.parametrize(("extra", "message"), [
    (["--seeds", "0", "1", "0"], "invalid --seeds: seed 0 given twice"),
    (["--seeds", "0", "-1"], "invalid --seeds: got -1; accepted: integers in [0, 4,294,967,295]"),
    (["--seeds", "3"], "accepted: two or more (one run: --seed)"),
    (["--seeds", "0", "1", "--seed", "2"], "--seeds with --seed 2"),
    (["--seeds", "0", "1", "--resume", "runs/x"], "--seeds with --resume"),
])
def test_bad_seeds_are_errors_naming_them(extra: list[str], message: str, tmp_path: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["train", *CARTPOLE, "--out", str(tmp_path / "out"), *extra]) == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "out").exists()  # refused before anything is written


# ---- a real run ------------------------------------------------------------------------------------
@pytest.mark.slow
def test_two_seeds_of_cartpole_write_both_runs_and_the_aggregate(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "seeds"
    assert main(["train", *CARTPOLE, "--total_env_steps", "1500", "--seeds", "0", "1", "--out", str(out)]) == 0
    for seed in (0, 1):
        run = json.loads((out / f"seed-{seed}" / "results.json").read_text())["runs"][0]
        assert run["status"] == "finished" and run["config"]["seed"] == seed
        assert (out / f"seed-{seed}" / "config.yaml").is_file()
    data = json.loads((out / "aggregate.json").read_text())
    assert [r["seed"] for r in data["per_seed"]] == [0, 1]
    for s in data["final_return"].values():
        assert s["ci95"][0] <= s["estimate"] <= s["ci95"][1]
    assert (out / "aggregate.png").is_file()
    printed = capsys.readouterr().out
    assert "iqm" in printed and ("in parallel" in printed or "one after another" in printed)


@pytest.mark.slow
def test_ctrl_c_stops_every_seed_and_the_aggregate_covers_what_ran(tmp_path: Path) -> None:
    out = tmp_path / "seeds"
    env = {**os.environ, "PYTHONPATH": str(Path(janus.__file__).parents[1])}  # this checkout's code
    proc = subprocess.Popen([sys.executable, "-m", "janus", "train", *CARTPOLE, "--total_env_steps", "1000000",
                             "--results_interval_s", "0.5", "--seeds", "0", "1", "--out", str(out)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    try:
        deadline = time.monotonic() + 120
        while not all((out / f"seed-{s}" / "results.json").is_file() for s in (0, 1)):  # both are training
            assert proc.poll() is None and time.monotonic() < deadline, "the runs did not start"
            time.sleep(0.2)
        proc.send_signal(signal.SIGINT)
        printed, _ = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, printed
    data = json.loads((out / "aggregate.json").read_text())
    assert [r["status"] for r in data["per_seed"]] == ["interrupted", "interrupted"], printed
    assert data["bootstrap"]["samples"] == 2  # each wrote its final return so far
