"""The collection operator of Dual-End Staging: :class:`CollectionOp`, staged pieces into the experience buffer.

It takes staged rollout pieces, flattens ``[T, envs, ...]`` to ``[T*envs, ...]``, concatenates
them, applies an optional preprocessing function and writes them to the experience buffer in one
``extend`` (several, in order, when they are more than its capacity). It only touches data: when it
runs (inline or in a thread) is :class:`~janus.buffer.pipeline.JanusBuffer`'s business, when an
insert may be written the rate limiter's (:mod:`janus.buffer.pacing`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol

import torch

from janus.buffer.staging.batch import Batch, Preprocess
from janus.errors import BufferInputError


class CollectionTarget(Protocol):
    """What collection writes into: an experience buffer (or a frame-stack replay) of ``capacity`` items."""

    @property
    def capacity(self) -> int: ...

    def extend(self, data: Mapping[str, Any]) -> object: ...


def flatten_piece(piece: Mapping[str, Any], time_major_dims: int) -> Batch:
    """Merge the leading ``time_major_dims`` dims of every field into one batch dim."""
    out = {}
    for k, v in piece.items():
        t = v if isinstance(v, torch.Tensor) else torch.as_tensor(v)
        if t.dim() < time_major_dims:
            raise BufferInputError(
                f"rollout field {k!r} has shape {tuple(t.shape)}; expected at least {time_major_dims} leading dims"
            )
        out[k] = t.reshape(-1, *t.shape[time_major_dims:]) if time_major_dims > 1 else t
    return out


class CollectionOp:
    """Concatenate staged rollout pieces and write them to the experience buffer in one operation."""

    def __init__(
        self,
        buffer: CollectionTarget,
        time_major_dims: int = 1,
        preprocess: Preprocess | None = None,
    ) -> None:
        self.buffer = buffer
        self.time_major_dims = time_major_dims
        self.preprocess = preprocess

    def prepare(self, pieces: Sequence[Mapping[str, Any]]) -> Batch:
        """Flatten, concatenate and preprocess ``pieces`` into the batch :meth:`write` stores."""
        flat = [flatten_piece(p, self.time_major_dims) for p in pieces]
        if len(flat) == 1:
            batch = flat[0]
        else:
            batch = {k: torch.cat([f[k] for f in flat]) for k in flat[0]}
        return batch if self.preprocess is None else self.preprocess(batch)

    def write(self, batch: Batch) -> int:
        """Write a prepared batch; return the number of transitions written."""
        n = next(iter(batch.values())).shape[0]
        capacity = self.buffer.capacity
        if n <= capacity:
            self.buffer.extend(batch)
        else:  # more than the ring holds (g_collect pieces, or one large piece): written in order, as a ring would
            for start in range(0, n, capacity):
                self.buffer.extend({k: v[start : start + capacity] for k, v in batch.items()})
        return n

    def __call__(self, pieces: Sequence[Mapping[str, Any]]) -> int:
        """Write ``pieces``; return the number of transitions written."""
        return self.write(self.prepare(pieces))
