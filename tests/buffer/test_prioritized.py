"""PrioritizedSampler: proportional sampling, importance weights, max priority, checkpoints."""

from __future__ import annotations

import io
import math

import numpy as np
import pytest
import torch

from janus.buffer.replay.prioritized import PrioritizedSampler
from janus.errors import BufferEmptyError

CUDA = pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA not available on this machine")
DEVICES = ["cpu", pytest.param("cuda", marks=CUDA)]


def chi2_critical(df: int, z: float = 4.75) -> float:
    """Upper chi-square quantile (Wilson-Hilferty); z = 4.75 is a one-sided p of about 1e-6."""
    try:
        from scipy.stats import chi2

        return float(chi2.isf(1e-6, df))
    except ImportError:
        a = 2.0 / (9.0 * df)
        return df * (1.0 - a + z * math.sqrt(a)) ** 3


def filled(capacity: int, size: int, priority: torch.Tensor, device, **kwargs) -> PrioritizedSampler:
    sampler = PrioritizedSampler(capacity, device, seed=0, **kwargs)
    slots = torch.arange(size, device=device)
    sampler.on_write(slots)
    sampler.update_priority(slots, priority.to(device))
    return sampler


@pytest.mark.parametrize("device", DEVICES)
def test_sampling_frequencies_follow_priorities(device):
    size = 50
    priority = torch.arange(1, size + 1, dtype=torch.float64)  # P(i) proportional to i + 1
    sampler = filled(64, size, priority, device, alpha=1.0, eps=1e-6)
    draws = torch.cat([sampler.sample(1000, size)[0].cpu() for _ in range(100)])
    assert int(draws.max()) < size  # unwritten slots (priority 0) are never drawn
    counts = torch.bincount(draws, minlength=size).double().numpy()
    leaf = priority.numpy() + 1e-6
    expected = draws.numel() * leaf / leaf.sum()
    chi2 = float(((counts - expected) ** 2 / expected).sum())
    critical = chi2_critical(size - 1)
    assert chi2 < critical
    # The test can fail: uniform draws would be rejected by a wide margin.
    uniform = np.full(size, draws.numel() / size)
    assert float(((uniform - expected) ** 2 / expected).sum()) > 100 * critical


@pytest.mark.parametrize("device", DEVICES)
def test_weights_match_formula(device):
    """w_i = (N P(i))^-beta / (N P_min)^-beta, worked out on a 4-item example."""
    priority = torch.tensor([1.0, -2.0, 3.0, 4.0], dtype=torch.float64)  # |p| is used
    alpha, beta, eps = 0.5, 0.4, 1e-6
    sampler = filled(8, 4, priority, device, alpha=alpha, beta=beta, eps=eps)
    leaf = (np.abs(priority.numpy()) + eps) ** alpha
    prob = leaf / leaf.sum()
    n = 4
    w_ref = (n * prob) ** -beta / (n * prob.min()) ** -beta
    slots, weights = sampler.sample(256, n)
    assert weights.dtype == torch.float32 and weights.device.type == torch.device(device).type
    assert slots.device.type == torch.device(device).type
    np.testing.assert_allclose(weights.cpu().numpy(), w_ref[slots.cpu().numpy()], rtol=1e-6)
    assert set(slots.cpu().tolist()) == {0, 1, 2, 3}  # stratified: every item drawn
    assert float(weights.max()) == 1.0  # the min-priority item carries weight exactly 1
    assert float(weights.min()) < 0.9
    # beta override and annealing of the public attribute
    assert torch.all(sampler.sample(16, n, beta=0.0)[1] == 1.0)
    sampler.beta = 1.0
    slots, weights = sampler.sample(64, n)
    np.testing.assert_allclose(weights.cpu().numpy(), leaf.min() / leaf[slots.cpu().numpy()], rtol=1e-6)


