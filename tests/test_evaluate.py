"""``janus.evaluate``: whole episodes of a trained policy (a Policy or a run folder), in the run's
environment or another one given by id, factory or instance."""

from __future__ import annotations

from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest

import janus
from janus.cli import main


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("evaluate") / "dqn"
    assert main(["train", "--algo", "dqn", "--env", "CartPole-v1", "--total_env_steps", "256", "--learning_starts", "128",
                 "--batch_size", "32", "--envs_per_actor", "2", "--rollout_length", "16", "--backend", "local",
                 "--out", str(out)]) == 0
    return out


def test_evaluate_a_run_folder_returns_each_episode(run: Path) -> None:
    result = janus.evaluate(run, episodes=4, seed=3)
    assert len(result.returns) == len(result.lengths) == 4
    assert result.returns == [float(n) for n in result.lengths], "CartPole pays 1 per step"
    assert result.mean == pytest.approx(np.mean(result.returns)) and result.std == pytest.approx(np.std(result.returns))
    assert result["mean"] == result.mean and result.as_dict()["lengths"] == result.lengths


def test_a_policy_and_its_folder_give_the_same_episodes(run: Path) -> None:
    policy = janus.load_policy(run)
    assert janus.evaluate(policy, "CartPole-v1", episodes=3, seed=7).returns == \
        janus.evaluate(run, episodes=3, seed=7).returns


def test_another_environment_by_factory_or_instance(run: Path) -> None:
    short = janus.evaluate(run, lambda: gym.make("CartPole-v1", max_episode_steps=5), episodes=3)
    assert len(short.lengths) == 3 and max(short.lengths) <= 5, "the factory's time limit, not the run's"
    instance = janus.evaluate(run, gym.make("CartPole-v1", max_episode_steps=4), episodes=2)
    assert max(instance.lengths) <= 4


def test_an_environment_that_does_not_fit_the_policy_is_refused(run: Path) -> None:
    with pytest.raises(janus.ConfigError, match="does not fit the policy"):
        janus.evaluate(run, "Pendulum-v1", episodes=1)


@pytest.mark.parametrize("kwargs, message", [
    ({"episodes": 0}, "invalid episodes: got 0"),
    ({"seed": -1}, "invalid seed: got -1"),
])
def test_bad_arguments_are_clear_errors(run: Path, kwargs: dict[str, int], message: str) -> None:
    with pytest.raises(janus.ConfigError, match=message):
        janus.evaluate(run, **kwargs)


def test_what_is_not_a_policy_is_refused(tmp_path: Path) -> None:
    with pytest.raises(janus.ConfigError, match="invalid policy"):
        janus.evaluate(42)
    with pytest.raises(janus.CheckpointError, match="no policy checkpoint"):
        janus.evaluate(tmp_path / "missing")
