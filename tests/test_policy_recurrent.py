"""A recurrent policy end to end: trained on a cue-recall task only memory solves, then ``load_policy``'s
``predict`` with a state, ``janus.evaluate``, ``janus rollout`` (with ``--video``), the best policy of the
run's evaluations, and a resumed run."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch

import janus
from janus.buffer.storage.state_file import load_state
from janus.cli import main
from janus.errors import ConfigError

LENGTH = 4


class CueRecall(gym.Env):
    """The first observation shows a cue (+1 or -1), the next ones nothing, the last one asks for it:
    acting 1 for +1 (0 for -1) at that step pays 1, else -1. A policy without memory sees the same
    question either way and averages 0; one that remembers the cue gets 1. ``render()`` paints the step."""

    metadata = {"render_modes": ["rgb_array"], "render_fps": 10}

    def __init__(self, render_mode: str | None = None, length: int = LENGTH) -> None:
        self.render_mode, self.length, self.t, self.cue = render_mode, length, 0, 1.0
        self.observation_space = gym.spaces.Box(-1, 1, (2,), np.float32)
        self.action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[np.ndarray, dict]:
        super().reset(seed=seed)
        self.t, self.cue = 0, float(self.np_random.choice([-1.0, 1.0]))
        return np.array([self.cue, 0.0], np.float32), {}

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict]:
        asked = self.t == self.length - 1
        self.t += 1
        reward = (1.0 if int(action) == int(self.cue > 0) else -1.0) if asked else 0.0
        return np.array([0.0, float(self.t == self.length - 1)], np.float32), reward, asked, False, {}

    def render(self) -> np.ndarray:
        return np.full((4, 6, 3), self.t * 20, np.uint8)


gym.register("JanusTestCueRecall-v0", entry_point=CueRecall)
ENV = "test_policy_recurrent:JanusTestCueRecall-v0"
TRAIN = ["--algo", "ppo", "--env", ENV, "--recurrent", "gru", "--recurrent_size", "16", "--net_arch", "16",
         "--envs_per_actor", "8", "--rollout_length", "16", "--num_minibatches", "2", "--g_select", "0.5",
         "--lr", "0.003", "--ent_coef", "0.0", "--backend", "local", "--seed", "0"]


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("recurrent") / "run"
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        assert main(["train", *TRAIN, "--total_env_steps", "6144", "--eval_interval_steps", "2048",
                     "--out", str(out)]) == 0
    finally:
        torch.set_num_threads(before)
    return out


def test_a_recurrent_ppo_recalls_the_cue(run: Path) -> None:
    result = janus.evaluate(run, episodes=20)
    assert result.lengths == [LENGTH] * 20
    assert result.mean > 0.8, result.returns  # without memory: 0 on average


def test_predict_takes_and_returns_the_state(run: Path) -> None:
    policy = janus.load_policy(run)
    assert policy.recurrent and policy.initial_state(3).shape == (3, 16) and not policy.initial_state(3).any()
    obs = np.array([[1.0, 0.0], [-1.0, 0.0]], np.float32)
    actions, state = policy.predict(obs)  # state None: an episode's start
    assert actions.shape == (2,) and state.shape == (2, 16) and state.any()
    again, state0 = policy.predict(obs, policy.initial_state(2))
    np.testing.assert_array_equal(state, state0)
    # episode_start zeroes the rows it flags: row 0 starts afresh, row 1 goes on from its state
    _, both = policy.predict(obs, state, episode_start=np.array([True, False]))
    _, fresh = policy.predict(obs[:1], None)
    np.testing.assert_allclose(both[0], fresh[0], rtol=1e-6)
    assert not np.allclose(both[1], state0[1])
    # one observation: one action and a state [state_size]; the cue is recalled at the question
    state1 = policy.initial_state(1)[0]
    for cue in (1.0, -1.0):
        action, s = policy.predict(np.array([cue, 0.0], np.float32), state1)
        for t in range(1, LENGTH):
            action, s = policy.predict(np.array([0.0, float(t == LENGTH - 1)], np.float32), s)
        assert s.shape == (16,) and int(action) == int(cue > 0)


def test_bad_states_are_clear_errors(run: Path) -> None:
    policy = janus.load_policy(run)
    with pytest.raises(ConfigError, match=r"state of shape \(3, 16\); expected \(2, 16\)"):
        policy.predict(np.zeros((2, 2), np.float32), np.zeros((3, 16), np.float32))
    with pytest.raises(ConfigError, match="episode_start"):
        policy.predict(np.zeros((2, 2), np.float32), None, episode_start=[True])
    with pytest.raises(ConfigError, match="integer >= 1"):
        policy.initial_state(0)


def test_a_feed_forward_policy_takes_no_state(tmp_path: Path) -> None:
    out = tmp_path / "ff"
    assert main(["train", "--algo", "ppo", "--env", ENV, "--envs_per_actor", "2", "--rollout_length", "16",
                 "--total_env_steps", "64", "--backend", "local", "--out", str(out)]) == 0
    policy = janus.load_policy(out)
    assert not policy.recurrent and policy.predict(np.zeros(2, np.float32)).shape == ()
    with pytest.raises(ConfigError, match="feed-forward; it takes no state"):
        policy.predict(np.zeros(2, np.float32), np.zeros(16, np.float32))
    with pytest.raises(ConfigError, match="feed-forward"):
        policy.initial_state(1)


def test_rollout_with_video_and_the_best_policy(run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    evaluations = json.loads((run / "results.json").read_text())["runs"][0]["evaluations"]
    assert len(evaluations) == 3
    best = janus.load_policy(run / "best")
    assert best.recurrent and best.info["eval_return"] == max(e["mean_return"] for e in evaluations)
    capsys.readouterr()
    video = tmp_path / "first.gif"
    assert main(["rollout", "--checkpoint", str(run), "--episodes", "3", "--video", str(video)]) == 0
    out = capsys.readouterr().out
    assert "3 episodes: mean return" in out and f"wrote {video}: the first episode, {LENGTH + 1} frames" in out


def test_a_recurrent_run_resumes(run: Path, tmp_path: Path) -> None:
    copy = tmp_path / "run"
    shutil.copytree(run, copy)
    before = load_state(copy / "checkpoint" / "trainer.pt", fmt="janus.trainer")
    assert main(["train", "--resume", str(copy), "--total_env_steps", "8192"]) == 0
    after = load_state(copy / "checkpoint" / "trainer.pt", fmt="janus.trainer")
    assert after["learner"]["learner"]["updates"] > before["learner"]["learner"]["updates"]
    core = [k for k in after["learner"]["learner"]["agent"] if k.startswith("core.")]
    assert core and janus.load_policy(copy).recurrent
