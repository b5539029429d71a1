"""A run's folder tells the truth about how it ended and holds everything it writes: a run that fails
(a full disk at a checkpoint commit) says ``failed`` in results.json, never ``running``, and keeps its
last commit; a resume never writes through a symbolic link out of the run folder (tensorboard,
checkpoint, best)."""

from __future__ import annotations

import csv
import errno
import json
from pathlib import Path
from typing import Any

import pytest

from janus.cli import main
from janus.runtime import checkpoints

CARTPOLE = ["--algo", "dqn", "--env", "CartPole-v1", "--backend", "local", "--learning_starts", "50"]


def test_a_run_stopped_by_a_full_disk_says_failed_and_resumes_from_its_last_commit(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    out = tmp_path / "run"
    real_commit = checkpoints.commit
    commits: list[Any] = []

    def commit_until_the_disk_fills(folder: Any, names: Any, tag: Any, state: dict[str, Any]) -> None:
        if commits and (out / "results.json").is_file():  # one commit made, the periodic results written
            raise OSError(errno.ENOSPC, "No space left on device")
        real_commit(folder, names, tag, state)
        commits.append(tag)

    monkeypatch.setattr(checkpoints, "commit", commit_until_the_disk_fills)
    code = main(["train", *CARTPOLE, "--total_env_steps", "1000000", "--checkpoint_interval_s", "0.2",
                 "--results_interval_s", "0.2", "--out", str(out)])
    assert code != 0
    run = json.loads((out / "results.json").read_text())["runs"][0]
    assert run["status"] == "failed" and "No space left on device" in run["stop_reason"], run.get("stop_reason")
    with (out / "results.csv").open() as fh:
        assert [row["status"] for row in csv.DictReader(fh)] == ["failed"]
    monkeypatch.setattr(checkpoints, "commit", real_commit)  # space again: the run continues from its commit
    assert main(["train", "--resume", str(out), "--total_env_steps", str(int(run["counts"]["env_steps"]) + 2000)]) == 0
    resumed = json.loads((out / "results.json").read_text())["runs"][-1]
    assert resumed["status"] == "finished"


@pytest.mark.parametrize("name", ["tensorboard", "checkpoint", "best"])
def test_a_resume_never_writes_through_a_link_out_of_the_run_folder(
        name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out, elsewhere = tmp_path / "run", tmp_path / "elsewhere"
    assert main(["train", *CARTPOLE, "--total_env_steps", "300", "--tensorboard", "--out", str(out)]) == 0
    before = (out / "results.json").read_text()
    elsewhere.mkdir()
    if (out / name).is_dir():  # its files moved out, the folder replaced by a link to them
        for entry in (out / name).iterdir():
            entry.rename(elsewhere / entry.name)
        (out / name).rmdir()
    (out / name).symlink_to(elsewhere)
    written = {p.name: p.read_bytes() for p in elsewhere.iterdir()}
    capsys.readouterr()
    assert main(["train", "--resume", str(out), "--total_env_steps", "600", "--tensorboard"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and f"{name}: " in err and "outside the run folder" in err, err
    assert {p.name: p.read_bytes() for p in elsewhere.iterdir()} == written  # nothing written there
    assert (out / "results.json").read_text() == before  # and the run as it was
