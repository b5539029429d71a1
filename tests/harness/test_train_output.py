"""What a train run prints and records (issue 45 items 4 and 6): RL first, the data path behind
--verbose, chart.png its learning curve, the budget it ran, why it stopped, each line once."""

from __future__ import annotations

import io
import json
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml
from tests.harness.test_report import make_rl_run

from janus.callbacks import CallbackHooks, EarlyStop, Evaluation, Progress, RunInfo
from janus.cli import main
from janus.config import from_dict, recorded, resolve
from janus.config.request import RunRequest
from janus.errors import ConfigError
from janus.harness.commands import progress_line
from janus.harness.outputs import write_outputs
from janus.harness.reports.train import whole_budget
from janus.runtime.status import RunStatus
from janus.stopping import StopRequested, Terminated, reason_of


def train_args(**kw: Any) -> RunRequest:
    return RunRequest(command="train", quick=False, tensorboard=False, wandb=False, **kw)


def rl_run() -> dict[str, Any]:
    run = make_rl_run([float(i) for i in range(30)])
    run.update(env_steps_per_s=1234.0, wall_s=10.0, elapsed_s=12.5, stop_reason="budget reached: 3,000 env steps",
               status="finished", runtime={"backend": "local", "messages": {}, "param_versions_published": 3,
                                           "param_fetches_per_node": {}, "worker_restarts": {}, "stalls": 0},
               evaluations=[{"env_steps": 1000, "mean_return": 40.0, "std_return": 2.0, "episodes": 5},
                            {"env_steps": 2000, "mean_return": 30.0, "std_return": 1.0, "episodes": 5}])
    run["counts"] = {"updates": 100, "env_steps": 3000, "run_env_steps": 3000}
    return run


