"""Fixed-length, overlapping sequences cut from a worker's step stream: `SequenceWriter` (R2D2's replay rows).

A worker steps ``E`` envs ``period`` times per piece. Per piece the writer emits exactly one
sequence per env, ``seq_len`` steps long: the last ``seq_len - period`` steps of the previous
sequences (kept here between pieces) then the piece's ``period`` new steps. Consecutive sequences of
an env therefore overlap by ``seq_len - period`` steps, and every env step is the newest ``period``
of exactly one sequence (``period > seq_len`` would skip steps: refused). Beside each sequence it
emits the actor's recurrent ``state`` at the sequence's first step (what a learner unrolls from,
after its burn-in), ``mask`` (0 for padding: the steps before this worker's first step, after a
start or restart) and ``first`` (1 where a step begins an episode).

Sequences run on across episode ends, as the env streams do: a learner zeroes the recurrent state
where ``first`` is set and never bootstraps across a terminal step. This is the data of R2D2's
sequences (Kapturowski et al., 2019) without their padding at every episode end: a fixed number of
rows per piece (one per env), no wasted padded steps but at a worker's start, and a state stored once
per sequence. numpy only: the writer knows nothing of actors, environments or torch.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from janus.buffer.arguments import check_int
from janus.errors import BufferInputError, ConfigError

STATE, MASK, FIRST = "state", "mask", "first"
"""The fields the writer adds to each sequence (a step field of these names is refused)."""


class SequenceWriter:
    """Cuts ``num_envs`` step streams into sequences of ``seq_len`` steps, one new per env every
    ``period`` steps (see the module doc).

    Args:
        num_envs: envs the worker steps (``E``).
        seq_len: steps per sequence.
        period: new steps per piece (a worker's ``rollout_length``), at most ``seq_len``.
        state_size: floats of recurrent state per env (0: no state field).
    """

    def __init__(self, num_envs: int, seq_len: int, period: int, state_size: int) -> None:
        check_int("num_envs", num_envs, 1)
        check_int("seq_len", seq_len, 1)
        check_int("period", period, 1)
        check_int("state_size", state_size, 0)
        if period > seq_len:
            raise ConfigError(f"invalid period: got {period} new steps per piece for sequences of seq_len={seq_len}; "
                              f"accepted: at most seq_len (a longer period would skip {period - seq_len} steps "
                              f"per piece)")
        self.num_envs, self.seq_len, self.period, self.state_size = num_envs, seq_len, period, state_size
        self.overlap = seq_len - period
        """Steps each sequence shares with the env's previous one (kept here between pieces)."""
        self._tail: dict[str, np.ndarray] | None = None  # the last `overlap` steps per env, [E, overlap, ...]
        self._next_first = np.ones(num_envs, dtype=bool)  # the next step begins an episode (a worker's first does)

    def write(self, steps: Mapping[str, np.ndarray], state: np.ndarray, done: np.ndarray) -> dict[str, np.ndarray]:
        """One piece's sequences, ``[E, seq_len, ...]`` per field of ``steps`` plus ``state``
        ``[E, state_size]`` (float32), ``mask`` and ``first`` ``[E, seq_len]`` (bool).

        ``steps``: the piece's fields, time-major ``[period, E, ...]``; ``state``: the recurrent state
        each step acted from, ``[period, E, state_size]`` (after the reset of an episode's start);
        ``done``: ``[period, E]``, the episode ended at that step (terminated or truncated)."""
        fields = self._check(steps, state, done)
        new = {k: np.swapaxes(v, 0, 1) for k, v in fields.items()}  # [E, period, ...]
        first = np.empty((self.period, self.num_envs), dtype=bool)
        first[0] = self._next_first
        first[1:] = done[:-1]
        self._next_first = done[-1].astype(bool).copy()
        new[FIRST] = first.T
        new[MASK] = np.ones((self.num_envs, self.period), dtype=bool)
        if self._tail is None:
            self._tail = {k: np.zeros((self.num_envs, self.overlap, *v.shape[2:]), dtype=v.dtype) for k, v in new.items()}
        sequence = {k: np.concatenate([self._tail[k], v], axis=1) for k, v in new.items()}
        self._tail = {k: v[:, self.period:].copy() for k, v in sequence.items()}
        out = {k: v for k, v in sequence.items() if k != STATE}
        if self.state_size:
            out[STATE] = np.ascontiguousarray(sequence[STATE][:, 0])
        return out

    def _check(self, steps: Mapping[str, np.ndarray], state: np.ndarray, done: np.ndarray) -> dict[str, np.ndarray]:
        """The step fields and the state as numpy arrays of the writer's shapes (clear errors else)."""
        lead = (self.period, self.num_envs)
        fields: dict[str, np.ndarray] = {}
        for key, value in steps.items():
            if key in (STATE, MASK, FIRST):
                raise BufferInputError(f"SequenceWriter.write: step field {key!r} is a name the writer adds; rename it")
            array = np.asarray(value)
            if array.shape[:2] != lead:
                raise BufferInputError(f"SequenceWriter.write: field {key!r} has shape {array.shape}; expected "
                                       f"[period={self.period}, num_envs={self.num_envs}, ...]")
            fields[key] = array
        done = np.asarray(done)
        if done.shape != lead:
            raise BufferInputError(f"SequenceWriter.write: done has shape {done.shape}; expected {lead}")
        if self.state_size:
            state = np.asarray(state, dtype=np.float32)
            if state.shape != (*lead, self.state_size):
                raise BufferInputError(f"SequenceWriter.write: state has shape {state.shape}; expected "
                                       f"{(*lead, self.state_size)} (the state each step acted from)")
            fields[STATE] = state
        return fields
