"""``--backend auto`` (DQN's default): process where a spare CPU lets acting overlap the update,
local for the serial ``--seed`` scheduler or on one CPU; what a run used is what it records."""
from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import gymnasium as gym
import pytest
import yaml

from janus import config as config_module
from janus.algorithms.base import algorithm
from janus.cli import config_from_args, main, parse_args
from janus.config import from_dict, resolve, resolve_backend
from janus.errors import ConfigError
from janus.harness.experiments.sweeps import compare_configs, resolve_all, sweep_configs
from janus.runtime.run import RunFailed, run_runtime


def cli_config(*flags: str) -> Any:
    return resolve(config_from_args(parse_args(["train", *flags])))


def test_dqn_defaults_to_auto_which_picks_process_where_two_cpus_let_acting_overlap(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(config_module, "usable_cpus", lambda: 2)
    assert config_from_args(parse_args(["train", "--algo", "dqn"])).runtime.backend == "auto"
    assert cli_config("--algo", "dqn").runtime.backend == "process"
    assert cli_config("--algo", "dqn", "--overlap_collect", "0").runtime.backend == "process"  # one overlap is enough
    # both overlaps off: the serial scheduler, which is --seed reproducible and runs on local only
    assert cli_config("--algo", "dqn", "--seed", "3", "--overlap_collect", "0", "--overlap_select", "0").runtime.backend == "local"
    assert cli_config("--algo", "dqn", "--backend", "local").runtime.backend == "local"  # a choice is kept
    assert cli_config("--algo", "ppo").runtime.backend == "local"  # PPO gains nothing from process (benchmarks.md)
    assert cli_config("--algo", "sac").runtime.backend == "local"
    assert cli_config().runtime.backend == "local"  # the synthetic workload of the default config
    monkeypatch.setattr(config_module, "usable_cpus", lambda: 1)  # workers would only take turns with the learner
    assert cli_config("--algo", "dqn").runtime.backend == "local"
    assert cli_config("--algo", "dqn", "--backend", "process").runtime.backend == "process"


def test_auto_resolves_from_any_config_and_only_auto_changes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(config_module, "usable_cpus", lambda: 4)
    dqn = from_dict(algorithm("dqn").preset)
    assert resolve_backend(replace(dqn, runtime=replace(dqn.runtime, backend="ray"))) == "ray"
    synthetic = from_dict({"runtime": {"backend": "auto"}, "overlap_collect": 1, "overlap_select": 0})
    assert resolve_backend(synthetic) == "process" and resolve(synthetic).runtime.backend == "process"
    serial = from_dict({"overlap_collect": 0, "overlap_select": 0}, base=synthetic)
    assert resolve_backend(serial) == "local"
    with pytest.raises(ConfigError, match=r"backend.*'local', 'process', 'ray', 'auto'"):
        resolve(from_dict({"runtime": {"backend": "threads"}}))


def test_a_ray_only_flag_with_the_auto_backend_says_what_auto_picks() -> None:
    with pytest.raises(ConfigError, match=r"--address applies to --backend ray only \(this run uses --backend auto \(local or process"):
        config_from_args(parse_args(["train", "--algo", "dqn", "--address", "auto"]))


def test_the_default_dqn_run_trains_on_worker_processes_and_records_it(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(config_module, "usable_cpus", lambda: 2)  # the machine this default was measured on
    run = tmp_path / "run"
    assert main(["train", "--algo", "dqn", "--quick", "--out", str(run)]) == 0
    assert "runtime: backend=process" in capsys.readouterr().out
    assert yaml.safe_load((run / "config.yaml").read_text())["runtime"]["backend"] == "process"
    results = json.loads((run / "results.json").read_text())
    assert results["runs"][0]["runtime"]["backend"] == "process"
    assert results["runs"][0]["counts"]["updates"] > 0


def test_an_env_registered_only_where_the_run_started_is_a_clear_error_of_its_worker_process() -> None:
    """Spawned workers import janus and the script, not what a function registered at run time."""
    env_id = "JanusRegisteredHereOnly-v0"
    gym.register(env_id, entry_point="gymnasium.envs.classic_control.cartpole:CartPoleEnv", max_episode_steps=50)
    try:
        cfg = from_dict({"workload": {"env": env_id, "total_env_steps": 2000}, "runtime": {"backend": "process"}},
                        base=from_dict(algorithm("dqn").preset))
        with pytest.raises(RunFailed) as failed:
            run_runtime(resolve(cfg), timeout_s=60)
    finally:
        gym.registry.pop(env_id, None)
    message = str(failed.value)
    assert f"invalid --env: got '{env_id}'" in message, message
    assert "this is a worker process of --backend process" in message and "--backend local" in message, message


@pytest.mark.parametrize("sweep", [None, "overlap", "granularity", "placement"])
def test_every_configuration_of_an_experiment_runs_on_one_backend(sweep: str | None, monkeypatch: pytest.MonkeyPatch) -> None:
    """auto would put the configurations with both overlaps off on local and the rest on process:
    compare and eval would then compare backends, not the knob. They run on local, or on the
    backend asked for."""
    monkeypatch.setattr(config_module, "usable_cpus", lambda: 2)
    for flags, expected in (((), "local"), (("--backend", "process"), "process")):
        if sweep is None:
            cfg = config_from_args(parse_args(["compare", "--algo", "dqn", *flags]))
            configs = compare_configs(cfg)
        else:
            cfg = config_from_args(parse_args(["eval", "--sweep", sweep, "--algo", "dqn", *flags]))
            configs = sweep_configs(cfg, sweep)[0]
        assert len(configs) >= (1 if sweep == "placement" else 4)  # placement: cpu_pageable only without CUDA
        assert {c.runtime.backend for c in resolve_all(configs)} == {expected}, (sweep, flags)
