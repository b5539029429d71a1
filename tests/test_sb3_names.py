"""Stable-Baselines3's names (janus.config.sb3): aliases, conversions and refusals, as flags and as
janus.train keywords; nothing here trains (configurations only, or errors before a run)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import pytest
from torch import nn

import janus
from janus import cli
from janus.api.keywords import keyword_request
from janus.api.run import configured_from, prepared
from janus.config import RunConfig, sb3


def configured(*argv: str) -> RunConfig:
    return cli.configured(cli.parse_args(["train", *argv]))


def from_keywords(algo: str, **flags: Any) -> RunConfig:
    """The configuration janus.train(algo, env=..., **flags) runs (its errors in keywords)."""
    return configured_from(prepared(keyword_request(algo, {"env": "CartPole-v1", **flags}), None)[1])


def test_aliases_set_janus_flags_of_the_same_meaning() -> None:
    cfg = configured("--algo", "ppo", "--learning_rate", "0.001", "--total_timesteps", "8192", "--n_epochs", "7",
                     "--clip_range", "0.3", "--normalize_advantage", "false", "--log_std_init", "-0.5")
    a = cfg.algorithm
    assert (a["lr"], a["clip_coef"], a["norm_adv"], a["init_log_std"]) == (0.001, 0.3, False, -0.5)
    assert (cfg.workload.total_env_steps, cfg.workload.num_epochs) == (8192, 7)
    cfg = configured("--algo", "dqn", "--buffer_size", "5000", "--exploration_initial_eps", "0.9",
                     "--exploration_final_eps", "0.02")
    assert cfg.janus.buffer_capacity == 5000
    assert (cfg.algorithm["eps_start"], cfg.algorithm["eps_end"]) == (0.9, 0.02)


def test_train_freq_counts_vector_steps_as_in_sb3() -> None:
    """SB3 trains every train_freq steps of its vector env, each n_envs transitions; janus's
    train_frequency counts env steps (transitions)."""
    assert configured("--algo", "dqn", "--train_freq", "4").algorithm["train_frequency"] == 4
    assert configured("--algo", "dqn", "--train_freq", "4", "--n_envs", "8").algorithm["train_frequency"] == 32
    with pytest.raises(janus.ConfigError, match="invalid train_freq"):
        from_keywords("dqn", train_freq=(4, "episode"))


def test_every_alias_names_a_flag_of_janus_train() -> None:
    parser = cli.build_parser()
    train = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices["train"]
    flags = {o[2:] for a in train._actions for o in a.option_strings}
    assert set(sb3.ALIASES.values()) <= flags
    assert set(sb3.ALIASES) | set(sb3.CONVERTED) | set(sb3.REFUSED) <= flags


def test_n_envs_counts_every_environment_copy() -> None:
    assert configured("--algo", "ppo", "--n_envs", "8").workload.envs_per_actor == 8
    cfg = configured("--algo", "ppo", "--n_envs", "8", "--num_actors", "2")
    assert (cfg.workload.num_actors, cfg.workload.envs_per_actor) == (2, 4)
    with pytest.raises(janus.ConfigError, match="give a multiple of 3"):
        configured("--algo", "ppo", "--n_envs", "8", "--num_actors", "3")


def test_ppo_n_steps_and_batch_size_mean_what_they_mean_in_sb3() -> None:
    cfg = configured("--algo", "ppo", "--n_envs", "4", "--n_steps", "256", "--batch_size", "64")
    assert cfg.workload.rollout_length == 256
    assert cfg.janus.num_minibatches == 4 * 256 // 64, "SB3's batch_size is the minibatch size"
    with pytest.raises(janus.ConfigError, match="a divisor of the rollout's 512 transitions"):
        configured("--algo", "ppo", "--batch_size", "100")
    with pytest.raises(janus.ConfigError, match="n_steps is SB3's rollout length of on-policy algorithms"):
        configured("--algo", "dqn", "--n_steps", "5")


def test_exploration_fraction_becomes_exploration_steps_of_the_budget() -> None:
    cfg = configured("--algo", "dqn", "--total_timesteps", "10000", "--exploration_fraction", "0.25")
    assert cfg.algorithm["exploration_steps"] == 2500
    with pytest.raises(janus.ConfigError, match="--exploration_fraction.*does not read"):
        configured("--algo", "ppo", "--exploration_fraction", "0.25")


@pytest.mark.parametrize("name", sorted(sb3.REFUSED))
def test_refused_names_say_what_janus_has_instead(name: str, tmp_path: Path) -> None:
    value = "MlpPolicy" if name == "policy" else 1
    with pytest.raises(janus.ConfigError) as err:
        janus.train("ppo", env="CartPole-v1", out=tmp_path / "run", **{name: value})
    assert f"{name} (a Stable-Baselines3 setting) has no janus equivalent" in str(err.value)
    assert "--" not in str(err.value), "a keyword call is answered in keywords"
    assert not (tmp_path / "run").exists()


def test_a_bad_value_is_named_as_typed(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(janus.ConfigError, match=r"invalid learning_rate: got -1"):
        janus.train("ppo", env="CartPole-v1", learning_rate=-1, out=tmp_path / "run")
    assert cli.main(["train", "--algo", "ppo", "--n_epochs", "0", "--out", str(tmp_path / "run")]) == 2
    assert "invalid --n_epochs: got 0" in capsys.readouterr().err


def test_an_alias_with_its_janus_flag_is_an_error() -> None:
    with pytest.raises(janus.ConfigError, match="learning_rate and lr both given"):
        from_keywords("ppo", learning_rate=1e-3, lr=2e-3)
    with pytest.raises(janus.ConfigError, match="--learning_rate and --lr both given"):
        configured("--algo", "ppo", "--learning_rate", "0.1", "--lr", "0.2")


def test_keywords_take_sb3_names_and_policy_kwargs() -> None:
    cfg = from_keywords("PPO", learning_rate=3e-4, n_envs=2, n_steps=32, batch_size=16, gamma=0.98,
                        policy_kwargs={"net_arch": {"pi": [32, 32], "vf": [64]}, "activation_fn": nn.ReLU})
    assert cfg.workload.algo == "ppo"
    assert (cfg.workload.envs_per_actor, cfg.workload.rollout_length, cfg.janus.num_minibatches) == (2, 32, 4)
    a = cfg.algorithm
    assert (a["lr"], a["gamma"], a["hidden"], a["critic_hidden"], a["activation"]) == (3e-4, 0.98, [32, 32], [64], "relu")
    sac = from_keywords("sac", net_arch={"pi": [8], "qf": [16, 16]}, activation="tanh", env="Pendulum-v1")
    assert (sac.algorithm["hidden"], sac.algorithm["critic_hidden"], sac.algorithm["activation"]) == ([8], [16, 16], "tanh")
    with pytest.raises(janus.ConfigError, match="policy_kwargs key 'ortho_init' has no janus equivalent"):
        from_keywords("ppo", policy_kwargs={"ortho_init": False})


def test_sb3_names_a_run_does_not_read_hint_at_janus_name() -> None:
    with pytest.raises(janus.ConfigError, match="sac's entropy temperature is init_alpha"):
        from_keywords("sac", ent_coef=0.1, env="Pendulum-v1")


@pytest.mark.parametrize("name", ["learning_rate", "n_envs", "policy_kwargs", "total_timesteps", "n_steps"])
def test_close_match_hints_never_point_an_sb3_name_elsewhere(name: str) -> None:
    """Each is accepted now: no 'did you mean learning_starts?' for learning_rate."""
    try:
        from_keywords("ppo", **{name: {"net_arch": [8]} if name == "policy_kwargs" else 64})
    except janus.ConfigError as exc:
        assert "did you mean" not in str(exc) and "unknown keyword" not in str(exc)


def test_hints_for_mistyped_names_suggest_janus_flags_only(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        cli.parse_args(["train", "--steps", "6000"])
    err = capsys.readouterr().err
    assert "--total_env_steps" in err and "--n_steps" not in err and "--gradient_steps" not in err


@pytest.mark.parametrize("given", ["PPO", "Ppo", "dqn", "SAC"])
def test_algo_is_case_insensitive(given: str) -> None:
    assert configured("--algo", given).workload.algo == given.lower()


def test_a_custom_algorithm_keeps_its_case() -> None:
    from janus.algorithms.base import canonical_name

    assert canonical_name("My.Module:Algo") == "My.Module:Algo"
    assert canonical_name("NoSuchAlgo") == "NoSuchAlgo", "unknown names are left for the check to name"


def test_policy_kwargs_on_the_command_line_is_json() -> None:
    cfg = configured("--algo", "sac", "--policy_kwargs", '{"net_arch": {"pi": [32], "qf": [64, 64]}, "activation_fn": "Tanh"}')
    assert (cfg.algorithm["hidden"], cfg.algorithm["critic_hidden"], cfg.algorithm["activation"]) == ([32], [64, 64], "tanh")
    with pytest.raises(janus.ConfigError, match="policy_kwargs 'net_arch' .*and --net_arch both given"):
        configured("--algo", "ppo", "--policy_kwargs", '{"net_arch": [8]}', "--net_arch", "16")