@pytest.mark.parametrize("device", DEVICES)
def test_new_items_get_running_max_priority(device):
    alpha, eps = 0.6, 1e-6
    sampler = PrioritizedSampler(16, device, seed=0, alpha=alpha, eps=eps)
    sampler.on_write(torch.tensor([0, 1], device=device))
    assert sampler.priorities(torch.tensor([0, 1], device=device)).tolist() == [1.0, 1.0]
    sampler.update_priority(torch.tensor([0], device=device), torch.tensor([5.0], device=device))
    sampler.update_priority(torch.tensor([1], device=device), torch.tensor([0.5], device=device))
    sampler.on_write(torch.tensor([2, 3], device=device))
    got = sampler.priorities(torch.arange(4, device=device)).cpu().numpy()
    top = (5.0 + eps) ** alpha
    np.testing.assert_allclose(got, [top, (0.5 + eps) ** alpha, top, top], rtol=1e-12)
    # an overwritten slot gets the max again, whatever it had
    sampler.on_write(torch.tensor([1], device=device))
    assert math.isclose(sampler.priorities(torch.tensor([1], device=device)).item(), top, rel_tol=1e-12)


@pytest.mark.parametrize("device", DEVICES)
def test_update_priority_duplicates_last_wins(device):
    sampler = PrioritizedSampler(8, device, seed=0, alpha=1.0, eps=0.0)
    sampler.on_write(torch.arange(8, device=device))
    slots = torch.tensor([2, 5, 2, 2, 5], device=device)
    sampler.update_priority(slots, torch.tensor([9.0, 1.0, 3.0, 4.0, 2.0], device=device))
    got = sampler.priorities(torch.tensor([2, 5], device=device)).tolist()
    assert got == [4.0, 2.0]
    assert math.isclose(sampler.sum_tree.total().item(), 6 * 1.0 + 4.0 + 2.0)
    assert sampler.min_tree.min().item() == 1.0


@pytest.mark.parametrize("device", DEVICES)
def test_state_dict_round_trip_reproduces_samples(device):
    g = torch.Generator().manual_seed(3)
    sampler = filled(1000, 700, torch.rand(700, generator=g, dtype=torch.float64) * 5, device)
    sampler.sample(32, 700)
    buf = io.BytesIO()
    torch.save(sampler.state_dict(), buf)  # plain tensors and numbers: loadable with weights_only
    buf.seek(0)
    state = torch.load(buf, weights_only=True)
    expected = [sampler.sample(64, 700) for _ in range(3)]
    restored = PrioritizedSampler(1000, device, seed=123, alpha=0.9, beta=0.1)
    restored.load_state_dict(state)
    assert (restored.alpha, restored.beta, restored.eps) == (sampler.alpha, sampler.beta, sampler.eps)
    for slots, weights in expected:
        s2, w2 = restored.sample(64, 700)
        assert torch.equal(s2, slots) and torch.equal(w2, weights)
    # priorities and the running max carry over too
    restored.on_write(torch.tensor([900], device=device))
    sampler.on_write(torch.tensor([900], device=device))
    assert torch.equal(restored.priorities(torch.arange(1000, device=device)),
                       sampler.priorities(torch.arange(1000, device=device)))


def test_seeded_samplers_agree_and_differ_by_seed():
    a, b, c = (PrioritizedSampler(100, "cpu", seed=s) for s in (7, 7, 8))
    for s in (a, b, c):
        s.on_write(torch.arange(100))
    sa, sb, sc = a.sample(50, 100)[0], b.sample(50, 100)[0], c.sample(50, 100)[0]
    assert torch.equal(sa, sb) and not torch.equal(sa, sc)


def test_invalid_arguments():
    sampler = PrioritizedSampler(10, "cpu", seed=0)
    sampler.on_write(torch.tensor([], dtype=torch.long))  # empty calls are no-ops
    sampler.update_priority(torch.tensor([], dtype=torch.long), torch.tensor([]))
    assert sampler.sum_tree.total().item() == 0.0
    with pytest.raises(BufferEmptyError):
        sampler.sample(4, 0)
    with pytest.raises(ValueError):
        sampler.sample(0, 5)
    for kwargs in ({"alpha": -1.0}, {"beta": math.nan}, {"eps": -1e-3}):
        with pytest.raises(ValueError):
            PrioritizedSampler(10, "cpu", **kwargs)
