"""Presets by environment family: detection by env id, layering under the config file and flags,
``--preset none|FAMILY``, what ``janus train`` prints and records. Nothing here trains."""

from __future__ import annotations

from pathlib import Path

import gymnasium
import pytest
import yaml

from janus.algorithms.presets import FAMILIES, family_of, preset_for
from janus.cli import build_parser, config_from_args, configured, parse_args
from janus.config import recorded
from janus.errors import ConfigError


@pytest.mark.parametrize("env_id, family", [
    ("ALE/Pong-v5", "atari"), ("ALE/Breakout-v5", "atari"),
    ("CartPole-v1", "classic_control"), ("Acrobot-v1", "classic_control"), ("MountainCar-v0", "classic_control"),
    ("Pendulum-v1", "classic_control"), ("MountainCarContinuous-v0", "classic_control"),
    ("LunarLander-v3", "box2d"), ("BipedalWalker-v3", "box2d"), ("CarRacing-v3", "box2d"),
    ("HalfCheetah-v5", "mujoco"), ("Hopper-v4", "mujoco"), ("Walker2d-v5", "mujoco"), ("Ant-v5", "mujoco"),
    ("Humanoid-v5", "mujoco"), ("InvertedPendulum-v5", "mujoco"),
])
def test_the_family_comes_from_the_registry_without_the_family_installed(env_id: str, family: str) -> None:
    if not env_id.startswith("ALE/") and env_id not in gymnasium.envs.registry:
        pytest.skip(f"{env_id} is not in this Gymnasium's registry")
    assert family_of(env_id) == family  # box2d and mujoco need not be installed: the entry point names them


@pytest.mark.parametrize("env_id, family", [("HalfCheetah-v3", "mujoco"), ("LunarLander-v2", "box2d"),
                                            ("Swimmer-v2", "mujoco"), ("FrozenLake-v1", None), ("Taxi-v3", None),
                                            ("mypackage:MyEnv-v0", None), ("mypackage:CartPole-v1", "classic_control")])
def test_ids_outside_the_registry_go_by_their_name_and_others_have_no_family(env_id: str, family: str | None) -> None:
    assert family_of(env_id) == family


def test_each_algorithm_has_the_families_its_action_spaces_allow_and_each_loads_as_a_config() -> None:
    from janus.algorithms.base import algorithm
    from janus.config import from_dict

    expected = {"dqn": {"atari", "classic_control", "box2d"},
                "ppo": {"atari", "classic_control", "box2d", "mujoco", "memory"},  # memory: the recurrent PPO's preset
                "sac": {"classic_control", "box2d", "mujoco"}}
    for algo, families in expected.items():
        got = {f for f in FAMILIES if preset_for(algo, "CartPole-v1", f).family == f}
        assert got == families, algo
        for family in families:
            choice = preset_for(algo, "CartPole-v1", family)
            cfg = from_dict(choice.preset.values, base=from_dict(algorithm(algo).preset))  # known keys only
            assert cfg.workload.algo == algo and choice.describe().startswith(f"preset: {algo}/{family} (")
    assert preset_for("dqn", "HalfCheetah-v5", "auto").family == "none"  # dqn has no continuous-action preset
    assert preset_for("sac", "ALE/Pong-v5", "auto").family == "none"
    assert preset_for("impala", "ALE/Pong-v5", "auto").family == "none"
    with pytest.raises(ConfigError, match="invalid workload.preset: got 'box3d'"):
        preset_for("dqn", "CartPole-v1", "box3d")


def test_the_atari_dqn_preset_reaches_the_run_config(capsys: pytest.CaptureFixture[str]) -> None:
    cfg = configured(parse_args(["train", "--algo", "dqn", "--env", "ALE/Pong-v5"]))
    a = cfg.algorithm
    # hyperparams/dqn.yml `atari` of the RL Zoo, mapped onto janus's knobs
    assert (cfg.janus.buffer_capacity, cfg.janus.batch_size) == (1_000_000, 32)
    assert (a["lr"], a["learning_starts"], a["train_frequency"], a["eps_end"]) == (1e-4, 100_000, 4.0, 0.1)
    assert (a["exploration_steps"], a["target_update_interval"]) == (1_000_000, 2_500)
    assert cfg.workload.total_env_steps == 10_000_000
    assert cfg.janus.overlap_select == 1 and cfg.runtime.backend == "auto"  # the dqn preset's own knobs stay
    assert "janus: preset: dqn/atari (RL Zoo dqn.yml, atari)" in capsys.readouterr().out
    assert recorded(cfg)["workload"]["preset"] == "atari"


