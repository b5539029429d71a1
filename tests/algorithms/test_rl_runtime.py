"""DQN and PPO through the actor-model runtime (``run_runtime``): learning, backends, settings, errors.

Budgets are calibrated on this 2-core machine: PPO 20k env steps at lr 1e-3 ended at mean returns
of 145-339 and DQN 10k steps at 204-226 over seeds 0-4 (random play: ~22), so the learning tests
ask for > 100. The ray tests share the session's local Ray (``ray_session`` of tests/runtime).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from janus.algorithms.base import algorithm
from janus.algorithms.gym_algorithm import MAPPED
from janus.config import RunConfig, available_placements, from_dict, resolve
from janus.errors import ConfigError
from janus.runtime.run import run_runtime

ROOT = Path(__file__).resolve().parents[2]
RANDOM_RETURN = 22  # mean CartPole-v1 return of a uniformly random policy
LEARNED = 100




def rl_cfg(algo: str, steps: int, seed: int = 0, **overrides: Any) -> RunConfig:
    """The algorithm's preset with ``steps`` env steps and ``overrides`` (config keys), resolved."""
    workload = {"total_env_steps": steps, **overrides.pop("workload", {})}
    return resolve(from_dict({"workload": workload, "seed": seed, **overrides}, base=from_dict(algorithm(algo).preset)))


def tiny(algo: str, **overrides: Any) -> RunConfig:
    """A run of a few seconds: PPO 4 rollouts of 512 steps; DQN 1,024 steps, learning from 256."""
    if algo == "dqn":
        overrides["algorithm"] = {"learning_starts": 256, **overrides.get("algorithm", {})}
        return rl_cfg("dqn", 1024, **overrides)
    return rl_cfg("ppo", 2048, **overrides)


def assert_curve(run: dict[str, Any], cfg: RunConfig) -> None:
    """A learning curve: one point per episode, env steps that only grow, within the budget."""
    curve = run["learning_curve"]
    steps, returns, walls = curve["env_steps"], curve["return"], curve["wall_s"]
    assert run["episodes"] == len(steps) == len(returns) == len(walls) > 0
    assert all(a <= b for a, b in zip(steps, steps[1:])), "env steps never decrease"
    assert all(a <= b for a, b in zip(walls, walls[1:])), "wall times never decrease"
    assert steps[-1] > steps[0] > 0
    assert all(1 <= r <= 500 for r in returns), "CartPole-v1 returns lie in [1, 500]"
    assert run["final_mean_return"] == pytest.approx(sum(returns[-20:]) / len(returns[-20:]))
    # the budget is exact: whole rounds of one piece from every worker, the first at or above total_env_steps
    budget = algorithm(cfg.workload.algo).budget(cfg)
    planned = budget.env_steps or budget.iterations * cfg.rollout_transitions
    assert steps[-1] <= planned < cfg.workload.total_env_steps + cfg.rollout_transitions


def assert_counts(run: dict[str, Any], cfg: RunConfig) -> None:
    """Every transition produced was inserted and collected; the learner did its updates."""
    counts = run["counts"]
    assert counts["updates"] >= algorithm(cfg.workload.algo).budget(cfg).total_updates
    assert counts["transitions_inserted"] == counts["transitions_produced"] == counts["transitions_collected"] > 0
    assert counts["batches_selected"] >= counts["updates"]
    if cfg.workload.algo == "ppo":  # exactly the rollouts of the budget
        assert counts["transitions_produced"] == algorithm(cfg.workload.algo).budget(cfg).iterations * cfg.rollout_transitions
        assert counts["updates"] == algorithm(cfg.workload.algo).budget(cfg).total_updates
    else:
        assert counts["transitions_produced"] >= algorithm(cfg.workload.algo).config(cfg).learning_starts
    assert run["env_steps_per_s"] > 0 and run["samples_per_s"] > 0


# -------------------------------------------------------------------------------------- learning
# DQN learning through the local runtime is also the CNN test's path (test_images.py): slow-only here
@pytest.mark.parametrize("algo,steps,algorithm", [pytest.param("dqn", 10_000, {}, marks=pytest.mark.slow), ("ppo", 20_000, {"lr": 1e-3})])
def test_local_runtime_learns_cartpole(algo: str, steps: int, algorithm: dict) -> None:
    cfg = rl_cfg(algo, steps, algorithm=algorithm, runtime={"backend": "local"})  # DQN's default is auto
    run = run_runtime(cfg, timeout_s=300)
    assert run["runtime"]["backend"] == "local"
    assert_curve(run, cfg)
    assert_counts(run, cfg)
    assert run["final_mean_return"] > LEARNED > 4 * RANDOM_RETURN, run["final_mean_return"]
    recorded = run["config"]["algorithm"]  # every hyperparameter, the overrides among them (issue 35 item 6)
    assert run["config"]["workload"]["algo"] == algo and {k: recorded[k] for k in algorithm} == algorithm
    assert recorded["gamma"] == 0.99


