"""Checkpoints, `janus train --resume` and `janus rollout` on the local runtime."""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

import pytest
import torch

from janus.buffer.storage.state_file import load_state
from janus.cli import main


def _train(out: Path, *extra: str) -> None:
    assert main(["train", "--algo", "dqn", "--total_env_steps", "3000", "--seed", "1", "--out", str(out), *extra]) == 0


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The run of ``_train``, made once per module: the tests that only read it share it, the others copy it."""
    out = tmp_path_factory.mktemp("trained") / "run"
    before = torch.get_num_threads()
    torch.set_num_threads(1)  # as the one_thread fixture, which is per test and so not yet in effect here
    try:
        _train(out)
    finally:
        torch.set_num_threads(before)
    return out


def test_resume_restores_policy_optimiser_counters_and_replay(trained: Path, tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    run = tmp_path / "run"
    shutil.copytree(trained, run)  # this test resumes it: a private copy
    ckpt = run / "checkpoint"
    assert {p.name for p in ckpt.iterdir()} >= {"trainer.pt", "trajectory_manager.pt", "run_state.json"}
    trainer = load_state(ckpt / "trainer.pt", fmt="janus.trainer")
    replay = load_state(ckpt / "trajectory_manager.pt", fmt="janus.trajectory_manager")
    state = json.loads((ckpt / "run_state.json").read_text())
    assert state["trained"] == trainer["trained"] > 0 and state["env_steps"] > 0

    # resuming with the budget already spent is refused and changes nothing (issue 12, item 3)
    before = {p.name: p.read_bytes() for p in [*run.iterdir(), *ckpt.iterdir()] if p.is_file()}
    capsys.readouterr()
    assert main(["train", "--resume", str(run), "--total_env_steps", "3000"]) == 2
    assert f"already at {state['env_steps']:,} env steps" in capsys.readouterr().err
    assert {p.name: p.read_bytes() for p in [*run.iterdir(), *ckpt.iterdir()] if p.is_file()} == before

    # resuming with a larger budget restores everything and continues the counters and the learning curve
    assert main(["train", "--resume", str(run), "--total_env_steps", "5000"]) == 0
    said = capsys.readouterr().out
    assert f"resuming from the end of the last run: {state['trained']:,} updates, {state['env_steps']:,} env steps" in said
    assert f"{replay['inserted']:,} transitions in replay" in said
    replay2 = load_state(ckpt / "trajectory_manager.pt", fmt="janus.trajectory_manager")
    n = replay["buffer"]["written"]
    assert replay2["inserted"] > replay["inserted"] and replay2["buffer"]["written"] >= n
    for field, data in replay["buffer"]["data"].items():  # the saved items came back, in their slots
        assert torch.equal(data[:n], replay2["buffer"]["data"][field][:n]), field
    state3 = json.loads((ckpt / "run_state.json").read_text())
    assert state3["trained"] > state["trained"] and state3["env_steps"] > state["env_steps"]
    curve = json.loads((run / "results.json").read_text())["runs"][0]["learning_curve"]
    assert curve["env_steps"] == sorted(curve["env_steps"]) and len(curve["return"]) >= len(state["curve"])


def test_rollout_runs_the_saved_policy(trained: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["rollout", "--checkpoint", str(trained), "--episodes", "3"]) == 0  # rollout only reads the folder
    out = capsys.readouterr().out
    assert "3 episodes" in out and "mean return" in out and "CartPole-v1" in out


def test_resume_and_rollout_of_a_folder_that_is_no_run_are_clear_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["train", "--resume", str(tmp_path)]) == 2
    assert "--resume" in capsys.readouterr().err
    assert main(["rollout", "--checkpoint", str(tmp_path)]) == 2
    assert "no policy checkpoint" in capsys.readouterr().err


@pytest.fixture(scope="module")
def prioritized(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A prioritized 2-step DQN run (with TensorBoard events where tensorboard is installed), made
    once for the two tests that read it: its flags and files, and its PER exponent's schedule."""
    import importlib.util

    out = tmp_path_factory.mktemp("prioritized") / "per"
    argv = ["train", "--algo", "dqn", "--prioritized", "--n_step", "2", "--total_env_steps", "2500",
            "--learning_starts", "400", "--results_interval_s", "0.5", "--out", str(out)]
    tensorboard = importlib.util.find_spec("tensorboard") is not None
    before = torch.get_num_threads()
    torch.set_num_threads(1)  # as the one_thread fixture, which is per test and so not yet in effect here
    try:
        assert main(argv + (["--tensorboard"] if tensorboard else [])) == 0
    finally:
        torch.set_num_threads(before)
    return out


