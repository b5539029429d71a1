"""A learner crash is recovered with ``janus train --resume`` from the last checkpoint, with
identical buffer contents and counters; the two-phase checkpoint commit survives a crash anywhere."""

from __future__ import annotations

import copy
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from ckpt_helpers import assert_resumed_identically, committed

from janus.buffer.storage.state_file import load_state
from janus.cli import main
from janus.runtime import checkpoints
from janus.runtime.checkpoint_parties import Checkpointer
from janus.runtime.orchestrator import Orchestrator
from janus.runtime.trainer import Trainer
from janus.runtime.trajectory_manager import TrajectoryManager

NAMES = ("trainer", "trajectory_manager")


def _resume_capturing(monkeypatch: pytest.MonkeyPatch, run: Path, total_env_steps: int) -> dict[str, Any]:
    """Resume RUN, recording each component's state right after it restored its checkpoint."""
    seen: dict[str, Any] = {}
    tm_start, trainer_start, orch_init = TrajectoryManager.on_StartMsg, Trainer.on_StartMsg, Orchestrator.__init__

    def tm(self: TrajectoryManager, msg: Any) -> None:
        # The buffer's selection thread may sample as soon as the replay is loaded (advancing the
        # sampler's RNG): holding the buffer's lock keeps any sample out until the snapshot is taken.
        with self.buffer.experience._lock:
            tm_start(self, msg)
            seen.setdefault("replay", {"buffer": self.buffer.experience.state_dict(), "inserted": self.inserted})

    def trainer(self: Trainer, msg: Any) -> None:
        trainer_start(self, msg)
        seen.setdefault("trainer", {"learner": copy.deepcopy(self.learner.state_dict()), "trained": self.trained,
                                    "version": self.version})

    def orchestrator(self: Orchestrator, *args: Any, **kwargs: Any) -> None:
        orch_init(self, *args, **kwargs)
        seen.setdefault("orchestrator", {"trained": self.trained, "env_steps": self.env_steps, "curve": list(self.curve)})

    monkeypatch.setattr(TrajectoryManager, "on_StartMsg", tm)
    monkeypatch.setattr(Trainer, "on_StartMsg", trainer)
    monkeypatch.setattr(Orchestrator, "__init__", orchestrator)
    assert main(["train", "--resume", str(run), "--total_env_steps", str(total_env_steps)]) == 0
    return seen


def _wait_for_commits(ckpt: Path, proc: subprocess.Popen, commits: int, timeout_s: float = 120.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        assert proc.poll() is None, f"training exited early with {proc.returncode}"
        try:
            tag = json.loads((ckpt / "run_state.json").read_text()).get("tag")
        except (FileNotFoundError, json.JSONDecodeError):
            tag = None
        if isinstance(tag, int) and tag >= commits:
            return
        time.sleep(0.05)
    raise AssertionError(f"no {commits} checkpoint commits within {timeout_s}s")


# Slow-only: test_kill_resume_loop.py[local] runs by default and does the same and more: it SIGKILLs
# `janus train` (whole process tree) after its first commit and at random moments, and every resume,
# the last one to its end included, must restore the last commit field by field (assert_resumed_identically).
@pytest.mark.slow
def test_sigkill_of_a_training_process_resumes_from_the_last_commit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """SIGKILL the whole `janus train` process mid-run (learner included), then --resume it."""
    run = tmp_path / "run"
    argv = [sys.executable, "-m", "janus.cli", "train", "--algo", "dqn", "--total_env_steps", "1000000",
            "--checkpoint_interval_s", "0.3", "--seed", "3", "--out", str(run),
            "--overlap_collect", "1", "--overlap_select", "1", "--g_collect", "4"]  # pieces staged at every instant
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env={**os.environ, "OMP_NUM_THREADS": "1"})
    try:
        _wait_for_commits(run / "checkpoint", proc, commits=3)
        time.sleep(0.15)  # most likely mid-way through the next checkpoint
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    expected = committed(run)
    seen = _resume_capturing(monkeypatch, run, total_env_steps=expected["state"]["env_steps"] + 1500)
    assert_resumed_identically(expected, seen)
    final = checkpoints.read_run_state(run / "checkpoint")
    assert final["tag"] == checkpoints.FINAL and final["env_steps"] > expected["state"]["env_steps"]
    assert final["curve"][: len(expected["state"]["curve"])] == expected["state"]["curve"]


