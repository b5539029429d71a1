"""CLI smoke tests: every command with --quick produces the promised files; errors are clear."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from janus.cli import main

ROOT = Path(__file__).resolve().parents[1]
DEFAULT = str(ROOT / "configs" / "default.yaml")
TINY = ["--iterations", "3", "--config", DEFAULT]


def _results(out: Path) -> dict:
    for name in ("results.json", "results.csv", "chart.png"):
        assert (out / name).is_file(), f"{name} missing in {out}"
    assert (out / "chart.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    data = json.loads((out / "results.json").read_text())
    rows = list(csv.DictReader((out / "results.csv").open()))
    assert len(rows) == len(data["runs"])
    for run in data["runs"]:
        assert run["name"] and run["samples_per_s"] > 0 and run["wall_s"] > 0
        assert set(run["stage_s"]) >= {"rollout", "collect", "select", "update", "learner_wait", "actor_blocked"}
        assert run["config"]["placement"] in ("cpu_pageable", "cpu_pinned", "cuda")
        assert "workload" in run["config"]
        # the runtime figures are in every run (the runtime's, or the synchronous loop's: janus.runtime.synchronous)
        rt = run["runtime"]
        assert 0 < rt["learner_utilization"] <= 1 and rt["learner_wait_s"] >= 0
        assert run["counts"]["updates"] > 0 and run["counts"]["transitions_inserted"] > 0
        efficiency = run["ideal"]["efficiency"]
        assert efficiency is not None and 0 < efficiency <= 1.05, "the ideal bound is a bound"
    return data


def test_compare_quick_runs_the_four_presets(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["compare", "--quick", "--out", str(tmp_path), *TINY]) == 0
    data = _results(tmp_path)
    names = [r["name"] for r in data["runs"]]
    assert names == ["baseline", "overlap", "granularity", "janus"]
    knobs = {r["name"]: r["config"] for r in data["runs"]}
    assert knobs["baseline"]["overlap_collect"] == knobs["baseline"]["overlap_select"] == 0
    assert knobs["baseline"]["g_select"] == 1 and knobs["baseline"]["placement"] == "cpu_pageable"
    assert knobs["janus"]["overlap_collect"] == knobs["janus"]["overlap_select"] == 1
    assert knobs["janus"]["g_select"] > 1
    assert data["runs"][0]["speedup_vs_baseline"] == pytest.approx(1.0)
    assert all(r["ideal"]["efficiency"] > 0 for r in data["runs"])
    printed = capsys.readouterr().out
    assert "speedup" in printed and "janus" in printed and "resolved" in printed


def test_train_with_artifact_flags(tmp_path: Path) -> None:
    argv = ["train", "--quick", "--out", str(tmp_path), *TINY,
            "--overlap_collect", "0", "--overlap_select", "1", "--g_collect", "2", "--g_select", "2"]
    assert main(argv) == 0
    (run,) = _results(tmp_path)["runs"]
    assert run["config"]["overlap_collect"] == 0 and run["config"]["overlap_select"] == 1
    assert run["config"]["g_collect"] == 2 and run["counts"]["batches_selected"] % 2 == 0
    assert run["counts"]["select_calls"] * 2 == run["counts"]["batches_selected"] > 0
    assert run["runtime"]["backend"] == "local", "janus train runs on the local runtime by default"
    assert run["counts"]["transitions_collected"] == run["counts"]["transitions_produced"]


def test_train_on_policy_fraction(tmp_path: Path) -> None:
    argv = ["train", "--quick", "--out", str(tmp_path), *TINY, "--is_on_policy", "true", "--g_collect", "1/4", "--g_select", "0.5"]
    assert main(argv) == 0
    (run,) = _results(tmp_path)["runs"]
    assert run["config"]["is_on_policy"] is True
    # 3 iterations x 2 epochs x 4 minibatches, every one delivered
    assert run["counts"]["updates"] == 3 * 2 * 4


@pytest.mark.parametrize("sweep,count", [("overlap", 4), ("granularity", 5), ("placement", None)])
def test_eval_sweeps(tmp_path: Path, sweep: str, count: int | None) -> None:
    assert main(["eval", "--sweep", sweep, "--quick", "--out", str(tmp_path), *TINY]) == 0
    data = _results(tmp_path)
    if sweep == "placement":
        ran = {r["name"] for r in data["runs"]}
        skipped = {s["name"]: s["reason"] for s in data["skipped"]}
        assert ran | set(skipped) == {"cpu_pageable", "cpu_pinned", "cuda"}
        assert "cpu_pageable" in ran
        if not torch.cuda.is_available():
            assert "CUDA" in skipped["cuda"] and "CUDA" in skipped["cpu_pinned"]
    else:
        assert len(data["runs"]) == count


# Slow-only (~7 s): tests/reliability/test_run_dir_only.py runs every command, `eval --sweep overlap`
# among them, through src/main.py in a real subprocess by default, and test_eval_sweeps above runs the
# granularity sweep.
@pytest.mark.slow
def test_main_py_entry_point_granularity_sweep(tmp_path: Path) -> None:
    """The artifact's documented entry point, in a real subprocess."""
    proc = subprocess.run(
        [sys.executable, str(ROOT / "src" / "main.py"), "eval", "--sweep", "granularity", "--quick", "--out", str(tmp_path), *TINY],
        capture_output=True, text=True, timeout=240, cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    assert [r["name"] for r in _results(tmp_path)["runs"]] == ["g=1", "g=2", "g=4", "g=8", "g=16"]


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the error on machines without CUDA")
@pytest.mark.parametrize("flag", [["--placement", "cuda"], ["--placement", "cpu_pinned"], ["--actor_device", "cuda"]])
def test_cuda_request_without_cuda_is_a_clear_error(tmp_path: Path, capsys: pytest.CaptureFixture[str], flag: list[str]) -> None:
    assert main(["train", "--quick", "--out", str(tmp_path / "o"), *TINY, *flag]) == 2
    err = capsys.readouterr().err
    assert flag[0].lstrip("-") in err and "CUDA is not available" in err and "Traceback" not in err
    assert not (tmp_path / "o").exists(), "no work (and no output) before the error"


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the error on machines without CUDA")
def test_artifact_off_policy_example_needs_cuda(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["train", "--quick", "--config", str(ROOT / "configs" / "off_policy.yaml"), "--out", str(tmp_path)]) == 2
    assert "placement='cuda'" in capsys.readouterr().err


def test_bad_values_name_the_field(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["train", "--quick", *TINY, "--buffer_capacity", "-5"]) == 2
    assert "buffer_capacity" in capsys.readouterr().err
    bad = tmp_path / "bad.yaml"
    bad.write_text("placement: auto\nplacment: cuda\n")
    assert main(["train", "--config", str(bad)]) == 2
    err = capsys.readouterr().err
    assert "'placment'" in err and "accepted keys" in err
    assert main(["train", "--quick", *TINY, "--is_on_policy", "1", "--g_select", "0.3"]) == 2
    assert "1/4" in capsys.readouterr().err


def test_a_run_that_could_never_sample_is_refused_before_work(tmp_path: Path) -> None:
    """Issue 13 item 3 from the command line: thresholds that can never be met are an error at
    once (exit 2, naming the knob), not a run that waits for its one-hour timeout."""
    proc = subprocess.run([sys.executable, "-m", "janus.cli", "train", "--quick", "--min_inserts", "100000000",
                           "--samples_per_insert", "1", "--out", str(tmp_path / "r")],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "can never sample" in proc.stderr and "min_inserts" in proc.stderr


@pytest.mark.parametrize("when", ["at once", "on a signal"])
def test_a_run_whose_output_pipe_closes_still_writes_its_results(tmp_path: Path, when: str) -> None:
    """``janus train | head``, or ``| tee log`` killed by the same Ctrl-C/SIGTERM as janus: the next
    print raised BrokenPipeError, so the run died (exit 1, a traceback to the closed pipe) and
    results.json was never written, or, after the signal, not the run so far."""
    import os
    import signal
    import time

    out = tmp_path / "run"
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    argv = ["train", "--config", DEFAULT, "--quick", "--out", str(out)]
    if when == "on a signal":
        argv = ["train", "--algo", "dqn", "--backend", "local", "--total_env_steps", "100000", "--results_interval_s", "1",
                "--out", str(out)]
    proc = subprocess.Popen([sys.executable, "-m", "janus.cli", *argv], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT)
    assert proc.stdout is not None
    proc.stdout.readline()  # the run has started
    if when == "on a signal":
        while not (out / "results.json").exists():  # the first periodic write: the run is going
            assert proc.poll() is None
            time.sleep(0.1)
    proc.stdout.close()  # the reader is gone
    if when == "on a signal":
        proc.send_signal(signal.SIGTERM)
    code = proc.wait(timeout=180)
    assert code == (143 if when == "on a signal" else 0)
    (run,) = _results(out)["runs"]
    assert run["status"] == ("interrupted" if when == "on a signal" else "finished")
