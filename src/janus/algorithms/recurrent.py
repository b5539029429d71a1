"""The recurrent core of janus's memory policies: an LSTM or GRU that an actor steps and a learner unrolls.

Its state is one float32 tensor per batch of envs, ``[B, state_size]`` (an LSTM's ``h`` then ``c``; a
GRU's ``h``), so a piece stores the state at a sequence's start as one field beside the sequence.

Episode ends reset it: an actor zeroes the rows of envs whose episode ended after each step
(:meth:`RecurrentCore.reset`); a learner unrolls a stored sequence from the state stored at its
start with ``first`` (1 where a step begins an episode) zeroing those rows before the step
(:meth:`RecurrentCore.unroll`). Both compute the same thing: unrolling a sequence is exactly
stepping it (tests/algorithms/test_recurrent_core.py).
"""

from __future__ import annotations

import itertools

import torch
from torch import nn

from janus.errors import ConfigError, invalid, one_of

RECURRENT_KINDS = ("lstm", "gru")
"""What ``--recurrent`` accepts (besides ``""``: no recurrent core)."""


def check_recurrent(key: str, kind: str, size: int) -> None:
    """Raise ConfigError unless ``kind`` is ``""`` or one of :data:`RECURRENT_KINDS` and ``size`` is >= 1."""
    if kind not in ("", *RECURRENT_KINDS):
        raise invalid(key, kind, f"{one_of(RECURRENT_KINDS)}, or \"\" for a feed-forward network")
    if kind and (isinstance(size, bool) or not isinstance(size, int) or size < 1):
        raise ConfigError(f"invalid recurrent size {size!r} for {key}={kind}: expected an integer >= 1")


class RecurrentCore(nn.Module):
    """An LSTM or GRU layer of ``hidden_size`` units over inputs of ``input_size`` features."""

    def __init__(self, kind: str, input_size: int, hidden_size: int) -> None:
        super().__init__()
        check_recurrent("recurrent", kind, hidden_size)
        if not kind:
            raise invalid("recurrent", kind, one_of(RECURRENT_KINDS))
        self.kind = kind
        self.hidden_size = int(hidden_size)
        self.state_size = 2 * self.hidden_size if kind == "lstm" else self.hidden_size
        self.rnn: nn.LSTM | nn.GRU = (nn.LSTM if kind == "lstm" else nn.GRU)(input_size, hidden_size)
        for name, param in self.rnn.named_parameters():  # orthogonal weights, zero biases (CleanRL's LSTM)
            if "bias" in name:
                nn.init.zeros_(param)
            else:
                nn.init.orthogonal_(param, 1.0)

    def initial_state(self, batch: int) -> torch.Tensor:
        """The state of ``batch`` envs at an episode's start: zeros ``[batch, state_size]``."""
        return torch.zeros(batch, self.state_size)

    def reset(self, state: torch.Tensor, done: torch.Tensor) -> torch.Tensor:
        """``state`` with the rows of envs where ``done`` (``[B]``, bool or 0/1) zeroed."""
        keep = 1.0 - torch.as_tensor(done, dtype=state.dtype).reshape(-1, 1)
        return state * keep

    def step(self, x: torch.Tensor, state: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """One step: ``x [B, input]`` and ``state [B, S]`` -> ``(output [B, hidden], next state [B, S])``."""
        out, state = self._run(x.unsqueeze(0), state)
        return out[0], state

    def unroll(self, x: torch.Tensor, state: torch.Tensor, first: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``x [T, B, input]`` from ``state [B, S]``, zeroing row b's state before step t where
        ``first[t, b]``: ``(outputs [T, B, hidden], state after the last step [B, S])``.

        One call of the torch layer per stretch of time in which no row resets (few calls where
        episodes are long), so it costs about what an unmasked call does."""
        first = torch.as_tensor(first).reshape(x.shape[0], -1).to(torch.bool)
        resets = first.any(1)
        resets[0] = True  # a reset at step 0 zeroes the stored state's rows (already zero where the actor reset)
        starts = resets.nonzero().flatten().tolist() + [x.shape[0]]
        outputs = []
        for begin, end in itertools.pairwise(starts):
            state = self.reset(state, first[begin])
            out, state = self._run(x[begin:end], state)
            outputs.append(out)
        return (outputs[0] if len(outputs) == 1 else torch.cat(outputs)), state

    def _run(self, x: torch.Tensor, state: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The torch layer over ``x [T, B, input]`` from ``state [B, S]``."""
        if self.kind == "lstm":
            h, c = state[:, : self.hidden_size], state[:, self.hidden_size :]
            out, (h, c) = self.rnn(x, (h.unsqueeze(0).contiguous(), c.unsqueeze(0).contiguous()))
            return out, torch.cat([h[0], c[0]], 1)
        out, h = self.rnn(x, state.unsqueeze(0).contiguous())
        return out, h[0]
