"""R2D2's targets: the value rescaling and its inverse, n-step targets inside a sequence with a
terminal (checked by hand)."""

from __future__ import annotations

import math

import pytest
import torch

from janus.algorithms.returns import inverse_value_rescale, sequence_nstep_targets, value_rescale


def test_value_rescale_matches_its_formula() -> None:
    x = torch.tensor([-10.0, -1.0, 0.0, 3.0, 99.0])
    expected = [math.copysign(math.sqrt(abs(v) + 1) - 1, v) + 1e-3 * v for v in x.tolist()]
    torch.testing.assert_close(value_rescale(x), torch.tensor(expected))


@pytest.mark.parametrize("eps", [1e-3, 1e-2])
def test_inverse_value_rescale_undoes_it(eps: float) -> None:
    x = torch.cat([torch.linspace(-1000, 1000, 2001, dtype=torch.float64), torch.tensor([0.0, 1e-6, -1e-6], dtype=torch.float64)])
    torch.testing.assert_close(inverse_value_rescale(value_rescale(x, eps), eps), x, rtol=1e-9, atol=1e-9)
    torch.testing.assert_close(value_rescale(inverse_value_rescale(x, eps), eps), x, rtol=1e-9, atol=1e-9)


def test_sequence_nstep_targets_stop_at_a_terminal_and_inside_the_sequence() -> None:
    gamma, n = 0.5, 2
    # one sequence of 6 steps (B = 1): rewards 1..6, a terminal at step 2 (the episode ends after it)
    reward = torch.tensor([[1.0], [2.0], [3.0], [4.0], [5.0], [6.0]])
    terminal = torch.tensor([[0], [0], [1], [0], [0], [0]], dtype=torch.bool)
    bootstrap = torch.tensor([[10.0], [20.0], [30.0], [40.0], [50.0], [60.0]])  # the value of each step's state
    target, valid = sequence_nstep_targets(reward, terminal, bootstrap, gamma, n)
    expected = [
        1 + 0.5 * 2 + 0.25 * 30,  # t=0: steps 0, 1, then bootstrap from step 2's state
        2 + 0.5 * 3,              # t=1: steps 1, 2; step 2 is terminal: no bootstrap
        3,                        # t=2: terminal at once
        4 + 0.5 * 5 + 0.25 * 60,  # t=3: steps 3, 4, bootstrap from step 5 (the last step, inside)
        5 + 0.5 * 6,              # t=4: its bootstrap step 6 is past the sequence: not valid
        6,                        # t=5: likewise
    ]
    torch.testing.assert_close(target[:4, 0], torch.tensor(expected[:4]))
    assert valid[:, 0].tolist() == [True, True, True, True, False, False]


def test_sequence_nstep_targets_one_step_and_a_terminal_at_the_end() -> None:
    reward = torch.tensor([[1.0, 1.0], [2.0, 2.0], [3.0, 3.0]])
    terminal = torch.tensor([[0, 0], [0, 0], [0, 1]], dtype=torch.bool)
    bootstrap = torch.tensor([[5.0, 5.0], [6.0, 6.0], [7.0, 7.0]])
    target, valid = sequence_nstep_targets(reward, terminal, bootstrap, 0.9, 1)
    torch.testing.assert_close(target[:2], torch.tensor([[1 + 0.9 * 6, 1 + 0.9 * 6], [2 + 0.9 * 7, 2 + 0.9 * 7]]))
    assert target[2, 1].item() == 3.0  # ends by a terminal at the last step: a target without bootstrap
    assert valid.tolist() == [[True, True], [True, True], [False, True]]
