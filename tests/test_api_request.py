"""The API is the core, the CLI a thin layer (issue 47, item 1): ``janus.train`` takes a typed
:class:`~janus.config.request.RunRequest` or keywords, the command line parses its flags into the same
request, and both build the same configuration; errors name the caller's words."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import janus
from janus import cli
from janus.api.keywords import keyword_request
from janus.api.run import configured_from, prepared
from janus.config.request import FLAGS, KEYWORDS, RunRequest

DEFAULT_YAML = str(Path(__file__).resolve().parents[1] / "configs" / "default.yaml")


def from_keywords(algo: str | None, **keywords: Any) -> janus.RunConfig:
    """The configuration janus.train(algo, **keywords) runs."""
    return configured_from(prepared(keyword_request(algo, keywords), None)[1])


def from_flags(*argv: str) -> janus.RunConfig:
    """The configuration janus train ARGV runs."""
    return cli.configured(cli.parse_args(["train", *argv]))


@pytest.mark.parametrize("flags, keywords", [
    (["--algo", "dqn", "--env", "CartPole-v1"], {"algo": "dqn", "env": "CartPole-v1"}),
    (["--algo", "PPO", "--lr", "0.001", "--num_workers", "2", "--n_steps", "64"],
     {"algo": "PPO", "lr": 1e-3, "num_workers": 2, "n_steps": 64}),
    (["--algo", "dqn", "--total_env_steps", "5000", "--seed", "3", "--quick", "--backend", "local"],
     {"algo": "dqn", "total_env_steps": 5000, "seed": 3, "quick": True, "backend": "local"}),
    (["--env", "Pendulum-v1", "--net_arch", "32", "32", "--gamma", "0.95"],
     {"env": "Pendulum-v1", "net_arch": [32, 32], "gamma": 0.95}),
    (["--algo", "sac", "--env", "Pendulum-v1", "--learning_rate", "0.0003", "--buffer_size", "5000"],
     {"algo": "sac", "env": "Pendulum-v1", "learning_rate": 3e-4, "buffer_size": 5000}),
    (["--algo", "ppo", "--env_kwargs", '{"max_episode_steps": 50}', "--g_collect", "1/4", "--normalize_obs", "true"],
     {"algo": "ppo", "env_kwargs": {"max_episode_steps": 50}, "g_collect": "1/4", "normalize_obs": True}),
    (["--config", DEFAULT_YAML, "--iterations", "20", "--overlap_collect", "0"],
     {"config": DEFAULT_YAML, "iterations": 20, "overlap_collect": 0}),
])
def test_the_cli_and_the_api_build_equal_configurations(flags: list[str], keywords: dict[str, Any]) -> None:
    algo = keywords.pop("algo", None)
    assert from_flags(*flags) == from_keywords(algo, **keywords)


def test_the_cli_parses_its_flags_into_the_request_the_keywords_make() -> None:
    parsed = cli.request_from_args(cli.parse_args(["train", "--algo", "dqn", "--lr", "0.001", "--out", "runs/x",
                                                   "--force", "--num_workers", "2"]))
    typed = prepared(keyword_request("dqn", {"lr": 1e-3, "out": "runs/x", "force": True, "num_workers": 2}), None)[1]
    assert (parsed.naming, typed.naming) == (FLAGS, KEYWORDS)
    assert RunRequest(**{**vars(parsed), "naming": KEYWORDS}) == typed


@pytest.mark.parametrize("keywords, message", [
    ({"lr": "fast"}, r"^invalid lr: got 'fast' \(str\); accepted: a number \(int or float\)$"),
    ({"total_env_steps": 1.5}, r"^invalid total_env_steps: got 1\.5"),
    ({"force": "yes"}, r"^invalid force: got 'yes' \(str\); accepted: True or False \(a bool\)$"),
    ({"num_workers": [2]}, r"^invalid num_workers: got \[2\] \(list\)"),
    ({"out": 3}, r"^invalid out: got 3; accepted: a path"),
])
def test_a_keyword_of_the_wrong_type_is_named_as_the_keyword(keywords: dict[str, Any], message: str,
                                                             tmp_path: Path) -> None:
    with pytest.raises(janus.ConfigError, match=message) as err:
        janus.train("dqn", env="CartPole-v1", **{"out": tmp_path / "run", **keywords})
    assert "--" not in str(err.value)
    assert not (tmp_path / "run").exists()


def test_a_request_of_the_wrong_type_is_named_as_its_naming_says(tmp_path: Path) -> None:
    given = {"env": "CartPole-v1", "gamma": True}
    with pytest.raises(janus.ConfigError, match=r"^invalid gamma: got True \(bool\)"):
        janus.train(RunRequest(algo="dqn", settings=given, out=tmp_path / "run"))
    with pytest.raises(janus.ConfigError, match=r"^invalid --gamma: got True \(bool\)"):
        janus.train(RunRequest(algo="dqn", settings=given, out=tmp_path / "run", naming=FLAGS))
    with pytest.raises(janus.ConfigError, match=r"'out' not a setting of a run's configuration"):
        janus.train(RunRequest(algo="dqn", settings={"out": "x"}))
    with pytest.raises(janus.ConfigError, match=r"give only callbacks beside it"):
        janus.train(RunRequest(algo="dqn"), env="CartPole-v1")  # type: ignore[call-overload]
    assert not (tmp_path / "run").exists()


def test_a_request_object_passed_to_janus_train_runs_as_its_keywords_do(tmp_path: Path) -> None:
    request = RunRequest(algo="dqn", settings={"env": "CartPole-v1", "total_env_steps": 1500, "backend": "local",
                                               "seed": 1}, out=tmp_path / "run")
    run = janus.train(request, callbacks=[])
    assert isinstance(run, janus.TrainedRun) and run.status == "finished" and run.out == tmp_path / "run"
    assert run.result["config"]["seed"] == 1
    saved = json.loads((tmp_path / "run" / "results.json").read_text())
    assert saved["command"].startswith("janus.train(RunRequest(algo='dqn', settings=")
    assert from_keywords("dqn", env="CartPole-v1", total_env_steps=1500, backend="local", seed=1) == \
        configured_from(prepared(request, None)[1])


@pytest.mark.parametrize(("keywords", "g_select"), [
    ({"num_minibatches": 1}, 1.0),  # the preset's 1/4 of a rollout is no k/1
    ({"num_minibatches": 3, "n_steps": 129}, 1 / 3),  # the nearest k/3 to 1/4 (4 x 129 = 3 x 172)
    ({"num_minibatches": 8}, 0.25),  # 2/8: kept
    ({"n_envs": 8, "n_steps": 32, "batch_size": 256}, 1.0),  # SB3's names: one minibatch of the whole rollout
])
def test_a_new_minibatch_count_takes_the_preset_selection_along(keywords: dict[str, Any], g_select: float) -> None:
    cfg = from_keywords("ppo", env="CartPole-v1", **keywords)
    assert cfg.janus.g_select == pytest.approx(g_select)


def test_a_selection_given_beside_the_minibatch_count_is_kept_and_checked() -> None:
    with pytest.raises(janus.ConfigError, match="g_select"):
        from_keywords("ppo", env="CartPole-v1", num_minibatches=1, g_select=0.25)
