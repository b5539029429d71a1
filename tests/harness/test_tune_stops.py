"""janus tune keeps every result on any stop: tune.json after every trial, with status ``stopped`` on a
stop signal and ``failed`` (one error line) when no trial could run; a small budget's trials still run."""

from __future__ import annotations

import errno
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import janus
from janus.cli import build_parser, config_from_args, main
from janus.config import resolve
from janus.harness.tune import command as tune_command
from janus.harness.tune.command import run_trial
from janus.harness.tune.search import MIN_SHARE, scaled
from janus.harness.tune.space import defaults_of

ROOT = Path(__file__).resolve().parents[2]
DEFAULT = str(ROOT / "configs" / "default.yaml")
QUICK_TUNE = ["tune", "--quick", "--iterations", "400", "--budget_s", "300", "--backends", "local", "--config", DEFAULT]
"""A tune whose trials take about a second each on a busy 2-core machine: far longer in all than the
first three trials, so a signal after them always comes mid-tune."""


def _trials(path: Path) -> list[dict]:
    try:
        return list(json.loads(path.read_text())["trials"])
    except (OSError, ValueError):  # not written yet (it is replaced whole: never half-written)
        return []


@pytest.mark.parametrize(("sig", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_a_stop_signal_keeps_tune_json_with_every_finished_trial(sig: signal.Signals, code: int, tmp_path: Path) -> None:
    out = tmp_path / "t"
    env = {**os.environ, "PYTHONPATH": str(Path(janus.__file__).parents[1])}  # this checkout's code
    proc = subprocess.Popen([sys.executable, "-m", "janus", *QUICK_TUNE, "--out", str(out)], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while len(seen := _trials(out / "tune.json")) < 3:  # the warm-up and two trials of rung 0 finished
            assert proc.poll() is None and time.monotonic() < deadline, proc.stderr.read() if proc.stderr else ""
            time.sleep(0.1)
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == code, err
    data = json.loads((out / "tune.json").read_text())
    assert data["status"] == "stopped", err
    assert data["trials"][: len(seen)] == seen and data["trials"][0]["warmup"]  # every finished trial kept
    assert data["best"] is not None
    assert "the trials so far and the best so far are in" in err and "Traceback" not in err


def test_a_small_budgets_short_trial_still_reaches_its_sampling_threshold() -> None:
    # --total_env_steps 2000: the warm-up's share (1/27: 74 env steps) never reached DQN's
    # learning_starts 1000, so every trial failed with a message to raise the budget
    cfg = config_from_args(build_parser().parse_args(
        ["tune", "--algo", "dqn", "--env", "CartPole-v1", "--backend", "local", "--total_env_steps", "2000"]))
    trial = scaled(defaults_of(cfg).apply(cfg), MIN_SHARE)
    assert trial.algorithm["learning_starts"] == round(1000 * MIN_SHARE)  # the same part of its run as the whole
    got = run_trial(resolve(trial), 120.0)
    assert got["env_steps_per_s"] > 0 and not got["cut"]
    whole = scaled(cfg, 1.0)
    assert whole.algorithm.get("learning_starts", 1000) == 1000 and whole.runtime.min_inserts == cfg.runtime.min_inserts


def test_a_tune_whose_every_trial_fails_is_one_error_line_and_tune_json_says_failed(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    def refused(cfg: object, allowed_s: float) -> dict:
        raise RuntimeError("this setting cannot run here")

    monkeypatch.setattr(tune_command, "run_trial", refused)
    out = tmp_path / "t"
    assert main([*QUICK_TUNE[:-4], "--budget_s", "5", "--config", DEFAULT, "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "no trial ran" in err and "this setting cannot run here" in err, err
    assert "budget" not in err.split("no trial ran")[1]
    data = json.loads((out / "tune.json").read_text())
    assert data["status"] == "failed" and data["trials"][0]["warmup"]
    assert all(t["throughput"] is None for t in data["trials"]) and not (out / "best.yaml").exists()


def test_a_failure_of_the_tunes_own_code_leaves_tune_json_failed_with_the_trials_so_far(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    real_write = tune_command.write_json
    writes = []

    def disk_full_once(out_dir: Path, result: object, status: str, error: str | None = None) -> Path:
        writes.append(status)
        if len(writes) == 4:  # the one at the start, then the third trial's: the disk was full for a moment
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_write(out_dir, result, status, error)  # type: ignore[arg-type]

    monkeypatch.setattr(tune_command, "write_json", disk_full_once)
    out = tmp_path / "t"
    # an unexpected error is one line and exit 2 (its traceback with JANUS_DEBUG=1)
    assert main([*QUICK_TUNE[:-4], "--budget_s", "60", "--config", DEFAULT, "--out", str(out)]) == 2
    assert "No space left on device" in capsys.readouterr().err
    data = json.loads((out / "tune.json").read_text())
    assert data["status"] == "failed" and "No space left on device" in data["error"]
    assert len(data["trials"]) == 3 and data["trials"][0]["warmup"]  # the third trial too: it had finished


def test_a_stop_during_the_warm_up_still_leaves_tune_json(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def stopped(cfg: object, allowed_s: float) -> dict:
        raise KeyboardInterrupt  # Ctrl-C before the first trial ends

    monkeypatch.setattr(tune_command, "run_trial", stopped)
    out = tmp_path / "t"
    assert main([*QUICK_TUNE, "--out", str(out)]) == 130
    data = json.loads((out / "tune.json").read_text())
    assert data["status"] == "stopped" and data["trials"] == [] and data["defaults"] is not None
