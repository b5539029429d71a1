"""`janus rollout --video`: the first episode's frames, each last frame included, as a GIF."""

from __future__ import annotations

from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
from PIL import Image

from janus.cli import main
from janus.envs.vector import make_vector_env
from janus.harness.reports.video import FrameRecorder, write_gif


class Counter(gym.Env):
    """Episodes of ``length`` steps; ``render()`` paints the step count into the image."""

    metadata = {"render_modes": ["rgb_array"], "render_fps": 25}

    def __init__(self, render_mode: str | None = None, length: int = 5) -> None:
        self.render_mode, self.length, self.t = render_mode, length, 0
        self.observation_space = gym.spaces.Box(0, 100, (1,), np.float32)
        self.action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return np.zeros(1, np.float32), {}

    def step(self, action):
        self.t += 1
        return np.full(1, self.t, np.float32), 1.0, self.t >= self.length, False, {}

    def render(self):
        return np.full((4, 6, 3), self.t * 10, np.uint8)


gym.register("JanusTestCounter-v0", entry_point=Counter)


def _gif_frames(path: Path) -> list[np.ndarray]:
    with Image.open(path) as im:
        frames = []
        for i in range(im.n_frames):
            im.seek(i)
            frames.append(np.asarray(im.convert("RGB")))
    return frames


def test_recorder_inside_a_vector_env_keeps_each_episodes_last_frame() -> None:
    env = make_vector_env("JanusTestCounter-v0", 1, 0, {"render_mode": "rgb_array", "length": 5})
    rec = FrameRecorder(env.envs[0], max_frames=100)
    env.envs[0] = rec
    env.reset(seed=0)
    for _ in range(7):  # one whole episode (autoreset inside the 5th step), then two more steps
        env.step(np.zeros(1, np.int64))
    env.close()
    # reset, steps 1..5 (the last seen before the same-step autoreset), the autoreset, steps 1..2
    assert [int(f[0, 0, 0]) // 10 for f in rec.frames] == [0, 1, 2, 3, 4, 5, 0, 1, 2]


def test_write_gif_round_trips_frames(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    frames = [np.repeat(rng.integers(0, 4, (8, 8, 1), dtype=np.uint8) * 60, 3, axis=2) for _ in range(6)]
    write_gif(frames, tmp_path / "v.gif", fps=20)
    back = _gif_frames(tmp_path / "v.gif")
    assert len(back) == 6 and all(np.array_equal(a, b) for a, b in zip(frames, back))
    assert not list(tmp_path.glob("*.partial"))


def test_rollout_video_of_a_trained_dqn(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run, video = tmp_path / "run", tmp_path / "first.gif"
    env = ["--env", "test_video:JanusTestCounter-v0", "--env_kwargs", '{"length": 7}']
    assert main(["train", "--algo", "dqn", *env, "--total_env_steps", "1200", "--seed", "2", "--out", str(run)]) == 0
    capsys.readouterr()
    assert main(["rollout", "--checkpoint", str(run), "--episodes", "3", "--video", str(video)]) == 0
    out = capsys.readouterr().out
    assert "3 episodes: mean return 7.0" in out and f"wrote {video}: the first episode, 8 frames" in out
    # the first episode only: the reset frame and each of its 7 steps, the last one included
    assert [int(f[0, 0, 0]) // 10 for f in _gif_frames(video)] == list(range(8))


def test_a_video_of_an_environment_that_cannot_render_is_a_clear_error(finished_dqn_run: Path, tmp_path: Path,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    run = finished_dqn_run  # the session's CartPole DQN run (tests/conftest.py): rollout only reads it
    capsys.readouterr()
    code = main(["rollout", "--checkpoint", str(run), "--episodes", "1", "--video", str(tmp_path / "v.gif")])
    err = capsys.readouterr().err
    try:
        import pygame  # noqa: F401  (CartPole can render: nothing to refuse)
    except ImportError:
        assert code == 2 and "--video" in err and "pygame" in err
        assert not list(tmp_path.glob("v.gif*"))
    else:
        assert code == 0


@pytest.mark.parametrize("name,why", [("v.mp4", "ending in .gif"), ("missing/v.gif", "does not exist")])
def test_bad_video_paths_are_refused_before_work(tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str, why: str) -> None:
    assert main(["rollout", "--checkpoint", str(tmp_path), "--video", str(tmp_path / name)]) == 2
    assert why in capsys.readouterr().err
