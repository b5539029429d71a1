"""``janus/ImageCatch-v0``: a small image environment for tests and for trying image observations.

A ball falls one row per step down a ``rows x cols`` grid from a random column of the top row; a
paddle on the bottom row, starting in the middle, moves left, stays or moves right (actions 0, 1,
2). When the ball reaches the bottom row the episode ends with reward +1 if the paddle is under
it, else -1 (every episode lasts ``rows - 1`` steps). Every ball can be caught, so the best
return is +1. A uniformly random policy catches with probability exactly ``1 / cols`` (the ball's
column is uniform and independent of the paddle's walk), so its expected return is
``2 / cols - 1`` (-0.75 with the default 8 columns): :func:`random_return`.

The observation is the grid drawn as a uint8 image, each cell ``scale x scale`` pixels (ball 255,
paddle 128, background 0): ``(rows * scale, cols * scale)`` = ``(16, 16)`` by default, or with a
channel axis, ``layout="CHW"`` ``(1, H, W)`` or ``layout="HWC"`` ``(H, W, 1)``. ``render_mode=
"rgb_array"`` renders the same picture in RGB, enlarged to at least 128 pixels a side.

Importing :mod:`janus.envs.vector` (every algorithm does) registers the id, so ``janus train
--env janus/ImageCatch-v0`` works; elsewhere ``import janus.envs.image_catch`` first.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

ENV_ID = "janus/ImageCatch-v0"
BALL, PADDLE = 255, 128
LAYOUTS = ("HW", "CHW", "HWC")


def random_return(cols: int = 8) -> float:
    """Expected return of a uniformly random policy (see the module doc)."""
    return 2.0 / cols - 1.0


class ImageCatch(gym.Env):
    """Catch the falling ball; see the module doc."""

    metadata = {"render_modes": ["rgb_array"], "render_fps": 10}  # noqa: RUF012  gymnasium.Env declares it an instance field

    def __init__(self, rows: int = 8, cols: int = 8, scale: int = 2, layout: str = "HW",
                 render_mode: str | None = None) -> None:
        if rows < 2 or cols < 1 or scale < 1:
            raise ValueError(f"ImageCatch needs rows >= 2, cols >= 1 and scale >= 1; got {rows}, {cols}, {scale}")
        if layout not in LAYOUTS:
            raise ValueError(f"ImageCatch layout must be one of {LAYOUTS}; got {layout!r}")
        if render_mode not in (None, "rgb_array"):
            raise ValueError(f"ImageCatch renders only 'rgb_array'; got render_mode={render_mode!r}")
        self.rows, self.cols, self.scale, self.layout = rows, cols, scale, layout
        self.render_mode = render_mode
        h, w = rows * scale, cols * scale
        shape = {"HW": (h, w), "CHW": (1, h, w), "HWC": (h, w, 1)}[layout]
        self.observation_space = spaces.Box(0, 255, shape, np.uint8)
        self.action_space = spaces.Discrete(3)
        self.ball = (0, 0)  # (row, column)
        self.paddle = cols // 2

    def _grid(self) -> np.ndarray:
        grid = np.zeros((self.rows, self.cols), np.uint8)
        grid[self.rows - 1, self.paddle] = PADDLE
        grid[self.ball] = BALL  # drawn last: a caught ball covers the paddle
        return grid

    def _obs(self) -> np.ndarray:
        image = self._grid().repeat(self.scale, 0).repeat(self.scale, 1)
        return image.reshape(self.observation_space.shape)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[np.ndarray, dict]:
        super().reset(seed=seed)
        self.ball = (0, int(self.np_random.integers(self.cols)))
        self.paddle = self.cols // 2
        return self._obs(), {}

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict]:
        if not self.action_space.contains(action):
            raise ValueError(f"ImageCatch action must be 0 (left), 1 (stay) or 2 (right); got {action!r}")
        self.paddle = min(max(self.paddle + int(action) - 1, 0), self.cols - 1)
        self.ball = (self.ball[0] + 1, self.ball[1])
        terminated = self.ball[0] == self.rows - 1
        reward = (1.0 if self.paddle == self.ball[1] else -1.0) if terminated else 0.0
        return self._obs(), reward, terminated, False, {}

    def render(self) -> np.ndarray | None:
        if self.render_mode != "rgb_array":
            return None
        zoom = max(1, -(-128 // min(self.rows, self.cols)))  # at least 128 pixels a side
        return np.repeat(self._grid().repeat(zoom, 0).repeat(zoom, 1)[..., None], 3, axis=2)


if ENV_ID not in gym.registry:
    gym.register(ENV_ID, entry_point="janus.envs.image_catch:ImageCatch")
