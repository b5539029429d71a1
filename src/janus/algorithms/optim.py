"""Optimisers for the learners: Adam with torch's fused kernel where this torch has one."""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import torch
from torch.optim import optimizer as torch_optimizer


class LeanAdam(torch.optim.Adam):
    """``torch.optim.Adam(fused=True)`` whose ``step`` calls the fused kernel directly once every
    parameter has its state.

    ``Adam.step`` spends ~70 us of Python per call (regrouping the tensors by device and dtype,
    checks, state look-ups) around a ~60 us kernel for a CartPole-sized network. This step keeps
    the lists of state tensors and makes the same two calls torch does (``_foreach_add_`` of the
    step counts, then ``_fused_adam_``), so the update is the same to the bit (tested). Anything
    else goes through ``Adam.step``: a closure, a parameter without a gradient, sparse or complex
    tensors, mixed devices or dtypes, amsgrad, capturable or differentiable groups, a torch without
    the kernel.

    Step hooks and the profiler's record are kept, and cost nothing when unused: torch wraps every
    optimiser's step in a ``record_function`` and the hook loops, ~8% of a CartPole DQN update
    (mostly ``torch.ops`` dispatch from Python) even with no profiler on. LeanAdam's step goes
    through torch's wrapper only while something watches it (a step hook, its own or global, or
    a running profiler).
    """

    _lean: list[tuple[dict[str, Any], list[torch.Tensor], list[torch.Tensor], list[torch.Tensor], list[torch.Tensor]]] | None = None
    _lean_key: tuple[int, ...] = ()

    def step(self, closure: Callable[[], float] | None = None) -> float | None:  # type: ignore[override]  # Adam.step's own signature; torch types it loosely
        groups = self._lean_groups() if closure is None else None
        if groups is None:
            out = _adam_step(self, closure)
            self._lean = None  # rebuilt (state may have just been created) on the next call
            return out
        grads = [[p.grad for p in params] for _, params, _, _, _ in groups]
        if any(g is None or g.is_sparse for group_grads in grads for g in group_grads):
            return _adam_step(self, None)  # Adam's step skips parameters without gradients
        for (group, params, exp_avgs, exp_avg_sqs, steps), group_grads in zip(groups, grads, strict=False):
            torch._foreach_add_(steps, 1)
            torch._fused_adam_(params, group_grads, exp_avgs, exp_avg_sqs, [], steps, amsgrad=False,
                               lr=group["lr"], beta1=float(group["betas"][0]), beta2=float(group["betas"][1]),
                               weight_decay=group["weight_decay"], eps=group["eps"], maximize=group["maximize"],
                               grad_scale=None, found_inf=None)
        return None

    def _lean_groups(self) -> list | None:
        key = tuple(id(p) for g in self.param_groups for p in g["params"])
        if self._lean is not None and key == self._lean_key:
            return self._lean
        if not hasattr(torch, "_fused_adam_"):
            return None
        lean = []
        for group in self.param_groups:
            params = list(group["params"])
            if not (group.get("fused") and not group.get("amsgrad") and not group.get("capturable")
                    and not group.get("differentiable") and not group.get("decoupled_weight_decay", False)
                    and not isinstance(group["lr"], torch.Tensor)):
                return None
            states = [self.state.get(p) for p in params]
            if not params or any(not s or "exp_avg" not in s for s in states):
                return None  # the first step creates the state through Adam.step
            if len({(p.device, p.dtype) for p in params}) != 1 or any(p.is_complex() for p in params):
                return None
            found = [s for s in states if s]  # all of them (checked above); typed as not None
            lean.append((group, params, [s["exp_avg"] for s in found], [s["exp_avg_sq"] for s in found],
                         [s["step"] for s in found]))
        self._lean, self._lean_key = lean, key
        return lean

    def _patch_step_function(self) -> None:
        super()._patch_step_function()  # torch's wrapper, once per class
        cls = type(self)
        if not getattr(cls.step, "lean_hooked", False):
            cls.step = _skip_wrapper_unless_watched(cls.step)  # type: ignore[method-assign]

    # torch wraps these four in ``torch._disable_dynamo``, whose first call imports torch._dynamo
    # (and sympy): 1.5-4 s of a run's start-up, for a guard that only matters under torch.compile,
    # which never traces janus's learners. The methods themselves are called instead.
    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        _undecorated(torch.optim.Optimizer.load_state_dict)(self, state_dict)
        self._lean = None  # the state tensors are new objects

    def add_param_group(self, param_group: dict[str, Any]) -> None:
        _undecorated(torch.optim.Optimizer.add_param_group)(self, param_group)
        self._lean = None

    def state_dict(self) -> dict[str, Any]:
        return _undecorated(torch.optim.Optimizer.state_dict)(self)

    def zero_grad(self, set_to_none: bool = True) -> None:
        _undecorated(torch.optim.Optimizer.zero_grad)(self, set_to_none)


