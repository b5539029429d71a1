"""Issue 12, items 1, 2, 3 and 8: a run folder is a unit of trust.

Every numbered case of the issue runs as a real ``janus`` subprocess (this checkout's code) with a
tiny budget, except the commands refused while their flags are checked, before any work: those run
in this process (``cli.main``, :func:`janus_here`), the same parsing, checks, message and exit code
without a subprocess's ~2 s of start-up each. A refused or failed command must leave the run
folder byte-identical: every file under it is hashed before and after.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path

import pytest

from janus.cli import main
from janus.errors import RunFolderError
from janus.harness import resume_checks, run_folder
from janus.harness.run_lock import LOCK_NAME

REPO = Path(__file__).resolve().parents[2]
HOOKS = REPO / "tests" / "reliability" / "hooks"
STEPS = 1500  # the env steps of finished_dqn_run (tests/conftest.py): its run folder is the base of most tests
SYNTHETIC = ["--quick", "--iterations", "3", "--config", str(REPO / "configs" / "default.yaml")]


def janus_env(fail_after: int | None = None) -> dict[str, str]:
    """This checkout's code (and, on request, the test hooks of tests/reliability/hooks)."""
    paths = ([str(HOOKS)] if fail_after is not None else []) + [str(REPO / "src")]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": os.pathsep.join(paths)}
    env.pop("JANUS_TEST_FAIL_AFTER", None)
    env.pop("JANUS_TEST_CAPTURE", None)
    if fail_after is not None:
        env["JANUS_TEST_FAIL_AFTER"] = str(fail_after)
    return env


def janus(*args: str, env: dict[str, str] | None = None, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "janus.cli", *args], capture_output=True, text=True,
                          timeout=240, env=env or janus_env(), cwd=cwd)


JanusHere = Callable[..., subprocess.CompletedProcess[str]]


