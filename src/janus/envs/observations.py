"""Observations that are not one array: Discrete, MultiDiscrete, MultiBinary, Dict and Tuple spaces.

The algorithms, the buffers and the networks take one array per observation. An environment whose
observation space is anything but a Box is given one by :class:`ObservationEncoder`, applied where
:func:`janus.envs.vector.make_vector_env` builds the actors' environments
(:class:`EncodedObservations`): every leaf of the space, in the space's own order (a Dict's keys as
it lists them, a Tuple's items by index), becomes float32 features, concatenated:

* ``Discrete(n)`` -> a one-hot of ``n`` (``start`` subtracted); ``MultiDiscrete(nvec)`` -> one
  one-hot per entry; ``MultiBinary(n)`` -> its 0/1 entries;
* ``Box`` -> its values flattened; a Box that is an image (:func:`janus.algorithms.networks.image_layout`)
  keeps its pixel values: the multi-input torso (:class:`janus.algorithms.networks.MultiInputTorso`)
  cuts it out again and gives it the CNN, as SB3's ``MultiInputPolicy`` does.

The encoded space is an :class:`EncodedBox`: a 1-D float32 Box that remembers the space it came
from and where each leaf lies in it. A trained policy's ``predict`` takes observations as the
environment emits them and encodes them itself. What it costs: images inside a Dict are stored as
float32 (4x the bytes of uint8 frames); an image-only environment keeps its Box and its uint8.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from janus.errors import ConfigError

LEAF_SPACES = (spaces.Box, spaces.Discrete, spaces.MultiDiscrete, spaces.MultiBinary)


@dataclass(frozen=True)
class Leaf:
    """One leaf of an observation space and its slice of the encoded vector."""

    path: tuple[Any, ...]
    """Keys (Dict) and indices (Tuple) from the root to the leaf; ``()`` for a space that is one leaf."""
    space: gym.Space
    offset: int
    size: int

    @property
    def name(self) -> str:
        return "/".join(str(p) for p in self.path) or "obs"

    @property
    def shape(self) -> tuple[int, ...]:
        """Shape of one observation of this leaf, as the environment emits it."""
        return tuple(self.space.shape or ())

    def encode(self, value: Any, batch: int) -> np.ndarray:
        """``value``: ``batch`` observations of this leaf stacked on a leading axis -> ``[batch, size]`` float32."""
        x = np.asarray(value)
        if x.shape != (batch, *self.shape):
            raise ConfigError(f"observation {self.name!r}: got shape {x.shape[1:] if x.ndim else x.shape}, "
                              f"expected {self.shape} (space {self.space})")
        space = self.space
        if isinstance(space, spaces.Discrete):
            out = np.zeros((batch, self.size), dtype=np.float32)
            out[np.arange(batch), x.astype(np.int64) - int(space.start)] = 1.0
            return out
        if isinstance(space, spaces.MultiDiscrete):
            nvec, start = space.nvec.reshape(-1), np.asarray(space.start).reshape(-1)
            out = np.zeros((batch, self.size), dtype=np.float32)
            columns = np.concatenate([[0], np.cumsum(nvec)[:-1]]) + (x.reshape(batch, -1) - start)
            np.put_along_axis(out, columns.astype(np.int64), 1.0, axis=1)
            return out
        return x.reshape(batch, -1).astype(np.float32)

    def bounds(self) -> tuple[np.ndarray, np.ndarray]:
        """The encoded features' low and high (one-hots and binaries: 0 and 1)."""
        if isinstance(self.space, spaces.Box):
            return (self.space.low.reshape(-1).astype(np.float32), self.space.high.reshape(-1).astype(np.float32))
        return np.zeros(self.size, np.float32), np.ones(self.size, np.float32)


def _leaves(space: gym.Space, path: tuple[Any, ...] = ()) -> Iterator[tuple[tuple[Any, ...], gym.Space]]:
    if isinstance(space, spaces.Dict):
        for key, sub in space.spaces.items():
            yield from _leaves(sub, (*path, key))
    elif isinstance(space, spaces.Tuple):
        for i, sub in enumerate(space.spaces):
            yield from _leaves(sub, (*path, i))
    elif isinstance(space, LEAF_SPACES):
        yield path, space
    else:
        where = f" (at {'/'.join(map(str, path))})" if path else ""
        raise ConfigError(f"observation space {space}{where} is not supported: janus takes Box, Discrete, MultiDiscrete, "
                          "MultiBinary and Dict/Tuple of them; wrap the environment to turn it into one of those")