# ------------------------------------------------------------------------------------- ray backend
@pytest.mark.parametrize("algo,steps", [pytest.param("dqn", 3000, marks=pytest.mark.slow),  # Ray runs DQN in the kill/restart
                                         pytest.param("ppo", 4096, marks=pytest.mark.slow)])  # and CLI tests too
def test_ray_backend_two_workers(ray_session: Any, algo: str, steps: int) -> None:
    cfg = rl_cfg(algo, steps, workload={"num_actors": 2}, runtime={"backend": "ray"})
    run = run_runtime(cfg, timeout_s=240)
    rt = run["runtime"]
    assert rt["backend"] == "ray" and run["config"]["workload"]["num_actors"] == 2
    assert sorted(n for n in rt["nodes"] if n.startswith("worker-")) == ["worker-0", "worker-1"]
    assert all(rt["nodes"].values()), "every component ran on a Ray node"
    assert rt["param_versions_published"] > 0 and sum(rt["worker_restarts"].values()) == 0
    assert_curve(run, cfg)
    assert_counts(run, cfg)
    if algo == "ppo":  # both workers' rollouts, in lockstep
        assert run["counts"]["transitions_produced"] == algorithm(cfg.workload.algo).budget(cfg).iterations * 2 * 4 * 128


# ------------------------------------------------------------------------- data-path settings
@pytest.mark.parametrize("overlap_select", [0, 1])
@pytest.mark.parametrize("overlap_collect", [0, 1])
@pytest.mark.parametrize("algo", ["dqn", "ppo"])
def test_every_overlap_setting_runs(algo: str, overlap_collect: int, overlap_select: int) -> None:
    cfg = tiny(algo, overlap_collect=overlap_collect, overlap_select=overlap_select)
    run = run_runtime(cfg, timeout_s=120)
    assert run["config"]["overlap_collect"] == overlap_collect and run["config"]["overlap_select"] == overlap_select
    assert_counts(run, cfg)
    assert_curve(run, cfg)


@pytest.mark.parametrize("placement", ["cpu_pageable", "cpu_pinned", "cuda"])
@pytest.mark.parametrize("algo", ["dqn", "ppo"])
def test_every_placement_available_here_runs(algo: str, placement: str) -> None:
    reason = available_placements()[placement]
    if reason is not None:
        pytest.skip(reason)  # "CUDA is not available on this machine"
    cfg = tiny(algo, placement=placement)
    run = run_runtime(cfg, timeout_s=120)
    assert run["config"]["placement"] == placement
    assert_counts(run, cfg)
    assert_curve(run, cfg)