@pytest.fixture
def janus_here(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> JanusHere:
    """``janus_here(*args, cwd=None)``: ``janus ARGS`` in this process, its exit code and output as
    :func:`janus` returns them. Only for commands refused before any work: a command that runs
    would share this process's threads and signals with the test."""
    def run(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
        if cwd is not None:
            monkeypatch.chdir(cwd)
        capsys.readouterr()
        code = main(list(args))
        said = capsys.readouterr()
        return subprocess.CompletedProcess(["janus", *args], code, said.out, said.err)
    return run


def hashes(folder: Path) -> dict[str, str]:
    """``{relative path: sha256}`` of every file under ``folder`` (folders as ``"dir"``)."""
    out = {}
    for path in sorted(folder.rglob("*")):
        rel = path.relative_to(folder).as_posix()
        out[rel] = "dir" if path.is_dir() else hashlib.sha256(path.read_bytes()).hexdigest()
    return out


def refused(proc: subprocess.CompletedProcess[str], *needles: str) -> None:
    """Exit 2 with a one-line ``janus <cmd>: error: ...`` holding every needle, no traceback."""
    assert proc.returncode == 2, f"exit {proc.returncode}\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}"
    assert "Traceback" not in proc.stderr and ": error: " in proc.stderr, proc.stderr[-3000:]
    for needle in needles:
        assert needle in proc.stderr, f"{needle!r} not in: {proc.stderr[-2000:]}"


@pytest.fixture
def run(finished_dqn_run: Path, tmp_path: Path) -> Path:
    """A private copy of the session's finished CartPole DQN run (tests/conftest.py: checkpoint,
    config.yaml, results; seed 1, ``STEPS`` env steps)."""
    copy = tmp_path / "R"
    shutil.copytree(finished_dqn_run, copy)
    return copy


# ---- item 2: a new run refuses an existing run folder; --force moves it aside ----------------------
def test_a_new_run_refuses_an_existing_run_folder_and_force_moves_it_aside(run: Path, janus_here: JanusHere) -> None:
    before = hashes(run)
    proc = janus_here("train", "--algo", "ppo", "--total_env_steps", "500", "--out", str(run))
    refused(proc, f"--out {str(run)!r}", "--resume", "--force")
    assert hashes(run) == before

    proc = janus("train", "--algo", "ppo", "--total_env_steps", "500", "--out", str(run), "--force")
    assert proc.returncode == 0, proc.stderr[-3000:]
    (aside,) = [p for p in run.parent.iterdir() if p.name.startswith("R.old-")]
    assert f"moved the existing {run} aside to {aside}" in proc.stdout
    assert hashes(aside) == before, "the old run is kept whole, never deleted"
    assert (run / "checkpoint" / "trainer.pt").is_file()
    assert not (run / "checkpoint" / "trajectory_manager.pt").exists(), "no DQN replay beside the PPO run"
    assert json.loads((run / "results.json").read_text())["runs"][0]["config"]["workload"]["algo"] == "ppo"
    assert not (run / LOCK_NAME).exists() and not (aside / LOCK_NAME).exists()


@pytest.mark.parametrize("command", [["compare"], pytest.param(["eval", "--sweep", "overlap"], marks=pytest.mark.slow)])
def test_compare_and_eval_refuse_an_existing_out_folder(tmp_path: Path, command: list[str],
                                                        janus_here: JanusHere) -> None:
    out = tmp_path / "out"
    out.mkdir()
    (out / "results.json").write_text("{}")
    refused(janus_here(*command, *SYNTHETIC, "--out", str(out)), f"--out {str(out)!r}", "--force")
    assert hashes(out) == {"results.json": hashlib.sha256(b"{}").hexdigest()}
    proc = janus(*command, *SYNTHETIC, "--out", str(out), "--force")
    assert proc.returncode == 0, proc.stderr[-3000:]
    (aside,) = [p for p in tmp_path.iterdir() if p.name.startswith("out.old-")]
    assert (aside / "results.json").read_text() == "{}" and json.loads((out / "results.json").read_text())["runs"]


def test_a_new_run_refuses_a_checkpoint_dir_that_holds_another_runs_checkpoint(run: Path, tmp_path: Path,
                                                                              janus_here: JanusHere) -> None:
    """runtime.checkpoint_dir chosen in the YAML, outside the run folder, is protected the same way."""
    ckpt = run / "checkpoint"
    before = hashes(ckpt)
    config = tmp_path / "c.yaml"
    config.write_text(f"runtime:\n  checkpoint_dir: {ckpt}\nworkload:\n  total_env_steps: 1000\n")
    proc = janus_here("train", "--algo", "dqn", "--config", str(config), "--out", str(tmp_path / "new"))
    refused(proc, f"runtime.checkpoint_dir {str(ckpt)!r}", "--resume")
    assert hashes(ckpt) == before and not (tmp_path / "new").exists()


def test_default_out_folders_never_collide(tmp_path: Path) -> None:
    """Eight commands starting in the same second each get a folder of their own."""
    got: list[Path] = []
    threads = [threading.Thread(target=lambda: got.append(run_folder.claim_default("compare", tmp_path / "runs")))
               for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(set(got)) == 8 and all(p.is_dir() and not any(p.iterdir()) for p in got)


# ---- item 2: a lock stops two runs sharing one folder ----------------------------------------------
def test_a_second_run_into_a_locked_folder_exits_2_naming_the_lock(tmp_path: Path, janus_here: JanusHere) -> None:
    out = tmp_path / "R"
    # --backend local: the lock is the run folder's on every backend, and no worker processes then
    # take the CPU from the run's start-up. The second commands are refused before any work, so
    # they run in this process (janus_here): another process than the run's, as a second janus is
    first = subprocess.Popen([sys.executable, "-m", "janus.cli", "train", "--algo", "dqn", "--backend", "local",
                              "--total_env_steps", "10000000", "--out", str(out)], env=janus_env(), stdout=subprocess.DEVNULL,
                             stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while not ((out / LOCK_NAME).is_file() and (out / "config.yaml").is_file()):
            assert first.poll() is None and time.monotonic() < deadline, "the first run did not start"
            time.sleep(0.1)
        seconds = [["train", "--algo", "dqn", "--out", str(out)],
                   ["train", "--algo", "dqn", "--out", str(out), "--force"],
                   ["train", "--resume", str(out), "--total_env_steps", "20000000"]]
        started = time.monotonic()
        for proc in [janus_here(*argv) for argv in seconds]:
            refused(proc, str(out / LOCK_NAME), f"pid {first.pid}", "in use by another janus run")
        assert time.monotonic() - started < 60, "refused at once, not after a run"
        assert first.poll() is None, "the first run goes on"
        assert not [p for p in tmp_path.iterdir() if p.name.startswith("R.old-")], "--force never moves a live run"
    finally:
        first.send_signal(signal.SIGTERM)
        first.wait(timeout=120)
    assert not (out / LOCK_NAME).exists(), "the lock is released at exit"


def test_a_stale_lock_of_a_dead_process_is_taken_over(tmp_path: Path) -> None:
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    out = tmp_path / "R"
    out.mkdir()
    (out / LOCK_NAME).write_text(json.dumps({"pid": dead.pid, "host": socket.gethostname(), "started": 0}))
    proc = janus("train", *SYNTHETIC, "--out", str(out))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert f"taking over the stale lock {out / LOCK_NAME} of pid {dead.pid}" in proc.stdout
    assert (out / "results.json").is_file() and not (out / LOCK_NAME).exists()


# ---- item 1: a refused or failed resume leaves the run folder byte-identical -----------------------
def test_the_issue_repro_resume_with_another_env_is_refused_and_changes_nothing(run: Path) -> None:
    before = hashes(run)
    with ThreadPoolExecutor(2) as pool:  # the refused resume and a rollout, which only reads: at once
        resume = pool.submit(janus, "train", "--resume", str(run), "--env", "Acrobot-v1")
        rollout = pool.submit(janus, "rollout", "--checkpoint", str(run), "--episodes", "1")
    refused(resume.result(), "--env", "'CartPole-v1' in the run", "'Acrobot-v1' asked", "may change only", "--total_env_steps")
    assert hashes(run) == before  # after both: neither changed the folder
    rollout = rollout.result()
    assert rollout.returncode == 0 and "CartPole-v1" in rollout.stdout, rollout.stderr[-3000:]


@pytest.mark.parametrize("flags,named", [
    (["--algo", "ppo"], "--algo"),
    (["--buffer_capacity", "1000"], "--buffer_capacity"),
    (["--prioritized"], "--prioritized"),
    (["--seed", "7"], "--seed"),
    (["--num_workers", "3"], "--num_actors/--num_workers"),
])
def test_a_resume_may_not_change_what_the_checkpoint_fixes(run: Path, flags: list[str], named: str,
                                                         janus_here: JanusHere) -> None:
    before = hashes(run)
    refused(janus_here("train", "--resume", str(run), "--total_env_steps", "5000", *flags), named, "may change only")
    assert hashes(run) == before


def test_a_resume_may_restate_the_runs_own_hyperparameters(run: Path, janus_here: JanusHere) -> None:
    """A hyperparameter left at its preset is not in the run's config.yaml: restating its value on
    --resume was refused as a change ("algorithm.lr: None in the run, 0.0005 asked")."""
    before = hashes(run)
    proc = janus_here("train", "--resume", str(run), "--total_env_steps", "5000", "--lr", "0.01")
    refused(proc, "cannot change --lr (--lr: 0.0005 in the run, 0.01 asked)")
    assert hashes(run) == before
    proc = janus("train", "--resume", str(run), "--total_env_steps", str(STEPS + 100), "--lr", "0.0005",
                 "--hidden_size", "128", "--double_q", "true", "--seed", "1")
    assert proc.returncode == 0, proc.stderr[-3000:]


def test_a_resume_may_change_how_often_results_are_written(run: Path) -> None:
    """--results_interval_s fixes nothing in the checkpoint (README: timing may change); it was refused."""
    stored = resume_checks.stored_config(run)
    resume_checks.check_changes(run, stored, replace(stored, runtime=replace(stored.runtime, results_interval_s=5.0)))


@pytest.mark.parametrize("key, value, named", [
    ("hidden", [64], "cannot change --net_arch/--hidden_size/--num_layers ("),
    ("activation", "tanh", "cannot change --activation ("),
])
def test_a_resume_may_not_change_the_network(run: Path, key: str, value: object, named: str) -> None:
    stored = resume_checks.stored_config(run)
    with pytest.raises(RunFolderError) as err:
        resume_checks.check_changes(run, stored, replace(stored, algorithm={**stored.algorithm, key: value}))
    assert named in str(err.value)


@pytest.mark.parametrize("flags,named", [
    (["--out", "elsewhere"], "--out 'elsewhere' with --resume"),
    (["--quick"], "--quick with --resume"),
    (["--force"], "--force with --resume"),
    (["--config", str(REPO / "configs" / "default.yaml")], "--config with --resume"),
])
def test_flags_that_contradict_resume_are_errors(run: Path, flags: list[str], named: str,
                                               janus_here: JanusHere) -> None:
    before = hashes(run)
    refused(janus_here("train", "--resume", str(run), "--total_env_steps", "5000", *flags, cwd=run.parent), named)
    assert hashes(run) == before and not (run.parent / "elsewhere").exists()


def test_a_resume_that_fails_inside_the_run_leaves_the_folder_byte_identical(run: Path) -> None:
    """The learner raises at its first update after the resume: nothing was committed, so nothing
    in the folder changed (config.yaml included); the next resume then runs and updates config.yaml."""
    before = hashes(run)
    failed = janus("train", "--resume", str(run), "--total_env_steps", "4000", env=janus_env(fail_after=0))
    assert failed.returncode != 0 and "injected learner failure" in failed.stderr, failed.stderr[-3000:]
    assert hashes(run) == before

    done = janus("train", "--resume", str(run), "--total_env_steps", "2500")
    assert done.returncode == 0, done.stderr[-3000:]
    assert "total_env_steps: 2500" in (run / "config.yaml").read_text(), "written once the resumed run committed"


def test_a_resumed_run_writes_its_config_as_soon_as_it_has_committed(run: Path) -> None:
    """config.yaml follows the first commit of the resumed run while it runs: a SIGKILL later
    leaves a config that matches the newer checkpoint."""
    state = run / "checkpoint" / "run_state.json"
    seq = json.loads(state.read_text())["seq"]
    proc = subprocess.Popen([sys.executable, "-m", "janus.cli", "train", "--resume", str(run), "--total_env_steps",
                             "10000000", "--checkpoint_interval_s", "0.3"], env=janus_env(),
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while "total_env_steps: 10000000" not in (run / "config.yaml").read_text():
            assert proc.poll() is None and time.monotonic() < deadline, proc.stderr.read() if proc.stderr else ""
            time.sleep(0.1)
        assert json.loads(state.read_text())["seq"] > seq, "config.yaml was written before the resumed run committed"
    finally:
        proc.kill()
        proc.wait(timeout=60)
    assert "checkpoint_interval_s: 0.3" in (run / "config.yaml").read_text()


# ---- item 3: a resume past its budget is an error, not a 0.05 s "run" ------------------------------
def test_a_resume_whose_budget_is_reached_is_refused_and_keeps_the_results(run: Path, janus_here: JanusHere) -> None:
    before = hashes(run)
    env_steps = json.loads((run / "checkpoint" / "run_state.json").read_text())["env_steps"]
    for budget in ("1000", str(STEPS)):
        proc = janus_here("train", "--resume", str(run), "--total_env_steps", budget)
        refused(proc, f"already at {env_steps:,} env steps", f"--total_env_steps {int(budget):,}",
                "results.json and results.csv are as they were")
    assert hashes(run) == before


@pytest.mark.parametrize("how", ["deleted", "emptied"])
def test_a_resume_whose_checkpoint_folder_is_gone_is_refused_and_keeps_the_results(run: Path, how: str,
                                                                                   janus_here: JanusHere) -> None:
    """Starting from scratch would replace the finished run's results under its name."""
    steps = json.loads((run / "results.json").read_text())["runs"][-1]["counts"]["env_steps"]
    shutil.rmtree(run / "checkpoint")
    if how == "emptied":
        (run / "checkpoint").mkdir()
    before = hashes(run)
    proc = janus_here("train", "--resume", str(run), "--total_env_steps", str(2 * STEPS))
    refused(proc, f"results.json records {steps:,} env steps",
            f"checkpoint folder {run / 'checkpoint'} is {'gone' if how == 'deleted' else 'empty'}", "was not changed")
    assert hashes(run) == before


def test_a_resume_of_a_run_that_keeps_no_checkpoint_is_refused_and_keeps_the_results(tmp_path: Path,
                                                                                      janus_here: JanusHere) -> None:
    """The synthetic workload checkpoints nothing: a --resume ran it again from scratch and replaced
    the run's results under its name, with no word of it."""
    out = tmp_path / "syn"
    proc = janus("train", *SYNTHETIC, "--out", str(out))
    assert proc.returncode == 0, proc.stderr[-3000:]
    before = hashes(out)
    for more in ([], ["--iterations", "6"]):
        proc = janus_here("train", "--resume", str(out), *more)
        refused(proc, f"--resume {str(out)!r}", "synthetic", "no checkpoint", "--out", "was not changed")
    assert hashes(out) == before


def test_a_run_killed_before_its_first_commit_resumes_from_scratch(run: Path) -> None:
    """Its checkpoint folder (made at start) holds no commit yet; its periodic results.json may be there."""
    for path in (run / "checkpoint").iterdir():
        if path.name != "run.json":
            path.unlink()
    proc = janus("train", "--resume", str(run), "--total_env_steps", str(STEPS))
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "no committed checkpoint" in proc.stdout and "starting from scratch" in proc.stdout
    assert json.loads((run / "checkpoint" / "run_state.json").read_text())["env_steps"] >= STEPS  # whole vector steps


# ---- item 8: bad --out paths are clear errors before any work ---------------------------------------
def test_out_naming_a_file_or_a_path_under_a_file_is_an_error(tmp_path: Path, janus_here: JanusHere) -> None:
    file = tmp_path / "F"
    file.write_text("keep me")
    refused(janus_here("train", *SYNTHETIC, "--out", str(file)), f"--out {str(file)!r}", "is a file, not a folder")
    refused(janus_here("compare", *SYNTHETIC, "--out", str(file / "sub")), f"{str(file)!r} is a file, not a folder")
    assert file.read_text() == "keep me" and sorted(p.name for p in tmp_path.iterdir()) == ["F"]


def test_out_in_a_place_that_cannot_be_written_is_an_error(tmp_path: Path, janus_here: JanusHere) -> None:
    place = Path("/sys/janus-run-folder-test")  # root may write almost anywhere, but not into sysfs
    try:
        place.mkdir()
    except OSError:
        pass
    else:
        place.rmdir()
        pytest.skip("this machine lets the test create a folder under /sys")
    refused(janus_here("train", *SYNTHETIC, "--out", str(place / "R")), f"--out {str(place / 'R')!r}", "cannot create the folder")


def test_a_resume_that_commits_nothing_puts_the_best_policy_back(tmp_path: Path) -> None:
    """Periodic evaluation may write RUN_DIR/best/policy.pt before a resumed run's first commit: a
    run that then commits nothing leaves it as it was (and removes one it created)."""
    from janus.harness.resume_commit import ResumeCommit

    best = tmp_path / "best" / "policy.pt"
    best.parent.mkdir()
    best.write_bytes(b"the best policy of the committed run")
    guard = ResumeCommit(tmp_path / "config.yaml", "new config", tmp_path / "no-commit", best)  # nothing ever commits
    guard.start()
    best.write_bytes(b"written by the resumed run, which then failed")
    guard.finish()
    assert best.read_bytes() == b"the best policy of the committed run"
    assert not (tmp_path / "config.yaml").exists()
    best.unlink()
    guard = ResumeCommit(tmp_path / "config.yaml", "new config", tmp_path / "no-commit", best)
    guard.start()
    best.write_bytes(b"created by the failed run")
    guard.finish()
    assert not best.exists()
