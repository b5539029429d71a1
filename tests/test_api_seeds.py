"""janus.train(seeds=[...]): a run per seed into OUT/seed-<s> and the aggregate, as janus train --seeds.

Real CartPole DQN runs on the local backend, tiny budgets: in this process (callbacks, env factories)
and, marked slow, in the command's per-seed processes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from tests.test_api import CtrlC

import janus
from janus.callbacks import ProgressStats, RunInfo

CARTPOLE: dict[str, Any] = {"env": "CartPole-v1", "backend": "local"}


class StopAfterEpisodes(janus.Callback):
    """Stops each run once ``episodes`` episodes have ended; records which seeds' runs it saw."""

    progress_every_s = 0.0

    def __init__(self, episodes: int = 3) -> None:
        self.episodes = episodes
        self.started: list[RunInfo] = []
        self.ended: list[Any] = []

    def on_start(self, run: RunInfo) -> None:
        self.started.append(run)

    def on_progress(self, stats: ProgressStats) -> bool:
        return stats.episodes >= self.episodes

    def on_end(self, result: Any) -> None:
        self.ended.append(result)


def test_seeds_with_callbacks_run_here_one_after_another_and_write_the_aggregate(tmp_path: Path) -> None:
    made: list[gym.Env] = []

    def cartpole() -> gym.Env:
        made.append(gym.make("CartPole-v1"))
        return made[-1]

    stop = StopAfterEpisodes()
    runs = janus.train("dqn", env=cartpole, seeds=[3, 1], out=tmp_path / "seeds", total_env_steps=20_000,
                       callbacks=[stop], lr=5e-4)
    assert isinstance(runs, janus.SeedRuns) and runs.out == tmp_path / "seeds" and made
    assert runs.seeds == [3, 1], "in the order given"
    assert [info.seed for info in stop.started] == [3, 1], "the callback sees each seed's run, the seed told"
    assert [info.out for info in stop.started] == [runs.out / "seed-3", runs.out / "seed-1"]
    assert [r.status for r in stop.ended] == ["stopped", "stopped"], "a stop ends that seed's run, the next starts"
    for seed in (3, 1):
        run = runs[seed]
        assert run.out == runs.out / f"seed-{seed}" and run.stopped_by is stop and run.status == "stopped"
        saved = json.loads((run.out / "results.json").read_text())["runs"][0]
        assert saved["config"]["seed"] == seed and saved["config"]["algorithm"]["lr"] == 5e-4
    actions = {seed: policy.predict(np.zeros((2, 4), dtype=np.float32)) for seed, policy in runs.policies.items()}
    assert list(actions) == [3, 1] and all(a.shape == (2,) for a in actions.values())
    data = json.loads((runs.out / "aggregate.json").read_text())
    assert data == runs.aggregate and [r["seed"] for r in data["per_seed"]] == [3, 1]
    assert "in this process" in data["schedule"] and data["command"].startswith("janus.train('dqn', env=")
    iqm = runs.final_return["iqm"] if runs.final_return else {}
    assert iqm["ci95"][0] <= iqm["estimate"] <= iqm["ci95"][1]
    assert data["bootstrap"]["samples"] == 2
    assert (runs.out / "aggregate.png").is_file()


def test_early_stop_starts_afresh_for_each_seed(tmp_path: Path) -> None:
    """One EarlyStop object for every seed: each seed's run is judged on its own returns."""
    early = janus.EarlyStop(mean_return=1.0)
    runs = janus.train("dqn", seeds=[0, 1], out=tmp_path / "seeds", total_env_steps=20_000, callbacks=[early],
                       **CARTPOLE)
    assert [runs[s].stopped_by for s in (0, 1)] == [early, early]
    assert all(0 < runs[s].result["counts"]["env_steps"] < 20_000 for s in (0, 1))


def test_ctrl_c_in_a_seeds_run_writes_the_aggregate_of_what_ran_and_reaches_the_caller(tmp_path: Path) -> None:
    with pytest.raises(KeyboardInterrupt):
        janus.train("dqn", seeds=[0, 1], out=tmp_path / "seeds", total_env_steps=20_000, callbacks=[CtrlC()],
                    **CARTPOLE)
    data = json.loads((tmp_path / "seeds" / "aggregate.json").read_text())
    assert [r["status"] for r in data["per_seed"]] == ["interrupted", "not run"], "the next seed never started"
    assert data["bootstrap"]["samples"] == 1 and not (tmp_path / "seeds" / "seed-1").exists()


@pytest.mark.parametrize(("flags", "message"), [
    ({"seeds": []}, "invalid seeds: got 0 seed; accepted: two or more (one run: seed)"),
    ({"seeds": [0, 1, 0]}, "invalid seeds: seed 0 given twice"),
    ({"seeds": [0, "1"]}, "invalid seeds: got '1'; accepted: integers in [0, 4,294,967,295]"),
    ({"seeds": [0, -1]}, "invalid seeds: got -1"),
    ({"seeds": 3}, "invalid seeds: got 3; accepted: two or more distinct integers >= 0"),
    ({"seeds": [0, 1], "seed": 2}, "seeds with seed 2: seeds gives each run its own seed"),
    ({"seeds": [0, 1], "resume": "runs/x"}, "seeds with resume"),
    ({"seeds": [0, 1], "lr": "fast"}, "invalid lr: got 'fast'"),
])
def test_bad_seeds_are_refused_before_anything_is_written(flags: dict[str, Any], message: str, tmp_path: Path) -> None:
    with pytest.raises(janus.ConfigError) as err:
        janus.train("dqn", out=tmp_path / "out", **CARTPOLE, **flags)
    assert message in str(err.value)
    assert not (tmp_path / "out").exists()


@pytest.mark.slow  # two `janus train` processes, each importing torch
def test_seeds_of_an_env_id_run_as_the_command_runs_them(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    runs = janus.train("dqn", seeds=[0, 1], out=tmp_path / "seeds", total_env_steps=1500, **CARTPOLE)
    assert runs.seeds == [0, 1] and "janus train --seeds 0 1" in capsys.readouterr().out
    for seed in (0, 1):
        assert runs[seed].status == "finished" and runs[seed].result["config"]["seed"] == seed
        assert runs[seed].policy.predict(np.zeros(4, dtype=np.float32)).shape == ()
    assert "in this process" not in runs.aggregate["schedule"] and runs.aggregate["per_seed"][1]["status"] == "finished"
    assert runs.final_return is not None and (runs.out / "aggregate.png").is_file()
