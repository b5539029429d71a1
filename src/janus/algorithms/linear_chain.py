"""A plain MLP differentiated by hand: the forward pass keeps what the backward pass needs, and the
backward pass is the few matrix products that autograd would run, without building its graph.

Why: on one CPU thread a CartPole-sized update is mostly per-op overhead (see "The algorithm
seam" in docs/design.md); autograd adds a graph node, saved tensors and a dispatch per op on top of
the arithmetic. A DQN update through :class:`LinearChain` runs about half the ops of the autograd
one and computes the same products; the results agree with autograd's to float rounding (to the
bit with this machine's MKL; tests/algorithms/test_linear_chain.py compares them).

Only a *plain* chain qualifies (:func:`linear_chain`): ``nn.Flatten`` layers before the first
``nn.Linear``, then ``nn.Linear`` layers with ``nn.ReLU`` or ``nn.Tanh`` between them, no hooks
anywhere, every parameter a float32 tensor (that requires a gradient, to be differentiated).
Anything else (a CNN, another activation, a hook on a layer or a parameter, a frozen layer) makes
:func:`linear_chain` return ``None`` or :meth:`LinearChain.usable` false, and the caller keeps
autograd.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from janus.algorithms.networks import MLP, _global_module_hooks

_ACTIVATIONS = {nn.ReLU: "relu", nn.Tanh: "tanh"}


@dataclass(frozen=True)
class Layer:
    """One ``nn.Linear`` of the chain and the activation after it (``None``: the output layer).
    The parameters are read from the module on every call, so replacing one is seen."""

    linear: nn.Linear
    activation: str | None


class LinearChain:
    """The layers of a plain MLP, run forward and backward by hand (see the module doc).

    ``modules``: every module of the network (its hooks are checked on each :meth:`usable`).
    ``flatten``: the ``(start_dim, end_dim)`` of the ``nn.Flatten`` layers before the first linear one.
    """

    def __init__(self, layers: list[Layer], modules: list[nn.Module], flatten: list[tuple[int, int]]) -> None:
        self.layers = layers
        self.modules = modules
        self.flatten = flatten

    @property
    def params(self) -> list[torch.Tensor]:
        """The parameters, in the network's ``parameters()`` order (weight, then bias, per layer)."""
        return [t for layer in self.layers for t in (layer.linear.weight, layer.linear.bias) if t is not None]

    def usable(self, backward: bool = True) -> bool:
        """Whether the chain may still be run by hand: no hook has been registered since (on a
        module, a parameter or globally) and every parameter is still a float32 tensor; with
        ``backward``, one that requires a gradient (a target network's need not)."""
        if _global_module_hooks():
            return False
        for m in self.modules:
            if m._forward_hooks or m._forward_pre_hooks or m._backward_hooks or m._backward_pre_hooks:
                return False
        for p in self.params:
            if ((backward and not p.requires_grad) or p.dtype != torch.float32 or p._backward_hooks
                    or getattr(p, "_post_accumulate_grad_hooks", None)):
                return False
        return True

    def inputs(self, x: torch.Tensor) -> torch.Tensor:
        """``x`` as the first linear layer takes it (float32, flattened as the network does)."""
        x = x.float()
        for start, end in self.flatten:
            x = x.flatten(start, end)
        return x

    def forward(self, x: torch.Tensor, keep: bool = False) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """The network's output for ``x`` (call under ``torch.no_grad()``), and with ``keep`` the
        input of every linear layer (what :meth:`backward` needs)."""
        h = self.inputs(x)
        saved: list[torch.Tensor] = []
        for layer in self.layers:
            if keep:
                saved.append(h)
            weight, bias = layer.linear.weight, layer.linear.bias
            h = torch.addmm(bias, h, weight.t()) if bias is not None else h.mm(weight.t())
            if layer.activation == "relu":
                h = torch.relu_(h)
            elif layer.activation == "tanh":
                h = torch.tanh_(h)
        return h, saved

    def backward(self, saved: list[torch.Tensor], grad_out: torch.Tensor) -> list[torch.Tensor]:
        """Gradients of :attr:`params` (in their order) given ``d loss / d output``.

        ``saved`` is :meth:`forward`'s (``keep=True``): the input of layer ``i`` is the activation
        of layer ``i - 1``, which the activation's derivative is computed from, as autograd does.
        ``grad_out`` may cover only the first rows of the forward's batch (the rest had no loss):
        the gradients are then those of those rows alone.
        """
        grads: list[torch.Tensor] = []
        d = grad_out
        rows = len(grad_out)
        for i in range(len(self.layers) - 1, -1, -1):
            layer, inp = self.layers[i], saved[i][:rows]
            layer_grads = [d.t().mm(inp)]
            if layer.linear.bias is not None:
                layer_grads.append(d.sum(0))
            grads[:0] = layer_grads
            if i == 0:
                break
            d = d.mm(layer.linear.weight)
            below = self.layers[i - 1].activation
            if below == "relu":
                d = torch.ops.aten.threshold_backward(d, inp, 0)
            elif below == "tanh":
                d = torch.ops.aten.tanh_backward(d, inp)
        return grads


def linear_chain(network: nn.Module) -> LinearChain | None:
    """The :class:`LinearChain` of ``network`` when it is a plain MLP (see the module doc), else ``None``."""
    if not isinstance(network, MLP):
        return None
    modules: list[nn.Module] = [network]
    leaves: list[nn.Module] = []

    def walk(seq: nn.Sequential) -> bool:
        for child in seq:
            modules.append(child)
            if isinstance(child, MLP):
                if not walk(child):
                    return False
            elif type(child) in (nn.Linear, nn.Flatten) or type(child) in _ACTIVATIONS:
                leaves.append(child)
            else:
                return False
        return True

    if not walk(network):
        return None
    flatten: list[tuple[int, int]] = []
    layers: list[Layer] = []
    pending: Layer | None = None  # the last linear layer, its activation not yet known
    for leaf in leaves:
        kind = type(leaf)
        if kind is nn.Flatten:
            if layers or pending is not None:
                return None  # a Flatten between linear layers: not a plain chain
            assert isinstance(leaf, nn.Flatten)  # kind
            flatten.append((leaf.start_dim, leaf.end_dim))
        elif kind is nn.Linear:
            if pending is not None:
                return None  # two linear layers in a row: still an MLP, but not one this handles
            assert isinstance(leaf, nn.Linear)  # kind
            pending = Layer(leaf, None)
        else:
            if pending is None:
                return None  # an activation first, or two in a row
            layers.append(Layer(pending.linear, _ACTIVATIONS[kind]))
            pending = None
    if pending is None:
        return None  # no layer at all, or an activation on the output
    layers.append(pending)
    chain = LinearChain(layers, modules, flatten)
    if [id(p) for p in chain.params] != [id(p) for p in network.parameters()]:
        return None  # parameters the chain does not know of
    return chain if chain.usable(backward=False) else None