def test_trainer_exception_commits_nothing_after_it_and_resume_is_identical(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The Trainer raises mid-run: the run fails with a clear error, the parts other components
    wrote on stop are not committed, and --resume starts from the last periodic commit."""
    from janus.algorithms.gym_algorithm import GymLearnerSide as RLLearnerSide

    run = tmp_path / "run"
    update = RLLearnerSide.update

    def failing_update(self: RLLearnerSide, batch: dict) -> Any:
        state = run / "checkpoint" / "run_state.json"
        if state.is_file() and json.loads(state.read_text()).get("tag", 0) >= 2:
            raise RuntimeError("injected learner crash")
        return update(self, batch)

    with monkeypatch.context() as patch:
        patch.setattr(RLLearnerSide, "update", failing_update)
        code = main(["train", "--algo", "dqn", "--total_env_steps", "1000000", "--checkpoint_interval_s", "0.3",
                     "--seed", "4", "--out", str(run)])
    assert code == 2
    expected = committed(run)
    assert expected["state"]["tag"] != checkpoints.FINAL
    seen = _resume_capturing(monkeypatch, run, total_env_steps=expected["state"]["env_steps"] + 1500)
    assert_resumed_identically(expected, seen)


# ---- the commit protocol, crash point by crash point ----------------------------------------------
def _stage(folder: Path, tag: int | str, value: int) -> None:
    for name in NAMES:
        Checkpointer(str(folder), name, resume=False).stage({"value": value}, tag)


def _values(folder: Path) -> list[int]:
    return [load_state(folder / f"{n}.pt", fmt=f"janus.{n}")["value"] for n in NAMES]


def _counters(trained: int) -> dict[str, Any]:
    return {"trained": trained, "env_steps": 10 * trained, "wall_s": 1.0, "curve": [], "restarts": {}}


def test_commit_promotes_the_staged_parts_and_drops_older_ones(tmp_path: Path) -> None:
    _stage(tmp_path, 1, 10)
    checkpoints.commit(tmp_path, NAMES, 1, _counters(1))
    _stage(tmp_path, 2, 20)
    _stage(tmp_path, checkpoints.FINAL, 30)  # a stop racing the commit of 2 keeps its parts
    checkpoints.commit(tmp_path, NAMES, 2, _counters(2))
    state = checkpoints.read_run_state(tmp_path)
    assert _values(tmp_path) == [20, 20] and (state["trained"], state["tag"], state["seq"]) == (2, 2, 2)
    assert set(state["files"]) == {"trainer.pt", "trajectory_manager.pt"}
    assert checkpoints.staged(tmp_path, NAMES, checkpoints.FINAL)


def test_crash_before_the_run_state_is_written_keeps_the_previous_commit(tmp_path: Path) -> None:
    _stage(tmp_path, 1, 10)
    checkpoints.commit(tmp_path, NAMES, 1, _counters(1))
    _stage(tmp_path, 2, 20)  # both parts written, then the crash: run_state.json still names 1
    Path(checkpoints.pending_path(tmp_path, "trainer", 3)).write_bytes(b"half a file")
    checkpoints.recover(tmp_path)
    assert _values(tmp_path) == [10, 10] and not list(tmp_path.glob("*.pending-*"))


def test_crash_between_run_state_and_renames_is_finished_by_recover(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _stage(tmp_path, 1, 10)
    checkpoints.commit(tmp_path, NAMES, 1, _counters(1))
    _stage(tmp_path, 2, 20)
    renames = []

    def crash_after_one_rename(src: Any, dst: Any) -> None:
        if len(renames) == 2:  # run_state.json and one part renamed, then the crash
            raise KeyboardInterrupt("crash between the renames")
        renames.append(src)
        os.rename(src, dst)

    with monkeypatch.context() as patch:
        patch.setattr(checkpoints.os, "replace", crash_after_one_rename)
        with pytest.raises(KeyboardInterrupt):
            checkpoints.commit(tmp_path, NAMES, 2, _counters(2))
    checkpoints.recover(tmp_path)
    assert _values(tmp_path) == [20, 20] and not list(tmp_path.glob("*.pending-*"))


def test_parts_staged_on_stop_are_dropped_unless_committed(tmp_path: Path) -> None:
    _stage(tmp_path, 1, 10)
    checkpoints.commit(tmp_path, NAMES, 1, _counters(1))
    Checkpointer(str(tmp_path), "trajectory_manager", resume=False).stage(
        {"value": 99}, checkpoints.FINAL)  # the trainer died before staging its part
    assert not checkpoints.staged(tmp_path, NAMES, checkpoints.FINAL)
    checkpoints.recover(tmp_path)
    assert _values(tmp_path) == [10, 10]
