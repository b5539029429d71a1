"""janus train --seeds starts nothing that cannot be stopped and keeps every result: seed runs die
with their parent, --force never moves a folder a live seed holds, each seed's arguments travel as
data, every seed is checked before the first runs, and the aggregate is written whatever a seed did.

Real CartPole DQN runs (local backend) in real processes, sent real signals."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import gymnasium as gym
import pytest

import janus
from janus.cli import main
from janus.harness.run_lock import LOCK_NAME, _alive
from janus.harness.seeds.aggregate import write_aggregate

CARTPOLE = ["--algo", "dqn", "--env", "CartPole-v1", "--backend", "local"]
LONG = [*CARTPOLE, "--total_env_steps", "1000000", "--results_interval_s", "0.5"]
ENV = {**os.environ, "PYTHONPATH": str(Path(janus.__file__).parents[1])}  # this checkout's code


def _janus(*argv: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "janus", *argv], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, env=ENV)


def _wait_until(done: Any, what: str, proc: subprocess.Popen[str] | None = None, timeout_s: float = 120) -> None:
    deadline = time.monotonic() + timeout_s
    while not done():
        assert proc is None or proc.poll() is None, f"{what}: the process ended ({proc.returncode})"
        assert time.monotonic() < deadline, f"{what}: not within {timeout_s:.0f} s"
        time.sleep(0.1)


def _lock_pid(folder: Path) -> int:
    return int(json.loads((folder / LOCK_NAME).read_text())["pid"])


def _training(out: Path, seeds: tuple[int, ...]) -> bool:
    return all((out / f"seed-{s}" / "results.json").is_file() and (out / f"seed-{s}" / LOCK_NAME).is_file()
               for s in seeds)


def _status(folder: Path) -> str:
    return str(json.loads((folder / "results.json").read_text())["runs"][0]["status"])


def test_the_seed_runs_die_with_a_killed_parent_and_keep_what_they_ran(tmp_path: Path) -> None:
    out = tmp_path / "seeds"
    proc = _janus("train", *LONG, "--seeds", "0", "1", "--out", str(out))
    children: list[int] = []
    try:
        _wait_until(lambda: _training(out, (0, 1)), "both seeds training", proc)
        children = [_lock_pid(out / f"seed-{s}") for s in (0, 1)]
        proc.send_signal(signal.SIGKILL)  # no handler, no clean-up: the children must notice alone
        proc.wait(timeout=30)
        _wait_until(lambda: not any(_alive({"pid": pid, "host": os.uname().nodename}) for pid in children),
                    "the orphaned seed runs ending", timeout_s=90)
    finally:
        if proc.poll() is None:
            proc.kill()
        for pid in children:  # only if the test failed: never leave them running
            if _alive({"pid": pid, "host": os.uname().nodename}):
                os.kill(pid, signal.SIGKILL)
    for s in (0, 1):  # each stopped as on SIGTERM: its results written, its lock released
        assert _status(out / f"seed-{s}") == "interrupted"
        assert not (out / f"seed-{s}" / LOCK_NAME).exists()


def test_a_seed_whose_pipe_to_its_parent_closes_stops_without_the_kernels_signal() -> None:
    # the portable half (no prctl, as on macOS): the watchdog on the pipe alone sends the SIGTERM
    script = ("import os, sys, time\n"
              "sys.platform = 'darwin'\n"
              "from janus.harness.seeds import child as seed_child\n"
              "assert seed_child.die_with_parent(os.getppid(), sys.stdin.buffer)\n"
              "print('watching', flush=True)\n"
              "time.sleep(120)\n")
    child = subprocess.Popen([sys.executable, "-c", script], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             text=True, env=ENV)
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "watching"
        assert child.stdin is not None
        child.stdin.close()  # what the parent's death does to the pipe
        assert child.wait(timeout=60) == -signal.SIGTERM
    finally:
        if child.poll() is None:
            child.kill()


def test_force_never_moves_a_folder_that_a_live_run_below_it_holds(tmp_path: Path,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "seeds"
    out.mkdir()
    (out / "aggregate.json").write_text("{}")  # an old multi-seed folder, one seed of which still runs
    proc = _janus("train", *LONG, "--out", str(out / "seed-0"))
    try:
        _wait_until(lambda: _training(out, (0,)), "the seed's run training", proc)
        assert main(["train", *CARTPOLE, "--total_env_steps", "300", "--out", str(out), "--force"]) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and f"pid {proc.pid}" in err and str(out / "seed-0" / LOCK_NAME) in err, err
        assert (out / "seed-0" / LOCK_NAME).is_file() and not list(tmp_path.glob("seeds.old-*"))  # not moved
    finally:
        proc.send_signal(signal.SIGINT)
        proc.communicate(timeout=120)
    assert _status(out / "seed-0") == "interrupted"


def test_each_seeds_arguments_travel_as_data_so_odd_values_arrive_as_given(tmp_path: Path) -> None:
    # --out=-dash: a folder whose name starts with a dash; --config /dev/stdin: a file only the parent
    # can read (once), so each seed must get the configuration itself, not the path to read again
    config = "workload:\n  total_env_steps: 300\nalgorithm:\n  learning_starts: 50\n"
    done = subprocess.run([sys.executable, "-m", "janus", "train", *CARTPOLE, "--config", "/dev/stdin", "--seeds",
                           "0", "1", "--out=-dash", "--name=-x --not-a-flag"], input=config, capture_output=True,
                          text=True, cwd=tmp_path, env=ENV, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    for s in (0, 1):
        run = json.loads((tmp_path / "-dash" / f"seed-{s}" / "results.json").read_text())["runs"][0]
        assert run["status"] == "finished" and run["config"]["seed"] == s
        assert run["config"]["name"] == "-x --not-a-flag"
        assert run["config"]["workload"]["total_env_steps"] == 300 and run["config"]["algorithm"]["learning_starts"] == 50
    data = json.loads((tmp_path / "-dash" / "aggregate.json").read_text())
    assert [r["status"] for r in data["per_seed"]] == ["finished", "finished"]


@pytest.mark.parametrize(("seeds", "message"), [
    (["0", str(2**32)], "invalid --seeds: got 4294967296; accepted: integers in [0, 4,294,967,295]"),
    (["1", "0", str(2**40)], "invalid --seeds: got 1099511627776"),
])
def test_every_seed_is_checked_before_the_first_runs(seeds: list[str], message: str, tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["train", *CARTPOLE, "--total_env_steps", "300", "--seeds", *seeds, "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1
    assert not (tmp_path / "o").exists()  # seed 0 never ran


def test_the_aggregate_is_written_whatever_each_seed_did(tmp_path: Path) -> None:
    def seed_folder(seed: int, status: str | None, text: str | None = None) -> Path:
        folder = tmp_path / f"seed-{seed}"
        folder.mkdir()
        if status is not None:
            run = {"status": status, "final_mean_return": 10.0 * (seed + 1), "env_steps_per_s": 100.0, "episodes": 4,
                   "learning_curve": {"env_steps": [10, 20], "return": [1.0, 2.0]}}
            (folder / "results.json").write_text(json.dumps({"runs": [run]}))
        if text is not None:
            (folder / "results.json").write_text(text)
        return folder

    folders = {0: seed_folder(0, "finished"), 1: seed_folder(1, "running"),  # killed before its final write
               2: seed_folder(2, None, '{"runs": [{"status": "fin'),  # cut off mid-file by a full disk
               3: seed_folder(3, None), 4: seed_folder(4, "stopped"), 5: tmp_path / "seed-5"}
    codes = {0: 0, 1: -signal.SIGKILL, 2: 1, 3: -signal.SIGTERM, 4: 0, 5: None}
    table, paths, failed = write_aggregate(tmp_path, folders, codes, {})
    data = json.loads((tmp_path / "aggregate.json").read_text())
    assert failed and paths[0] == tmp_path / "aggregate.json"
    assert [r["status"] for r in data["per_seed"]] == [
        "finished", "killed (SIGKILL)", "failed (exit code 1); its results.json cannot be read (JSONDecodeError)",
        "killed (SIGTERM)", "stopped", "not run"]
    assert data["bootstrap"]["samples"] == 3  # what seeds 0, 1 and 4 measured
    assert "killed (SIGKILL)" in table and "not run" in table


@pytest.mark.slow
def test_a_seed_killed_mid_run_is_in_the_aggregate_as_killed(tmp_path: Path) -> None:
    out = tmp_path / "seeds"
    proc = _janus("train", *LONG, "--seeds", "0", "1", "--out", str(out))
    try:
        _wait_until(lambda: _training(out, (0, 1)), "both seeds training", proc)
        lines: list[str] = []
        reader = threading.Thread(target=lambda: lines.extend(iter(proc.stdout.readline, "")), daemon=True)  # type: ignore[union-attr]
        reader.start()
        os.kill(_lock_pid(out / "seed-1"), signal.SIGKILL)
        _wait_until(lambda: any(line.startswith("seed 1: failed") for line in lines), "the parent seeing it", proc)
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=120)
        reader.join(timeout=30)
        printed = "".join(lines)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, printed
    data = json.loads((out / "aggregate.json").read_text())
    assert [r["status"] for r in data["per_seed"]] == ["interrupted", "killed (SIGKILL)"], printed


def test_a_failing_in_process_seed_raises_its_own_error_and_the_aggregate_is_written(tmp_path: Path) -> None:
    broken: list[bool] = []

    def factory() -> gym.Env:
        if broken:  # once seed 1 failed, the factory fails too: its error must not replace seed 1's
            raise ValueError("the env factory cannot make an env any more")
        return gym.make("CartPole-v1")

    class BreaksInSeedOne(janus.Callback):
        progress_every_s = 0.0
        seed = -1

        def on_start(self, run: Any) -> None:
            self.seed = run.seed

        def on_progress(self, stats: Any) -> bool:
            if self.seed == 1:
                broken.append(True)
                raise RuntimeError("the callback broke in seed 1")
            return False

    with pytest.raises(Exception, match="the callback broke in seed 1"):
        janus.train("dqn", env=factory, seeds=[0, 1], out=tmp_path / "o", backend="local", total_env_steps=300,
                    learning_starts=50, callbacks=[BreaksInSeedOne()])
    data = json.loads((tmp_path / "o" / "aggregate.json").read_text())
    assert data["per_seed"][0]["status"] == "finished" and data["per_seed"][1]["status"] != "finished"


def test_a_second_signal_inside_the_first_ones_handler_never_loses_the_first(monkeypatch: pytest.MonkeyPatch) -> None:
    """Two SIGTERMs in quick succession (a seed's parent-death signal and its watchdog's): Python may run
    the handler for the second inside the first's call. The first still stops the run (it raises);
    the second only prints the note. Before, both calls read the count after the second's increment,
    both took the note branch, and the run trained on after its parent was gone."""
    from janus import stopping

    handler = stopping.StopSignals()
    real = signal.Signals
    nested: list[BaseException | None] = []

    def signals_reentered(value: int) -> signal.Signals:
        if not nested:  # the second signal arrives while the first call is running
            try:
                nested.append(None)
                handler(signal.SIGTERM, None)
            except BaseException as exc:  # noqa: BLE001 - what the nested call raised, if anything
                nested[0] = exc
        return real(value)

    monkeypatch.setattr(stopping.signal, "Signals", signals_reentered)
    with pytest.raises(stopping.Terminated):
        handler(signal.SIGTERM, None)  # the first: raises, where the run can be interrupted
    assert nested == [None]  # the second (nested) one only printed the note
    assert handler.count == 2 and handler.first == "SIGTERM" and handler.delivered
