"""Small environments with Dict, Tuple and image-in-Dict observations, for the observation tests."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

LENGTH = 7  # corridor cells; the agent starts in the middle


class DictCorridor(gym.Env):
    """Walk left or right along a corridor to the end the observation's ``goal`` names: +1 there,
    -1 at the other end. A policy that ignores ``goal`` (or acts at random) averages 0; one that
    reads both keys gets 1. ``kind``: ``dict`` ({"position": Discrete, "goal": Discrete}),
    ``tuple`` ((position, goal)) or ``image`` ({"view": 8x8x1 uint8 image of the corridor, "goal": Box})."""

    def __init__(self, kind: str = "dict") -> None:
        self.kind = kind
        if kind == "dict":
            self.observation_space: spaces.Space = spaces.Dict({"position": spaces.Discrete(LENGTH), "goal": spaces.Discrete(2)})
        elif kind == "tuple":
            self.observation_space = spaces.Tuple((spaces.Discrete(LENGTH), spaces.MultiBinary(1)))
        else:
            self.observation_space = spaces.Dict({"view": spaces.Box(0, 255, (8, 8, 1), np.uint8),
                                                  "goal": spaces.Box(-1.0, 1.0, (1,), np.float32)})
        self.action_space = spaces.Discrete(2)
        self.pos, self.goal, self.steps = LENGTH // 2, 0, 0

    def _obs(self) -> Any:
        if self.kind == "dict":
            return {"position": self.pos, "goal": self.goal}
        if self.kind == "tuple":
            return (self.pos, np.array([self.goal], np.int8))
        view = np.zeros((8, 8, 1), np.uint8)
        view[:, self.pos, 0] = 255
        return {"view": view, "goal": np.array([1.0 if self.goal else -1.0], np.float32)}

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[Any, dict]:
        super().reset(seed=seed)
        self.pos, self.goal, self.steps = LENGTH // 2, int(self.np_random.integers(2)), 0
        return self._obs(), {}

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict]:
        self.pos += 1 if int(action) == 1 else -1
        self.steps += 1
        at_end = self.pos in (0, LENGTH - 1)
        reward = 0.0 if not at_end else (1.0 if (self.pos == LENGTH - 1) == bool(self.goal) else -1.0)
        return self._obs(), reward, at_end, self.steps >= 30, {}


class TextObservations(gym.Env):
    """An observation space janus cannot encode (Text)."""

    observation_space = spaces.Text(8)
    action_space = spaces.Discrete(2)

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[Any, dict]:
        return "a", {}

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict]:
        return "a", 0.0, True, False, {}


TEXT_ENV = "janus-test/TextObservations-v0"
if TEXT_ENV not in gym.registry:
    gym.register(TEXT_ENV, entry_point=TextObservations)


DICT_ENV = "janus-test/DictCorridor-v0"
if DICT_ENV not in gym.registry:
    gym.register(DICT_ENV, entry_point=DictCorridor)
