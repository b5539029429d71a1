"""POPGym (the ``[popgym]`` extra, in ``[test]``): its ids resolve as ``popgym:EnvId`` and bare, its
observation spaces are encoded, dqn and ppo train on it, and a missing package names the extra."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest

import janus
from janus.algorithms.presets import family_of
from janus.envs.memory import POPGYM_INSTALL
from janus.envs.vector import make_vector_env, registered_env_id
from janus.errors import ConfigError

REPEAT_PREVIOUS = "popgym-RepeatPreviousEasy-v0"  # Discrete(4) observations and actions


def test_popgym_ids_resolve_with_the_module_and_bare() -> None:
    assert registered_env_id(f"popgym:{REPEAT_PREVIOUS}") == REPEAT_PREVIOUS
    assert registered_env_id(REPEAT_PREVIOUS) == REPEAT_PREVIOUS  # a bare popgym- id imports popgym
    assert family_of(f"popgym:{REPEAT_PREVIOUS}") == "memory"


@pytest.mark.parametrize("env_id", [f"popgym:{REPEAT_PREVIOUS}", "popgym-CountRecallEasy-v0"])
def test_a_missing_popgym_is_an_error_naming_the_extra(env_id: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "popgym", None)  # import popgym raises ImportError
    for name in [e for e in gym.registry if e.startswith("popgym-")]:
        monkeypatch.delitem(gym.registry, name)  # as in a process that never imported it
    with pytest.raises(ConfigError, match=r"popgym.*pip install 'janus-rl\[popgym\]'") as info:
        registered_env_id(env_id)
    assert POPGYM_INSTALL in str(info.value)


@pytest.mark.parametrize("env_id, width", [
    (REPEAT_PREVIOUS, 4),                      # Discrete(4): a one-hot
    ("popgym-CountRecallEasy-v0", 4),          # MultiDiscrete([2 2]): one one-hot per entry
    ("popgym-AutoencodeEasy-v0", 2 + 4),       # Tuple(Discrete(2), Discrete(4))
    ("popgym-PositionOnlyCartPoleEasy-v0", 2),  # Box(2,)
])
def test_popgym_observations_become_one_float32_vector(env_id: str, width: int) -> None:
    envs = make_vector_env(f"popgym:{env_id}", num_envs=2, seed=0)
    try:
        obs, _ = envs.reset(seed=[0, 1])
        assert envs.single_observation_space.shape == (width,) and obs.shape == (2, width)
        assert obs.dtype == np.float32 and np.isfinite(obs).all()
        obs, reward, term, trunc, _ = envs.step(envs.action_space.sample())
        assert obs.shape == (2, width) and reward.shape == (2,)
    finally:
        envs.close()


def test_popgym_episodes_are_seeded() -> None:
    def observations(seed: int) -> list[list[float]]:
        env = make_vector_env(f"popgym:{REPEAT_PREVIOUS}", num_envs=1, seed=seed)
        first, _ = env.reset(seed=seed)
        seen = [first[0].tolist()]
        for _ in range(20):
            obs, *_ = env.step(np.zeros(1, np.int64))
            seen.append(obs[0].tolist())
        env.close()
        return seen

    assert observations(3) == observations(3)
    assert observations(3) != observations(4)


@pytest.mark.parametrize("algo", ["dqn", "ppo"])
def test_dqn_and_ppo_train_on_a_popgym_task(algo: str, tmp_path: Path) -> None:
    run = janus.train(algo, env=f"popgym:{REPEAT_PREVIOUS}", total_env_steps=1_024, out=tmp_path / algo, seed=0,
                      backend="local")
    assert run.status == "finished"
    saved = json.loads((run.out / "results.json").read_text())["runs"][0]
    assert saved["counts"]["env_steps"] >= 1_024
    assert saved["counts"]["updates"] > 0
    assert saved["episodes"] > 0 and np.isfinite(saved["final_mean_return"])  # its episodes end by themselves
    obs, _ = gym.make(REPEAT_PREVIOUS).reset(seed=0)
    assert run.policy.recurrent == (algo == "ppo")  # POPGym is the memory family: ppo's preset there is recurrent
    out = run.policy.predict(obs)  # recurrent: (action, next state) from a zero state
    action = out[0] if run.policy.recurrent else out
    assert int(np.asarray(action).reshape(-1)[0]) in range(4)  # the policy takes the Discrete observation as emitted