def test_prioritized_nstep_and_tensorboard_flags(prioritized: Path) -> None:
    import yaml

    pytest.importorskip("tensorboard", reason="tensorboard not installed (optional extra)")
    out = prioritized
    algorithm = yaml.safe_load((out / "config.yaml").read_text())["algorithm"]  # every hyperparameter (issue 35)
    assert algorithm["prioritized"] is True and algorithm["n_step"] == 2 and algorithm["gamma"] == 0.99
    replay = load_state(out / "checkpoint" / "trajectory_manager.pt", fmt="janus.trajectory_manager")
    assert replay["buffer"]["sampler"] == "prioritized"
    assert any(p.name.startswith("events.out.tfevents") for p in (out / "tensorboard").rglob("*"))


def test_per_beta_is_annealed_to_per_beta_final_over_the_run(prioritized: Path) -> None:
    """Issue 35 item 7: --per_beta's help promised annealing to 1 and the exponent stayed 0.4 all run.
    It rises from per_beta to per_beta_final (default 1.0) over the run's updates, as the results'
    training metrics show (a row: the mean over its updates). The run of ``prioritized`` (shared
    with the test above: one run instead of two, ~6 s)."""

    out = prioritized
    metrics = json.loads((out / "results.json").read_text())["runs"][0]["train_metrics"]
    beta, updates = metrics["per_beta"], metrics["updates"]  # a row: the mean over its updates (every 2 s)
    assert beta == sorted(beta) and 0.4 <= beta[0] <= beta[-1] <= 1.0, beta
    if len(beta) > 1:  # a quick run on a quiet machine may close a single row
        assert beta[0] < beta[-1], beta
    # over the whole run a linear ramp from 0.4 to 1.0 averages 0.7 (a fixed exponent: 0.4)
    weights = [b - a for a, b in zip([0, *updates[:-1]], updates, strict=True)]
    mean = sum(w * b for w, b in zip(weights, beta, strict=True)) / sum(weights)
    assert mean == pytest.approx(0.7, abs=0.05), (beta, updates)