def _leaf_size(space: gym.Space) -> int:
    if isinstance(space, spaces.Discrete):
        return int(space.n)
    if isinstance(space, spaces.MultiDiscrete):
        return int(space.nvec.sum())
    return int(np.prod(space.shape or ()))


class EncodedBox(spaces.Box):
    """The 1-D float32 Box of an :class:`ObservationEncoder`; ``source`` is the environment's space."""

    def __init__(self, encoder: ObservationEncoder) -> None:
        low, high = (np.concatenate(b) for b in zip(*(leaf.bounds() for leaf in encoder.leaves), strict=True))
        super().__init__(low=low, high=high, shape=(encoder.size,), dtype=np.float32)
        self.encoder = encoder

    @property
    def source(self) -> gym.Space:
        return self.encoder.space

    def __repr__(self) -> str:
        return f"EncodedBox({self.encoder.size} features of {self.source})"


class ObservationEncoder:
    """A space's observations as one float32 vector each (see the module doc)."""

    def __init__(self, space: gym.Space) -> None:
        self.space = space
        leaves, offset = [], 0
        for path, sub in _leaves(space):
            size = _leaf_size(sub)
            leaves.append(Leaf(path, sub, offset, size))
            offset += size
        self.leaves: tuple[Leaf, ...] = tuple(leaves)
        self.size = offset
        self.box = EncodedBox(self)

    def encode(self, obs: Any, batch: int) -> np.ndarray:
        """``batch`` observations (a vector env's: leaves stacked on a leading axis) -> ``[batch, size]``."""
        return np.concatenate([leaf.encode(_at(obs, leaf.path), batch) for leaf in self.leaves], axis=1)

    def encode_one(self, obs: Any) -> np.ndarray:
        """One observation -> ``[size]``."""
        return np.concatenate([leaf.encode(np.asarray(_at(obs, leaf.path))[None], 1) for leaf in self.leaves], axis=1)[0]

    def encode_any(self, obs: Any) -> tuple[np.ndarray, bool]:
        """One observation or a batch of them (told apart by the first leaf's shape) -> ``([B, size], single)``."""
        first = self.leaves[0]
        value = np.asarray(_at(obs, first.path))
        if value.shape == first.shape:
            return self.encode_one(obs)[None], True
        if value.ndim == len(first.shape) + 1:
            return self.encode(obs, len(value)), False
        raise ConfigError(f"predict: observation {first.name!r} of shape {value.shape}; expected {first.shape} "
                          f"or (batch, *{first.shape}) (space {self.space})")


def _at(obs: Any, path: tuple[Any, ...]) -> Any:
    for key in path:
        try:
            obs = obs[key]
        except (KeyError, IndexError, TypeError):
            raise ConfigError(f"observation has no {'/'.join(map(str, path))!r} (at {key!r}): got {type(obs).__name__}") from None
    return obs


def needs_encoding(space: gym.Space) -> bool:
    """Whether observations of ``space`` go through an :class:`ObservationEncoder` (anything but a Box)."""
    return not isinstance(space, spaces.Box)


class EncodedObservations(gym.vector.VectorWrapper):
    """A vector env whose observations (and ``info["final_obs"]``) are encoded by :class:`ObservationEncoder`."""

    def __init__(self, env: gym.vector.VectorEnv) -> None:
        super().__init__(env)
        self.encoder = ObservationEncoder(env.single_observation_space)
        self.single_observation_space = self.encoder.box
        self.observation_space = gym.vector.utils.batch_space(self.encoder.box, env.num_envs)

    def reset(self, **kwargs: Any) -> tuple[np.ndarray, dict[str, Any]]:
        obs, info = self.env.reset(**kwargs)
        return self.encoder.encode(obs, self.num_envs), info

    def step(self, actions: Any) -> tuple[Any, ...]:
        obs, reward, terminated, truncated, info = self.env.step(actions)
        if "final_obs" in info:
            final = np.empty(self.num_envs, dtype=object)
            for i in np.flatnonzero(info.get("_final_obs", terminated | truncated)):
                final[i] = self.encoder.encode_one(info["final_obs"][i])
            info = {**info, "final_obs": final}
        return self.encoder.encode(obs, self.num_envs), reward, terminated, truncated, info
