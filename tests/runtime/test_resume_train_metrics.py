"""Training scalars survive `--resume`: the earlier sessions' rows stay in results.json."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from janus.cli import main
from janus.errors import CheckpointError
from janus.runtime import checkpoints


def test_resumed_run_keeps_the_earlier_sessions_training_scalars(tmp_path: Path) -> None:
    run = tmp_path / "run"
    assert main(["train", "--algo", "ppo", "--total_env_steps", "4096", "--seed", "3", "--out", str(run)]) == 0
    first = json.loads((run / "checkpoint" / "run_state.json").read_text())
    rows = first["train_metrics"]
    assert rows and all(r["env_steps"] <= first["env_steps"] for r in rows)
    assert main(["train", "--resume", str(run), "--total_env_steps", "8192"]) == 0
    metrics = json.loads((run / "results.json").read_text())["runs"][0]["train_metrics"]
    steps = metrics["env_steps"]
    assert steps[: len(rows)] == [r["env_steps"] for r in rows]  # the first session's rows, as committed
    assert steps[-1] > first["env_steps"] and steps == sorted(steps)  # then the resumed session's
    assert metrics["wall_s"] == sorted(metrics["wall_s"])  # one clock across sessions
    second = json.loads((run / "results.json").read_text())["runs"][0]
    final = json.loads((run / "checkpoint" / "run_state.json").read_text())
    counts = second["counts"]  # this session's counts, and the whole run's
    assert counts["run_env_steps"] == final["env_steps"] == first["env_steps"] + counts["env_steps"] == 8192
    assert counts["run_updates"] == final["trained"] == first["trained"] + counts["updates"]
    csv_row = (run / "results.csv").read_text().splitlines()
    header, row = csv_row[0].split(","), csv_row[1].split(",")
    assert int(row[header.index("env_steps")]) == 8192  # the whole run's, not the last episode's step


def test_a_commit_record_with_malformed_training_scalars_is_refused(tmp_path: Path) -> None:
    run = tmp_path / "run"
    assert main(["train", "--algo", "ppo", "--total_env_steps", "2048", "--seed", "3", "--out", str(run)]) == 0
    path = run / "checkpoint" / "run_state.json"
    good = json.loads(path.read_text())
    for bad in ({"loss": "high"}, ["loss", 1.0], {"loss": True}, {"loss": None}):
        state = dict(good, train_metrics=[bad])
        state["record_sha256"] = checkpoints.record_digest(state)  # consistent: the schema check is what refuses it
        path.write_text(json.dumps(state))
        with pytest.raises(CheckpointError, match="train_metrics"):
            checkpoints.read_run_state(run / "checkpoint")
    state = {k: v for k, v in good.items() if k != "train_metrics"}  # a record from before the field was kept
    state["record_sha256"] = checkpoints.record_digest(state)
    path.write_text(json.dumps(state))
    assert "train_metrics" not in checkpoints.read_run_state(run / "checkpoint")
