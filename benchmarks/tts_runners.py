"""One time-to-solve run per call: a system's command in a fresh subprocess, timed from the parent.

The clock: :func:`watch` takes ``time.perf_counter()`` just before ``Popen`` and reads the child's
stdout line by line on a thread; the first line that says the threshold was reached (each system's
marker, below) is stamped with the parent's clock on read. That is the run's ``time_s``: start-up,
imports, environment creation and training all count, as they do for a user. A run with no such
line by ``cap_s`` seconds (or by the task's env-step cap) is unsolved; its process group is killed.

Markers per system:
- janus: the first ``eval @ N env steps: mean return X`` line with X at or over the threshold (its
  Evaluator's line, printed as the evaluation returns; ``janus train --target_return`` then stops the
  run), else ``janus: NAME: solved`` (printed after shut-down); results.json's ``solved_at_s`` and
  ``solved_at_env_steps`` are read afterwards and kept beside the parent's clock (``reported``).
- sb3: ``TTS_SOLVED {json}`` from benchmarks/tts_sb3.py (SB3's EvalCallback, the Zoo's model).
- cleanrl: none of its own (no evaluator): every ``global_step=N, episodic_return=[R]`` line is a
  training episode; the mean of the last ``CLEANRL_WINDOW`` reaching the threshold is "solved".
- sf: ``SF_SOLVED {json}`` from benchmarks/sf_appo.py ``train --threshold`` (its training return).
"""

from __future__ import annotations

import json
import os
import queue
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from tts_tasks import CLEANRL_WINDOW, EVAL_EPISODES, Task

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
SF_PYTHON = ROOT / ".venv-sf" / "bin" / "python"
CLEANRL_PYTHON = ROOT / ".venv-cleanrl" / "bin" / "python"
EXIT_GRACE_S = 20.0  # after the solved line: how long a child may take to exit on its own before it is killed
POLL_S = 0.5  # how often the watcher looks whether the child is gone
TAIL_LINES = 30  # the child's last lines kept for a run that failed


@dataclass
class Solve:
    """What a marker line says: env steps at the solve and the mean return that reached the threshold."""

    env_steps: int | None
    mean_return: float | None


@dataclass
class RunResult:
    """One (task, system, seed) run as the suite records it in its JSON."""

    task: str
    system: str
    seed: int
    solved: bool
    time_s: float | None  # the parent's clock: Popen start -> the solved line read; None: unsolved
    env_steps: int | None  # env steps at the solve (the system's own count)
    mean_return: float | None  # the evaluation (or training-return mean) that reached the threshold
    wall_s: float  # Popen start -> the process gone
    exit: str  # "solved", "exited N", "cap_s", "cap_steps"
    setting: str  # what ran (the command, shortened)
    reported: dict[str, Any] = field(default_factory=dict)  # the system's own numbers (janus: solved_at_*)
    tail: list[str] = field(default_factory=list)  # the last lines of a run that failed

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


LineCheck = Callable[[str], "Solve | str | None"]  # a Solve: solved; "cap_steps": stop unsolved; None: go on


def _read_lines(stream: Any, out: queue.Queue[tuple[float, str | None]]) -> None:
    for line in stream:
        out.put((time.perf_counter(), line.rstrip("\n")))
    out.put((time.perf_counter(), None))


def _kill_group(proc: subprocess.Popen[str]) -> None:
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    proc.wait()


def watch(cmd: list[str], check: LineCheck, cap_s: float, cwd: Path, env: dict[str, str] | None = None,
          grace_s: float = EXIT_GRACE_S) -> tuple[Solve | None, float | None, float, str, list[str]]:
    """Run ``cmd`` in a fresh process (its own session) and time it from just before ``Popen``.

    After the solved line the child gets ``grace_s`` to exit on its own (0: a child that would train on).
    Returns (the solve or None, its parent-clock seconds or None, wall seconds, how it ended, last lines).
    """
    child_env = {**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})}
    lines: queue.Queue[tuple[float, str | None]] = queue.Queue()
    tail: deque[str] = deque(maxlen=TAIL_LINES)
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=cwd, env=child_env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, start_new_session=True)
    reader = threading.Thread(target=_read_lines, args=(proc.stdout, lines), daemon=True)
    reader.start()
    solve: Solve | None = None
    solved_s: float | None = None
    ended = "cap_s"
    deadline = t0 + cap_s
    while True:
        try:
            stamp, line = lines.get(timeout=min(max(deadline - time.perf_counter(), 0.0), POLL_S))
        except queue.Empty:
            if proc.poll() is not None and lines.empty():  # gone; its workers may still hold the pipe open
                ended = f"exited {proc.returncode}"
                break
            if time.perf_counter() >= deadline:
                break  # cap_s: unsolved
            continue
        if line is None:
            ended = f"exited {proc.wait()}"
            break
        tail.append(line)
        verdict = check(line)
        if isinstance(verdict, Solve):
            solve, solved_s, ended = verdict, stamp - t0, "solved"
            break
        if verdict == "cap_steps":
            ended = "cap_steps"
            break
    if solve is not None:
        try:  # let it write its results (janus: results.json), then stop it
            proc.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            pass
    _kill_group(proc)
    reader.join(timeout=5)
    return solve, solved_s, time.perf_counter() - t0, ended, list(tail)


