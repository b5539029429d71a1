"""Recording what an environment renders, and writing it as an animated GIF.

:class:`FrameRecorder` wraps one environment made with ``render_mode="rgb_array"`` and keeps the
frame after every ``reset`` and ``step``. It sits *inside* a vector env, so with SAME_STEP
autoreset it sees an episode's true last frame before the sub-env resets. :func:`write_gif`
encodes the frames with Pillow (already installed: matplotlib depends on it), so recording a
video needs no new dependency and no ffmpeg binary.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np

from janus.errors import ConfigError
from janus.fileio import checking_path

VIDEO_SUFFIXES = (".gif",)
"""File types :func:`write_gif` writes."""


class FrameRecorder(gym.Wrapper):
    """Keeps ``env.render()`` after every reset and step while :attr:`recording` is true."""

    def __init__(self, env: gym.Env, max_frames: int) -> None:
        super().__init__(env)
        if env.render_mode != "rgb_array":
            raise ConfigError(f"--video: the environment renders {env.render_mode!r}, not 'rgb_array' images")
        self.frames: list[np.ndarray] = []
        self.max_frames = max_frames
        self.recording = True
        self.truncated_video = False  # frames were dropped past max_frames

    def _keep(self) -> None:
        if not self.recording:
            return
        if len(self.frames) >= self.max_frames:
            self.truncated_video = True
            return
        try:
            frame = self.env.render()
        except gym.error.DependencyNotInstalled as exc:  # e.g. classic control draws with pygame
            raise ConfigError(f"--video: the environment cannot render without a package that is not installed: {exc}") from None
        if not isinstance(frame, np.ndarray) or frame.ndim != 3 or frame.shape[2] not in (3, 4):
            raise ConfigError(f"--video: render() gave {type(frame).__name__} "
                              f"{getattr(frame, 'shape', '')}, not an (H, W, 3) RGB image")
        self.frames.append(np.ascontiguousarray(frame[..., :3], dtype=np.uint8))

    def reset(self, **kwargs: Any) -> Any:
        out = self.env.reset(**kwargs)
        self._keep()
        return out

    def step(self, action: Any) -> Any:
        out = self.env.step(action)
        self._keep()
        return out


def check_video_path(path: str | Path) -> Path:
    """``path`` as a writable ``.gif`` file name, or :class:`ConfigError` saying why not (before any work)."""
    path = Path(path)
    if path.suffix.lower() not in VIDEO_SUFFIXES:
        raise ConfigError(f"invalid --video: got {str(path)!r}; accepted: a file name ending in .gif")
    parent = path.parent if str(path.parent) else Path(".")
    with checking_path("--video", path):
        if path.is_dir():
            raise ConfigError(f"invalid --video: {str(path)!r} is a directory; give a file name ending in .gif")
        if not parent.is_dir():
            raise ConfigError(f"invalid --video: folder {str(parent)!r} does not exist")
    if not os.access(parent, os.W_OK):
        raise ConfigError(f"invalid --video: folder {str(parent)!r} is not writable")
    return path


def write_gif(frames: list[np.ndarray], path: str | Path, fps: float) -> None:
    """Write ``frames`` (``(H, W, 3)`` uint8) as a looping animated GIF at about ``fps`` frames/s."""
    from PIL import Image

    if not frames:
        raise ValueError("no frames to write")
    images = [Image.fromarray(f) for f in frames]
    duration_ms = max(20, round(1000.0 / max(fps, 1e-3)))  # GIF delays are in 10 ms units; 20 ms floor
    tmp = Path(path).with_name(Path(path).name + ".partial")
    images[0].save(tmp, format="GIF", save_all=True, append_images=images[1:], duration=duration_ms, loop=0)
    os.replace(tmp, path)
