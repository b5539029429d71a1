"""Atari games (``ALE/<Game>-v5`` through ale-py) with the standard DQN/PPO preprocessing.

:func:`make_atari_env` builds one game as an agent sees it; :func:`janus.envs.vector.make_vector_env`
calls it for every ``ALE/`` id. The chain, innermost first:

1. the ALE game, ``frameskip=1`` and ``obs_type="grayscale"`` (ALE's own luminance of each
   frame); everything else stays the v5 default: sticky actions with ``repeat_action_probability
   0.25`` (Machado et al., 2018), the minimal action set, at most 108,000 frames per game (then
   ``truncated``). ``env_kwargs`` reach this ``gymnasium.make`` (e.g. ``{"repeat_action_probability": 0}``);
2. :class:`AtariFrames`: on reset, 1 to 30 no-op frames (random); each step repeats the action
   for 4 frames, sums their rewards, takes the pixel-wise max of the last two frames (sprites
   flicker) and resizes it to 84x84 by area averaging (:func:`area_resize`);
3. training only, :class:`EpisodicLife`: a lost life ends the *training* episode (``terminated``,
   so nothing is bootstrapped past it) while the game goes on; the reward is clipped to
   ``{-1, 0, +1}``; ``info["raw_reward"]`` and ``info["game_over"]`` carry the unclipped reward
   and the real end of the game, from which :class:`~janus.envs.vector.EpisodeTracker`
   records full-game returns;
4. ``FrameStackObservation``: the last 4 frames, a ``(4, 84, 84)`` uint8 observation.

Evaluation (``training=False``: the Evaluator, ``janus rollout``, ``janus.load_policy``) plays the
same chain without step 3: whole games, real rewards. This module needs no torch, so the
subprocesses of an ``AsyncVectorEnv`` import only gymnasium, numpy and ale-py.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from janus.errors import ConfigError

PREFIX = "ALE/"
NOOP_MAX = 30  # no-op frames at most at the start of a game
FRAME_SKIP = 4  # frames per agent step
SIZE = 84  # frames are resized to SIZE x SIZE
STACK = 4  # frames per observation
OWNED_KWARGS = ("frameskip", "obs_type")  # the preprocessing sets these itself


def is_atari(env_id: str) -> bool:
    """Whether ``env_id`` is an ALE game that gets the Atari preprocessing (``ALE/...``)."""
    return isinstance(env_id, str) and env_id.startswith(PREFIX)


def register_ale() -> None:
    """Import ale-py (which registers the ``ALE/`` ids); a :class:`ConfigError` saying how to install it."""
    try:
        import ale_py
    except ImportError as exc:
        raise ConfigError(f"invalid --env: Atari environments (ALE/...) need ale-py, which could not be imported "
                          f"({exc}): pip install janus-rl[atari]") from None
    gym.register_envs(ale_py)


@functools.cache
def area_weights(n_in: int, n_out: int) -> np.ndarray:
    """The ``[n_out, n_in]`` float32 matrix of area averaging: output pixel ``j`` is the mean of the
    input interval ``[j * s, (j + 1) * s)``, ``s = n_in / n_out``, partly covered pixels counted by
    the fraction covered. Shrinking only."""
    if not 0 < n_out <= n_in:
        raise ValueError(f"area averaging shrinks: {n_in} -> {n_out}")
    scale = n_in / n_out
    out = np.zeros((n_out, n_in), dtype=np.float32)
    for j in range(n_out):
        lo, hi = j * scale, (j + 1) * scale
        for p in range(math.floor(lo), min(n_in, math.ceil(hi))):
            out[j, p] = (min(p + 1.0, hi) - max(float(p), lo)) / scale
    out.flags.writeable = False
    return out


def area_resize(frame: np.ndarray, height: int, width: int) -> np.ndarray:
    """A 2-D uint8 ``frame`` shrunk to ``(height, width)`` by area averaging (what OpenCV's
    ``INTER_AREA`` computes), rounded to the nearest integer.

    The weights repeat every ``n_in / gcd`` input pixels (210 -> 84 rows: 5 -> 2; 160 -> 84
    columns: 40 -> 21), so each axis is a matmul of the blocks by a small matrix (~30 us for 210x160 ->
    84x84; full-size matrices take ~100 us).
    """
    h, w = frame.shape
    bh, bw = h // math.gcd(h, height), w // math.gcd(w, width)  # input pixels per block
    x = frame.astype(np.float32).reshape(-1, bh, w)  # rows first: it shrinks what the columns see
    x = np.matmul(area_weights(bh, bh * height // h), x).reshape(-1, bw)
    x = (x @ area_weights(bw, bw * width // w).T).reshape(height, width)
    x += 0.5
    return x.astype(np.uint8)


class AtariFrames(gym.Wrapper):
    """No-op starts, frame skip with a max over the last two frames, resize to ``SIZE x SIZE``.

    Wraps a grayscale ALE env with ``frameskip=1``; an agent step is ``FRAME_SKIP`` frames (fewer
    when the game ends on the way), its reward their sum.
    """

    def __init__(self, env: gym.Env, noop_max: int = NOOP_MAX, frame_skip: int = FRAME_SKIP, size: int = SIZE) -> None:
        super().__init__(env)
        # one rendered frame per agent step: a video of them plays at game speed at 60 Hz (the
        # console's frame rate; ALE's metadata says 30) / frame_skip
        self.metadata = {**env.metadata, "render_fps": 60 / frame_skip}
        if env.unwrapped.get_action_meanings()[0] != "NOOP":  # type: ignore[attr-defined]  # ale_py's AtariEnv
            name = env.spec.id if env.spec else env
            env.close()
            raise ConfigError(f"invalid --env: got {name!r}, whose action 0 is not NOOP; janus's Atari preprocessing "
                              f"starts episodes with random no-ops and needs a game whose action 0 is NOOP")
        self.noop_max, self.frame_skip, self.size = noop_max, frame_skip, size
        self.observation_space = spaces.Box(0, 255, (size, size), np.uint8)

    def _frame(self, frame: np.ndarray) -> np.ndarray:
        return area_resize(frame, self.size, self.size)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[np.ndarray, dict]:
        obs, info = self.env.reset(seed=seed, options=options)
        noops = int(self.np_random.integers(1, self.noop_max + 1)) if self.noop_max > 0 else 0
        for _ in range(noops):
            obs, _, terminated, truncated, info = self.env.step(0)
            if terminated or truncated:  # the game ended within the no-ops (never seen): start over
                obs, info = self.env.reset()
        return self._frame(obs), info

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict]:
        total = 0.0
        last = previous = None
        for _ in range(self.frame_skip):
            frame, reward, terminated, truncated, info = self.env.step(action)
            total += float(reward)
            previous, last = last, frame
            if terminated or truncated:
                break
        assert last is not None  # frame_skip >= 1
        pooled = last if previous is None else np.maximum(previous, last)
        return self._frame(pooled), total, terminated, truncated, info


class EpisodicLife(gym.Wrapper):
    """Training signals: a lost life ends the episode, rewards are clipped; the real ones ride in ``info``.

    A step that loses a life (and does not end the game) returns ``terminated=True``. The vector env
    then calls :meth:`reset`, which does *not* reset the game: it returns the current frame and
    play continues from there. Only a reset after the real end of the game (or one given a seed or
    options) resets it. Every step adds ``info["raw_reward"]`` (the unclipped reward) and
    ``info["game_over"]`` (the game ended: ALE's own ``terminated`` or ``truncated``).
    """

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        self.lives = 0
        self.life_lost = False
        self.last_obs: np.ndarray | None = None

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[np.ndarray, dict]:
        if self.life_lost and seed is None and options is None:
            self.life_lost = False
            assert self.last_obs is not None
            return self.last_obs, {"lives": self.lives, "life_lost": True}
        obs, info = self.env.reset(seed=seed, options=options)
        self.life_lost = False
        self.lives = self.env.unwrapped.ale.lives()  # type: ignore[attr-defined]  # ale_py's AtariEnv
        return obs, info

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict]:
        obs, reward, terminated, truncated, info = self.env.step(action)
        lives = self.env.unwrapped.ale.lives()  # type: ignore[attr-defined]  # ale_py's AtariEnv
        game_over = bool(terminated or truncated)
        self.life_lost = lives < self.lives and not game_over
        self.lives, self.last_obs = lives, obs
        info = {**info, "raw_reward": float(reward), "game_over": game_over}
        return obs, float(np.sign(float(reward))), bool(terminated) or self.life_lost, bool(truncated), info


def make_atari_env(env_id: str, env_kwargs: Mapping[str, Any] | None = None, training: bool = False) -> gym.Env:
    """One ``ALE/`` game with the preprocessing of the module doc (``training``: with :class:`EpisodicLife`)."""
    register_ale()
    kwargs = dict(env_kwargs or {})
    owned = sorted(set(kwargs) & set(OWNED_KWARGS))
    if owned:
        raise ConfigError(f"invalid --env_kwargs: {', '.join(owned)} cannot be set for {env_id!r}: the Atari "
                          f"preprocessing uses frameskip=1 and grayscale frames and skips {FRAME_SKIP} frames itself")
    env: gym.Env = AtariFrames(gym.make(env_id, frameskip=1, obs_type="grayscale", **kwargs))
    if training:
        env = EpisodicLife(env)
    return gym.wrappers.FrameStackObservation(env, STACK)
