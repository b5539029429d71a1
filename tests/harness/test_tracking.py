"""Experiment tracking (issue 39 item 4): evaluation lines in the console, the evaluation curve in
learning_curve.png, progress in env steps with an ETA, and the optional Weights & Biases logger."""

from __future__ import annotations

import io
from pathlib import Path

from janus.cli import main
from janus.harness.progress import EvaluationLines, evaluation_line


def test_evaluation_line_reads_as_a_sentence() -> None:
    line = evaluation_line({"env_steps": 20_000, "mean_return": 431.23, "std_return": 35.0, "episodes": 10})
    assert line == "eval @ 20,000 env steps: mean return 431.2 ± 35.0 (10 episodes)"


def test_each_evaluation_is_shown_once_and_a_resumed_runs_earlier_ones_not_again() -> None:
    shown: list[str] = []
    lines = EvaluationLines(shown.append, skip=1)
    earlier = {"env_steps": 1000, "mean_return": 1.0, "std_return": 0.0, "episodes": 2}
    lines({"evaluations": [earlier]})
    assert shown == []
    later = {"env_steps": 2000, "mean_return": 5.0, "std_return": 1.0, "episodes": 2}
    lines({"evaluations": [earlier, later]})
    lines({"evaluations": [earlier, later]})  # the next poll: nothing new
    assert shown == ["eval @ 2,000 env steps: mean return 5.0 ± 1.0 (2 episodes)"]


def test_a_training_run_prints_its_evaluations(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    assert main(["train", "--algo", "dqn", "--env", "CartPole-v1", "--total_env_steps", "2000", "--backend", "local",
                 "--eval_interval_steps", "1000", "--eval_episodes", "2", "--out", str(tmp_path / "run")]) == 0
    err = capsys.readouterr().err
    evals = [line for line in err.splitlines() if line.startswith("eval @ ")]
    steps = [int(line.split(" env steps")[0].removeprefix("eval @ ").replace(",", "")) for line in evals]
    assert len(steps) == 2 and 1000 <= steps[0] < 2000 <= steps[1], err  # one per 1,000 steps crossed
    assert all(" ± " in line and line.endswith("(2 episodes)") for line in evals), evals


def test_an_evaluation_line_clears_the_progress_line_on_a_terminal() -> None:
    from janus.harness.progress import ProgressLine

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    stream = Terminal()
    line = ProgressLine("train", stream=stream)
    line(10, 100)
    line.event("eval @ 1,000 env steps: mean return 1.0 ± 0.0 (1 episodes)")
    written = stream.getvalue()
    assert written.endswith("\r" + " " * 100 + "\reval @ 1,000 env steps: mean return 1.0 ± 0.0 (1 episodes)\n"), written
