"""The networks' building blocks: the MLP of vector observations and the CNN torso of images.

**Image observations.** :func:`image_layout` calls a Box observation space an image when it has

* 3 dims, read as channels-last ``(H, W, C)`` when the last dim is smaller than the first
  (CarRacing's ``(96, 96, 3)``, MinAtar's ``(10, 10, 4)``), else channels-first ``(C, H, W)``
  (an Atari frame stack ``(4, 84, 84)``; a tie such as ``(8, 8, 8)`` too, PyTorch's order); or
* 2 dims ``(H, W)``: one grayscale channel;

and both spatial sides at least :data:`MIN_SIDE` (8) pixels. Any dtype: ``uint8`` images are
divided by 255 inside the network (in float32), other dtypes go in as they are. Everything else
(vectors, and arrays too small to be images) is flattened into the MLP, as always. A shape the
rule reads the wrong way (e.g. channels-last with as many channels as rows) can be transposed by
an observation wrapper.

**The torso** (:class:`CNNTorso`) takes the observation as the environment emits it (any dtype,
channels-last permuted inside) and returns features:

* ``"nature"`` when both sides are at least :data:`NATURE_MIN_SIDE` (36, the smallest input the
  stack fits): the Nature-DQN stack (Mnih et al., 2015), conv 32 8x8 stride 4, conv 64 4x4
  stride 2, conv 64 3x3 stride 1, then linear 512, all ReLU;
* ``"small"`` for smaller images (MinAtar-sized, 8 to 35 pixels a side): conv 16 3x3 stride 1,
  conv 32 3x3 stride 2, then linear 256, all ReLU (a 16x16 image costs 0.5 M multiply-adds, so
  CPU training stays fast).

The torso is fixed: ``algorithm.hidden`` (``critic_hidden``, ``activation``) shape the MLPs of
vector observations only.

**Activations** of those MLPs (``algorithm.activation``): :data:`ACTIVATIONS` by name.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Callable

import numpy as np
import torch
import torch.nn.functional as F
from gymnasium import spaces
from torch import nn

from janus.errors import ConfigError, shown

MIN_SIDE = 8
"""Smallest height and width of an image observation (smaller arrays go to the MLP)."""
NATURE_MIN_SIDE = 36
"""Smallest height and width that get the Nature-DQN torso (smaller images get the small one)."""


def image_layout(space: spaces.Space) -> str | None:
    """``"CHW"``, ``"HWC"`` or ``"HW"`` for an image observation space (see the module doc), else ``None``."""
    if not isinstance(space, spaces.Box):
        return None
    shape = tuple(space.shape)
    if len(shape) == 2:
        layout, (h, w) = "HW", shape
    elif len(shape) == 3:
        layout = "HWC" if shape[2] < shape[0] else "CHW"
        h, w = shape[:2] if layout == "HWC" else shape[1:]
    else:
        return None
    return layout if min(h, w) >= MIN_SIDE else None


def image_chw(space: spaces.Box) -> tuple[int, int, int]:
    """``(channels, height, width)`` of an image observation space."""
    layout, shape = image_layout(space), tuple(space.shape)
    if layout is None:
        raise ValueError(f"not an image observation space: {space}")
    if layout == "HW":
        return (1, shape[0], shape[1])
    return (shape[2], shape[0], shape[1]) if layout == "HWC" else (shape[0], shape[1], shape[2])


def torso_kind(space: spaces.Space) -> str:
    """``"nature"``, ``"small"`` (image observations, see the module doc) or ``"mlp"``."""
    if image_layout(space) is None:
        return "mlp"
    _, h, w = image_chw(space)  # type: ignore[arg-type]  # an image layout: a Box
    return "nature" if min(h, w) >= NATURE_MIN_SIDE else "small"


def obs_dtype(space: spaces.Space) -> np.dtype:
    """What an actor stores observations as: ``uint8`` images stay ``uint8`` (4x less memory, and
    the network scales them); every other observation is float32, as it always was."""
    uint8 = image_layout(space) is not None and np.dtype(space.dtype) == np.uint8
    return np.dtype(np.uint8) if uint8 else np.dtype(np.float32)


class CNNTorso(nn.Module):
    """Image observations -> ReLU features (``self.features`` of them); see the module doc."""

    def __init__(self, space: spaces.Box) -> None:
        super().__init__()
        self.layout = image_layout(space)
        self.kind = torso_kind(space)
        c, h, w = image_chw(space)
        self.scale = 1.0 / 255.0 if np.dtype(space.dtype) == np.uint8 else 1.0
        if self.kind == "nature":
            convs = [nn.Conv2d(c, 32, 8, stride=4), nn.ReLU(), nn.Conv2d(32, 64, 4, stride=2), nn.ReLU(),
                     nn.Conv2d(64, 64, 3, stride=1), nn.ReLU()]
            self.features = 512
        else:
            convs = [nn.Conv2d(c, 16, 3, stride=1), nn.ReLU(), nn.Conv2d(16, 32, 3, stride=2), nn.ReLU()]
            self.features = 256
        self.convs = nn.Sequential(*convs, nn.Flatten())
        with torch.no_grad():
            flat = self.convs(torch.zeros(1, c, h, w)).shape[1]
        self.linear = nn.Linear(flat, self.features)
        # channels-last (NHWC) convolutions: oneDNN's faster layout on CPUs (a Nature-DQN update,
        # batch 32, one thread: 36 vs 49 ms here); the parameters' names, shapes and values are
        # unchanged, only their strides, so snapshots and checkpoints are the same
        self.convs.to(memory_format=torch.channels_last)  # type: ignore[call-overload]  # torch's stubs omit memory_format

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        """``obs``: a batch ``[B, *space.shape]`` of any dtype, as the environment emits it."""
        x = obs.float()
        if self.scale != 1.0:
            x = x * self.scale
        if self.layout == "HW":
            x = x.unsqueeze(1)
        elif self.layout == "HWC":
            x = x.permute(0, 3, 1, 2)
        return torch.relu(self.linear(self.convs(x.contiguous(memory_format=torch.channels_last))))


VECTOR_FEATURES = 64
"""Width of the ReLU layer a :class:`MultiInputTorso` gives the non-image leaves of an observation."""


class MultiInputTorso(nn.Module):
    """Dict/Tuple observations with images (an :class:`~janus.envs.observations.EncodedBox`) ->
    ReLU features: each image leaf through its own :class:`CNNTorso`, the other leaves together
    through one linear layer of :data:`VECTOR_FEATURES` (as SB3's ``CombinedExtractor``, which
    flattens them), all concatenated."""

    rest: torch.Tensor

    def __init__(self, space: spaces.Box) -> None:
        super().__init__()
        leaves = space.encoder.leaves  # type: ignore[attr-defined]  # an EncodedBox (has_images)
        image_leaves = [leaf for leaf in leaves if image_layout(leaf.space) is not None]
        self.images = [(leaf.offset, leaf.size, leaf.shape) for leaf in image_leaves]
        cnns = [CNNTorso(leaf.space) for leaf in image_leaves]
        self.cnns = nn.ModuleList(cnns)
        rest = [torch.arange(leaf.offset, leaf.offset + leaf.size) for leaf in leaves if leaf not in image_leaves]
        self.register_buffer("rest", torch.cat(rest) if rest else torch.zeros(0, dtype=torch.long), persistent=False)
        self.vector = nn.Sequential(nn.Linear(len(self.rest), VECTOR_FEATURES), nn.ReLU()) if rest else None
        self.features = sum(c.features for c in cnns) + (VECTOR_FEATURES if rest else 0)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        x = obs.float()
        parts = [cnn(x[:, off:off + size].reshape(-1, *shape)) for (off, size, shape), cnn in zip(self.images, self.cnns, strict=True)]
        if self.vector is not None:
            parts.append(self.vector(x.index_select(1, self.rest)))
        return torch.cat(parts, 1)


def has_images(space: spaces.Space) -> bool:
    """Whether ``space`` is an image, or encodes a Dict/Tuple with an image leaf."""
    encoder = getattr(space, "encoder", None)
    if encoder is not None:
        return any(image_layout(leaf.space) is not None for leaf in encoder.leaves)
    return image_layout(space) is not None


def make_torso(space: spaces.Space) -> CNNTorso | MultiInputTorso | None:
    """The torso of ``space``'s observations: a CNN for images, a multi-input torso for a
    Dict/Tuple with images, None for vectors (which go into the algorithm's MLP)."""
    if image_layout(space) is not None:
        return CNNTorso(space)  # type: ignore[arg-type]  # an image layout: a Box
    if has_images(space):
        return MultiInputTorso(space)  # type: ignore[arg-type]  # an EncodedBox
    return None


ACTIVATIONS: dict[str, type[nn.Module]] = {
    "relu": nn.ReLU, "tanh": nn.Tanh, "elu": nn.ELU, "leaky_relu": nn.LeakyReLU, "gelu": nn.GELU, "silu": nn.SiLU,
}
"""The activations ``algorithm.activation`` names (SB3's ``activation_fn``: ``torch.nn.Tanh`` is ``"tanh"``)."""
_FUNCTIONS = {nn.ReLU: torch.relu, nn.Tanh: torch.tanh, nn.ELU: F.elu, nn.LeakyReLU: F.leaky_relu, nn.GELU: F.gelu,
              nn.SiLU: F.silu}
"""Each activation as a function (default arguments: the modules' defaults)."""
_ACTIVATIONS = {nn.ReLU: torch.relu, nn.Tanh: torch.tanh}


def activation_class(name: str) -> type[nn.Module]:
    """The module class of activation ``name`` (a key of :data:`ACTIVATIONS`)."""
    try:
        return ACTIVATIONS[name]
    except KeyError:
        raise ValueError(f"unknown activation {name!r}; accepted: {', '.join(ACTIVATIONS)}") from None


def activation_function(name: str) -> Callable[[torch.Tensor], torch.Tensor]:
    """Activation ``name`` as a function of a tensor (``torch.tanh`` for ``"tanh"``)."""
    return _FUNCTIONS[activation_class(name)]


def activation_name(value: object) -> object:
    """An activation as ``algorithm.activation`` records it: a name stays (lower-cased), a
    ``torch.nn`` activation class (SB3's ``activation_fn=nn.Tanh``) becomes its name; anything
    else is returned as it is, for the configuration's check to refuse."""
    if isinstance(value, str):
        return value.lower()
    return next((name for name, cls in ACTIVATIONS.items() if value is cls), value)


class MLP(nn.Sequential):
    """An ``nn.Sequential`` of linear layers and activations whose forward calls the functions
    (``F.linear``, ``torch.relu``, ...) instead of each layer's ``__call__``.

    The same maths, parameters and ``state_dict`` as the plain ``nn.Sequential``; what goes is the
    per-layer module call (hook checks, ~5-8 us a layer), a third of a CartPole-sized forward's
    time on one CPU thread. A layer with hooks of its own, any layer of another type, and every
    layer while a global module hook is registered go through their ``__call__`` as usual.
    """

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if _global_module_hooks():
            return super().forward(x)
        for layer in self:
            kind = type(layer)
            if layer._forward_hooks or layer._forward_pre_hooks or layer._backward_hooks or layer._backward_pre_hooks:
                x = layer(x)
            elif kind is nn.Linear:
                x = F.linear(x, layer.weight, layer.bias)  # type: ignore[arg-type]  # an nn.Linear (kind)
            elif kind in _ACTIVATIONS:
                x = _ACTIVATIONS[kind](x)
            elif kind is nn.Flatten:
                x = x.flatten(layer.start_dim, layer.end_dim)  # type: ignore[arg-type]  # an nn.Flatten (kind)
            elif isinstance(layer, MLP):
                x = layer.forward(x)
            else:
                x = layer(x)
        return x


def _global_module_hooks() -> bool:
    """Whether a global module hook (``nn.modules.module.register_module_forward_hook`` and kin) is set."""
    m = nn.modules.module
    return bool(getattr(m, "_global_forward_hooks", None) or getattr(m, "_global_forward_pre_hooks", None)
                or getattr(m, "_global_backward_hooks", None) or getattr(m, "_global_backward_pre_hooks", None))


MAX_NETWORK_PARAMS = 200_000_000
"""Parameters one MLP may have (800 MB of float32 weights, as much again for each copy an algorithm
keeps and its optimiser's state); more is refused before anything is allocated, a run's
config.yaml too (a ``hidden: [100000000]`` of a folder from elsewhere). The environment variable
:data:`MAX_PARAMS_VARIABLE` raises it, deliberately."""
MAX_PARAMS_VARIABLE = "JANUS_MAX_NETWORK_PARAMS"


def max_network_params() -> int:
    """:data:`MAX_NETWORK_PARAMS`, or the positive integer :data:`MAX_PARAMS_VARIABLE` sets."""
    text = os.environ.get(MAX_PARAMS_VARIABLE, "").strip().replace("_", "")
    if not text:
        return MAX_NETWORK_PARAMS
    if not text.isdigit() or int(text) < 1:
        raise ConfigError(f"invalid {MAX_PARAMS_VARIABLE}: got {shown(text, 40)}; accepted: a positive integer "
                          f"(the parameters one network may have)")
    return int(text)


def check_mlp_size(in_features: int, hidden: tuple[int, ...], out_features: int) -> int:
    """The parameters of :func:`mlp`'s network; a :class:`ConfigError` when over :func:`max_network_params`."""
    widths = [int(in_features), *(int(h) for h in hidden), int(out_features)]
    params = sum((a + 1) * b for a, b in itertools.pairwise(widths))
    limit = max_network_params()
    if params > limit:
        raise ConfigError(f"network too large: hidden widths {shown(list(hidden), 120)} (algorithm.hidden or "
                          f"critic_hidden, --net_arch) make {params:,} parameters ({params * 4 / 2**30:,.1f} GiB of "
                          f"float32 weights), over the limit of {limit:,}; set {MAX_PARAMS_VARIABLE}={params} to "
                          f"build it anyway")
    return params


def mlp(in_features: int, hidden: tuple[int, ...], out_features: int, activation: type[nn.Module] = nn.ReLU) -> MLP:
    """Linear layers of widths ``hidden`` with ``activation`` between them, then a linear head (checked
    first by :func:`check_mlp_size`)."""
    check_mlp_size(in_features, hidden, out_features)
    layers: list[nn.Module] = []
    width = in_features
    for h in hidden:
        layers += [nn.Linear(width, h), activation()]
        width = h
    layers.append(nn.Linear(width, out_features))
    return MLP(*layers)


def flat_size(space: spaces.Box) -> int:
    """Number of features of a Box observation once flattened."""
    return int(np.prod(space.shape))
