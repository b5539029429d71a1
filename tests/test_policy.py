"""``janus.load_policy``: predict from a run folder, its checkpoint or a file, for DQN and PPO
(discrete and Box actions), single observations and batches; clear errors for what is not a run."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml

import janus
from janus.cli import main
from janus.errors import CheckpointError

REPO = Path(__file__).resolve().parents[1]


def train(tmp_path: Path, algo: str, env: str, **workload: int) -> Path:
    """A tiny janus train run of ``algo`` on ``env``; returns its run folder."""
    cfg = {"workload": {"algo": algo, "env": env, "num_actors": 1, "envs_per_actor": 2, "rollout_length": 16, **workload}}
    if algo == "dqn":
        cfg["algorithm"] = {"learning_starts": 128}
        cfg["batch_size"] = 32
    (tmp_path / f"{algo}.yaml").write_text(yaml.safe_dump(cfg))
    out = tmp_path / f"{algo}-{env}"
    assert main(["train", "--algo", algo, "--config", str(tmp_path / f"{algo}.yaml"), "--out", str(out)]) == 0
    return out


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    tmp = tmp_path_factory.mktemp("policies")
    return {"dqn": train(tmp, "dqn", "CartPole-v1", total_env_steps=256),
            "ppo": train(tmp, "ppo", "CartPole-v1", total_env_steps=64),
            "ppo-box": train(tmp, "ppo", "Pendulum-v1", total_env_steps=64)}


@pytest.mark.parametrize("name", ["dqn", "ppo"])
def test_discrete_policy_predicts_single_and_batched(runs: dict[str, Path], name: str) -> None:
    policy = janus.load_policy(runs[name])
    obs = np.random.default_rng(0).normal(size=(5, 4)).astype(np.float32)
    batch = policy.predict(obs)
    assert isinstance(batch, np.ndarray) and batch.shape == (5,) and set(batch.tolist()) <= {0, 1}
    single = [policy.predict(o) for o in obs]
    assert all(np.ndim(a) == 0 for a in single) and [int(a) for a in single] == batch.tolist()
    # the same weights whichever way the run is named
    for path in (runs[name] / "checkpoint", runs[name] / "checkpoint" / "trainer.pt"):
        assert janus.load_policy(path).predict(obs).tolist() == batch.tolist()


def test_box_policy_predicts_clipped_actions(runs: dict[str, Path]) -> None:
    policy = janus.load_policy(runs["ppo-box"])
    obs = np.random.default_rng(1).normal(size=(7, 3)).astype(np.float32)
    greedy = policy.predict(obs)
    assert greedy.shape == (7, 1) and greedy.dtype == np.float32
    assert np.all(greedy >= -2.0) and np.all(greedy <= 2.0)
    assert np.array_equal(policy.predict(obs), greedy)  # deterministic: the mode
    assert policy.predict(obs[0]).shape == (1,)
    sampled = np.stack([policy.predict(obs, deterministic=False) for _ in range(5)])
    assert np.all(np.abs(sampled) <= 2.0) and not np.all(sampled == sampled[0])


def test_wrong_observation_shape_is_a_clear_error(runs: dict[str, Path]) -> None:
    with pytest.raises(janus.ConfigError, match=r"expected \(4,\)"):
        janus.load_policy(runs["dqn"]).predict(np.zeros(3))


def test_folder_that_is_not_a_run_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(CheckpointError, match="no policy checkpoint at"):
        janus.load_policy(tmp_path)
    (tmp_path / "trainer.pt").write_bytes(b"x")
    with pytest.raises(CheckpointError, match="not a janus train run folder"):
        janus.load_policy(tmp_path)


def test_rollout_cli_on_a_folder_that_is_not_a_run_exits_2(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO / "src"), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run([sys.executable, "-m", "janus.cli", "rollout", "--checkpoint", str(tmp_path)], env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and f"janus rollout: error: no policy checkpoint at {str(tmp_path)!r}" in proc.stderr
    assert "Traceback" not in proc.stderr


@pytest.mark.parametrize("seed", ["-1", str(1 << 32)])
def test_rollout_with_a_seed_out_of_range_is_a_clear_error(runs: dict[str, Path], seed: str,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    """A negative seed ended in a traceback from Gymnasium's seeding."""
    assert main(["rollout", "--checkpoint", str(runs["dqn"]), "--episodes", "1", "--seed", seed]) == 2
    err = capsys.readouterr().err
    assert f"invalid --seed: got {seed}" in err and "4,294,967,295" in err