# --- janus ---------------------------------------------------------------------------------------

def find_key(tree: Any, key: str) -> Any:
    """The first value of ``key`` anywhere in a JSON tree (results.json nests per run), else None."""
    if isinstance(tree, dict):
        if key in tree:
            return tree[key]
        tree = list(tree.values())
    if isinstance(tree, list):
        for item in tree:
            found = find_key(item, key)
            if found is not None:
                return found
    return None


JANUS_EVAL_LINE = re.compile(r"eval @ ([0-9,]+) env steps: mean return ([-+0-9.eE]+)")  # printed as it returns
JANUS_SOLVED_LINE = re.compile(r"janus: (\S+: )?solved")  # printed after the run has shut down


def run_janus(task: Task, seed: int, cap_s: float, cap_steps: int, algo: str) -> RunResult:
    """``janus train --target_return`` in a fresh process; the parent's clock and results.json's ``solved_at_*``."""
    janus = Path(sys.executable).parent / "janus"
    with tempfile.TemporaryDirectory(prefix="tts-janus-") as tmp:
        out = Path(tmp) / "run"
        cmd = [str(janus), "train", "--algo", algo, "--env", task.name, "--target_return", str(task.threshold),
               "--eval_interval_steps", str(task.eval_interval_steps), "--eval_episodes", str(EVAL_EPISODES),
               "--total_env_steps", str(cap_steps), "--seed", str(seed), "--out", str(out),
               *(task.janus_flags if algo == task.janus_algo else ())]

        def check(line: str) -> Solve | None:
            match = JANUS_EVAL_LINE.match(line)
            if match is not None and float(match.group(2)) >= task.threshold:
                return Solve(int(match.group(1).replace(",", "")), float(match.group(2)))
            return Solve(None, None) if JANUS_SOLVED_LINE.match(line) else None  # a run that prints no eval lines

        solve, solved_s, wall, ended, tail = watch(cmd, check, cap_s, Path(tmp))
        results = _read_json(out / "results.json")
    reported = {k: find_key(results, k) for k in ("solved", "solved_at_s", "solved_at_env_steps", "solved_at_train_s")}
    if solve is not None and solve.env_steps is None:
        solve.env_steps = reported["solved_at_env_steps"]
    return _result(task, "janus", seed, solve, solved_s, wall, ended, " ".join(cmd[1:7]), tail, reported)


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def _result(task: Task, system: str, seed: int, solve: Solve | None, solved_s: float | None, wall: float,
            ended: str, setting: str, tail: list[str], reported: dict[str, Any] | None = None) -> RunResult:
    return RunResult(task=task.name, system=system, seed=seed, solved=solve is not None, time_s=solved_s,
                     env_steps=solve.env_steps if solve else None, mean_return=solve.mean_return if solve else None,
                     wall_s=wall, exit=ended, setting=setting, reported=reported or {},
                     tail=[] if solve is not None else tail)


# --- SB3 (RL Zoo) and Sample Factory: a JSON marker line ---------------------------------------------

def marker_check(mark: str) -> LineCheck:
    """A line ``MARK {json}`` with env_steps and mean_return: solved."""
    def check(line: str) -> Solve | None:
        at = line.find(mark)
        if at < 0:
            return None
        record = json.loads(line[at + len(mark):])
        return Solve(int(record["env_steps"]), float(record["mean_return"]))
    return check


def run_sb3(task: Task, seed: int, cap_s: float, cap_steps: int) -> RunResult:
    """benchmarks/tts_sb3.py (SB3, the RL Zoo's entry, SB3's EvalCallback) in a fresh process."""
    cmd = [sys.executable, "-u", str(HERE / "tts_sb3.py"), "--algo", task.zoo_algo, "--env", task.sb3_env_id,
           "--zoo_entry", task.zoo_entry or task.sb3_env_id, "--threshold", str(task.threshold),
           "--eval_interval_steps", str(task.eval_interval_steps), "--eval_episodes", str(EVAL_EPISODES),
           "--cap_steps", str(cap_steps), "--seed", str(seed)]
    with tempfile.TemporaryDirectory(prefix="tts-sb3-") as tmp:
        solve, solved_s, wall, ended, tail = watch(cmd, marker_check("TTS_SOLVED "), cap_s, Path(tmp))
    setting = f"rl_zoo3 {task.zoo_algo}.yml {task.zoo_entry or task.sb3_env_id} on {task.sb3_env_id}"
    return _result(task, "sb3", seed, solve, solved_s, wall, ended, setting, tail)


