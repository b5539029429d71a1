"""janus.train: real CartPole runs on the local backend, small budgets, stopped early by callbacks."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import yaml
from tests.conftest import FINISHED_DQN_STEPS

import janus
from janus.callbacks import ProgressStats, RunInfo

BUDGET = 20_000  # env steps; every run here is stopped long before it


class Recorder(janus.Callback):
    """Records every hook; stops the run once ``stop_at_episodes`` episodes have ended."""

    progress_every_s = 0.0

    def __init__(self, stop_at_episodes: int | None = 3) -> None:
        self.stop_at_episodes = stop_at_episodes
        self.started: list[RunInfo] = []
        self.progress: list[ProgressStats] = []
        self.evaluations: list[dict[str, Any]] = []
        self.ended: list[Any] = []

    def on_start(self, run: RunInfo) -> None:
        self.started.append(run)

    def on_progress(self, stats: ProgressStats) -> bool:
        self.progress.append(stats)
        return self.stop_at_episodes is not None and stats.episodes >= self.stop_at_episodes

    def on_evaluation(self, evaluation: dict[str, Any]) -> None:
        self.evaluations.append(evaluation)

    def on_end(self, result: Any) -> None:
        self.ended.append(result)


class CtrlC(janus.Callback):
    """Sends this process a SIGINT, as a Ctrl-C in the terminal, once 3 episodes have ended."""

    progress_every_s = 0.0

    def on_progress(self, stats: ProgressStats) -> None:
        if stats.episodes >= 3:
            os.kill(os.getpid(), signal.SIGINT)  # the main thread gets it


def results_of(out: Path) -> dict[str, Any]:
    runs = json.loads((out / "results.json").read_text())["runs"]
    assert len(runs) == 1
    return runs[0]


def test_early_stop_ends_the_run_before_its_budget(tmp_path: Path) -> None:
    early = janus.EarlyStop(mean_return=1.0)  # any finished episode reaches it: stops at the first look
    rec = Recorder(stop_at_episodes=None)
    run = janus.train("dqn", env="CartPole-v1", total_env_steps=BUDGET, out=tmp_path / "run", seed=0,
                      callbacks=[rec, early], backend="local", lr=5e-4)
    assert run.stopped_by is early and "mean return" in early.reason
    assert run.status == "stopped"
    saved = results_of(run.out)
    assert saved["status"] == "stopped", "results.json says the run was stopped"
    assert saved["stop_reason"] == f"EarlyStop: {early.reason}" and saved["stop_reason"].startswith("EarlyStop: mean return")
    assert 0 < saved["counts"]["env_steps"] < BUDGET
    assert saved["config"]["algorithm"]["lr"] == 5e-4, "a hyperparameter keyword reaches the run"
    assert (run.out / "checkpoint" / "run_state.json").is_file(), "stopped as on Ctrl-C: the final checkpoint is committed"
    assert [i.out for i in rec.started] == [run.out] and rec.started[0].total_env_steps == BUDGET
    assert rec.progress and rec.progress[-1].mean_return is not None
    assert [r.status for r in rec.ended] == ["stopped"] and rec.ended[0] is run.result
    assert json.loads((run.out / "results.json").read_text())["command"].startswith("janus.train('dqn', env='CartPole-v1'")


def test_policy_predicts_actions_of_the_env(tmp_path: Path) -> None:
    run = janus.train("ppo", env="CartPole-v1", total_env_steps=BUDGET, out=tmp_path / "run", callbacks=[Recorder()])
    obs, _ = gym.make("CartPole-v1").reset(seed=0)
    single = run.policy.predict(obs)
    batch = run.policy.predict(np.stack([obs] * 5))
    assert single.shape == () and batch.shape == (5,)
    assert set(batch.tolist()) <= {0, 1}
    assert run.policy.algo == "ppo"


@pytest.mark.parametrize("flags, named", [
    ({"batch_size": -3}, "invalid batch_size: got -3"),
    ({"lr": "fast"}, "invalid lr: got 'fast'"),
    ({"num_workers": 0}, "invalid num_actors: got 0"),
    ({"backend": "gpu"}, "invalid backend: got 'gpu'"),
    ({"clip_coef": 0.2}, "clip_coef does not apply to algo dqn"),
    ({"batch_sise": 32}, "unknown keyword 'batch_sise' (did you mean batch_size?)"),
    ({"steps": 100}, "unknown keyword 'steps' (did you mean total_env_steps"),
])
def test_keywords_are_validated_before_anything_runs(tmp_path: Path, flags: dict[str, Any], named: str) -> None:
    with pytest.raises(janus.ConfigError) as err:
        janus.train("dqn", env="CartPole-v1", out=tmp_path / "run", **flags)
    assert named in str(err.value)
    assert not (tmp_path / "run").exists(), "a refused configuration writes nothing"


def test_callbacks_set_the_runtime_settings_they_stand_for(tmp_path: Path) -> None:
    with pytest.raises(janus.ConfigError, match="Checkpoint sets checkpoint_interval_s=5"):
        janus.train("dqn", env="CartPole-v1", out=tmp_path / "a", callbacks=[janus.Checkpoint(every_s=5)],
                    checkpoint_interval_s=10)
    with pytest.raises(janus.ConfigError, match="invalid checkpoint_interval_s"):
        janus.train("dqn", env="CartPole-v1", out=tmp_path / "b", callbacks=[janus.Checkpoint(every_s=-1)])
    with pytest.raises(janus.ConfigError, match="callbacks"):
        janus.train("dqn", env="CartPole-v1", out=tmp_path / "c", callbacks=[print])  # type: ignore[list-item]


def test_evaluation_callback_sees_the_runtime_evaluations(tmp_path: Path) -> None:
    class StopAtFirstEvaluation(janus.Callback):
        def on_evaluation(self, evaluation: dict[str, Any]) -> bool:
            return True

    rec = Recorder(stop_at_episodes=None)
    run = janus.train("dqn", env="CartPole-v1", total_env_steps=BUDGET, out=tmp_path / "run", backend="local",
                      callbacks=[janus.Evaluation(every_env_steps=300, episodes=2), janus.Checkpoint(every_s=7),
                                 rec, StopAtFirstEvaluation()])
    config = yaml.safe_load((run.out / "config.yaml").read_text())
    assert config["runtime"]["eval_interval_steps"] == 300 and config["runtime"]["eval_episodes"] == 2
    assert config["runtime"]["checkpoint_interval_s"] == 7
    assert run.status == "stopped" and isinstance(run.stopped_by, StopAtFirstEvaluation)
    assert rec.evaluations and rec.evaluations[0]["env_steps"] >= 300
    assert results_of(run.out)["evaluations"][0]["env_steps"] == rec.evaluations[0]["env_steps"]


def test_env_factory_and_instance_run_on_the_local_backend(tmp_path: Path) -> None:
    made: list[gym.Env] = []

    def cartpole() -> gym.Env:
        made.append(gym.make("CartPole-v1"))
        return made[-1]

    run = janus.train(env=cartpole, total_env_steps=BUDGET, out=tmp_path / "factory", callbacks=[Recorder()])
    config = results_of(run.out)["config"]
    assert config["workload"]["env"].startswith("janus_api/cartpole_") and config["workload"]["algo"] == "dqn"
    assert config["runtime"]["backend"] == "local" and made, "the run's environments came from the factory"
    assert run.policy.predict(np.zeros(4)).shape == ()

    instance = gym.make("CartPole-v1")
    run = janus.train("dqn", env=instance, total_env_steps=BUDGET, out=tmp_path / "instance", callbacks=[Recorder()])
    assert run.status == "stopped" and results_of(run.out)["episodes"] >= 3


@pytest.mark.parametrize("flags", [{"backend": "ray"}, {"vector_env": "async"}])  # process: see test_env_factory_processes.py
def test_env_objects_refuse_other_processes(tmp_path: Path, flags: dict[str, Any]) -> None:
    with pytest.raises(janus.ConfigError, match="registered in this process only"):
        janus.train("dqn", env=lambda: gym.make("CartPole-v1"), out=tmp_path / "run", **flags)
    with pytest.raises(janus.ConfigError, match="accepted: a Gymnasium id"):
        janus.train("dqn", env=42, out=tmp_path / "run")


def test_the_api_writes_the_run_folder_the_cli_writes(tmp_path: Path, finished_dqn_run: Path) -> None:
    """The conftest's run is ``janus train --algo dqn --backend local --total_env_steps 1500 --seed 1``."""
    run = janus.train("dqn", env="CartPole-v1", total_env_steps=FINISHED_DQN_STEPS, seed=1, backend="local",
                      out=tmp_path / "run")
    assert run.status == "finished" and run.stopped_by is None

    def files(folder: Path) -> set[str]:
        return {str(p.relative_to(folder)) for p in folder.rglob("*") if p.name != ".lock"}

    assert files(run.out) == files(finished_dqn_run)
    assert (run.out / "config.yaml").read_text() == (finished_dqn_run / "config.yaml").read_text()
    assert results_of(run.out)["counts"]["env_steps"] >= FINISHED_DQN_STEPS


def test_ctrl_c_stops_the_run_writes_it_and_reaches_the_caller(tmp_path: Path) -> None:
    before = signal.getsignal(signal.SIGINT)
    with pytest.raises(KeyboardInterrupt):
        janus.train("dqn", env="CartPole-v1", total_env_steps=BUDGET, out=tmp_path / "run", callbacks=[CtrlC()])
    saved = results_of(tmp_path / "run")
    assert saved["status"] == "interrupted" and saved["counts"]["env_steps"] < BUDGET
    assert saved["stop_reason"] == "SIGINT received (Ctrl-C)"
    assert signal.getsignal(signal.SIGINT) is before, "the caller's handler is back"
