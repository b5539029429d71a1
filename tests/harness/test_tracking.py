"""Experiment tracking (issue 39 item 4): evaluation lines in the console, the evaluation curve in
learning_curve.png, progress in env steps with an ETA, and the optional Weights & Biases logger."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import pytest

from janus.cli import main
from janus.harness.reports.progress import EvaluationLines, evaluation_line
from janus.runtime.status import RunStatus


def test_evaluation_line_reads_as_a_sentence() -> None:
    line = evaluation_line({"env_steps": 20_000, "mean_return": 431.23, "std_return": 35.0, "episodes": 10})
    assert line == "eval @ 20,000 env steps: mean return 431.2 ± 35.0 (10 episodes)"


def test_each_evaluation_is_shown_once_and_a_resumed_runs_earlier_ones_not_again() -> None:
    shown: list[str] = []
    lines = EvaluationLines(shown.append, skip=1)
    earlier = {"env_steps": 1000, "mean_return": 1.0, "std_return": 0.0, "episodes": 2}
    lines(RunStatus(evaluations=[earlier]))
    assert shown == []
    later = {"env_steps": 2000, "mean_return": 5.0, "std_return": 1.0, "episodes": 2}
    lines(RunStatus(evaluations=[earlier, later]))
    lines(RunStatus(evaluations=[earlier, later]))  # the next poll: nothing new
    assert shown == ["eval @ 2,000 env steps: mean return 5.0 ± 1.0 (2 episodes)"]


def test_a_training_run_prints_its_evaluations(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    assert main(["train", "--algo", "dqn", "--env", "CartPole-v1", "--total_env_steps", "2000", "--backend", "local",
                 "--eval_interval_steps", "1000", "--eval_episodes", "2", "--out", str(tmp_path / "run")]) == 0
    err = capsys.readouterr().err
    evals = [line for line in err.splitlines() if line.startswith("eval @ ")]
    steps = [int(line.split(" env steps")[0].removeprefix("eval @ ").replace(",", "")) for line in evals]
    assert len(steps) == 2 and 1000 <= steps[0] < 2000 <= steps[1], err  # one per 1,000 steps crossed
    assert all(" ± " in line and line.endswith("(2 episodes)") for line in evals), evals
    progress = [line for line in err.splitlines() if " env steps " in line and "ETA" in line]
    assert progress and "2,016/2,016     env steps 100.0%" in progress[-1], err  # 2,000 in whole rounds of 32
    assert " env-steps/s  ETA " in progress[-1] and "return " in progress[-1], progress
    assert not [line for line in err.splitlines() if "updates/s" in line], err


def test_an_evaluation_line_clears_the_progress_line_on_a_terminal() -> None:
    from janus.harness.reports.progress import ProgressLine

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    stream = Terminal()
    line = ProgressLine("train", stream=stream)
    line(10, 100)
    line.event("eval @ 1,000 env steps: mean return 1.0 ± 0.0 (1 episodes)")
    written = stream.getvalue()
    assert written.endswith("\r" + " " * 100 + "\reval @ 1,000 env steps: mean return 1.0 ± 0.0 (1 episodes)\n"), written


# ------------------------------------------------------------------------------ the plots
def rl_run_with_evaluations() -> dict[str, Any]:
    """An RL run of 60 episodes, 100 env steps apart, evaluated every 2,000 env steps."""
    from tests.harness.test_report import make_rl_run

    run = make_rl_run([float(i) for i in range(60)])
    run["evaluations"] = [{"env_steps": 2000 * k, "mean_return": 10.0 * k, "std_return": 2.0, "episodes": 5,
                           "wall_s": 2.0 * k, "version": k} for k in (1, 2, 3)]
    return run


def test_learning_curve_draws_the_evaluations_with_a_band_and_keeps_the_legend_off_the_curves() -> None:
    from matplotlib.collections import PolyCollection

    from janus.harness.reports.curves import learning_curve_figure

    fig = learning_curve_figure([rl_run_with_evaluations()])
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    for ax, xs in zip(fig.axes, ([2000, 4000, 6000], [2.0, 4.0, 6.0]), strict=True):
        (evals,) = [line for line in ax.get_lines() if "evaluation" in str(line.get_label())]
        assert list(evals.get_xdata()) == xs and list(evals.get_ydata()) == [10.0, 20.0, 30.0]
        assert evals.get_marker() == "o"
        (band,) = [c for c in ax.collections if isinstance(c, PolyCollection)]
        ys = band.get_paths()[0].vertices[:, 1]
        assert min(ys) == pytest.approx(8.0) and max(ys) == pytest.approx(32.0)  # mean ± std
        legend = ax.get_legend()
        assert any("evaluation mean ± std" in t.get_text() for t in legend.get_texts())
        box, plot_area = legend.get_window_extent(renderer), ax.get_window_extent(renderer)
        assert not box.overlaps(plot_area), "the legend sits outside the plot area"
        assert fig.bbox.x0 <= box.x0 and box.x1 <= fig.bbox.x1 and fig.bbox.y0 <= box.y0, "and inside the figure"


def test_chart_of_a_single_run_has_no_speedup_and_a_long_command_wraps() -> None:
    from tests.harness.test_report import make_rl_run

    from janus.harness.reports.table import annotate, chart_figure

    command = "janus train " + " ".join(f"--flag_{i} {i * 1000}" for i in range(30))
    fig = chart_figure(command, annotate([make_rl_run([1.0, 2.0])], baseline="train"))
    fig.canvas.draw()
    left = fig.axes[0]
    texts = [t.get_text() for t in left.texts]
    assert texts == ["1,000/s"] and "speedup" not in left.get_title(), texts
    title = fig._suptitle
    assert title.get_text().count("\n") >= 2 and title.get_text().replace("\n", " ") == command
    box = title.get_window_extent(fig.canvas.get_renderer())
    assert fig.bbox.x0 <= box.x0 and box.x1 <= fig.bbox.x1, "the title is wrapped, not clipped"
    several = chart_figure("compare", annotate([{**make_rl_run([1.0]), "name": n} for n in ("baseline", "janus")]))
    assert [t.get_text() for t in several.axes[0].texts] == ["1.00x", "1.00x"]


# ------------------------------------------------------------------------------ progress in env steps
def test_env_step_progress_shows_rate_and_time_left_and_counts_a_resumed_run_from_its_start() -> None:
    from janus.harness.reports.progress import EnvStepProgress, duration

    line = EnvStepProgress("train", stream=io.StringIO())
    line.start -= 4.0  # start-up before the first report
    line(10_000, 50_000, "return 87.1")  # a resumed run: 10,000 steps in an earlier session
    assert line.first_at is not None
    text = line._text(12_288 + 10_000, 50_000, line.first_at + 1.0)
    assert "22,288/50,000" in text and "env steps  44.6%" in text, text
    assert "12,288 env-steps/s" in text and "ETA     2s" in text and text.endswith("return 87.1"), text
    assert "ETA      ?" in line._text(10_000, 50_000, line.first_at + 1.0)  # no rate yet
    assert [duration(s) for s in (0.4, 12, 185, 7_620)] == ["0s", "12s", "3m05s", "2h07m"]


# ------------------------------------------------------------------------------ Weights & Biases
class RecordingWriter:
    """A scalar writer that keeps what it is given (a stand-in for the W&B run)."""

    def __init__(self) -> None:
        self.scalars: list[tuple[str, float, int]] = []
        self.flushes = 0
        self.closed = False

    def add_scalar(self, tag: str, value: float, step: int, walltime: float | None = None) -> None:
        self.scalars.append((tag, value, step))

    def flush(self) -> None:
        self.flushes += 1

    def close(self) -> None:
        self.closed = True


def test_the_wandb_writer_gets_the_scalars_tensorboard_gets(tmp_path: Path) -> None:
    from janus.harness.reports.live import LiveRun
    from janus.harness.reports.tensorboard import read_scalars

    recording = RecordingWriter()
    live = LiveRun(None, tensorboard_dir=tmp_path / "tb", tensorboard_interval_s=0.0, wandb=lambda: recording)
    status = RunStatus(elapsed_s=1.0, curve=[(0.5, 100, 3.0), (1.0, 200, 5.0)], train_metrics=[],
                       evaluations=[{"env_steps": 200, "mean_return": 9.0, "std_return": 1.0, "episodes": 2, "wall_s": 1.0}])
    live(status, lambda: {})  # type: ignore[arg-type, return-value]
    live.finish({"wall_s": 1.0, "learning_curve": {"env_steps": [100, 200], "wall_s": [0.5, 1.0], "return": [3.0, 5.0]},
                 "evaluations": status.evaluations, "samples_per_s": 10.0, "env_steps_per_s": 200.0})
    tensorboard = {tag: [(step, value) for step, value, _ in events] for tag, events in read_scalars(tmp_path / "tb").items()}
    wandb: dict[str, list[tuple[int, float]]] = {}
    for tag, value, step in recording.scalars:
        wandb.setdefault(tag, []).append((step, value))
    assert wandb == tensorboard and {"episode/return", "eval/mean_return", "run/samples_per_s"} <= set(wandb)
    assert recording.flushes >= 1 and recording.closed


def test_wandb_asked_without_the_package_is_a_clear_config_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    import sys

    monkeypatch.setitem(sys.modules, "wandb", None)  # as if not installed: import wandb raises ImportError
    out = tmp_path / "run"
    assert main(["train", "--algo", "dqn", "--total_env_steps", "500", "--wandb", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "--wandb: the wandb package is not installed" in err and "pip install 'janus-rl[wandb]'" in err, err
    assert not out.exists(), "refused before the run folder is made"


def test_wandb_logs_a_run_offline_into_its_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("wandb", reason="wandb is not installed (pip install 'janus-rl[wandb]')")
    for name in ("WANDB_CONFIG_DIR", "WANDB_CACHE_DIR", "WANDB_DATA_DIR", "WANDB_ARTIFACT_DIR"):
        monkeypatch.setenv(name, str(tmp_path / "wandb-home"))  # nothing written outside tmp_path
    monkeypatch.setenv("WANDB_MODE", "offline")  # no network, no account
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    out = tmp_path / "run"
    assert main(["train", "--algo", "dqn", "--env", "CartPole-v1", "--total_env_steps", "2000", "--backend", "local",
                 "--eval_interval_steps", "1000", "--eval_episodes", "2", "--wandb", "--wandb_project", "janus-test",
                 "--out", str(out)]) == 0
    (run_file,) = (out / "wandb").glob("offline-run-*/run-*.wandb")
    data = run_file.read_bytes()  # W&B's record log: protobuf records, whose strings are stored as they are
    for tag in (b"episode/return", b"episode/return_mean20", b"eval/mean_return", b"run/samples_per_s", b"env_steps"):
        assert tag in data, tag
    assert b"janus-test" in data and b"total_env_steps" in data and b"CartPole-v1" in data  # project and resolved config
