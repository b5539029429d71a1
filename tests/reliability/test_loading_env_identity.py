"""A loaded policy plays the environment it was trained on, or loading says why not (issue 46, item 5).

Generated ids of environment factories were a counter (``janus_api/lambda_0-v0`` in every session's
config.yaml): ``load_policy`` of a CartPole run in a session whose first lambda made a 7-step env
played that env (returns 7, 7, 7) without a word. Observation statistics were float32: observations
near 1e20 made the saved variance ``inf`` and the feature silently 0.
"""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch

from janus.algorithms.normalization import RunningNorm
from janus.envs.in_process import factory_digest, register_in_process
from janus.errors import ConfigError, TrainingDiverged

REPO = Path(__file__).resolve().parents[2]

SESSION = '''
import json, sys
import gymnasium as gym
import janus
from janus.envs.in_process import register_in_process

run = sys.argv[2]
cartpole = lambda: gym.make("CartPole-v1")
if sys.argv[1] == "train":
    janus.train("dqn", env=cartpole, total_env_steps=400, learning_starts=100, out=run)
    sys.exit(0)
seven = lambda: gym.make("CartPole-v1", max_episode_steps=7)  # this session's first factory
register_in_process(seven)
out = {}
for name, call in [("plain", lambda: janus.evaluate(run, episodes=3).lengths),
                   ("seven", lambda: janus.load_policy(run, env=seven).cfg.workload.env),
                   ("evaluate_seven", lambda: janus.evaluate(run, env=seven, episodes=1).lengths)]:
    try:
        out[name] = call()
    except janus.ConfigError as exc:
        out[name] = "refused: " + str(exc)
policy = janus.load_policy(run, env=cartpole)  # the run's own factory, in this session
out["own"] = [policy.cfg.workload.env, janus.evaluate(policy, episodes=1).lengths]
out["evaluate_own"] = janus.evaluate(run, env=cartpole, episodes=1).lengths
print(json.dumps(out))
'''


def session(*argv: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO / "src")}
    return subprocess.run([sys.executable, "-c", SESSION, *argv], capture_output=True, text=True, timeout=300, env=env)


def test_a_factory_run_never_loads_into_another_sessions_factory(tmp_path: Path) -> None:
    run = tmp_path / "run"
    trained = session("train", str(run))
    assert trained.returncode == 0, trained.stderr[-3000:]
    run_env = (run / "config.yaml").read_text().split("env: ", 1)[1].split("\n", 1)[0]
    assert run_env.startswith("janus_api/lambda_") and len(run_env.rsplit("_", 1)[1]) == len("0123456789abcdef-v0")
    loaded = session("load", str(run))
    assert loaded.returncode == 0, loaded.stderr[-3000:]
    out = json.loads(loaded.stdout.strip().splitlines()[-1])
    assert out["plain"].startswith("refused: ") and "load_policy(folder, env=factory)" in out["plain"], out
    assert out["seven"].startswith("refused: ") and "not the factory the run was trained on" in out["seven"], out
    assert "not the factory the run was trained on" in out["evaluate_seven"], out
    own_env, lengths = out["own"]
    assert own_env == run_env and lengths[0] > 7, "the run's own factory: CartPole's episodes, not 7-step ones"
    assert out["evaluate_own"] == lengths, "janus.evaluate(folder, env=factory) loads it the same way"


def test_factory_ids_follow_the_factory_not_the_order() -> None:
    def make(steps: int):  # the same code, another closure value: another env
        return lambda: gym.make("CartPole-v1", max_episode_steps=steps)

    seven, five = make(7), make(5)
    assert factory_digest(seven) != factory_digest(five)
    assert factory_digest(seven) == factory_digest(make(7))
    first = register_in_process(seven)
    assert register_in_process(seven) == first and register_in_process(five) != first
    assert first in gym.registry and first.startswith("janus_api/lambda_")
    def cartpole(steps: int) -> gym.Env:
        return gym.make("CartPole-v1", max_episode_steps=steps)

    def acrobot(steps: int) -> gym.Env:
        return gym.make("Acrobot-v1", max_episode_steps=steps)

    acrobot.__qualname__ = cartpole.__qualname__  # the same name: only the code tells them apart
    digests = {factory_digest(functools.partial(f, n)) for f in (cartpole, acrobot) for n in (5, 7)}
    assert len(digests) == 4 and factory_digest(functools.partial(cartpole, 5)) in digests
    instance = gym.make("CartPole-v1", max_episode_steps=7)
    assert register_in_process(instance) != register_in_process(gym.make("CartPole-v1", max_episode_steps=9))


def test_a_factory_run_given_the_wrong_factory_in_process_is_refused() -> None:
    from janus.envs.in_process import loadable_env_id

    cartpole = register_in_process(lambda: gym.make("CartPole-v1"))
    assert loadable_env_id(cartpole) == cartpole  # registered here: the same digest
    with pytest.raises(ConfigError, match="not the factory the run was trained on"):
        loadable_env_id(cartpole, lambda: gym.make("Acrobot-v1"))
    with pytest.raises(ConfigError, match="Gymnasium id; env= is for a run trained on a Python factory"):
        loadable_env_id("CartPole-v1", lambda: gym.make("CartPole-v1"))
    with pytest.raises(ConfigError, match="registered only in the process that trained it"):
        loadable_env_id("janus_api/lambda_0-v0")  # a janus before digests: never taken on trust


def test_observation_statistics_of_huge_observations_stay_finite() -> None:
    norm = RunningNorm((2,))
    obs = torch.tensor([[1e30, 1.0], [3e30, 2.0], [2e30, 3.0]], dtype=torch.float32)
    norm.observe(obs)
    norm.commit()
    assert torch.isfinite(norm.var).all() and norm.var.dtype == torch.float64
    out = norm(obs)
    assert out.dtype == torch.float32 and torch.isfinite(out).all()
    assert out[0, 0] < 0 < out[1, 0], "the huge feature is normalised, not zeroed"
    restored = RunningNorm((2,))
    restored.load_state_dict(norm.state_dict())
    assert torch.equal(restored(obs), out)


def test_float32_statistics_of_an_older_checkpoint_still_load() -> None:
    old = {"mean": torch.tensor([1.0, 2.0]), "var": torch.tensor([4.0, 9.0]), "count": torch.tensor(5.0, dtype=torch.float64)}
    norm = RunningNorm((2,))
    norm.load_state_dict(old)
    assert norm.var.dtype == torch.float64
    assert np.allclose(norm(torch.tensor([[3.0, 5.0]])).numpy(), [[1.0, 1.0]], atol=1e-6)


def test_statistics_that_overflow_even_float64_are_an_error_not_a_zero_feature() -> None:
    norm = RunningNorm((1,))
    norm.observe(torch.tensor([[float("inf")]]))
    with pytest.raises(TrainingDiverged, match="normalize_obs: the observations' running mean or variance is no longer finite"):
        norm.commit()