def test_per_beta_schedule_spans_the_budget_and_continues_from_the_trained_count(monkeypatch: pytest.MonkeyPatch) -> None:
    """The replay of a prioritized DQN run starts at --per_beta and reaches --per_beta_final at the
    budget's last update; a resumed run continues from the updates it had trained."""
    from janus.algorithms.base import algorithm
    from janus.cli import config_from_args, parse_args
    from janus.config import resolve
    from janus.runtime import wiring
    from janus.runtime.plan import RunPlan

    argv = ["train", "--algo", "dqn", "--prioritized", "--per_beta", "0.5", "--per_beta_final", "0.9",
            "--total_env_steps", "3000", "--backend", "local"]
    cfg = resolve(config_from_args(parse_args(argv)))
    total = algorithm("dqn").budget(cfg).total_updates
    for trained, beta in ((0, 0.5), (total // 2, 0.7), (total, 0.9), (2 * total, 0.9)):
        plan = dataclasses.replace(RunPlan.of(cfg), resumed={"trained": trained} if trained else {})
        buffer = wiring.make_buffer(plan)
        try:
            assert buffer.beta == pytest.approx(beta), trained
        finally:
            buffer.close()


def test_process_backend_checkpoints_and_resumes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Worker processes over shared memory: the same commit, the same resume (here across backends)."""
    run = tmp_path / "run"
    # 2,000 steps and two resumes of 1,000 each (learning starts at 1,000): each part trains, and
    # starting worker processes, not the steps, is what takes the time
    assert main(["train", "--algo", "dqn", "--total_env_steps", "2000", "--seed", "1", "--out", str(run), "--backend", "process"]) == 0
    ckpt = run / "checkpoint"
    state = json.loads((ckpt / "run_state.json").read_text())
    replay = load_state(ckpt / "trajectory_manager.pt", fmt="janus.trajectory_manager")
    assert state["trained"] > 0 and state["env_steps"] > 0 and replay["inserted"] > 0
    assert json.loads((run / "results.json").read_text())["runs"][0]["runtime"]["backend"] == "process"
    capsys.readouterr()
    assert main(["train", "--resume", str(run), "--total_env_steps", "3000", "--backend", "local"]) == 0
    assert f"{replay['inserted']:,} transitions in replay" in capsys.readouterr().out
    assert main(["train", "--resume", str(run), "--total_env_steps", "4000", "--backend", "process"]) == 0
    state3 = json.loads((ckpt / "run_state.json").read_text())
    assert state3["trained"] > state["trained"] and state3["env_steps"] > state["env_steps"]
    replay3 = load_state(ckpt / "trajectory_manager.pt", fmt="janus.trajectory_manager")
    assert replay3["inserted"] > replay["inserted"]


def test_a_checkpoint_dir_chosen_in_yaml_is_kept_so_resume_finds_it(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    chosen = tmp_path / "elsewhere"
    config = tmp_path / "c.yaml"
    # local: the folder is chosen and found by the driver on every backend (no worker processes to start)
    config.write_text(f"runtime:\n  checkpoint_dir: {chosen}\n  backend: local\nworkload:\n  total_env_steps: 2000\n")
    run = tmp_path / "run"
    assert main(["train", "--algo", "dqn", "--config", str(config), "--out", str(run)]) == 0
    assert (chosen / "run_state.json").is_file() and not (run / "checkpoint").exists()
    capsys.readouterr()
    assert main(["train", "--resume", str(run), "--total_env_steps", "3000"]) == 0
    assert "resuming from the end of the last run" in capsys.readouterr().out  # not "starting from scratch"


# SIGTERM takes the same path as SIGINT once raised (cli.Terminated is a KeyboardInterrupt); its
# handler is also exercised by default in test_process_backend.py's CLI signal test. SIGINT is
# slow-only too: test_a_signal_the_run_was_started_ignoring_stays_ignored below ends a local run
# with SIGINT and checks the same final commit and results (one run instead of two, ~6 s)
@pytest.mark.parametrize("sig", [pytest.param("SIGTERM", marks=pytest.mark.slow),
                                 pytest.param("SIGINT", marks=pytest.mark.slow)])
def test_signal_on_the_local_backend_commits_and_writes_results(tmp_path: Path, sig: str) -> None:
    """Issue 13 item 9: SIGTERM (and Ctrl-C) end `janus train` with the final commit, results.json
    and the learning curve of the run so far."""
    import signal
    import subprocess
    import sys
    import time

    def trained() -> bool:
        try:
            return json.loads((run / "checkpoint" / "run_state.json").read_text())["trained"] > 0
        except (FileNotFoundError, json.JSONDecodeError, KeyError):
            return False

    run = tmp_path / "run"
    # periodic commits every second: the first one with updates in it says the run is training (it
    # replaces a fixed 6 s wait); the signal must still end it with a commit of its own, the final one
    cmd = [sys.executable, "-m", "janus.cli", "train", "--algo", "dqn", "--backend", "local", "--total_env_steps", "10000000",
           "--checkpoint_interval_s", "1", "--out", str(run)]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while not trained():  # set up and training
            assert proc.poll() is None and time.monotonic() < deadline, proc.stderr.read() if proc.poll() is not None else "no start"
            time.sleep(0.2)
        proc.send_signal(getattr(signal, sig))
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == (143 if sig == "SIGTERM" else 130), err[-2000:]
    assert "interrupted" in err
    assert_stopped_run_saved(run)


def assert_stopped_run_saved(run: Path) -> None:
    """A run stopped by a signal committed its final checkpoint and wrote results.json and the
    learning curve of the run so far, with the checkpoint's count of updates."""
    import os

    state = json.loads((run / "checkpoint" / "run_state.json").read_text())
    assert state["tag"] == "final" and state["trained"] > 0, "the final checkpoint was committed"
    results = json.loads((run / "results.json").read_text())
    assert results["runs"][0]["counts"]["updates"] == state["trained"] > 0
    assert "learning_curve" in results["runs"][0] and (run / "learning_curve.png").is_file()
    assert os.path.getsize(run / "results.json") > 0


def test_a_signal_the_run_was_started_ignoring_stays_ignored(tmp_path: Path) -> None:
    """``nohup janus train``: SIGHUP (the terminal closing) must not stop the run; SIGINT still does,
    with the final commit, results.json and the learning curve of the run so far (issue 13 item 9,
    as test_signal_on_the_local_backend_commits_and_writes_results checks)."""
    import signal
    import subprocess
    import sys
    import time

    run = tmp_path / "run"
    cmd = [sys.executable, "-m", "janus.cli", "train", "--algo", "dqn", "--backend", "local", "--total_env_steps", "10000000",
           "--checkpoint_interval_s", "1", "--out", str(run)]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGHUP, signal.SIG_IGN))  # as nohup does

    def trained() -> int:
        try:
            return int(json.loads((run / "checkpoint" / "run_state.json").read_text())["trained"])
        except (FileNotFoundError, json.JSONDecodeError, KeyError):
            return 0

    try:
        deadline = time.monotonic() + 120
        while not trained():
            assert proc.poll() is None and time.monotonic() < deadline, "the run did not start training"
            time.sleep(0.2)
        proc.send_signal(signal.SIGHUP)
        before = trained()
        while trained() == before:  # it keeps training and committing (one commit a second)
            assert proc.poll() is None, f"SIGHUP stopped a run that ignores it: {proc.stderr.read()[-2000:]}"
            assert time.monotonic() < deadline + 60, "no commit after SIGHUP"
            time.sleep(0.2)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130 and "interrupted" in err and "SIGHUP" not in err, err[-2000:]
    assert_stopped_run_saved(run)