def _undecorated(method: Callable[..., Any]) -> Callable[..., Any]:
    """``method`` without torch's ``_disable_dynamo`` wrapper (itself where this torch has none)."""
    return getattr(method, "__wrapped__", method)


def _skip_wrapper_unless_watched(hooked: Callable[..., Any]) -> Callable[..., Any]:
    """A step that calls ``hooked`` (torch's ``profile_hook_step`` wrapper) while a hook or a
    profiler watches the optimiser, else the wrapped step itself (and, as torch does after it,
    ``_optimizer_step_code``, the profiler's entry point)."""
    raw = hooked.__wrapped__  # type: ignore[attr-defined]

    @functools.wraps(raw)
    def step(self: torch.optim.Optimizer, *args: Any, **kwargs: Any) -> Any:
        if _watched(self):
            return hooked(self, *args, **kwargs)
        out = raw(self, *args, **kwargs)
        self._optimizer_step_code()
        return out

    step.hooked = True  # type: ignore[attr-defined]  # torch's mark: never wrapped again
    step.lean_hooked = True  # type: ignore[attr-defined]
    return step


def _watched(opt: torch.optim.Optimizer) -> bool:
    """Whether a step hook (the optimiser's or a global one) or a running profiler watches ``opt``'s
    step (True also when this torch keeps its hooks where this does not look)."""
    pre = getattr(torch_optimizer, "_global_optimizer_pre_hooks", None)
    post = getattr(torch_optimizer, "_global_optimizer_post_hooks", None)
    profiling = getattr(torch._C._autograd, "_profiler_enabled", None)
    if pre is None or post is None or profiling is None:
        return True
    return bool(pre or post or opt._optimizer_step_pre_hooks or opt._optimizer_step_post_hooks or profiling())


def _adam_step(opt: torch.optim.Adam, closure: Callable[[], float] | None) -> Any:
    """``Adam.step`` without torch's hook wrapper: the subclass's own step is wrapped already, so
    going through the wrapper again would run the step hooks twice."""
    step = torch.optim.Adam.step
    return getattr(step, "__wrapped__", step)(opt, closure)


def adam(params: Iterable[torch.Tensor], **kwargs: Any) -> torch.optim.Adam:
    """:class:`LeanAdam` (fused: one kernel for all parameters) when supported, else foreach Adam.

    The fused CPU kernel (torch >= 2.4) takes ~18% off a CartPole-sized DQN update, and the lean
    step another ~5%; the maths is Adam's either way, and the optimiser's ``state_dict`` is the same.
    """
    params = list(params)
    try:
        return LeanAdam(params, fused=True, **kwargs)
    except (RuntimeError, TypeError, ValueError):  # older torch, or a device without the kernel
        return torch.optim.Adam(params, foreach=True, **kwargs)


def clip_grad_norm(params: Sequence[torch.Tensor], max_norm: float) -> torch.Tensor:
    """Scale gradients so their global 2-norm is at most ``max_norm``; returns the norm before.

    The same maths as ``torch.nn.utils.clip_grad_norm_`` in five tensor ops: torch's version
    regroups the tensors by device and dtype on every call, which costs a small network's update
    ~15% of its time. Parameters without a gradient are skipped.
    """
    grads = [p.grad for p in params if p.grad is not None]
    if not grads:
        return torch.zeros(())
    total = torch.linalg.vector_norm(torch.stack(torch._foreach_norm(grads)))
    torch._foreach_mul_(grads, torch.clamp(max_norm / (total + 1e-6), max=1.0))
    return total
