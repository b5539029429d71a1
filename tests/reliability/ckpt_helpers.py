"""Shared by the checkpoint reliability tests: `janus train` subprocesses with test hooks, the
committed state of a run folder, and field-by-field comparison of a resume with it."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import torch

from janus.buffer.storage.state_file import load_state
from janus.runtime import checkpoints

HOOKS = Path(__file__).parent / "hooks"
SRC = Path(checkpoints.__file__).resolve().parents[2]


def janus_env(capture: Path | None = None, fail_after: int | None = None) -> dict[str, str]:
    """The environment of a `janus train` subprocess; hooks (see hooks/sitecustomize.py) on request."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": os.pathsep.join([str(HOOKS), str(SRC)])}
    env.pop("JANUS_TEST_CAPTURE", None)
    env.pop("JANUS_TEST_FAIL_AFTER", None)
    if capture is not None:
        capture.mkdir(parents=True, exist_ok=True)
        env["JANUS_TEST_CAPTURE"] = str(capture)
    if fail_after is not None:
        env["JANUS_TEST_FAIL_AFTER"] = str(fail_after)
    return env


def janus(*args: str, env: dict[str, str] | None = None, timeout: float = 240) -> subprocess.CompletedProcess[str]:
    """Run `python -m janus.cli ARGS` to completion."""
    return subprocess.run([sys.executable, "-m", "janus.cli", *args], capture_output=True, text=True,
                          timeout=timeout, env=env or janus_env())


def spawn(*args: str, env: dict[str, str]) -> subprocess.Popen[bytes]:
    """Start `python -m janus.cli ARGS` in a session of its own (so it can be killed with all it started)."""
    return subprocess.Popen([sys.executable, "-m", "janus.cli", *args], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, env=env, start_new_session=True)


def kill_tree(proc: subprocess.Popen[bytes]) -> None:
    """SIGKILL ``proc`` and every process it started (Ray's raylet, workers...)."""
    import psutil

    try:
        family = [psutil.Process(proc.pid), *psutil.Process(proc.pid).children(recursive=True)]
    except psutil.NoSuchProcess:
        family = []
    for p in family:
        try:
            p.send_signal(signal.SIGKILL)
        except psutil.NoSuchProcess:
            pass
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    proc.wait(timeout=60)
    psutil.wait_procs(family, timeout=30)


def committed(run: Path) -> dict[str, Any] | None:
    """Recover a copy of RUN/checkpoint as --resume would; its committed files and state (None: nothing committed)."""
    snapshot = run.parent / f"{run.name}-snapshot"
    shutil.rmtree(snapshot, ignore_errors=True)
    shutil.copytree(run / "checkpoint", snapshot)
    try:
        checkpoints.recover(snapshot)
        assert not list(snapshot.glob("*.pending-*")), "recover left pending files"
        state = checkpoints.read_run_state(snapshot)
        if not state:
            return None
        return {"state": state, "trainer": load_state(snapshot / "trainer.pt", fmt="janus.trainer"),
                "replay": load_state(snapshot / "trajectory_manager.pt", fmt="janus.trajectory_manager")}
    finally:
        shutil.rmtree(snapshot, ignore_errors=True)


def captured(folder: Path) -> dict[str, Any] | None:
    """What the hooks saved right after each component restored (None unless all three did)."""
    names = ("replay", "trainer", "orchestrator")
    if not all((folder / f"{n}.pt").is_file() for n in names):
        return None
    return {n: torch.load(folder / f"{n}.pt", weights_only=True) for n in names}


def assert_equal_tree(a: Any, b: Any, where: str = "") -> None:
    if isinstance(a, dict):
        assert isinstance(b, dict) and a.keys() == b.keys(), f"{where}: keys {sorted(map(str, a))} != {sorted(map(str, b))}"
        for k in a:
            assert_equal_tree(a[k], b[k], f"{where}.{k}")
    elif isinstance(a, (list, tuple)):
        assert isinstance(b, (list, tuple)) and len(a) == len(b), f"{where}: lengths differ"
        for i, (x, y) in enumerate(zip(a, b)):
            assert_equal_tree(x, y, f"{where}[{i}]")
    elif isinstance(a, torch.Tensor):
        assert isinstance(b, torch.Tensor) and a.dtype == b.dtype and torch.equal(a, b), f"{where} differs"
    else:
        assert a == b, f"{where}: {a!r} != {b!r}"


def assert_resumed_identically(expected: dict[str, Any] | None, seen: dict[str, Any]) -> None:
    """Every field a resume restored equals the last committed checkpoint (or a fresh start when none)."""
    if expected is None:
        assert seen["trainer"]["trained"] == 0 and seen["replay"]["inserted"] == 0, "restored without a commit"
        assert (seen["orchestrator"]["trained"], seen["orchestrator"]["env_steps"], seen["orchestrator"]["curve"]) == (0, 0, [])
        return
    state, trainer, replay = expected["state"], expected["trainer"], expected["replay"]
    # the committed set is one instant: the run state's counters are those in the component files
    assert trainer["tag"] == replay["tag"] == state["tag"]
    assert trainer.get("run_id") == replay.get("run_id") == state.get("run_id")
    assert state["trained"] == trainer["trained"]
    assert state["inserted"] == replay["inserted"] == replay["buffer"]["written"]
    # the resumed components start from exactly that instant
    assert_equal_tree(replay["buffer"], seen["replay"]["buffer"], "buffer")
    assert seen["replay"]["inserted"] == replay["inserted"]
    assert_equal_tree(trainer["learner"], seen["trainer"]["learner"], "learner")
    assert (seen["trainer"]["trained"], seen["trainer"]["version"]) == (trainer["trained"], trainer["version"])
    orch = seen["orchestrator"]
    assert (orch["trained"], orch["env_steps"]) == (state["trained"], state["env_steps"])
    assert [list(c) for c in orch["curve"]] == [list(c) for c in state["curve"]]
