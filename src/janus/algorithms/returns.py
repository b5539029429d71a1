"""Return targets for RL workloads: n-step returns, discounted reward-to-go and GAE.

Also R2D2's (Kapturowski et al., 2019): the value rescaling :func:`value_rescale` and its inverse, and
n-step targets inside a stored sequence (:func:`sequence_nstep_targets`).

Pure torch functions on time-major ``[T, B]`` tensors (``B`` parallel environments). They loop over
time only, never over environments, and stay on the inputs' device.

Conventions (Gymnasium style):

* ``terminated[t]`` / ``truncated[t]`` describe the transition at ``t``: the episode ended after
  action ``a_t``. Terminated means the true return ends (no bootstrap); truncated means the episode
  was cut (time limit), so the target bootstraps from the value of ``next_obs[t]``. When both are
  set, termination wins.
* ``next_obs[t]`` is the observation after step ``t``; at a done step it is the *final* observation
  (Gymnasium's ``final_obs`` under autoreset, or supplied by the caller), not the reset one.
* ``value[t] = V(obs[t])`` and ``next_value[t] = V(next_obs[t])``.

Flags may be bool or numeric tensors (non-zero is true). Float results use ``reward.dtype``. Values
at terminated steps are never read (``torch.where``, not a product), so they may be NaN.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import torch

from janus.errors import BufferInputError, BufferTypeError, invalid


class NStepResult(NamedTuple):
    """Per ``(t, b)`` n-step target pieces: ``target = reward + discount * Q(next_obs[next_index, b])``."""

    reward: torch.Tensor  #: discounted sum of the ``steps`` rewards, ``reward.dtype``
    discount: torch.Tensor  #: ``gamma**steps``, or 0.0 when the episode terminated in the window
    next_index: torch.Tensor  #: int64 time index ``t + steps - 1`` whose ``next_obs`` is bootstrapped
    steps: torch.Tensor  #: int64 number of rewards summed, in ``1..n``
    complete: torch.Tensor  #: bool; False when the window was cut by the end of the data


def _check_reward(reward: object) -> torch.Tensor:
    if not isinstance(reward, torch.Tensor):
        raise invalid("reward", type(reward).__name__, "a torch.Tensor", BufferTypeError)
    if reward.dim() != 2:
        raise invalid("reward.shape", tuple(reward.shape), "[T, B] (2 dimensions)", BufferInputError)
    if not reward.is_floating_point():
        raise invalid("reward.dtype", reward.dtype, "a floating point dtype", BufferTypeError)
    return reward


def _check_like(name: str, x: object, shape: tuple[int, ...], reward: torch.Tensor) -> torch.Tensor:
    """Validate ``x`` against ``shape`` and the device of ``reward``."""
    if not isinstance(x, torch.Tensor):
        raise invalid(name, type(x).__name__, "a torch.Tensor", BufferTypeError)
    if tuple(x.shape) != shape:
        raise invalid(f"{name}.shape", tuple(x.shape), f"{shape}, matching reward", BufferInputError)
    if x.device != reward.device:
        raise invalid(f"{name}.device", str(x.device), f"{reward.device}, as reward", BufferInputError)
    return x


def _flag(name: str, x: object, reward: torch.Tensor) -> torch.Tensor:
    x = _check_like(name, x, tuple(reward.shape), reward)
    return x if x.dtype == torch.bool else x != 0


def _values(name: str, x: object, shape: tuple[int, ...], reward: torch.Tensor) -> torch.Tensor:
    return _check_like(name, x, shape, reward).to(reward.dtype)


def _unit(name: str, x: float) -> float:
    if isinstance(x, bool) or not isinstance(x, (int, float)) or not 0.0 <= x <= 1.0:
        raise invalid(name, x, "a float in [0, 1]")
    return float(x)


def nstep_returns(
    reward: torch.Tensor, terminated: torch.Tensor, truncated: torch.Tensor, gamma: float, n: int
) -> NStepResult:
    """n-step discounted returns for off-policy (e.g. DQN) targets.

    For each ``(t, b)`` sum ``R = sum_{k<m} gamma**k * reward[t+k]`` over ``m <= n`` steps, stopping
    (inclusively) at the first terminated or truncated step, or at the end of the data
    (``t + m == T``). ``discount`` is 0 if the window ended by termination, else ``gamma**m``:
    truncation and the end of the data both bootstrap from ``next_obs[t + m - 1]``.

    ``complete`` is True when the window holds ``n`` steps or ended by termination/truncation;
    windows cut by the end of the rollout are still valid targets (shorter horizon), but callers may
    hold them back until the next rollout arrives and recompute with the longer data.
    """
    reward = _check_reward(reward)
    term, trunc = _flag("terminated", terminated, reward), _flag("truncated", truncated, reward)
    gamma = _unit("gamma", gamma)
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise invalid("n", n, "an int >= 1")
    T, B = reward.shape
    dev, dtype = reward.device, reward.dtype
    powers = torch.tensor([gamma**k for k in range(n + 1)], dtype=dtype, device=dev)

    def shift(x: torch.Tensor, k: int) -> torch.Tensor:  # out[t] = x[t + k], padded past the end
        return torch.cat([x[k:], x.new_zeros((min(k, T), B))]) if k else x

    total = torch.zeros_like(reward)
    steps = torch.zeros((T, B), dtype=torch.long, device=dev)
    running = torch.ones((T, B), dtype=torch.bool, device=dev)  # window still open before step k
    hit_term = torch.zeros_like(running)
    ended = torch.zeros_like(running)
    time = torch.arange(T, device=dev).unsqueeze(1)
    for k in range(min(n, T)):
        term_k, trunc_k = shift(term, k), shift(trunc, k)
        active = running & (time + k < T)
        total = total + torch.where(active, shift(reward, k) * powers[k], 0.0)
        steps += active.long()
        done_k = active & (term_k | trunc_k)
        hit_term |= active & term_k
        ended |= done_k
        running = active & ~done_k
    discount = torch.where(hit_term, torch.zeros_like(total), powers[steps])
    complete = ended | (steps == n)
    return NStepResult(total, discount, time + steps - 1, steps, complete)


def discounted_returns(
    reward: torch.Tensor,
    terminated: torch.Tensor,
    truncated: torch.Tensor,
    gamma: float,
    bootstrap_value: torch.Tensor | None = None,
    next_value: torch.Tensor | None = None,
) -> torch.Tensor:
    """Discounted reward-to-go ``G[t] = reward[t] + gamma * G_next``, shape ``[T, B]``.

    ``G_next`` is 0 after a terminated step; ``next_value[t]`` (or 0 if not given) after a truncated
    step; ``bootstrap_value[b]`` (shape ``[B]``, or 0 if not given) after the last step when it is
    not done; ``G[t+1]`` otherwise.
    """
    reward = _check_reward(reward)
    term, trunc = _flag("terminated", terminated, reward), _flag("truncated", truncated, reward)
    gamma = _unit("gamma", gamma)
    T, B = reward.shape
    zero = torch.zeros_like(reward)
    nv = zero if next_value is None else _values("next_value", next_value, (T, B), reward)
    g = reward.new_zeros(B)
    if bootstrap_value is not None:
        g = _values("bootstrap_value", bootstrap_value, (B,), reward)
    out = torch.empty_like(reward)
    for t in range(T - 1, -1, -1):
        g_next = torch.where(term[t], zero[t], torch.where(trunc[t], nv[t], g))
        g = reward[t] + gamma * g_next
        out[t] = g
    return out


def gae(
    reward: torch.Tensor,
    value: torch.Tensor,
    next_value: torch.Tensor,
    terminated: torch.Tensor,
    truncated: torch.Tensor,
    gamma: float,
    lam: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Generalized advantage estimation (Schulman et al., 2016). Returns ``(advantages, returns)``.

    ``delta[t] = reward[t] + gamma * next_value[t] * (1 - terminated[t]) - value[t]`` and
    ``A[t] = delta[t] + gamma * lam * (1 - terminated[t]) * (1 - truncated[t]) * A[t+1]``, with
    ``A[T] = 0`` (the end of the data bootstraps through ``next_value[T-1]`` in ``delta``).
    ``returns = advantages + value`` (the value-function target).
    """
    reward = _check_reward(reward)
    shape = tuple(reward.shape)
    value = _values("value", value, shape, reward)
    next_value = _values("next_value", next_value, shape, reward)
    term, trunc = _flag("terminated", terminated, reward), _flag("truncated", truncated, reward)
    gamma, lam = _unit("gamma", gamma), _unit("lam", lam)
    zero = torch.zeros_like(reward)
    delta = reward + gamma * torch.where(term, zero, next_value) - value
    cont = ~(term | trunc)
    if delta.device.type == "cpu" and not delta.requires_grad:
        adv = torch.from_numpy(_gae_scan(delta.numpy(), cont.numpy(), gamma * lam))
        return adv, adv + value
    adv = torch.empty_like(reward)
    a = reward.new_zeros(shape[1])
    for t in range(shape[0] - 1, -1, -1):
        a = delta[t] + gamma * lam * torch.where(cont[t], a, zero[t])
        adv[t] = a
    return adv, adv + value


