"""The recurrent core: unrolling a sequence with episode starts is exactly stepping it with resets."""

from __future__ import annotations

import pytest
import torch

from janus.algorithms.recurrent import RecurrentCore, check_recurrent
from janus.errors import ConfigError


@pytest.mark.parametrize("kind", ["lstm", "gru"])
def test_unroll_with_resets_equals_stepping_with_resets(kind: str) -> None:
    torch.manual_seed(0)
    core = RecurrentCore(kind, 3, 5)
    assert core.state_size == (10 if kind == "lstm" else 5)
    steps, batch = 9, 4
    x = torch.randn(steps, batch, 3)
    first = torch.zeros(steps, batch, dtype=torch.bool)
    first[3, 1] = first[4, 2] = first[4, 0] = first[8, 3] = True
    start = torch.randn(batch, core.state_size)
    with torch.no_grad():
        out, end = core.unroll(x, start, first)
        state, stepped = start, []
        for t in range(steps):
            state = core.reset(state, first[t])
            y, state = core.step(x[t], state)
            stepped.append(y)
    torch.testing.assert_close(out, torch.stack(stepped))
    torch.testing.assert_close(end, state)
    assert out.shape == (steps, batch, 5) and end.shape == (batch, core.state_size)


def test_a_reset_at_the_first_step_zeroes_the_stored_state_and_differs_from_none() -> None:
    torch.manual_seed(1)
    core = RecurrentCore("lstm", 2, 4)
    x, start = torch.randn(5, 2, 2), torch.randn(2, 8)
    first = torch.zeros(5, 2)
    first[0, 0] = 1
    with torch.no_grad():
        out, _ = core.unroll(x, start, first)
        fresh, _ = core.unroll(x[:, :1], core.initial_state(1), torch.zeros(5, 1))
        carried, _ = core.unroll(x[:, 1:], start[1:], torch.zeros(5, 1))
    torch.testing.assert_close(out[:, :1], fresh)  # row 0 started from zeros
    torch.testing.assert_close(out[:, 1:], carried)  # row 1 kept its stored state
    assert not torch.allclose(fresh, core.unroll(x[:, :1], start[:1], torch.zeros(5, 1))[0])


def test_gradients_flow_through_the_unrolled_sequence() -> None:
    core = RecurrentCore("gru", 2, 3)
    out, _ = core.unroll(torch.randn(6, 2, 2), core.initial_state(2), torch.zeros(6, 2))
    out.sum().backward()
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in core.parameters())


def test_bad_settings_are_refused_with_the_accepted_values() -> None:
    with pytest.raises(ConfigError, match="lstm.*gru"):
        check_recurrent("algorithm.recurrent", "rnn", 64)
    with pytest.raises(ConfigError, match="integer >= 1"):
        check_recurrent("algorithm.recurrent", "lstm", 0)
    check_recurrent("algorithm.recurrent", "", 0)  # feed-forward: the size is unused