def test_preset_none_keeps_the_algorithm_preset(capsys: pytest.CaptureFixture[str]) -> None:
    plain = configured(parse_args(["train", "--algo", "dqn", "--env", "ALE/Pong-v5", "--preset", "none"]))
    base = configured(parse_args(["train", "--algo", "dqn", "--env", "CartPole-v1"]))
    assert "janus: preset: none (the dqn defaults)" in capsys.readouterr().out
    assert plain.janus == base.janus and plain.algorithm == base.algorithm
    assert plain.janus.buffer_capacity == 50_000 and plain.workload.preset == "none"
    assert base.workload.preset == "classic_control"  # CartPole: janus's own tuned preset, nothing layered


def test_a_flag_and_a_config_file_beat_the_preset(tmp_path: Path) -> None:
    cfg = configured(parse_args(["train", "--algo", "dqn", "--env", "ALE/Pong-v5", "--buffer_capacity", "20000",
                                 "--learning_starts", "5000", "--total_env_steps", "50000"]))
    assert (cfg.janus.buffer_capacity, cfg.algorithm["learning_starts"], cfg.workload.total_env_steps) == (20_000, 5_000, 50_000)
    assert cfg.algorithm["lr"] == 1e-4  # what no flag gave still comes from the preset
    path = tmp_path / "pong.yaml"
    path.write_text(yaml.safe_dump({"batch_size": 64, "workload": {"algo": "dqn", "env": "ALE/Pong-v5"},
                                    "algorithm": {"lr": 2e-4}}))
    cfg = configured(parse_args(["train", "--config", str(path)]))
    assert (cfg.janus.batch_size, cfg.algorithm["lr"], cfg.janus.buffer_capacity) == (64, 2e-4, 1_000_000)


def test_preset_forces_a_family_and_the_forced_overlays_validate() -> None:
    # Box2D and MuJoCo may be absent: each overlay is checked on an installed env of the same action space
    for algo, env, family in (("ppo", "CartPole-v1", "box2d"), ("ppo", "Pendulum-v1", "mujoco"), ("ppo", "CartPole-v1", "atari"),
                              ("dqn", "CartPole-v1", "box2d"), ("sac", "Pendulum-v1", "box2d"), ("sac", "Pendulum-v1", "mujoco")):
        cfg = configured(parse_args(["train", "--algo", algo, "--env", env, "--preset", family]))
        assert cfg.workload.preset == family
    cfg = configured(parse_args(["train", "--algo", "ppo", "--env", "CartPole-v1", "--preset", "box2d"]))
    assert (cfg.workload.envs_per_actor, cfg.workload.rollout_length, cfg.janus.num_minibatches) == (16, 1024, 256)


def test_box2d_and_mujoco_ids_pick_their_preset_without_the_packages() -> None:
    cfg = config_from_args(parse_args(["train", "--algo", "sac", "--env", "HalfCheetah-v5"]))  # not validated: no env made
    assert cfg.workload.preset == "mujoco" and cfg.algorithm["learning_starts"] == 10_000
    cfg = config_from_args(parse_args(["train", "--algo", "ppo", "--env", "LunarLander-v3"]))
    assert cfg.workload.preset == "box2d" and cfg.algorithm["gamma"] == 0.999


def test_the_preset_is_recorded_and_a_resumed_config_keeps_it(tmp_path: Path) -> None:
    cfg = configured(parse_args(["train", "--algo", "dqn", "--env", "ALE/Pong-v5", "--preset", "none"]))
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(recorded(cfg)))
    again = config_from_args(parse_args(["train", "--config", str(tmp_path / "config.yaml")]))
    assert again.workload.preset == "none" and again.janus.buffer_capacity == 50_000


def test_help_lists_the_presets(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        build_parser().parse_args(["train", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert "--preset PRESET Hyperparameters by environment family" in out
    assert "atari, classic_control, box2d, mujoco" in out and "none (the algorithm's own)" in out and "[default auto]" in out
    with pytest.raises(SystemExit):
        parse_args(["train", "--algo", "dqn", "--preset", "box3d"])
    assert "invalid choice: 'box3d'" in capsys.readouterr().err


def test_preset_does_not_apply_to_the_synthetic_workload() -> None:
    with pytest.raises(ConfigError, match="--preset does not apply to --algo synthetic"):
        config_from_args(parse_args(["train", "--preset", "atari"]))


def test_a_run_from_before_presets_resumes_without_one(tmp_path: Path) -> None:
    """Its config.yaml has no workload.preset (and, before issue 35, no algorithm section): the
    resumed run keeps the values it had, not the Atari preset's."""
    from janus.harness.resume_checks import check_changes, stored_config

    cfg = configured(parse_args(["train", "--algo", "dqn", "--env", "ALE/Pong-v5", "--preset", "none"]))
    old = cfg.to_dict()
    del old["workload"]["preset"]
    old.pop("algorithm", None)
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(old))
    resumed = config_from_args(parse_args(["train", "--resume", str(tmp_path)]))
    assert resumed.workload.preset == "none" and resumed.algorithm.get("lr", 5e-4) == 5e-4
    assert resumed.janus.buffer_capacity == 50_000
    check_changes(tmp_path, stored_config(tmp_path), resumed)  # no change refused