def _gae_scan(delta: np.ndarray, cont: np.ndarray, decay: float) -> np.ndarray:
    """``A[t] = delta[t] + decay * cont[t] * A[t+1]`` backwards in time, on numpy arrays: the same
    float32 arithmetic as the torch loop, at a fraction of its per-op cost for small batches."""
    factor = cont.astype(delta.dtype) * delta.dtype.type(decay)
    adv = np.empty_like(delta)
    a = np.zeros(delta.shape[1:], dtype=delta.dtype)
    for t in range(delta.shape[0] - 1, -1, -1):
        a = delta[t] + factor[t] * a
        adv[t] = a
    return adv


RESCALE_EPS = 1e-3
"""R2D2's ``eps`` of the value rescaling ``h`` (Pohlen et al., 2018)."""


def value_rescale(x: torch.Tensor, eps: float = RESCALE_EPS) -> torch.Tensor:
    """``h(x) = sign(x) (sqrt(|x| + 1) - 1) + eps x``: squashes returns so that one network fits
    values of any scale (Pohlen et al., 2018; R2D2)."""
    return torch.sign(x) * (torch.sqrt(x.abs() + 1.0) - 1.0) + eps * x


def inverse_value_rescale(x: torch.Tensor, eps: float = RESCALE_EPS) -> torch.Tensor:
    """``h^-1(x) = sign(x) (((sqrt(1 + 4 eps (|x| + 1 + eps)) - 1) / (2 eps))^2 - 1)``, exactly
    :func:`value_rescale`'s inverse (``eps > 0``)."""
    root = (torch.sqrt(1.0 + 4.0 * eps * (x.abs() + 1.0 + eps)) - 1.0) / (2.0 * eps)
    return torch.sign(x) * (root.square() - 1.0)


