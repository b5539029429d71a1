"""Issue 46 item 6: an error a user meets is one clear line (the CLI exits 2), never a traceback, and
a run that commits its final checkpoint writes its results (results.json, csv, charts) on that path too.

Real CartPole runs on the local backend (threads), small budgets: a callback hook that raises or
returns a wrong type; callbacks given wrongly; an ``--algo``/``--env`` module that calls ``sys.exit``
or raises KeyboardInterrupt as it is imported; an Algorithm whose constructor raises; ``--out``
empty, too deep or too long.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import janus
from janus import cli
from janus.callbacks import ProgressStats, RunInfo
from janus.errors import CallbackError, ConfigError, JanusError

BUDGET = 20_000  # env steps: every run here ends long before


@pytest.fixture(autouse=True)
def _registry_as_found() -> Iterator[None]:
    """The algorithms these tests' modules register are taken out after each test (the registry
    is per process: a leftover would be one more algorithm in every later test's flag table)."""
    from janus.algorithms import base

    before = set(base._REGISTRY)
    yield
    for name in set(base._REGISTRY) - before - set(base.MODULES):
        base._REGISTRY.pop(name)


class Failing(janus.Callback):
    """Its hook ``hook`` raises (or returns ``answer``) once an episode has ended; the others record."""

    progress_every_s = 0.0

    def __init__(self, hook: str, answer: Any = None) -> None:
        self.hook, self.answer = hook, answer
        self.calls: list[str] = []

    def _act(self, hook: str, ready: bool = True) -> Any:
        self.calls.append(hook)
        if hook != self.hook or not ready:
            return None
        if self.answer is None:
            raise RuntimeError(f"broken in {hook}")
        return self.answer

    def on_start(self, run: RunInfo) -> Any:
        return self._act("on_start")

    def on_progress(self, stats: ProgressStats) -> Any:
        return self._act("on_progress", stats.episodes >= 1)

    def on_evaluation(self, evaluation: dict[str, Any]) -> Any:
        return self._act("on_evaluation")

    def on_end(self, result: Any) -> None:
        self._act("on_end")


def results_of(out: Path) -> dict[str, Any]:
    return json.loads((out / "results.json").read_text())["runs"][0]


def train(out: Path, callbacks: Any, **flags: Any) -> janus.api.train.TrainedRun:
    return janus.train("dqn", env="CartPole-v1", total_env_steps=flags.pop("total_env_steps", BUDGET), out=out,
                       backend="local", callbacks=callbacks, **flags)


@pytest.mark.parametrize(("hook", "answer", "flags"), [
    ("on_progress", None, {}),
    ("on_evaluation", None, {"eval_interval_steps": 256, "eval_episodes": 1}),
    ("on_progress", np.array([True, False]), {}),  # numpy's "truth value of an array is ambiguous" before
    ("on_evaluation", "stop", {"eval_interval_steps": 256, "eval_episodes": 1}),
])
def test_a_hook_that_fails_mid_run_saves_the_run_then_raises_naming_it(tmp_path: Path, hook: str, answer: Any,
                                                                       flags: dict[str, Any]) -> None:
    """The run stops as for a stop request: its final checkpoint committed and results.json (status
    failed, the hook's error as stop_reason), csv and charts written; then one CallbackError naming
    the callback and the hook, the user's exception chained."""
    cb = Failing(hook, answer)
    with pytest.raises(CallbackError, match=rf"^callback Failing\.{hook} ") as caught:
        train(tmp_path / "run", [cb], **flags)
    if answer is None:
        assert f"RuntimeError: broken in {hook}" in str(caught.value)
        assert isinstance(caught.value.__cause__, RuntimeError)
    else:
        assert f"returned {answer!r}" in str(caught.value) and type(answer).__name__ in str(caught.value)
    out = tmp_path / "run"
    for name in ("results.json", "results.csv", "chart.png", "learning_curve.png", "checkpoint/run_state.json"):
        assert (out / name).is_file(), name
    run = results_of(out)
    assert run["status"] == "failed"
    assert run["stop_reason"] == str(caught.value)
    state = json.loads((out / "checkpoint" / "run_state.json").read_text())
    assert state["tag"] == "final" and 0 < state["env_steps"] < BUDGET
    assert cb.calls[-1] == "on_end"  # every callback still sees the end of the run


def test_a_hook_that_fails_at_start_runs_nothing(tmp_path: Path) -> None:
    """on_start raising: nothing has run; one CallbackError, the folder left reusable."""
    with pytest.raises(CallbackError, match=r"^callback Failing\.on_start raised RuntimeError: broken in on_start") as caught:
        train(tmp_path / "run", [Failing("on_start")])
    assert isinstance(caught.value.__cause__, RuntimeError)
    assert not (tmp_path / "run" / "results.json").exists() and not (tmp_path / "run" / "config.yaml").exists()


