"""Tests for janus.algorithms.returns: naive per-element references under hypothesis, plus hand examples."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings, strategies as st

from janus.algorithms.returns import NStepResult, discounted_returns, gae, nstep_returns
from janus.errors import BufferInputError, ConfigError

FAST = settings(max_examples=120, deadline=None)


# ----------------------------------------------------------------------------- naive references
def ref_nstep(r, term, trunc, gamma, n):
    """Per (t, b) loops over Python floats. Returns lists [T][B] of (R, discount, next_index, m, complete)."""
    T, B = len(r), len(r[0])
    out = [[None] * B for _ in range(T)]
    for t in range(T):
        for b in range(B):
            total, m, terminated, ended = 0.0, 0, False, False
            for k in range(n):
                if t + k >= T:
                    break
                total += gamma**k * r[t + k][b]
                m += 1
                if term[t + k][b]:
                    terminated = ended = True
                    break
                if trunc[t + k][b]:
                    ended = True
                    break
            disc = 0.0 if terminated else gamma**m
            out[t][b] = (total, disc, t + m - 1, m, ended or m == n)
    return out


def ref_discounted(r, term, trunc, gamma, bootstrap=None, next_value=None):
    T, B = len(r), len(r[0])
    out = [[0.0] * B for _ in range(T)]
    for b in range(B):
        g = 0.0 if bootstrap is None else bootstrap[b]
        for t in reversed(range(T)):
            if term[t][b]:
                g = 0.0
            elif trunc[t][b]:
                g = 0.0 if next_value is None else next_value[t][b]
            g = r[t][b] + gamma * g
            out[t][b] = g
    return out


def ref_gae(r, v, nv, term, trunc, gamma, lam):
    T, B = len(r), len(r[0])
    adv = [[0.0] * B for _ in range(T)]
    for b in range(B):
        a = 0.0
        for t in reversed(range(T)):
            boot = 0.0 if term[t][b] else nv[t][b]
            delta = r[t][b] + gamma * boot - v[t][b]
            carry = 0.0 if (term[t][b] or trunc[t][b]) else a
            a = delta + gamma * lam * carry
            adv[t][b] = a
    ret = [[adv[t][b] + v[t][b] for b in range(B)] for t in range(T)]
    return adv, ret


# ----------------------------------------------------------------------------- strategies
@st.composite
def rollouts(draw):
    """Random [T, B] rollout as Python lists plus a tensor dtype and a flag encoding."""
    T, B = draw(st.integers(1, 20)), draw(st.integers(1, 4))
    num = st.floats(-10, 10, allow_nan=False, width=32)

    def grid(elem):
        return [[draw(elem) for _ in range(B)] for _ in range(T)]

    p_done = draw(st.sampled_from([0.0, 0.15, 0.5]))
    flag = st.floats(0, 1).map(lambda u: u < p_done)
    return dict(
        r=grid(num), v=grid(num), nv=grid(num), boot=[draw(num) for _ in range(B)],
        term=grid(flag), trunc=grid(flag),
        dtype=draw(st.sampled_from([torch.float32, torch.float64])),
        flag_dtype=draw(st.sampled_from([torch.bool, torch.float32, torch.uint8])),
    )


gammas = st.floats(0.01, 1.0)
lams = st.floats(0.0, 1.0)


def tensors(d):
    f = lambda x: torch.tensor(x, dtype=d["dtype"])  # noqa: E731
    g = lambda x: torch.tensor(x).to(d["flag_dtype"])  # noqa: E731
    return f(d["r"]), f(d["v"]), f(d["nv"]), f(d["boot"]), g(d["term"]), g(d["trunc"])


def close(actual, expected, dtype):
    tol = dict(rtol=1e-5, atol=1e-3) if dtype == torch.float32 else dict(rtol=1e-9, atol=1e-9)
    torch.testing.assert_close(actual, torch.tensor(expected, dtype=dtype), **tol)


# ----------------------------------------------------------------------------- property tests
@FAST
@given(rollouts(), gammas, st.integers(1, 6))
def test_nstep_matches_reference(d, gamma, n):
    r, _, _, _, term, trunc = tensors(d)
    res = nstep_returns(r, term, trunc, gamma, n)
    ref = ref_nstep(d["r"], d["term"], d["trunc"], gamma, n)
    col = lambda i: [[cell[i] for cell in row] for row in ref]  # noqa: E731
    close(res.reward, col(0), d["dtype"])
    close(res.discount, col(1), d["dtype"])
    assert res.next_index.tolist() == col(2)
    assert res.steps.tolist() == col(3)
    assert res.complete.tolist() == col(4)
    assert res.reward.dtype == res.discount.dtype == d["dtype"]
    assert res.next_index.dtype == res.steps.dtype == torch.long and res.complete.dtype == torch.bool


@FAST
@given(rollouts(), gammas, st.booleans(), st.booleans())
def test_discounted_returns_matches_reference(d, gamma, use_boot, use_nv):
    r, _, nv, boot, term, trunc = tensors(d)
    got = discounted_returns(r, term, trunc, gamma, boot if use_boot else None, nv if use_nv else None)
    ref = ref_discounted(d["r"], d["term"], d["trunc"], gamma,
                         d["boot"] if use_boot else None, d["nv"] if use_nv else None)
    close(got, ref, d["dtype"])


@FAST
@given(rollouts(), gammas, lams)
def test_gae_matches_reference(d, gamma, lam):
    r, v, nv, _, term, trunc = tensors(d)
    adv, ret = gae(r, v, nv, term, trunc, gamma, lam)
    ref_adv, ref_ret = ref_gae(d["r"], d["v"], d["nv"], d["term"], d["trunc"], gamma, lam)
    close(adv, ref_adv, d["dtype"])
    close(ret, ref_ret, d["dtype"])


@FAST
@given(rollouts(), gammas)
def test_gae_lam1_equals_discounted_returns_minus_value(d, gamma):
    """With consistent values (next_value[t] == value[t+1] inside an episode) lam=1 telescopes."""
    r, v, nv, _, term, trunc = tensors(d)
    done = term.bool() | trunc.bool()
    nv[:-1] = torch.where(done[:-1], nv[:-1], v[1:])
    adv, _ = gae(r, v, nv, term, trunc, gamma, 1.0)
    g = discounted_returns(r, term, trunc, gamma, bootstrap_value=nv[-1], next_value=nv)
    torch.testing.assert_close(adv, g - v, rtol=1e-4, atol=1e-3)


# ----------------------------------------------------------------------------- hand examples
def col(*xs):
    return torch.tensor(xs, dtype=torch.float32).unsqueeze(1)


def test_nstep_termination_inside_window_has_no_bootstrap():
    res = nstep_returns(col(1, 2, 3, 4), col(0, 1, 0, 0), col(0, 0, 0, 0), gamma=0.5, n=3)
    assert isinstance(res, NStepResult)
    torch.testing.assert_close(res.reward, col(2.0, 2.0, 5.0, 4.0))  # 1 + .5*2 ; 2 ; 3 + .5*4 ; 4
    torch.testing.assert_close(res.discount, col(0.0, 0.0, 0.25, 0.5))
    assert res.next_index.squeeze(1).tolist() == [1, 1, 3, 3]
    assert res.steps.squeeze(1).tolist() == [2, 1, 2, 1]
    assert res.complete.squeeze(1).tolist() == [True, True, False, False]  # tail cut by end of data


def test_nstep_truncation_bootstraps_from_truncated_step():
    res = nstep_returns(col(1, 2, 3, 4), col(0, 0, 0, 0), col(0, 1, 0, 0), gamma=0.5, n=3)
    torch.testing.assert_close(res.reward[:2], col(2.0, 2.0))
    torch.testing.assert_close(res.discount[:2], col(0.25, 0.5))
    assert res.next_index.squeeze(1).tolist()[:2] == [1, 1]
    assert res.complete.squeeze(1).tolist()[:2] == [True, True]


def test_nstep_full_window_and_both_flags():
    # n=2 windows fit at t=0; termination wins when a step is both terminated and truncated.
    res = nstep_returns(col(1, 1, 1), col(0, 0, 1), col(0, 0, 1), gamma=0.9, n=2)
    torch.testing.assert_close(res.reward, col(1.9, 1.9, 1.0))
    torch.testing.assert_close(res.discount, col(0.81, 0.0, 0.0))
    assert res.complete.all()


def test_nstep_gamma1_n1_is_one_step_target():
    g = torch.Generator().manual_seed(0)
    r = torch.randn(7, 3, generator=g)
    term, trunc = torch.rand(7, 3, generator=g) < 0.3, torch.rand(7, 3, generator=g) < 0.3
    q_next = torch.randn(7, 3, generator=g)  # Q_target(next_obs[t, b])
    res = nstep_returns(r, term, trunc, gamma=1.0, n=1)
    target = res.reward + res.discount * q_next.gather(0, res.next_index)
    torch.testing.assert_close(target, r + (~term).float() * q_next)
    assert (res.steps == 1).all() and res.complete.all()


def test_discounted_returns_hand_example():
    r, term, none = col(1, 1, 1, 1), col(0, 1, 0, 0), col(0, 0, 0, 0)
    got = discounted_returns(r, term, none, 0.5, bootstrap_value=torch.tensor([8.0]))
    torch.testing.assert_close(got, col(1.5, 1.0, 3.5, 5.0))
    trunc = col(0, 1, 0, 0)
    got = discounted_returns(r, none, trunc, 0.5, torch.tensor([8.0]), next_value=col(0, 4, 0, 0))
    torch.testing.assert_close(got, col(2.5, 3.0, 3.5, 5.0))
    got = discounted_returns(r, none, trunc, 0.5)  # no next_value: truncation bootstraps 0
    torch.testing.assert_close(got, col(1.5, 1.0, 1.5, 1.0))


def test_gae_lam1_hand_example_terminating_episode():
    r, v = col(1, 2, 3), col(0.5, -1.0, 2.0)
    nv = col(-1.0, 2.0, 7.0)  # next_value[t] = value[t+1]; the last is ignored (terminated)
    term, trunc = col(0, 0, 1), col(0, 0, 0)
    adv, ret = gae(r, v, nv, term, trunc, gamma=0.9, lam=1.0)
    g = col(1 + 0.9 * 2 + 0.81 * 3, 2 + 0.9 * 3, 3)
    torch.testing.assert_close(adv, g - v)
    torch.testing.assert_close(ret, g)


def test_gae_lam0_is_td_error():
    g = torch.Generator().manual_seed(1)
    r, v, nv = (torch.randn(9, 2, generator=g) for _ in range(3))
    term, trunc = torch.rand(9, 2, generator=g) < 0.3, torch.rand(9, 2, generator=g) < 0.3
    adv, ret = gae(r, v, nv, term, trunc, gamma=0.95, lam=0.0)
    td = r + 0.95 * nv * (~term).float() - v
    torch.testing.assert_close(adv, td)
    torch.testing.assert_close(ret, td + v)


def test_values_at_terminated_steps_are_never_read():
    nan = math.nan
    r, v, term, trunc = col(1, 1), col(0, 0), col(0, 1), col(0, 0)
    adv, _ = gae(r, v, col(0.0, nan), term, trunc, gamma=0.9, lam=0.9)
    assert torch.isfinite(adv).all()
    g = discounted_returns(r, term, trunc, 0.9, next_value=col(0.0, nan))
    assert torch.isfinite(g).all()


def test_meta_device_stays_on_device():
    """Every intermediate is created on the inputs' device (mixing with CPU tensors would raise)."""
    m = dict(device="meta")
    r, f = torch.empty(5, 3, **m), torch.empty(5, 3, dtype=torch.bool, **m)
    res = nstep_returns(r, f, f, 0.9, 3)
    assert all(x.device.type == "meta" for x in res)
    assert discounted_returns(r, f, f, 0.9, torch.empty(3, **m), r).device.type == "meta"
    assert all(x.device.type == "meta" for x in gae(r, r, r, f, f, 0.9, 0.95))