def sequence_nstep_targets(
    reward: torch.Tensor, terminal: torch.Tensor, bootstrap: torch.Tensor, gamma: float, n: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """n-step targets inside sequences, time-major ``[T, B]``: ``(target, valid)``.

    ``target[t] = sum_{k<m} gamma**k reward[t+k] + gamma**m bootstrap[t+m]``, ``m = n`` or fewer where
    a ``terminal`` step ends the window (then no bootstrap: the episode ended, or the actor already
    added a truncated step's bootstrap to its reward). ``bootstrap[t]`` is the value of the state at
    step ``t`` (R2D2: ``Q_target(s_t, argmax_a Q(s_t, a))``). ``valid[t]``: the target lies inside the
    sequence (the window ended by a terminal, or ``t + n < T``); others have no target and are masked."""
    res = nstep_returns(reward, terminal, torch.zeros_like(reward, dtype=torch.bool), gamma, n)
    T = reward.shape[0]
    ended = res.discount == 0  # a terminal in the window (gamma**m > 0 for gamma > 0)
    after = (res.next_index + 1).clamp(max=T - 1)  # the bootstrap step, clamped where unused
    bootstrap = _values("bootstrap", bootstrap, tuple(reward.shape), reward)
    value = bootstrap.gather(0, after)
    target = res.reward + torch.where(ended, torch.zeros_like(value), res.discount * value)
    valid = ended | (res.complete & (res.next_index + 1 < T))
    return target, valid