def test_a_train_run_ends_with_its_return_evaluations_rate_and_time(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write_outputs(train_args(verbose=False), "train", tmp_path, [rl_run()], [], "train")
    out = capsys.readouterr().out
    assert "train: finished; budget reached: 3,000 env steps" in out
    assert f"return {sum(range(10, 30)) / 20:.1f} (mean of the last 20 of 30 episodes" in out
    assert "evaluations: 2; the last 30.0 ± 1.0 at 2,000 env steps; the best 40.0 ± 2.0 at 1,000 env steps" in out
    assert "1,234 env-steps/s; 12.5 s in all: 10.0 s running, 2.5 s start-up and shutdown" in out
    assert "--verbose" in out
    for datapath in ("samples/s  ", "speedup", "ideal", "runtime of train", "parameter versions published"):
        assert datapath not in out, datapath
    saved = json.loads((tmp_path / "results.json").read_text())["runs"][0]
    assert saved["stage_s"] and saved["runtime"]["backend"] == "local", "results.json keeps the data-path figures"


def test_verbose_adds_the_data_path_table_and_runtime_figures(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write_outputs(train_args(verbose=True), "train", tmp_path, [rl_run()], [], "train")
    out = capsys.readouterr().out
    assert "speedup" in out and "runtime of train (local)" in out and "train: finished" in out and "--verbose" not in out


def test_the_python_api_names_the_keyword(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write_outputs(train_args(verbose=False, invocation="janus.train('ppo')"), "train", tmp_path, [rl_run()], [], "train")
    assert "verbose=True" in capsys.readouterr().out


def test_chart_of_a_train_run_is_its_learning_curve(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from janus import fileio

    figures: list[Any] = []
    save = fileio.save_figure
    monkeypatch.setattr(fileio, "save_figure", lambda fig, path, **kw: (figures.append((Path(path).name, fig)), save(fig, path, **kw)))
    write_outputs(train_args(verbose=False), "train", tmp_path, [rl_run()], [], "train")
    chart = dict(figures)["chart.png"]
    (ax,) = chart.axes
    assert ax.get_xlabel() == "environment steps" and ax.get_ylabel() == "episode return"
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert any("evaluation" in t for t in labels), "evaluations are marked"


def test_each_progress_and_evaluation_line_prints_once(capsys: pytest.CaptureFixture[str]) -> None:
    cfg = resolve(from_dict({"workload": {"algo": "ppo", "env": "CartPole-v1"}}))
    hooks = CallbackHooks([Progress(every_s=0), Evaluation(every_env_steps=100)])
    assert hooks.replaces_progress_line and not CallbackHooks([Evaluation(every_env_steps=100)]).replaces_progress_line
    line = progress_line(cfg, quiet=hooks.replaces_progress_line)
    line.stream = io.StringIO()
    line(100, 1000)
    line(1000, 1000)
    line.event("eval @ 100 env steps")
    line.finish("done")
    assert line.stream.getvalue().splitlines() == ["eval @ 100 env steps", f"{'  run':<28} done"]
    Evaluation(every_env_steps=100).on_evaluation({"env_steps": 100, "mean_return": 1.0})
    assert capsys.readouterr().out == "", "the run prints each evaluation itself"


def test_early_stop_patience_counts_evaluations() -> None:
    stop = EarlyStop(patience=2)
    stop.on_start(RunInfo(Path("."), resolve(from_dict({"workload": {"algo": "ppo"}}))))
    polls = [stop.on_progress(stats) for stats in [_stats(10.0)] * 50]
    assert not any(polls), "progress looks are not evaluations"
    answers = [stop.on_evaluation({"env_steps": 1000 * i, "mean_return": r}) for i, r in enumerate([5.0, 7.0, 6.0, 7.0], 1)]
    assert answers == [False, False, False, True]
    assert stop.reason == "no evaluation beat the best mean return 7.0 in 2 evaluations (the last at 4,000 env steps)"


def _stats(mean_return: float) -> Any:
    from janus.callbacks import ProgressStats

    return ProgressStats(env_steps=10, updates=1, total_env_steps=100, episodes=3, mean_return=mean_return,
                         elapsed_s=1.0, env_steps_per_s=10.0)


def test_early_stop_patience_without_evaluations_is_refused() -> None:
    stop = EarlyStop(patience=3)
    with pytest.raises(ConfigError, match=r"EarlyStop\(patience=3\) counts evaluations.*eval_interval_steps"):
        stop.check(resolve(from_dict({"workload": {"algo": "ppo"}})))
    stop.check(resolve(from_dict({"workload": {"algo": "ppo"}, "runtime": {"eval_interval_steps": 1000}})))


def test_stop_reasons_name_the_callback_and_its_condition() -> None:
    stop = EarlyStop(mean_return=5.0)
    hooks = CallbackHooks([stop])
    hooks.start(Path("."), resolve(from_dict({"workload": {"algo": "ppo"}})))
    with pytest.raises(StopRequested) as raised:
        hooks(RunStatus(env_steps=31_000, curve=[(0.0, 10, 6.0)], evaluations=[]), lambda: None)
    assert reason_of(raised.value) == "EarlyStop: mean return 6.0 >= 5 at 31,000 env steps"
    assert reason_of(KeyboardInterrupt()) == "SIGINT received (Ctrl-C)"
    assert reason_of(Terminated("SIGTERM")).startswith("SIGTERM received")


def test_the_budget_is_rounded_once_to_whole_rounds_and_recorded(capsys: pytest.CaptureFixture[str]) -> None:
    cfg = resolve(from_dict({"workload": {"algo": "ppo", "env": "CartPole-v1", "total_env_steps": 3000}},
                            base=from_dict({"workload": {"algo": "ppo", "num_actors": 1, "envs_per_actor": 4,
                                                              "rollout_length": 128}})))
    ran = whole_budget(cfg)
    assert ran.workload.total_env_steps == 3072 and recorded(ran)["workload"]["total_env_steps"] == 3072
    assert "total_env_steps 3,000 runs as 3,072, whole rounds of 512 env steps" in capsys.readouterr().out
    assert whole_budget(ran) is ran and capsys.readouterr().out == "", "a whole budget is kept, silently"


def test_config_yaml_holds_no_per_invocation_fields(finished_dqn_run: Path) -> None:
    runtime = yaml.safe_load((finished_dqn_run / "config.yaml").read_text())["runtime"]
    assert not {"best_dir", "checkpoint_dir", "resume"} & set(runtime)
    saved = json.loads((finished_dqn_run / "results.json").read_text())["runs"][0]
    assert saved["stop_reason"].startswith(f"budget reached: {saved['counts']['run_env_steps']:,} env steps")
    assert "best_dir" not in saved["config"]["runtime"] and "resume" not in saved["config"]["runtime"]


def test_a_run_folder_written_before_resumes(tmp_path: Path, finished_dqn_run: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """config.yaml used to carry best_dir/checkpoint_dir null and resume false: such a run still resumes."""
    run = tmp_path / "R"
    shutil.copytree(finished_dqn_run, run)
    config = yaml.safe_load((run / "config.yaml").read_text())
    config["runtime"].update(best_dir=None, checkpoint_dir=None, resume=False)
    (run / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    total = int(config["workload"]["total_env_steps"]) + 500
    assert main(["train", "--resume", str(run), "--total_env_steps", str(total)]) == 0
    saved = json.loads((run / "results.json").read_text())["runs"][0]
    assert saved["status"] == "finished" and saved["counts"]["run_env_steps"] >= total
    assert not {"best_dir", "resume"} & set(yaml.safe_load((run / "config.yaml").read_text())["runtime"])


def test_acting_past_the_budget_is_said() -> None:
    """appo/impala's workers run ahead of the learner: the env steps acted past the budget are named."""
    from janus.harness.reports.train import budget_reason

    run = rl_run()
    run["config"]["workload"].update(num_actors=1, envs_per_actor=4, rollout_length=128, total_env_steps=2048)
    assert budget_reason(run) == ("budget reached: 2,048 env steps trained on; the workers acted 3,000, 952 more "
                                  "while the learner finished (they ran ahead of it)")
    run["counts"]["run_env_steps"] = 2560
    run["config"]["workload"]["total_env_steps"] = 2500
    assert budget_reason(run) == "budget reached: 2,560 env steps (total_env_steps 2,500 in whole rounds of 512)"
    run["config"]["workload"]["total_env_steps"] = 2560
    assert budget_reason(run) == "budget reached: 2,560 env steps"


def test_an_off_policy_budget_keeps_the_value_that_sets_its_updates(capsys: pytest.CaptureFixture[str]) -> None:
    """DQN's updates and exploration follow total_env_steps itself: it is kept, and the line says what is acted."""
    cfg = resolve(from_dict({"workload": {"algo": "dqn", "env": "CartPole-v1", "total_env_steps": 1500, "num_actors": 2,
                                          "envs_per_actor": 1, "rollout_length": 64}}))
    assert whole_budget(cfg) is cfg
    assert "acts 1,536 env steps for total_env_steps 1,500" in capsys.readouterr().out


def test_a_synthetic_train_run_keeps_its_data_path_table(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The synthetic workload measures the data path: its table leads, and there is no return to show."""
    from tests.harness.test_report import make_run

    write_outputs(train_args(verbose=False), "train", tmp_path, [make_run("train", 1000.0, 2.0, (1.0,) * 6)], [], "train")
    out = capsys.readouterr().out
    assert "speedup" in out and "train: finished" in out and "return" not in out and "--verbose" not in out


def test_verbose_is_a_keyword_of_janus_train() -> None:
    from janus.api.keywords import keyword_request, typed_request

    assert typed_request(keyword_request("ppo", {"verbose": True})).verbose is True
    assert typed_request(keyword_request("ppo", {})).verbose is False