def test_config_yaml_and_results_record_the_resolved_run(trained: Path) -> None:
    """Issue 35 item 6: config.yaml held only the hyperparameters set by flag and the synthetic
    workload's fields (obs_shape [1024], num_actions 8, iterations) for an RL run. It holds every
    DQN hyperparameter (the epsilon schedule, the target interval, PER's exponents ...), nothing
    of other algorithms, and results.json reports the same configuration."""
    import yaml

    saved = yaml.safe_load((trained / "config.yaml").read_text())
    assert {"gamma", "eps_start", "eps_end", "exploration_steps", "target_update_interval", "per_beta",
            "per_beta_final", "n_step", "lr"} <= set(saved["algorithm"])
    assert not {"obs_shape", "num_actions", "iterations", "num_epochs"} & set(saved["workload"])
    assert "num_minibatches" not in saved and "clip_coef" not in saved["algorithm"]  # PPO's
    reported = json.loads((trained / "results.json").read_text())["runs"][0]["config"]
    assert reported["algorithm"] == saved["algorithm"] and reported["workload"] == saved["workload"]
    assert reported["minibatch_size"] == saved["batch_size"] == 128


def test_ppo_records_its_minibatch_size_not_an_unread_batch_size(tmp_path: Path) -> None:
    """PPO's results.json, results.csv and config.yaml said batch_size 256 while its minibatches were
    128 (a rollout of 4 x 128 over num_minibatches 4); they now say minibatch_size 128 and no batch_size."""
    import csv

    import yaml

    out = tmp_path / "ppo"
    assert main(["train", "--algo", "ppo", "--total_env_steps", "1024", "--out", str(out)]) == 0
    saved = yaml.safe_load((out / "config.yaml").read_text())
    assert "batch_size" not in saved and saved["num_minibatches"] == 4 and "gae_lambda" in saved["algorithm"]
    run = json.loads((out / "results.json").read_text())["runs"][0]
    assert "batch_size" not in run["config"] and run["config"]["minibatch_size"] == 128
    with (out / "results.csv").open(newline="") as fh:
        row = next(csv.DictReader(fh))
    assert row["batch_size"] == "" and row["minibatch_size"] == "128"


def test_a_run_whose_config_yaml_the_old_code_wrote_still_resumes(trained: Path, tmp_path: Path) -> None:
    """A run folder of the code before issue 35 (config.yaml: every field of every workload, the
    algorithm section only as set by flag) resumes as before; its config.yaml is then rewritten in
    the recorded form (every hyperparameter, only the fields the run reads)."""
    import yaml

    from janus.harness.resume_checks import stored_config

    run = tmp_path / "run"
    shutil.copytree(trained, run)
    old = stored_config(run).to_dict()  # all fields, as RunConfig.to_dict wrote them
    del old["algorithm"]  # _train set no hyperparameter flag: the old code wrote no algorithm section
    (run / "config.yaml").write_text(yaml.safe_dump(old, sort_keys=False))
    assert main(["train", "--resume", str(run), "--total_env_steps", "4000"]) == 0
    saved = yaml.safe_load((run / "config.yaml").read_text())
    assert "obs_shape" not in saved["workload"] and saved["algorithm"]["target_update_interval"] == 250
    assert saved["workload"]["total_env_steps"] == 4000