# ------------------------------------------------------------------------------------ clear errors
def no_run(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fail the test if a run starts (errors must come before any work)."""
    def started(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("a run started despite an invalid config")

    monkeypatch.setattr("janus.runtime.run.build", started)


@pytest.mark.parametrize("algo", ["dqn", "ppo"])
def test_unknown_env_id_fails_at_resolve(monkeypatch: pytest.MonkeyPatch, algo: str) -> None:
    no_run(monkeypatch)
    with pytest.raises(ConfigError, match="--env") as err:
        rl_cfg(algo, 1000, workload={"env": "CartPol-v1"})
    assert "CartPol-v1" in str(err.value) and "did you mean CartPole-v1" in str(err.value)


def test_an_observation_space_janus_cannot_encode_fails_at_resolve(monkeypatch: pytest.MonkeyPatch) -> None:
    from obs_envs import TEXT_ENV

    no_run(monkeypatch)
    with pytest.raises(ConfigError, match="--env.*Text.*not supported") as err:
        rl_cfg("ppo", 1000, workload={"env": TEXT_ENV})
    assert TEXT_ENV in str(err.value)
    rl_cfg("ppo", 1000, workload={"env": "FrozenLake-v1"})  # Discrete observations: one-hot


@pytest.mark.parametrize("env", ["Pendulum-v1", "MountainCarContinuous-v0"])
def test_dqn_on_continuous_actions_fails_at_resolve(monkeypatch: pytest.MonkeyPatch, env: str) -> None:
    no_run(monkeypatch)
    with pytest.raises(ConfigError, match="--env action space for --algo dqn") as err:
        rl_cfg("dqn", 1000, workload={"env": env})
    assert "Discrete" in str(err.value) and "Box" in str(err.value)
    rl_cfg("ppo", 1000, workload={"env": env})  # PPO takes Box actions


def test_unknown_algorithm_key_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    no_run(monkeypatch)
    with pytest.raises(ConfigError, match="unknown key 'learning_rate' in algorithm") as err:
        rl_cfg("ppo", 1000, algorithm={"learning_rate": 1e-3})
    assert "lr" in str(err.value).split("accepted keys", 1)[1]
    with pytest.raises(ConfigError, match="unknown key 'clip_coef' in algorithm"):
        rl_cfg("dqn", 1000, algorithm={"clip_coef": 0.1})  # a PPO key on DQN


@pytest.mark.parametrize("algo,key", [("dqn", "batch_size"), ("dqn", "buffer_size"), ("ppo", "num_minibatches"),
                                      ("ppo", "update_epochs"), ("dqn", "num_envs")])
def test_data_path_keys_in_algorithm_point_to_the_config(monkeypatch: pytest.MonkeyPatch, algo: str, key: str) -> None:
    no_run(monkeypatch)
    with pytest.raises(ConfigError, match=f"algorithm.{key} is set by the data-path config") as err:
        rl_cfg(algo, 1000, algorithm={key: 64})
    assert f"set {MAPPED[key]} instead" in str(err.value), "the message names the one place to set it"


def test_cli_rejects_a_bad_env_before_any_work(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    from janus.cli import main

    no_run(monkeypatch)
    out = tmp_path / "out"
    assert main(["train", "--algo", "dqn", "--env", "Pendulum-v1", "--out", str(out)]) == 2
    assert "--algo dqn" in capsys.readouterr().err and not out.exists()


# ------------------------------------------------------------------------------------------- CLI
def test_cli_train_ppo_writes_results_and_learning_curve(tmp_path: Path) -> None:
    from janus.cli import main

    argv = ["train", "--algo", "ppo", "--quick", "--total_env_steps", "2048", "--out", str(tmp_path), "--seed", "1"]
    assert main(argv) == 0
    data = json.loads((tmp_path / "results.json").read_text())
    (run,) = data["runs"]
    assert run["config"]["workload"]["algo"] == "ppo" and run["config"]["seed"] == 1
    curve = run["learning_curve"]
    assert len(curve["env_steps"]) == len(curve["return"]) == run["episodes"] > 0
    assert (tmp_path / "learning_curve.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


# ------------------------------------------------------------------------------------ tensorboard
def test_tensorboard_scalars_round_trip(tmp_path: Path) -> None:
    pytest.importorskip("tensorboard", reason="tensorboard is not installed (pip install janus-rl[tensorboard])")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from janus.harness.reports.tensorboard import write_scalars

    run = {
        "wall_s": 4.0, "env_steps_per_s": 1500.0, "samples_per_s": 9000.0,
        "stage_s": {"rollout": 2.5, "collect": 0.25, "select": 0.5, "update": 3.0, "learner_wait": 0.1, "actor_blocked": 0.0},
        "learning_curve": {"wall_s": [1.0, 2.0, 2.0, 4.0], "env_steps": [1000, 2000, 2000, 6000], "return": [10.0, 20.0, 30.0, 60.0]},
    }
    assert write_scalars(tmp_path / "tb", run) == tmp_path / "tb"
    acc = EventAccumulator(str(tmp_path / "tb"))
    acc.Reload()
    tags = set(acc.Tags()["scalars"])
    assert {"episode/return", "episode/return_mean20", "throughput/env_steps_per_s", "run/env_steps_per_s",
            "run/samples_per_s", "run/wall_s"} <= tags
    assert {f"stage_s/{s}" for s in run["stage_s"]} <= tags
    returns = acc.Scalars("episode/return")
    assert [e.step for e in returns] == [1000, 2000, 2000, 6000] and [e.value for e in returns] == [10, 20, 30, 60]
    assert [e.wall_time - returns[0].wall_time for e in returns] == pytest.approx([0, 1, 1, 3])
    assert [e.value for e in acc.Scalars("episode/return_mean20")] == pytest.approx([10, 15, 20, 30])
    assert [e.value for e in acc.Scalars("throughput/env_steps_per_s")] == pytest.approx([1000, 1000, 1000, 1500])
    (rate,) = acc.Scalars("run/samples_per_s")
    assert rate.value == 9000 and rate.step == 6000
    assert acc.Scalars("stage_s/update")[0].value == 3.0 and acc.Scalars("run/wall_s")[0].value == 4.0


def test_tensorboard_scalars_of_a_real_run(tmp_path: Path) -> None:
    pytest.importorskip("tensorboard", reason="tensorboard is not installed (pip install janus-rl[tensorboard])")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from janus.harness.reports.tensorboard import write_scalars

    run = run_runtime(tiny("ppo"), timeout_s=120)
    write_scalars(tmp_path, run)
    acc = EventAccumulator(str(tmp_path))
    acc.Reload()
    assert [e.value for e in acc.Scalars("episode/return")] == run["learning_curve"]["return"]
    assert acc.Scalars("run/env_steps_per_s")[0].value == pytest.approx(run["env_steps_per_s"])


def test_cli_train_tensorboard_flag_writes_scalars(tmp_path: Path) -> None:
    pytest.importorskip("tensorboard", reason="tensorboard is not installed (pip install janus-rl[tensorboard])")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from janus.cli import main

    argv = ["train", "--algo", "dqn", "--total_env_steps", "1200", "--out", str(tmp_path), "--tensorboard"]
    assert main(argv) == 0
    (run,) = json.loads((tmp_path / "results.json").read_text())["runs"]
    acc = EventAccumulator(str(tmp_path / "tensorboard"))
    acc.Reload()
    assert [e.value for e in acc.Scalars("episode/return")] == run["learning_curve"]["return"]
    assert acc.Scalars("run/samples_per_s")[0].value == pytest.approx(run["samples_per_s"])


@pytest.mark.parametrize("algo, key, value, accepted", [
    ("dqn", "n_step", "x", "integer >= 1"),
    ("dqn", "n_step", 0, "integer >= 1"),
    ("dqn", "prioritized", "yes", "true or false"),
    ("dqn", "gamma", 1.5, "[0, 1]"),
    ("dqn", "lr", 0, "> 0"),
    ("dqn", "train_frequency", float("nan"), "finite"),
    ("ppo", "hidden", [64, 0], "layer widths"),
    ("ppo", "ent_coef", -0.1, ">= 0"),
])
def test_bad_algorithm_values_are_config_errors(monkeypatch: pytest.MonkeyPatch, algo: str, key: str, value: Any, accepted: str) -> None:
    """YAML ``algorithm:`` values get the same clear errors as flags (was: a raw TypeError)."""
    import re

    no_run(monkeypatch)
    with pytest.raises(ConfigError, match=rf"algorithm\.{key}.*{re.escape(accepted)}"):
        rl_cfg(algo, 1000, algorithm={key: value})
    rl_cfg(algo, 1000, algorithm={"init_log_std": -0.5} if algo == "ppo" else {"learning_starts": 0})  # in range


def test_dqn_with_learning_starts_below_batch_size_trains_to_its_budget() -> None:
    """The limiter lets sampling start at learning_starts (64 < batch_size 128; sampling is with
    replacement): the buffer must serve from there too, not wait for batch_size items (a deadlock
    that the stall detector reported after 60 s)."""
    cfg = rl_cfg("dqn", 400, algorithm={"learning_starts": 64}, runtime={"stall_timeout_s": 20.0})
    assert cfg.janus.batch_size > 64
    run = run_runtime(cfg, timeout_s=120)
    assert run["counts"]["updates"] == algorithm("dqn").budget(cfg).total_updates


@pytest.mark.parametrize("backend", ["local", "process"])
def test_prioritized_dqn_sets_every_batch_priorities_on_the_replay(backend: str) -> None:
    """The Trainer shares the replay's process on these backends: it sets the priorities of every
    batch on the buffer itself (no UpdatePriorityMsg), and the sampler takes every one of them."""
    from janus.runtime.wiring import make_backend

    cfg = tiny("dqn", algorithm={"prioritized": True}, runtime={"backend": backend})
    runner = make_backend(cfg)
    run = run_runtime(cfg, backend=runner, timeout_s=120)
    trainer = runner.counters()["trainer"]
    updates = run["counts"]["updates"]
    assert updates >= algorithm("dqn").budget(cfg).total_updates > 0
    assert trainer["priorities_applied"] + trainer.get("priorities_dropped", 0) == updates * cfg.minibatch_size
    assert trainer["priorities_applied"] > 0  # items overwritten since sampling are dropped, not these
    assert run["runtime"]["priorities_dropped"] == trainer.get("priorities_dropped", 0)
    assert "UpdatePriorityMsg" not in run["runtime"]["messages"]