def test_a_hook_that_fails_at_the_end_keeps_the_finished_run(tmp_path: Path) -> None:
    """on_end raising: the run finished and is written as such; then the error is raised."""
    with pytest.raises(CallbackError, match=r"^callback Failing\.on_end raised RuntimeError"):
        train(tmp_path / "run", [Failing("on_end")], total_env_steps=1500)
    assert results_of(tmp_path / "run")["status"] == "finished"


@pytest.mark.parametrize(("make", "where"), [
    (lambda: janus.EarlyStop(mean_return=100, every_s="x"), "EarlyStop(every_s)"),
    (lambda: janus.EarlyStop(mean_return=100, every_s=float("nan")), "EarlyStop(every_s)"),
    (lambda: janus.EarlyStop(patience=-1), "EarlyStop(patience)"),
    (lambda: janus.Progress(every_s=-2), "Progress(every_s)"),
    (lambda: janus.Progress(stream="log.txt"), "Progress(stream)"),  # an AttributeError at its first line before
])
def test_callback_parameters_are_checked_when_made(make: Any, where: str) -> None:
    with pytest.raises(ConfigError, match=rf"^invalid {where.replace('(', '[(]').replace(')', '[)]')}: got "):
        make()


class SlowToAsk(janus.Callback):
    progress_every_s = "often"  # type: ignore[assignment]


@pytest.mark.parametrize("callbacks", [[object()], "Progress", 5, [janus.Progress(), print], [SlowToAsk()],
                                       {"cb": janus.Progress()}])
def test_callbacks_of_the_wrong_kind_are_refused_before_anything_is_written(tmp_path: Path, callbacks: Any) -> None:
    with pytest.raises(ConfigError, match=r"^invalid (callbacks|SlowToAsk\.progress_every_s): got "):
        train(tmp_path / "run", callbacks)
    assert not (tmp_path / "run").exists()


def test_a_single_callback_is_taken_as_a_list_of_one(tmp_path: Path) -> None:
    stop = janus.EarlyStop(mean_return=-1e9, every_s=0)  # stops at the first progress after an episode
    run = train(tmp_path / "run", stop)
    assert run.stopped_by is stop and run.status == "stopped"


# ---- the command line: one line, exit 2 -----------------------------------------------------------
def one_error_line(capsys: pytest.CaptureFixture[str], code: int) -> str:
    err = capsys.readouterr().err
    assert code == 2, err
    assert "Traceback" not in err, err
    lines = [line for line in err.splitlines() if line.startswith("janus train: error:")]
    assert len(lines) == 1, err
    return lines[0]


MODULES = {
    "exits0": "import sys\nsys.exit(0)\n",
    "exits3": "raise SystemExit(3)\n",
    "interrupts": "raise KeyboardInterrupt('from the module')\n",
    "raises": "raise ValueError('bad module')\n",
}


@pytest.mark.parametrize("name", sorted(MODULES))
@pytest.mark.parametrize("flag", ["--algo", "--env"])
def test_a_user_module_that_exits_or_raises_on_import_is_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                  capsys: pytest.CaptureFixture[str], name: str,
                                                                  flag: str) -> None:
    """``sys.exit(0)`` at import ended janus with code 0 and no output; now exit 2 naming the module."""
    module = f"errpath_{name}_{flag[2:]}"
    (tmp_path / f"{module}.py").write_text(MODULES[name])
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.chdir(tmp_path)
    value = f"{module}:Thing" if flag == "--algo" else f"{module}:Env-v0"
    argv = ["train", flag, value, "--total_env_steps", "500", "--out", str(tmp_path / "run")]
    if flag == "--env":
        argv += ["--algo", "dqn"]
    line = one_error_line(capsys, cli.main(argv))
    assert repr(module) in line
    assert {"exits0": "sys.exit(0)", "exits3": "sys.exit(3)", "interrupts": "KeyboardInterrupt: from the module",
            "raises": "ValueError: bad module"}[name] in line
    assert not (tmp_path / "run").exists()


def test_an_algorithm_whose_constructor_raises_is_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "errpath_badinit.py").write_text(
        "from janus.algorithms.dqn import DQN\n\n\nclass Broken(DQN):\n"
        "    def __init__(self):\n        raise RuntimeError('cannot build me')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    line = one_error_line(capsys, cli.main(["train", "--algo", "errpath_badinit:Broken", "--env", "CartPole-v1",
                                            "--out", str(tmp_path / "run")]))
    assert "Broken()" in line and "RuntimeError: cannot build me" in line
    with pytest.raises(ConfigError, match=r"Broken\(\) raised RuntimeError: cannot build me"):
        janus.train("errpath_badinit:Broken", env="CartPole-v1", out=tmp_path / "run")
    assert not (tmp_path / "run").exists()


