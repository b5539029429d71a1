"""The hand-differentiated MLP (janus.algorithms.linear_chain) against autograd, and the DQN
update that uses it against the autograd update it replaces."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch
from torch import nn

from janus.algorithms.dqn_agent import DQNConfig, DQNLearner, q_network
from janus.algorithms.linear_chain import linear_chain
from janus.algorithms.networks import MLP, mlp

TIGHT = {"rtol": 1e-5, "atol": 1e-6}  # float rounding at most (to the bit with MKL)


def _chain_nets() -> list[tuple[str, nn.Module, tuple[int, ...]]]:
    torch.manual_seed(0)
    return [
        ("relu 128x128", mlp(4, (128, 128), 2), (4,)),
        ("tanh one layer", mlp(6, (16,), 3, activation=nn.Tanh), (6,)),
        ("three layers", mlp(5, (32, 16, 8), 4), (5,)),
        ("no hidden layer", mlp(7, (), 2), (7,)),
        ("flatten first", MLP(nn.Flatten(), mlp(12, (20,), 3)), (3, 4)),
        ("no bias", MLP(nn.Linear(4, 8, bias=False), nn.ReLU(), nn.Linear(8, 2, bias=False)), (4,)),
    ]


@pytest.mark.parametrize("name,net,shape", _chain_nets(), ids=lambda v: v if isinstance(v, str) else "")
def test_forward_and_gradients_match_autograd(name: str, net: nn.Module, shape: tuple[int, ...]) -> None:
    chain = linear_chain(net)
    assert chain is not None, name
    x = torch.randn(37, *shape)
    out = net(x)
    grad_out = torch.randn_like(out)
    grads = torch.autograd.grad(out, list(net.parameters()), grad_out)
    with torch.no_grad():
        mine, saved = chain.forward(x, keep=True)
        mine_grads = chain.backward(saved, grad_out)
    torch.testing.assert_close(mine, out.detach(), **TIGHT)
    assert len(mine_grads) == len(grads)
    for g, ref in zip(mine_grads, grads):
        assert g.shape == ref.shape
        torch.testing.assert_close(g, ref, **TIGHT)


def test_backward_over_the_first_rows_only_is_the_gradient_of_those_rows() -> None:
    torch.manual_seed(1)
    net = mlp(4, (32, 32), 2)
    chain = linear_chain(net)
    assert chain is not None
    x = torch.randn(50, 4)
    grad_out = torch.randn(20, 2)
    ref = torch.autograd.grad(net(x[:20]), list(net.parameters()), grad_out)
    with torch.no_grad():
        _, saved = chain.forward(x, keep=True)  # 50 rows forward, a loss on the first 20
        mine = chain.backward(saved, grad_out)
    for g, r in zip(mine, ref):
        torch.testing.assert_close(g, r, **TIGHT)


@pytest.mark.parametrize("build", [
    lambda: nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2)),  # not an MLP: its own forward
    lambda: MLP(nn.Linear(4, 8), nn.LeakyReLU(), nn.Linear(8, 2)),  # an activation it does not know
    lambda: MLP(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2), nn.ReLU()),  # an activation on the output
    lambda: MLP(nn.Linear(4, 8), nn.Linear(8, 2)),  # two linear layers in a row
    lambda: MLP(nn.Linear(4, 8), nn.ReLU(), nn.Flatten(), nn.Linear(8, 2)),  # a Flatten between layers
    lambda: MLP(nn.Linear(4, 8), nn.ReLU(), nn.Dropout(0.1), nn.Linear(8, 2)),
    lambda: mlp(4, (8,), 2).double(),  # float64 parameters
    lambda: MLP(),  # nothing at all
], ids=["sequential", "leaky_relu", "output_activation", "linear_linear", "flatten_between", "dropout",
        "float64", "empty"])
def test_networks_that_are_not_plain_chains_have_none(build) -> None:
    assert linear_chain(build()) is None


def test_a_cnn_q_network_keeps_autograd() -> None:
    space = gym.spaces.Box(0, 255, (4, 84, 84), np.uint8)
    learner = DQNLearner(DQNConfig(), space, gym.spaces.Discrete(3), 0)
    assert learner._chains == (None, None)


def test_hooks_and_frozen_parameters_make_the_chain_unusable() -> None:
    net = mlp(4, (8,), 2)
    chain = linear_chain(net)
    assert chain is not None and chain.usable()
    handle = net[0].register_forward_hook(lambda *a: None)
    assert not chain.usable()
    handle.remove()
    assert chain.usable()
    handle = net[2].weight.register_hook(lambda g: g)
    assert not chain.usable()
    handle.remove()
    handle = nn.modules.module.register_module_forward_hook(lambda *a: None)
    try:
        assert not chain.usable()
    finally:
        handle.remove()
    net[0].weight.requires_grad_(False)
    assert not chain.usable()  # no gradient wanted for it: autograd knows what to skip
    assert chain.usable(backward=False)  # still fine forward (a target network)


def test_a_replaced_parameter_is_seen() -> None:
    net = mlp(4, (8,), 2)
    chain = linear_chain(net)
    assert chain is not None
    net[0].weight = nn.Parameter(torch.ones(8, 4))
    with torch.no_grad():
        torch.testing.assert_close(chain.forward(torch.ones(3, 4))[0], net(torch.ones(3, 4)))


def _batch(seed: int, size: int, shape: tuple[int, ...], actions: int, weighted: bool) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    batch = {"obs": torch.randn(size, *shape, generator=g), "next_obs": torch.randn(size, *shape, generator=g),
             "action": torch.randint(0, actions, (size,), generator=g), "reward": torch.randn(size, generator=g) * 3,
             "discount": torch.rand(size, generator=g), "index": torch.arange(size)}
    if weighted:
        batch["weight"] = torch.rand(size, generator=g)
    return batch


@pytest.mark.parametrize("size,shape,hidden,prioritized,double_q", [
    (128, (4,), (128, 128), False, True),
    (100, (3, 4), (64,), True, True),
    (37, (8,), (32, 16, 8), True, True),
    (64, (4,), (32, 32), False, False),
    (50, (5,), (16,), True, False),
])
def test_dqn_update_by_hand_follows_the_autograd_update(size, shape, hidden, prioritized, double_q) -> None:
    """Forty updates (several target syncs) from the same start: the same parameters, metrics and
    priorities as the autograd update, with large TD errors (the Huber loss's linear part) too."""
    cfg = DQNConfig(hidden=hidden, prioritized=prioritized, target_update_interval=7, double_q=double_q)
    space = gym.spaces.Box(-np.inf, np.inf, shape, np.float32)
    by_hand = DQNLearner(cfg, space, gym.spaces.Discrete(3), 0)
    autograd = DQNLearner(cfg, space, gym.spaces.Discrete(3), 0)
    autograd._chains = (None, None)
    assert by_hand._chains[0] is not None and by_hand._chains[1] is not None
    calls = []
    original = by_hand._loss_and_grads
    by_hand._loss_and_grads = lambda *a: calls.append(1) or original(*a)  # must not be used
    for i in range(40):
        batch = _batch(i, size, shape, 3, prioritized)
        mine, ref = by_hand.update(batch), autograd.update(batch)
        assert mine.metrics.keys() == ref.metrics.keys()
        for key in ref.metrics:
            assert mine.metrics[key] == pytest.approx(ref.metrics[key], rel=1e-4, abs=1e-5), key
        if prioritized:
            torch.testing.assert_close(mine.priorities, ref.priorities, rtol=1e-4, atol=1e-5)
    assert not calls
    for net in ("q", "target"):
        for (k, a), b in zip(getattr(by_hand, net).state_dict().items(), getattr(autograd, net).state_dict().values()):
            torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5, msg=f"{net}.{k}")
    assert by_hand.opt.state_dict()["state"][0]["step"] == autograd.opt.state_dict()["state"][0]["step"] == 40