def run_sf(task: Task, seed: int, cap_s: float, cap_steps: int) -> RunResult:
    """benchmarks/sf_appo.py ``train --threshold`` (SF's APPO, its training return) in .venv-sf."""
    cmd = [str(SF_PYTHON), "-u", str(HERE / "sf_appo.py"), "train", f"--steps={cap_steps}", f"--seed={seed}",
           f"--window={CLEANRL_WINDOW}", f"--env={task.name}", f"--threshold={task.threshold}"]
    with tempfile.TemporaryDirectory(prefix="tts-sf-") as tmp:
        solve, solved_s, wall, ended, tail = watch(cmd, marker_check("SF_SOLVED "), cap_s, Path(tmp))
    return _result(task, "sf", seed, solve, solved_s, wall, ended, "sf_appo.py APPO (SF_FLAGS)", tail)


# --- CleanRL: the training return's moving mean ----------------------------------------------------

EPISODE_LINE = re.compile(r"global_step=(\d+), episodic_return=\[?\s*([-+0-9.eE]+)")


def cleanrl_check(threshold: float, cap_steps: int, window: int = CLEANRL_WINDOW) -> LineCheck:
    """Solved when the mean of the last ``window`` training episodes' returns reaches ``threshold``."""
    recent: deque[float] = deque(maxlen=window)

    def check(line: str) -> Solve | str | None:
        match = EPISODE_LINE.search(line)
        if match is None:
            return None
        step, episode_return = int(match.group(1)), float(match.group(2))
        recent.append(episode_return)
        mean = sum(recent) / len(recent)
        if len(recent) == window and mean >= threshold:
            return Solve(step, mean)
        return "cap_steps" if step >= cap_steps else None
    return check


def run_cleanrl(task: Task, seed: int, cap_s: float, cap_steps: int, cleanrl_dir: Path, threads: int = 1) -> RunResult:
    """CleanRL's script for the task, unmodified, from its checkout, in .venv-cleanrl (CPU); ``threads`` > 0
    sets ``OMP_NUM_THREADS`` for it (torch's intra-op threads; 0: torch's default, one per core)."""
    assert task.cleanrl_script is not None
    script = cleanrl_dir / "cleanrl" / task.cleanrl_script
    cmd = [str(CLEANRL_PYTHON), "-u", str(script), "--env-id", task.cleanrl_env_id, "--seed", str(seed), "--no-cuda"]
    env = {"PYTHONPATH": str(cleanrl_dir), **({"OMP_NUM_THREADS": str(threads)} if threads > 0 else {})}
    # cwd: they write runs/ under it; PYTHONPATH: their cleanrl_utils; grace 0: their scripts train on
    with tempfile.TemporaryDirectory(prefix="tts-cleanrl-") as tmp:
        solve, solved_s, wall, ended, tail = watch(cmd, cleanrl_check(task.threshold, cap_steps), cap_s, Path(tmp),
                                                   env=env, grace_s=0.0)
    return _result(task, "cleanrl", seed, solve, solved_s, wall, ended,
                   f"cleanrl/{task.cleanrl_script} --env-id {task.cleanrl_env_id} (defaults), OMP_NUM_THREADS={threads or '-'}",
                   tail)


def unavailable(task: Task, system: str, cleanrl_dir: Path) -> str | None:
    """Why ``system`` cannot run ``task`` here (None: it can)."""
    if system == "sb3":
        import importlib.util

        if importlib.util.find_spec("rl_zoo3") is None:
            return "rl_zoo3 is not installed: `time_to_solve.py setup`"
    if system == "sf":
        if not task.sf:
            return "Sample Factory: no setting for this task wired in sf_appo.py"
        if not SF_PYTHON.exists():
            return ".venv-sf is missing: `python3 benchmarks/sf_appo.py setup`"
    if system == "cleanrl":
        if task.cleanrl_script is None:
            return "CleanRL: no script set up for this task (tts_tasks.py says why)"
        if not CLEANRL_PYTHON.exists():
            return ".venv-cleanrl is missing: `time_to_solve.py setup-cleanrl`"
        if not (cleanrl_dir / "cleanrl" / task.cleanrl_script).exists():
            return f"no cleanrl/{task.cleanrl_script} under --cleanrl_dir {cleanrl_dir}"
    return None
