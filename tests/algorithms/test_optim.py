"""LeanAdam (the fused step without Adam.step's Python) and the MLP's functional forward: both
must give torch's own results to the bit."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn
from torch.optim.optimizer import register_optimizer_step_post_hook

from janus.algorithms.networks import MLP, mlp
from janus.algorithms.optim import LeanAdam, adam

pytestmark = pytest.mark.skipif(not hasattr(torch, "_fused_adam_"), reason="this torch has no fused Adam kernel")


def _net(seed: int = 0) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Linear(16, 3))


def _grads(params: list[nn.Parameter], step: int, skip: int | None = None) -> None:
    g = torch.Generator().manual_seed(step)
    for i, p in enumerate(params):
        p.grad = None if i == skip else torch.randn(p.shape, generator=g)


def _run(opt_of, steps: int = 12, skip_at: int | None = None, lr_at: int | None = None) -> list[torch.Tensor]:
    net = _net()
    params = list(net.parameters())
    opt = opt_of(params)
    for t in range(steps):
        _grads(params, t, skip=1 if t == skip_at else None)
        if t == lr_at:
            for g in opt.param_groups:
                g["lr"] *= 0.5
        opt.step()
    return [p.detach().clone() for p in params] + [opt.state[p]["exp_avg_sq"].clone() for p in params]


@pytest.mark.parametrize("kwargs", [{}, {"weight_decay": 0.01}, {"maximize": True}, {"betas": (0.8, 0.95), "eps": 1e-5}])
def test_lean_adam_matches_torch_fused_adam_to_the_bit(kwargs):
    ours = _run(lambda p: LeanAdam(p, lr=1e-2, fused=True, **kwargs), skip_at=5, lr_at=7)
    ref = _run(lambda p: torch.optim.Adam(p, lr=1e-2, fused=True, **kwargs), skip_at=5, lr_at=7)
    for a, b in zip(ours, ref):
        assert torch.equal(a, b)


def test_lean_adam_takes_the_lean_path_and_keeps_step_hooks():
    net = _net()
    params = list(net.parameters())
    opt = adam(params, lr=1e-2)
    assert isinstance(opt, LeanAdam)
    calls = []
    opt.register_step_pre_hook(lambda o, a, k: calls.append("pre"))
    opt.register_step_post_hook(lambda o, a, k: calls.append("post"))
    for t in range(3):
        _grads(params, t)
        opt.step()
    assert opt._lean is not None  # built after the first step created the state
    assert calls == ["pre", "post"] * 3
    assert all(float(opt.state[p]["step"]) == 3 for p in params)


def test_lean_adam_after_load_state_dict_and_with_two_groups():
    def two_groups(params):
        return LeanAdam([{"params": params[:2]}, {"params": params[2:], "lr": 3e-3}], lr=1e-2, fused=True)

    def torch_two_groups(params):
        return torch.optim.Adam([{"params": params[:2]}, {"params": params[2:], "lr": 3e-3}], lr=1e-2, fused=True)

    ref = _run(torch_two_groups, steps=10)
    # run 4 steps, save, load into a fresh optimiser over a copy of the net, run 6 more
    net = _net()
    params = list(net.parameters())
    opt = two_groups(params)
    for t in range(4):
        _grads(params, t)
        opt.step()
    net2 = copy.deepcopy(net)
    params2 = list(net2.parameters())
    opt2 = two_groups(params2)
    opt2.load_state_dict(opt.state_dict())
    for t in range(4, 10):
        _grads(params2, t)
        opt2.step()
    ours = [p.detach() for p in params2] + [opt2.state[p]["exp_avg_sq"] for p in params2]
    for a, b in zip(ours, ref):
        assert torch.equal(a, b)


def test_lean_adam_with_a_closure_goes_through_adam_step():
    net = _net()
    params = list(net.parameters())
    opt = LeanAdam(params, lr=1e-2, fused=True)
    x = torch.randn(8, 4)

    def closure():
        opt.zero_grad()
        loss = net(x).pow(2).sum()
        loss.backward()
        return loss

    loss = opt.step(closure)
    assert isinstance(loss, torch.Tensor) and all(float(opt.state[p]["step"]) == 1 for p in params)


def _twin(activation=nn.ReLU) -> tuple[MLP, nn.Sequential]:
    torch.manual_seed(1)
    fast = mlp(5, (8, 8), 2, activation)
    plain = nn.Sequential(*[copy.deepcopy(m) for m in fast])
    return fast, plain


@pytest.mark.parametrize("activation", [nn.ReLU, nn.Tanh, nn.ELU])
def test_mlp_forward_and_gradients_equal_nn_sequential(activation):
    fast, plain = _twin(activation)
    assert list(fast.state_dict()) == list(plain.state_dict())
    x = torch.randn(7, 5)
    a, b = fast(x), plain(x)
    assert torch.equal(a, b)
    a.square().sum().backward()
    b.square().sum().backward()
    for p, q in zip(fast.parameters(), plain.parameters()):
        assert torch.equal(p.grad, q.grad)


def test_mlp_runs_layer_hooks_and_global_hooks():
    fast, _ = _twin()
    seen = []
    handle = fast[0].register_forward_hook(lambda m, i, o: seen.append("layer"))
    fast(torch.randn(2, 5))
    handle.remove()
    assert seen == ["layer"]
    handle = nn.modules.module.register_module_forward_hook(lambda m, i, o: seen.append(type(m).__name__))
    try:
        fast(torch.randn(2, 5))
    finally:
        handle.remove()
    assert seen.count("Linear") == 3 and seen.count("ReLU") == 2
    seen.clear()
    fast(torch.randn(2, 5))
    assert seen == []


def test_lean_adam_runs_step_hooks_and_the_profiler_record_only_when_watched(monkeypatch):
    """The step skips torch's hook wrapper when nothing watches it; a hook (its own or global) or
    a running profiler still sees every step, once."""
    params = list(_net().parameters())
    opt = LeanAdam(params, lr=1e-2, fused=True)
    entered = []
    real = torch.autograd.profiler.record_function.__enter__
    monkeypatch.setattr(torch.autograd.profiler.record_function, "__enter__",
                        lambda self: (entered.append(self.name), real(self))[1])
    for t in range(3):
        _grads(params, t)
        opt.step()
    assert entered == []  # nothing watched: no record_function

    calls = []
    pre = opt.register_step_pre_hook(lambda o, a, k: calls.append("pre"))
    post = opt.register_step_post_hook(lambda o, a, k: calls.append("post"))
    opt.step()
    assert calls == ["pre", "post"] and entered == ["Optimizer.step#LeanAdam.step"]
    pre.remove()
    post.remove()
    glob = register_optimizer_step_post_hook(lambda o, a, k: calls.append("global"))
    try:
        opt.step()
    finally:
        glob.remove()
    assert calls == ["pre", "post", "global"]
    entered.clear()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        opt.step()
    assert entered == ["Optimizer.step#LeanAdam.step"]
    assert any(e.name == "Optimizer.step#LeanAdam.step" for e in prof.events())
    opt.step()
    assert calls == ["pre", "post", "global"]  # removed hooks stay removed
