"""benchmarks/time_to_solve.py's parts: the parent-side clock on real child processes, the CleanRL
return watcher, the table and plot, and (slow) a real janus and SB3 run to a low threshold."""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import sys
import textwrap
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "benchmarks"
sys.path.insert(0, str(BENCH))

import time_to_solve  # noqa: E402
from tts_report import load_runs, plot, quartiles, table  # noqa: E402
from tts_runners import Solve, cleanrl_check, marker_check, run_janus, run_sb3, watch  # noqa: E402
from tts_tasks import TASKS  # noqa: E402


def child(tmp_path: Path, body: str) -> list[str]:
    script = tmp_path / "child.py"
    script.write_text(textwrap.dedent(body))
    return [sys.executable, "-u", str(script)]


def test_watch_stamps_the_solved_line_and_stops_the_child(tmp_path: Path) -> None:
    cmd = child(tmp_path, """
        import json, time
        for steps in (1000, 2000, 3000):
            print("MARK " + json.dumps({"env_steps": steps, "mean_return": steps / 10}), flush=True)
            time.sleep(0.05)
        time.sleep(600)  # a child that trains on after the solved line
    """)
    def check(line: str) -> Solve | None:
        solve = marker_check("MARK ")(line)
        return solve if isinstance(solve, Solve) and solve.mean_return >= 200 else None

    solve, solved_s, wall, ended, _ = watch(cmd, check, cap_s=120, cwd=tmp_path, grace_s=0.0)
    assert ended == "solved"
    assert solve == Solve(2000, 200.0)
    assert solved_s is not None and 0 < solved_s <= wall


def test_watch_counts_a_run_unsolved_at_cap_s_and_kills_it(tmp_path: Path) -> None:
    cmd = child(tmp_path, "import time\nprint('starting', flush=True)\ntime.sleep(600)\n")
    solve, solved_s, _, ended, tail = watch(cmd, lambda line: None, cap_s=1.0, cwd=tmp_path)
    assert (solve, solved_s, ended) == (None, None, "cap_s")
    assert tail == ["starting"]


def test_watch_ends_when_the_child_exits_though_its_workers_hold_the_pipe(tmp_path: Path) -> None:
    # Sample Factory's case: the main process is gone while worker processes still hold stdout open
    cmd = child(tmp_path, """
        import subprocess, sys
        subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
        print("done", flush=True)
        sys.exit(3)
    """)
    solve, _, _, ended, tail = watch(cmd, lambda line: None, cap_s=300, cwd=tmp_path)
    assert solve is None and ended == "exited 3" and tail == ["done"]


def test_cleanrl_check_takes_the_mean_of_the_last_episodes() -> None:
    check = cleanrl_check(threshold=100.0, cap_steps=10_000, window=3)
    assert check("SPS: 1234") is None
    assert check("global_step=100, episodic_return=[50.]") is None
    assert check("global_step=200, episodic_return=[150.]") is None  # two episodes: not yet a window
    assert check("global_step=300, episodic_return=[90.]") is None  # mean 96.7
    assert check("global_step=400, episodic_return=[-1.5e1]") is None  # mean 75
    assert check("global_step=500, episodic_return=[300.]") == Solve(500, 125.0)
    late = cleanrl_check(threshold=1e9, cap_steps=500, window=3)
    assert late("global_step=499, episodic_return=[1.]") is None
    assert late("global_step=500, episodic_return=[1.]") == "cap_steps"


def record(task: str, system: str, seed: int, time_s: float | None, steps: int | None = None) -> dict:
    return {"task": task, "system": system, "seed": seed, "solved": time_s is not None, "time_s": time_s,
            "env_steps": steps, "mean_return": None, "wall_s": time_s or 300.0, "exit": "x", "setting": "",
            "reported": {}, "tail": []}


def test_table_and_plot_combine_partial_runs(tmp_path: Path) -> None:
    first, second = tmp_path / "a.json", tmp_path / "b.json"
    first.write_text(json.dumps({"runs": [record("CartPole-v1", "janus", 0, 10.0, 5000),
                                          record("CartPole-v1", "sb3", 0, 12.0, 20000),
                                          record("Acrobot-v1", "sb3", 0, None)]}))
    second.write_text(json.dumps({"runs": [record("CartPole-v1", "janus", 1, 20.0, 10000),
                                           record("CartPole-v1", "janus", 2, 30.0, 15000),
                                           record("CartPole-v1", "janus", 3, None)]}))
    runs = load_runs([first, second])
    lines = table(runs).splitlines()
    assert lines[2] == "| CartPole-v1 | janus | 20.0 | 15.0-25.0 | 3/4 | 10,000 |"
    assert lines[3] == "| CartPole-v1 | sb3 | 12.0 | 12.0-12.0 | 1/1 | 20,000 |"
    assert lines[4] == "| Acrobot-v1 | sb3 | - | - | 0/1 | - |"
    assert quartiles([1.0, 2.0, 3.0, 4.0, 5.0]) == (2.0, 3.0, 4.0)
    png = tmp_path / "tts.png"
    plot(runs, png)
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_janus_algo_pairs_name_a_known_task() -> None:
    assert time_to_solve.parse_algos(["CartPole-v1=appo"]) == {"CartPole-v1": "appo"}
    with pytest.raises(SystemExit, match="TASK=ALGO"):
        time_to_solve.parse_algos(["CartPole=appo"])


@pytest.mark.slow
def test_janus_run_to_a_low_threshold_agrees_with_its_results_json() -> None:
    task = dataclasses.replace(TASKS["CartPole-v1"], threshold=30.0, eval_interval_steps=2_000)
    result = run_janus(task, seed=0, cap_s=240, cap_steps=20_000, algo="ppo")
    assert result.solved and result.exit == "solved", result.tail
    assert result.reported["solved"] is True
    assert result.env_steps == result.reported["solved_at_env_steps"]
    assert result.mean_return is not None and result.mean_return >= 30.0
    assert result.time_s is not None and result.time_s <= result.wall_s


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("rl_zoo3") is None, reason="rl_zoo3 not installed (time_to_solve.py setup)")
def test_sb3_run_to_a_low_threshold() -> None:
    task = dataclasses.replace(TASKS["CartPole-v1"], threshold=30.0, eval_interval_steps=2_000)
    result = run_sb3(task, seed=0, cap_s=240, cap_steps=20_000)
    assert result.solved and result.exit == "solved", result.tail
    assert result.env_steps is not None and result.env_steps % 2_000 == 0  # an evaluation's env step
    assert result.mean_return is not None and result.mean_return >= 30.0