def test_an_algorithm_whose_learner_raises_is_one_line_with_the_traceback_on_request(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """An error janus does not know (the user's learner, a bug) is one line naming it; ``--verbose``
    or ``JANUS_DEBUG=1`` print its traceback above it."""
    (tmp_path / "errpath_badlearner.py").write_text(
        "from janus.algorithms.dqn import DQN\n\n\nclass NoLearner(DQN):\n"
        "    def learner(self, cfg):\n        raise RuntimeError('no learner today')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delenv("JANUS_DEBUG", raising=False)
    argv = ["train", "--algo", "errpath_badlearner:NoLearner", "--env", "CartPole-v1", "--backend", "local",
            "--total_env_steps", "1500", "--out", str(tmp_path / "run")]
    line = one_error_line(capsys, cli.main(argv))
    assert line.startswith("janus train: error: RuntimeError: no learner today (an unexpected error; ")
    assert "JANUS_DEBUG=1" in line
    monkeypatch.setenv("JANUS_DEBUG", "1")
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert "Traceback" in err and "raise RuntimeError('no learner today')" in err


def test_a_run_that_fails_after_its_final_commit_writes_its_results(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    """A worker that keeps failing stops the run (the Orchestrator gives up): the final checkpoint
    was committed but no results.json, csv or charts were written."""
    (tmp_path / "errpath_badactor.py").write_text(
        "from janus.algorithms.dqn import DQN\n\n\nclass NoActor(DQN):\n"
        "    def actor(self, cfg, *args, **kwargs):\n        raise RuntimeError('no actor today')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    out = tmp_path / "run"
    code = cli.main(["train", "--algo", "errpath_badactor:NoActor", "--env", "CartPole-v1", "--backend", "local",
                     "--total_env_steps", "1500", "--out", str(out)])
    err = capsys.readouterr().err  # the worker's first error is shown with its traceback, as it is restarted
    assert code == 2 and "janus train: error: the run was stopped: worker 'worker-0' raised an error 3 times" in err
    assert (out / "checkpoint" / "run_state.json").is_file()
    for name in ("results.json", "results.csv", "chart.png"):
        assert (out / name).is_file(), name
    run = results_of(out)
    assert run["status"] == "failed" and run["stop_reason"].startswith("the run was stopped: worker 'worker-0' raised")


# ---- --out ----------------------------------------------------------------------------------------
def test_an_empty_out_is_refused_not_the_current_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    """``out=""`` is Path(""), the current folder: the run was written there."""
    monkeypatch.chdir(tmp_path)
    for empty in ("", "  "):
        with pytest.raises(ConfigError, match=r"^invalid out: got .*not empty"):
            janus.train("dqn", env="CartPole-v1", out=empty)
        with pytest.raises(SystemExit) as exited:
            cli.main(["train", "--algo", "dqn", "--env", "CartPole-v1", "--out", empty])
        assert exited.value.code == 2
        assert "argument --out: an empty path" in capsys.readouterr().err
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize(("out", "why"), [
    ("/".join(["a"] * 2000), "2,000 folders deep"),  # RecursionError in pathlib's mkdir before
    ("/".join(["abcdefghijklmnop"] * 250), "bytes long"),  # deep enough to pass, too long for the file system
    ("x" * 300, "a name of 300 bytes"),
    ("run\x00s", "NUL byte"),  # ValueError("embedded null byte") from the first os call before
])
def test_an_out_too_deep_or_long_is_refused_before_anything_starts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                   capsys: pytest.CaptureFixture[str], out: str,
                                                                   why: str) -> None:
    monkeypatch.chdir(tmp_path)
    line = one_error_line(capsys, cli.main(["train", "--algo", "dqn", "--env", "CartPole-v1", "--out", out]))
    assert line.startswith("janus train: error: invalid --out: ") and why in line
    with pytest.raises(JanusError, match=rf"^invalid out: .*{why}"):
        janus.train("dqn", env="CartPole-v1", out=out)
    assert os.listdir(tmp_path) == []


def test_a_checkpoint_dir_too_deep_in_a_config_file_is_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "deep.yaml").write_text("runtime:\n  checkpoint_dir: " + "/".join(["d"] * 2000) + "\n")
    line = one_error_line(capsys, cli.main(["train", "--algo", "dqn", "--env", "CartPole-v1", "--config", "deep.yaml",
                                            "--out", "run"]))
    assert line.startswith("janus train: error: invalid runtime.checkpoint_dir: ") and "2,000 folders deep" in line
    assert os.listdir(tmp_path) == ["deep.yaml"]
