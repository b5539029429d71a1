"""Tests for janus.algorithms.vtrace: the explicit-sum definition under hypothesis, plus hand examples."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings, strategies as st

from janus.algorithms.vtrace import VTrace, vtrace
from janus.errors import BufferInputError, BufferTypeError, ConfigError

FAST = settings(max_examples=120, deadline=None)


# ----------------------------------------------------------------------------- reference
def ref_vtrace(mu_logp, pi_logp, r, v, boot, disc, rho_bar, c_bar, pg_rho_bar):
    """IMPALA eq. (1) as the explicit sum, per element, in float64 numpy:
    ``v_s = V(x_s) + sum_{t>=s} (prod_{i=s}^{t-1} discount_i * c_i) * delta_t``."""
    T, B = r.shape
    ratio = np.exp(pi_logp - mu_logp)
    vs, pg = np.zeros((T, B)), np.zeros((T, B))
    for b in range(B):
        v_next = [v[t + 1, b] if t + 1 < T else boot[b] for t in range(T)]
        delta = [min(rho_bar, ratio[t, b]) * (r[t, b] + disc[t, b] * v_next[t] - v[t, b]) for t in range(T)]
        for s in range(T):
            total = v[s, b]
            for t in range(s, T):
                weight = 1.0
                for i in range(s, t):
                    weight *= disc[i, b] * min(c_bar, ratio[i, b])
                total += weight * delta[t]
            vs[s, b] = total
        for s in range(T):
            vs_next = vs[s + 1, b] if s + 1 < T else boot[b]
            pg[s, b] = min(pg_rho_bar, ratio[s, b]) * (r[s, b] + disc[s, b] * vs_next - v[s, b])
    return vs, pg, ratio


def ref_onpolicy_return(r, boot, disc):
    """On-policy v_s: the discounted return to the end of the data, bootstrapped, summed forwards."""
    T, B = r.shape
    out = np.zeros((T, B))
    for b in range(B):
        for s in range(T):
            total, scale = 0.0, 1.0
            for t in range(s, T):
                total += scale * r[t, b]
                scale *= disc[t, b]
            out[s, b] = total + scale * boot[b]
    return out


# ----------------------------------------------------------------------------- strategies
@st.composite
def trajectories(draw):
    """A random [T, B] rollout as float64 numpy arrays; discounts are 0 (terminated) or gamma."""
    T, B = draw(st.integers(1, 20)), draw(st.integers(1, 5))
    num = st.floats(-10, 10, allow_nan=False)
    logp = st.floats(-3, 0, allow_nan=False)

    def grid(elem):
        return np.array([[draw(elem) for _ in range(B)] for _ in range(T)], dtype=np.float64)

    gamma = draw(st.floats(0.0, 1.0))
    p_term = draw(st.sampled_from([0.0, 0.2, 0.5]))
    disc = grid(st.floats(0, 1).map(lambda u: 0.0 if u < p_term else gamma))
    return dict(mu=grid(logp), pi=grid(logp), r=grid(num), v=grid(num), boot=grid(num)[0], disc=disc)


# c_bar stays finite: an untruncated trace multiplies up to 19 ratios of e**3, and the order of
# summation then decides more digits than any tolerance allows.
rho_bars = st.sampled_from([0.5, 1.0, 2.0, math.inf])
c_bars = st.sampled_from([0.5, 1.0, 2.0])
pg_rho_bars = st.sampled_from([None, 0.5, 1.0, math.inf])


def run(d, dtype=torch.float64, **bars):
    t = lambda x: torch.tensor(x, dtype=dtype)  # noqa: E731
    return vtrace(t(d["mu"]), t(d["pi"]), t(d["r"]), t(d["v"]), t(d["boot"]), t(d["disc"]), **bars)


def close(actual, expected, rtol=1e-7, atol=1e-6):
    torch.testing.assert_close(actual, torch.as_tensor(expected, dtype=actual.dtype), rtol=rtol, atol=atol)


# ----------------------------------------------------------------------------- property tests
@FAST
@given(trajectories(), rho_bars, c_bars, pg_rho_bars)
def test_vtrace_matches_explicit_sum(d, rho_bar, c_bar, pg_rho_bar):
    got = run(d, rho_bar=rho_bar, c_bar=c_bar, pg_rho_bar=pg_rho_bar)
    pg_bar = rho_bar if pg_rho_bar is None else pg_rho_bar
    vs, pg, ratio = ref_vtrace(d["mu"], d["pi"], d["r"], d["v"], d["boot"], d["disc"], rho_bar, c_bar, pg_bar)
    assert isinstance(got, VTrace)
    close(got.vs, vs)
    close(got.pg_advantage, pg)
    close(got.rho, ratio)


@FAST
@given(trajectories(), st.sampled_from([1.0, 2.0, math.inf]), st.sampled_from([1.0, 2.0, math.inf]))
def test_on_policy_vs_is_the_bootstrapped_discounted_return(d, rho_bar, c_bar):
    d["pi"] = d["mu"]  # target == behaviour: every ratio is 1, below both truncation levels
    got = run(d, rho_bar=rho_bar, c_bar=c_bar)
    ret = ref_onpolicy_return(d["r"], d["boot"], d["disc"])
    close(got.vs, ret)
    vs_next = np.concatenate([ret[1:], d["boot"][None]])
    close(got.pg_advantage, d["r"] + d["disc"] * vs_next - d["v"])
    close(got.rho, np.ones_like(ret))


@FAST
@given(trajectories(), rho_bars, c_bars)
def test_float32_keeps_dtype_and_agrees_with_float64(d, rho_bar, c_bar):
    lo, hi = run(d, torch.float32, rho_bar=rho_bar, c_bar=min(c_bar, 1.0)), run(d, rho_bar=rho_bar, c_bar=min(c_bar, 1.0))
    assert lo.vs.dtype == lo.pg_advantage.dtype == lo.rho.dtype == torch.float32
    close(lo.vs, hi.vs, rtol=1e-4, atol=1e-3)
    close(lo.pg_advantage, hi.pg_advantage, rtol=1e-4, atol=1e-3)


# ----------------------------------------------------------------------------- hand examples
def col(*xs):
    return torch.tensor(xs, dtype=torch.float64).unsqueeze(1)


def two_steps(**bars):
    """r = [1, 2], V = [0.5, 1], V(x_2) = 3, discount 0.9; ratios pi/mu = [90, 0.5]."""
    mu, pi = col(math.log(0.01), math.log(0.8)), col(math.log(0.9), math.log(0.4))
    return vtrace(mu, pi, col(1.0, 2.0), col(0.5, 1.0), torch.tensor([3.0], dtype=torch.float64), col(0.9, 0.9), **bars)


def test_huge_ratio_is_clipped_at_rho_bar():
    out = two_steps(rho_bar=1.0, c_bar=1.0)
    # rho = [1, 0.5], c = [1, 0.5]; delta_1 = 0.5 * (2 + 0.9*3 - 1) = 1.85, delta_0 = 1 * (1 + 0.9*1 - 0.5) = 1.4
    close(out.rho, col(90.0, 0.5))
    close(out.vs, col(0.5 + 1.4 + 0.9 * 1.0 * 1.85, 1.0 + 1.85))  # [3.565, 2.85]
    close(out.pg_advantage, col(1.0 * (1 + 0.9 * 2.85 - 0.5), 1.85))  # [3.065, 1.85]


def test_c_bar_and_pg_rho_bar_clip_independently_of_rho_bar():
    out = two_steps(rho_bar=math.inf, c_bar=0.5, pg_rho_bar=2.0)
    # rho_0 = 90 (no truncation), c_0 = 0.5; pg weight min(2, 90) = 2
    close(out.vs, col(0.5 + 90 * 1.4 + 0.9 * 0.5 * 1.85, 2.85))  # [128.3325, 2.85]
    close(out.pg_advantage, col(2.0 * (1 + 0.9 * 2.85 - 0.5), 1.85))


def test_zero_discount_cuts_the_recursion():
    g = torch.Generator().manual_seed(0)
    T, B, cut = 6, 3, 2
    mu, pi = -torch.rand(T, B, generator=g), -torch.rand(T, B, generator=g)
    r, v, boot = torch.randn(T, B, generator=g), torch.randn(T, B, generator=g), torch.randn(B, generator=g)
    disc = torch.full((T, B), 0.99)
    disc[cut] = 0.0
    base = vtrace(mu, pi, r, v, boot, disc, rho_bar=math.inf, c_bar=math.inf)
    # Everything after the cut changes: rewards, values, ratios and the bootstrap.
    later = slice(cut + 1, None)
    r2, v2, pi2 = r.clone(), v.clone(), pi.clone()
    r2[later], v2[later], pi2[later] = r[later] + 100, v[later] - 50, pi[later] + 1
    moved = vtrace(mu, pi2, r2, v2, boot + 1000, disc, rho_bar=math.inf, c_bar=math.inf)
    assert torch.equal(moved.vs[: cut + 1], base.vs[: cut + 1])
    assert torch.equal(moved.pg_advantage[: cut + 1], base.pg_advantage[: cut + 1])
    assert not torch.equal(moved.vs[later], base.vs[later])  # the change was real
    # At the cut itself the target is the one-step (importance-weighted) TD target with no bootstrap.
    ratio = torch.exp(pi[cut] - mu[cut])
    torch.testing.assert_close(base.vs[cut], v[cut] + ratio * (r[cut] - v[cut]))


def test_results_carry_no_gradient():
    x = torch.zeros(3, 2, requires_grad=True)
    out = vtrace(x, x, x, x, torch.zeros(2, requires_grad=True), torch.full((3, 2), 0.9))
    assert not (out.vs.requires_grad or out.pg_advantage.requires_grad or out.rho.requires_grad)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_matches_cpu():
    g = torch.Generator().manual_seed(1)
    args = [-torch.rand(16, 4, generator=g), -torch.rand(16, 4, generator=g), torch.randn(16, 4, generator=g),
            torch.randn(16, 4, generator=g), torch.randn(4, generator=g), torch.full((16, 4), 0.95)]
    cpu = vtrace(*args, rho_bar=1.0, c_bar=0.9)
    gpu = vtrace(*[a.cuda() for a in args], rho_bar=1.0, c_bar=0.9)
    assert gpu.vs.device.type == "cuda"
    torch.testing.assert_close(gpu.vs.cpu(), cpu.vs)
    torch.testing.assert_close(gpu.pg_advantage.cpu(), cpu.pg_advantage)


# ----------------------------------------------------------------------------- bad input
def good(**change):
    args = dict(behaviour_logprob=torch.zeros(4, 2), target_logprob=torch.zeros(4, 2), reward=torch.zeros(4, 2),
                value=torch.zeros(4, 2), bootstrap_value=torch.zeros(2), discount=torch.full((4, 2), 0.9))
    args.update(change)
    return args


@pytest.mark.parametrize("name, bad, match", [
    ("value", torch.zeros(4, 3), r"value.shape: got \(4, 3\); accepted: \(4, 2\)"),
    ("target_logprob", torch.zeros(5, 2), r"target_logprob.shape: got \(5, 2\)"),
    ("discount", torch.zeros(4), r"discount.shape: got \(4,\)"),
    ("bootstrap_value", torch.zeros(4, 2), r"bootstrap_value.shape: got \(4, 2\); accepted: \(2,\)"),
    ("reward", torch.zeros(4), r"reward.shape: got \(4,\); accepted: \[T, B\]"),
    ("value", torch.zeros(4, 2, device="meta"), r"value.device: got 'meta'; accepted: cpu"),
])
def test_mismatched_shapes_and_devices_raise(name, bad, match):
    with pytest.raises(BufferInputError, match=match):
        vtrace(**good(**{name: bad}))


@pytest.mark.parametrize("name, bad, match", [
    ("reward", [[0.0]], "reward: got 'list'; accepted: a torch.Tensor"),
    ("behaviour_logprob", torch.zeros(4, 2, dtype=torch.long), "behaviour_logprob.dtype: got torch.int64"),
])
def test_wrong_types_raise(name, bad, match):
    with pytest.raises(BufferTypeError, match=match):
        vtrace(**good(**{name: bad}))


@pytest.mark.parametrize("name, bad", [
    ("rho_bar", 0.0), ("rho_bar", -1.0), ("rho_bar", math.nan), ("rho_bar", True), ("rho_bar", "1"),
    ("c_bar", 0), ("c_bar", -0.5), ("pg_rho_bar", 0.0), ("pg_rho_bar", math.nan),
])
def test_bad_truncation_levels_raise(name, bad):
    with pytest.raises(ConfigError, match=rf"invalid {name}: got {bad!r}; accepted: a float > 0"):
        vtrace(**good(), **{name: bad})


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_the_numpy_and_torch_loops_agree(dtype: torch.dtype) -> None:
    """The CPU fast path (numpy) and the loop other devices run (torch) give the same sums."""
    from janus.algorithms.vtrace import _backward_sum

    gen = torch.Generator().manual_seed(0)
    delta, decay = torch.randn(17, 3, generator=gen, dtype=dtype), torch.rand(17, 3, generator=gen, dtype=dtype)
    fast, plain = _backward_sum(delta, decay, in_numpy=True), _backward_sum(delta, decay, in_numpy=False)
    assert fast.dtype == plain.dtype == dtype
    torch.testing.assert_close(fast, plain)
