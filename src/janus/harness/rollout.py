"""``janus rollout``: run a trained policy (:func:`janus.load_policy`) and report its returns."""

from __future__ import annotations

from pathlib import Path

from janus.config import SEED_LIMIT, RunConfig
from janus.errors import ConfigError
from janus.harness.video import FrameRecorder, check_video_path, write_gif
from janus.policy import Policy, load_policy

MAX_VIDEO_FRAMES = 5_000
"""Frames a ``--video`` keeps at most (the rest of a longer episode is not recorded)."""


class Video:
    """What ``--video`` wrote: the file, its frames, and whether the episode was longer."""

    def __init__(self, path: Path, frames: int, cut: bool) -> None:
        self.path, self.frames, self.cut = path, frames, cut


def episode_returns(policy: Policy, episodes: int, seed: int = 0, deterministic: bool = True) -> list[float]:
    """Returns of ``episodes`` episodes of ``policy`` in a fresh copy of its run's environment."""
    return run_episodes(policy, episodes, seed, deterministic)[0]


def run_episodes(policy: Policy, episodes: int, seed: int = 0, deterministic: bool = True,
                 video: str | Path | None = None) -> tuple[list[float], Video | None]:
    """:func:`episode_returns`; with ``video`` (a ``.gif`` path) the first episode is also
    rendered (``render_mode="rgb_array"``) and written there."""
    from janus.algorithms.envs import make_vector_env

    kwargs = dict(policy.cfg.workload.env_kwargs or {})
    recorder = None
    if video is not None:
        video = check_video_path(video)
        kwargs["render_mode"] = "rgb_array"
    env = make_vector_env(policy.cfg.workload.env, 1, seed, kwargs, training=False)  # whole games, real rewards
    returns: list[float] = []
    try:
        if video is not None:
            # inside the vector env (sync, make_vector_env's default: it has .envs): sees each last frame
            recorder = FrameRecorder(env.envs[0], MAX_VIDEO_FRAMES)  # type: ignore[attr-defined]
            env.envs[0] = recorder  # type: ignore[attr-defined]
        obs, _ = env.reset(seed=seed)
        total = 0.0
        while len(returns) < episodes:
            obs, reward, term, trunc, _ = env.step(policy.predict(obs, deterministic=deterministic))
            total += float(reward[0])
            if term[0] or trunc[0]:
                returns.append(total)
                total = 0.0
                if recorder is not None and recorder.recording:
                    recorder.frames.pop()  # the autoreset's first frame of the next episode
                    recorder.recording = False
    finally:
        env.close()
    if recorder is None:
        return returns, None
    assert video is not None  # a recorder is made only when a video is asked for
    fps = float(recorder.metadata.get("render_fps") or 30)  # the wrapped env's own (Atari: per agent step)
    write_gif(recorder.frames, video, fps)
    return returns, Video(Path(video), len(recorder.frames), recorder.truncated_video)


def rollout(checkpoint: str | Path, episodes: int, seed: int = 0,
            video: str | Path | None = None) -> tuple[RunConfig, list[float], Video | None]:
    """Returns of ``episodes`` greedy episodes of the policy saved at ``checkpoint`` (and the
    ``--video`` of the first one, if asked for)."""
    if episodes < 1:
        raise ConfigError(f"invalid --episodes: got {episodes}; accepted: an integer >= 1")
    if not 0 <= seed < SEED_LIMIT:  # the range janus train accepts (Gymnasium refuses negative seeds)
        raise ConfigError(f"invalid --seed: got {seed}; accepted: an integer in [0, {SEED_LIMIT - 1:,}]")
    if video is not None:
        check_video_path(video)  # before loading anything
    policy = load_policy(checkpoint)
    returns, recorded = run_episodes(policy, episodes, seed, video=video)
    return policy.cfg, returns, recorded