def test_dqn_update_falls_back_to_autograd_when_a_hook_is_set() -> None:
    space = gym.spaces.Box(-np.inf, np.inf, (4,), np.float32)
    learner = DQNLearner(DQNConfig(hidden=(16,)), space, gym.spaces.Discrete(2), 0)
    seen = []
    learner._params[0].register_hook(lambda g: seen.append(g.shape))
    before = learner._params[0].detach().clone()
    learner.update(_batch(0, 32, (4,), 2, False))
    assert seen == [torch.Size([16, 4])]  # the hook ran: autograd did the backward pass
    assert not torch.equal(before, learner._params[0])


def test_q_network_of_vector_observations_is_a_plain_chain() -> None:
    space = gym.spaces.Box(-1, 1, (2, 3), np.float32)
    assert linear_chain(q_network(DQNConfig(), space, gym.spaces.Discrete(4))) is not None


@pytest.mark.parametrize("double_q", [True, False])
def test_td_target_is_double_dqn_or_the_target_networks_max(double_q: bool) -> None:
    space = gym.spaces.Box(-np.inf, np.inf, (4,), np.float32)
    learner = DQNLearner(DQNConfig(double_q=double_q), space, gym.spaces.Discrete(3), 0)
    batch = {"reward": torch.tensor([1.0, 0.0]), "discount": torch.tensor([0.5, 0.25])}
    online = torch.tensor([[0.0, 9.0, 1.0], [5.0, 0.0, 0.0]])  # picks actions 1 and 0
    target = torch.tensor([[2.0, 3.0, 7.0], [4.0, 8.0, 1.0]])  # whose max is at 2 and 1
    got = learner._td_target(batch, online if double_q else None, target)
    expected = [1.0 + 0.5 * 3.0, 0.25 * 4.0] if double_q else [1.0 + 0.5 * 7.0, 0.25 * 8.0]
    assert got.tolist() == expected