# ----------------------------------------------------------------------------- validation
R, F = torch.zeros(4, 2), torch.zeros(4, 2, dtype=torch.bool)
BAD = torch.zeros(4, 3)


@pytest.mark.parametrize(
    "name, call",
    [
        ("terminated", lambda: nstep_returns(R, BAD.bool(), F, 0.9, 2)),
        ("truncated", lambda: nstep_returns(R, F, BAD, 0.9, 2)),
        ("reward", lambda: nstep_returns(torch.zeros(4), F, F, 0.9, 2)),
        ("truncated", lambda: discounted_returns(R, F, BAD, 0.9)),
        ("next_value", lambda: discounted_returns(R, F, F, 0.9, next_value=BAD)),
        ("bootstrap_value", lambda: discounted_returns(R, F, F, 0.9, bootstrap_value=torch.zeros(3))),
        ("value", lambda: gae(R, BAD, R, F, F, 0.9, 0.95)),
        ("next_value", lambda: gae(R, R, BAD, F, F, 0.9, 0.95)),
        ("terminated", lambda: gae(R, R, R, BAD, F, 0.9, 0.95)),
    ],
)
def test_shape_mismatch_raises_buffer_input_error(name, call):
    with pytest.raises(BufferInputError, match=rf"invalid {name}\.shape"):
        call()


@pytest.mark.parametrize(
    "call",
    [
        lambda: nstep_returns(R, F, F, 1.5, 2),
        lambda: nstep_returns(R, F, F, 0.9, 0),
        lambda: discounted_returns(R, F, F, -0.1),
        lambda: gae(R, R, R, F, F, 0.9, 1.1),
    ],
)
def test_bad_hyperparameters_raise_config_error(call):
    with pytest.raises(ConfigError):
        call()


def test_gae_numpy_scan_matches_the_torch_loop_exactly() -> None:
    """CPU tensors take a numpy scan; tensors that need grad (and CUDA ones) the torch loop."""
    g = torch.Generator().manual_seed(0)
    reward, value, next_value = (torch.randn(64, 8, generator=g) for _ in range(3))
    term, trunc = torch.rand(64, 8, generator=g) < 0.05, torch.rand(64, 8, generator=g) < 0.05
    fast = gae(reward, value, next_value, term, trunc, 0.99, 0.95)
    loop = gae(reward.clone().requires_grad_(), value, next_value, term, trunc, 0.99, 0.95)
    assert torch.equal(fast[0], loop[0].detach()) and torch.equal(fast[1], loop[1].detach())
