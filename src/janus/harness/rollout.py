"""``janus rollout``: run a trained policy (:func:`janus.load_policy`) and report its returns."""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any

from janus.config import SEED_LIMIT, RunConfig
from janus.errors import ConfigError
from janus.harness.reports.video import FrameRecorder, check_video_path, write_gif
from janus.policy import Policy, episode_returns, load_policy

__all__ = ["MAX_VIDEO_FRAMES", "Video", "episode_returns", "report_rollout", "rollout", "run_episodes"]  # episode_returns: janus.policy's

MAX_VIDEO_FRAMES = 5_000
"""Frames a ``--video`` keeps at most (the rest of a longer episode is not recorded)."""


class Video:
    """What ``--video`` wrote: the file, its frames, and whether the episode was longer."""

    def __init__(self, path: Path, frames: int, cut: bool) -> None:
        self.path, self.frames, self.cut = path, frames, cut


def run_episodes(policy: Policy, episodes: int, seed: int = 0, deterministic: bool = True,
                 video: str | Path | None = None) -> tuple[list[float], Video | None]:
    """:func:`~janus.policy.episode_returns`; with ``video`` (a ``.gif`` path) the first episode is
    also rendered (``render_mode="rgb_array"``) and written there."""
    if video is None:
        return episode_returns(policy, episodes, seed, deterministic), None
    video = check_video_path(video)
    kwargs = {**(policy.cfg.workload.env_kwargs or {}), "render_mode": "rgb_array"}
    recorders: list[FrameRecorder] = []

    def record(env: Any) -> FrameRecorder:
        recorders.append(FrameRecorder(env, MAX_VIDEO_FRAMES))
        return recorders[0]

    def episode_end() -> None:
        if recorders and recorders[0].recording:
            recorders[0].frames.pop()  # the autoreset's first frame of the next episode
            recorders[0].recording = False

    returns = episode_returns(policy, episodes, seed, deterministic, env_kwargs=kwargs, wrap=record,
                              on_episode_end=episode_end)
    recorder = recorders[0]
    fps = float(recorder.metadata.get("render_fps") or 30)  # the wrapped env's own (Atari: per agent step)
    write_gif(recorder.frames, video, fps)
    return returns, Video(Path(video), len(recorder.frames), recorder.truncated_video)


def rollout(checkpoint: str | Path, episodes: int, seed: int = 0,
            video: str | Path | None = None, *, trust: bool = False) -> tuple[RunConfig, list[float], Video | None]:
    """Returns of ``episodes`` greedy episodes of the policy saved at ``checkpoint`` (and the
    ``--video`` of the first one, if asked for); ``trust``: ``--trust`` (:func:`janus.load_policy`'s)."""
    if episodes < 1:
        raise ConfigError(f"invalid --episodes: got {episodes}; accepted: an integer >= 1")
    if not 0 <= seed < SEED_LIMIT:  # the range janus train accepts (Gymnasium refuses negative seeds)
        raise ConfigError(f"invalid --seed: got {seed}; accepted: an integer in [0, {SEED_LIMIT - 1:,}]")
    if video is not None:
        check_video_path(video)  # before loading anything
    policy = load_policy(checkpoint, trust=trust)
    returns, recorded = run_episodes(policy, episodes, seed, video=video)
    return policy.cfg, returns, recorded


def report_rollout(checkpoint: str | Path, episodes: int, seed: int = 0, video: str | Path | None = None, *,
                   trust: bool = False) -> int:
    """``janus rollout``: :func:`rollout`, its returns printed (and where its video went); the exit code."""
    cfg, returns, recorded = rollout(checkpoint, episodes, seed, video, trust=trust)
    mean, std = statistics.fmean(returns), statistics.pstdev(returns)
    print(f"janus rollout: {cfg.workload.algo} on {cfg.workload.env}, {len(returns)} episode{'s' if len(returns) != 1 else ''}: "
          f"mean return {mean:.1f} (std {std:.1f}, min {min(returns):.1f}, max {max(returns):.1f})")
    if recorded is not None:
        cut = f" (the episode was longer: only its first {recorded.frames} frames)" if recorded.cut else ""
        print(f"wrote {recorded.path}: the first episode, {recorded.frames} frames{cut}")
    return 0
