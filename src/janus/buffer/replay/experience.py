"""The experience buffer: ring storage + a sampler + keys, thread-safe, checkpointable.

Each written item gets a *key*: its insertion number (0, 1, 2, ...). The slot it occupies is
``key % capacity``. ``extend`` returns the keys written and ``sample`` returns them as ``"index"``;
``update_priority`` takes keys, so an update for an item that has since been overwritten is
recognised (its key is older than ``capacity`` writes) and dropped instead of hitting the new
occupant of the slot.

On CPU placements every operation is one call into a compiled kernel (:mod:`janus.buffer.kernels.native`);
the ``cuda`` placement runs batched torch ops (:mod:`janus.buffer.replay.torch_path`). Checkpoint
states are :mod:`janus.buffer.replay.checkpoint`'s; input checks are named for what they check
(:mod:`~janus.buffer.replay.field_checks`, :mod:`~janus.buffer.replay.field_casts`,
:mod:`~janus.buffer.replay.priority_checks`).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch

from janus.buffer import arguments
from janus.buffer.kernels.native import NativePrioritizedSampler, NativeSampler, compiled, kernels
from janus.buffer.replay import checkpoint, field_casts, field_checks, priority_checks, torch_path
from janus.buffer.replay.samplers import Sampler, epoch_permutation, make_generator
from janus.buffer.storage import state_file
from janus.buffer.storage.memory import is_out_of_memory
from janus.buffer.storage.ring import FieldSpec, RingStorage, placement_device
from janus.errors import (
    AllocationError,
    BufferEmptyError,
    BufferInputError,
    CheckpointError,
    PlacementUnavailableError,
    invalid,
    one_of,
)

SAMPLERS = ("uniform", "prioritized")
OUTPUTS = ("torch", "numpy")
_from_numpy = torch.from_numpy
_NDARRAY, _INT64, _FLOAT32, _FLOAT64 = np.ndarray, np.dtype(np.int64), np.dtype(np.float32), np.dtype(np.float64)


class ExperienceBuffer:
    """Preallocated circular storage with uniform or prioritized sampling.

    Example::

        buf = ExperienceBuffer(100_000, sampler="prioritized", seed=0, fields={
            "obs": ((4,), "float32"), "action": ((), "int64"), "reward": ((), "float32"),
            "next_obs": ((4,), "float32"), "done": ((), "bool"),
        })
        keys = buf.extend({"obs": obs, "action": 1, "reward": 1.0, "next_obs": obs2, "done": False})
        batch = buf.sample(32)                 # fields + "index" (keys) + "weight"
        buf.update_priority(batch["index"], td_errors)

    Args:
        capacity: items held; the oldest are overwritten first.
        placement: ``cpu_pageable``, ``cpu_pinned`` (needs CUDA), ``cuda``, or ``auto``
            (``cuda`` where CUDA is available, else ``cpu_pageable``, as in ``JanusConfig``).
        sampler: ``uniform`` or ``prioritized``.
        seed: seeds the sampler's random state (same seed, same sample sequence).
        alpha, beta, eps: prioritized replay's exponents and priority offset (defaults 0.6, 0.4,
            1e-6). Only ``sampler="prioritized"`` takes them: a uniform buffer given one is an
            error, not a silently uniform replay.
        fields: optional declared fields, ``{name: (shape, dtype)}`` (shape an int or tuple, ``()``
            for scalars; dtype a torch/numpy dtype or its name). Declared fields are allocated at
            once, and ``extend`` casts what it is given to them: numpy arrays, tensors, Python
            numbers and lists, with or without the batch dimension, of any dtype that casts
            within its kind (float64 rewards into float32, bool into float; never float into
            int). Undeclared, the first ``extend`` fixes the fields from its input and later
            ones must match it exactly (tensors or arrays, same dtype, batch dimension). Either
            way ``"index"`` and ``"weight"`` are not field names: a batch holds its keys and
            importance weights under them.
        output: ``torch`` (default) or ``numpy``: what :meth:`sample`, :meth:`gather`,
            :meth:`epoch` and :meth:`extend` return. ``numpy`` returns numpy arrays, as cpprb
            does, for numpy and JAX code; it saves the ~0.9 us a torch tensor costs per field,
            most of a small sample's time. It needs a CPU placement (``auto`` then means
            ``cpu_pageable``) and fields with numpy dtypes (not bfloat16).

    Methods: :meth:`extend`, :meth:`sample`, :meth:`update_priority`, :meth:`gather`,
    :meth:`epoch`, :meth:`state_dict` / :meth:`load_state_dict`, :meth:`save` / :meth:`load`;
    ``len(buf)`` items are stored, :attr:`total_written` were ever written.
    """

    def __init__(
        self,
        capacity: int,
        placement: str = "cpu_pageable",
        sampler: str = "uniform",
        seed: int | None = None,
        *,
        alpha: float | None = None,
        beta: float | None = None,
        eps: float | None = None,
        fields: Mapping[str, Any] | None = None,
        output: str = "torch",
    ) -> None:
        arguments.check_capacity(capacity)
        arguments.check_seed(seed)
        if sampler not in SAMPLERS:
            raise invalid("sampler", sampler, one_of(SAMPLERS))
        if output not in OUTPUTS:
            raise invalid("output", output, one_of(OUTPUTS))
        if isinstance(placement, str) and placement == "auto":
            placement = "cuda" if torch.cuda.is_available() and output == "torch" else "cpu_pageable"
        specs = None if fields is None else field_checks.parse_fields(fields)
        self._declared = specs is not None  # declared fields cast their inputs
        self._storage = RingStorage(int(capacity), placement)
        self._native = self._storage.device.type == "cpu"  # compiled kernels, see janus.buffer.kernels.native
        self._numpy_out = output == "numpy"
        if self._numpy_out and not self._native:
            raise invalid("output", output, f"'torch' with placement={self.placement!r} (numpy arrays live in host memory)")
        self._sampler_name = sampler
        self._sampler_kwargs = priority_checks.prioritized_settings(sampler, alpha, beta, eps)
        self.seed = None if seed is None else int(seed)
        try:
            # A NativeSampler (host placements, self._native) or a torch Sampler: the code picks by
            # self._native, which mypy cannot follow, and an isinstance on the hot paths costs.
            self._sampler: Any = self._make_sampler(seed)
        except (RuntimeError, MemoryError) as exc:  # the prioritized trees may not fit in memory
            if not is_out_of_memory(exc):
                raise
            raise _allocation_error(f"priority trees for capacity={capacity}", exc) from None
        self._epoch_generator = make_generator(torch.device("cpu"), None if seed is None else seed + 1)
        self._lock = threading.RLock()
        self._written = 0  # total items ever written = next key
        self._sample_call: tuple[Any, Any, Any] | None = None  # (sampler, packed storage, compiled sample)
        if specs:
            self._allocate(self._storage, specs)

    @property
    def output(self) -> str:
        """What results are: ``torch`` tensors or ``numpy`` arrays."""
        return "numpy" if self._numpy_out else "torch"

    def _make_sampler(self, seed: int | None) -> Sampler | NativeSampler:
        cap, dev = self._storage.capacity, self._storage.device
        if self._native:
            if self._sampler_name == "prioritized":  # _sampler_kwargs: checked in __init__
                return NativePrioritizedSampler(cap, seed, **self._sampler_kwargs)
            return NativeSampler(cap, seed, False)
        return torch_path.make_sampler(self._sampler_name, cap, dev, seed, self._sampler_kwargs)

    # ---- properties -----------------------------------------------------------------------------
    @property
    def capacity(self) -> int:
        return self._storage.capacity

    @property
    def placement(self) -> str:
        return self._storage.placement

    @property
    def device(self) -> torch.device:
        return self._storage.device

    @property
    def sampler(self) -> Sampler | NativeSampler:
        """The sampler's state (random state; priority trees if prioritized)."""
        return self._sampler

    @property
    def fields(self) -> dict[str, tuple[tuple[int, ...], torch.dtype]]:
        """Each field's per-item shape and dtype (empty before the first extend)."""
        return {k: (s.shape, s.dtype) for k, s in self._storage.specs.items()}

    @property
    def total_written(self) -> int:
        """Items written since creation (the next key)."""
        return self._written

    def __len__(self) -> int:
        return min(self._written, self.capacity)

    def __repr__(self) -> str:
        return (
            f"ExperienceBuffer(capacity={self.capacity}, placement={self.placement!r}, "
            f"sampler={self._sampler_name!r}, output={self.output!r}, size={len(self)})"
        )

    # ---- writing --------------------------------------------------------------------------------
    def extend(self, data: Mapping[str, Any]) -> torch.Tensor | np.ndarray:
        """Append items (a mapping field -> values); return their keys (int64 tensor, or array
        with ``output="numpy"``).

        With declared fields (``fields=``), values are tensors, numpy arrays, numbers or lists,
        with a leading batch dimension or one item without it, cast to each field's dtype.
        Undeclared, values are tensors or arrays with a leading batch dimension; the first call
        fixes each field's shape and dtype and later calls must match them. Invalid input
        raises, naming the field, before anything is written.
        """
        with self._lock:
            if not self._storage.allocated:  # undeclared fields: the first batch fixes them
                _, specs = field_checks.check_batch(data, {}, self.capacity, self.device)
                self._allocate(self._storage, specs)
            if not self._native:
                written_keys = torch_path.extend(self._storage, self._sampler, self._declared, self._written, data)
                self._written += written_keys.shape[0]
                return written_keys
            st, s, written = self._storage, self._sampler, self._written
            views, n = field_casts.coerce_batch(data, st.specs, st.capacity, not self._declared, True)
            kernels().extend(st.packed, st.field_bytes, views, written % st.capacity, n, s.trees, s.params)
            self._written = written + n
            keys = np.arange(written, written + n, dtype=np.int64)
            return keys if self._numpy_out else _from_numpy(keys)  # ~0.7 us less than torch.arange

    def _allocate(self, storage: RingStorage, specs: Mapping[str, FieldSpec]) -> None:
        name = self._torch_only_field(specs)
        if name is not None:
            what = f"fields[{name!r}] dtype" if self._declared else f"field {name!r} dtype (from the first extend)"
            raise invalid(what, specs[name].dtype,
                          "a dtype numpy has, with output='numpy' (or output='torch')", BufferInputError)
        try:
            storage.allocate(specs)
        except RuntimeError as exc:  # undo a partial allocation
            storage.__init__(self.capacity, self.placement)  # type: ignore[misc]  # reset in place: a RingStorage, not a subclass
            if not is_out_of_memory(exc):
                raise
            raise _allocation_error(f"storage for capacity={self.capacity} items of {dict(specs)}", exc) from None

    def _torch_only_field(self, specs: Mapping[str, FieldSpec]) -> str | None:
        """A field that ``output="numpy"`` cannot return (no numpy dtype: bfloat16 ...), or None."""
        if self._numpy_out:
            for name, spec in specs.items():
                if spec.numpy_dtype is None:
                    return name
        return None

    # ---- reading --------------------------------------------------------------------------------
    def sample(self, batch_size: int, **sampler_kwargs: Any) -> dict[str, Any]:
        """Draw ``batch_size`` items with replacement.

        Args:
            batch_size: items drawn.
            beta: keyword, prioritized sampler only (``sample(32, beta=0.7)``): the
                importance-sampling exponent of this draw (``None``: the buffer's ``beta``);
                weights are ``(min priority / priority) ** beta``, at most 1. The uniform sampler
                takes no keyword arguments.

        Returns field -> tensor (numpy array with ``output="numpy"``), plus ``"index"`` (the
        items' keys, for :meth:`update_priority`) and, if prioritized, ``"weight"`` (float32
        importance weights). The results are never views of the storage and share memory with
        no other live result. Prioritized draws are stratified (draw ``i`` in the ``i``-th of
        ``batch_size`` equal parts of the total priority), so they come in slot order: to split one
        sample into minibatches, take every ``k``-th draw rather than runs of neighbours.
        """
        if type(batch_size) is not int or not 0 < batch_size <= arguments.MAX_ITEMS:
            arguments.check_batch_size(batch_size)
            batch_size = int(batch_size)
        if sampler_kwargs:
            priority_checks.check_sampler_kwargs(self._sampler_name, sampler_kwargs)
        with self._lock:
            written = self._written
            if written == 0:
                raise BufferEmptyError("cannot sample from an empty ExperienceBuffer: call extend() first")
            try:
                if self._native:
                    return self._sample_native(batch_size, written, sampler_kwargs.get("beta"))
                slots, weights = self._sampler.sample(batch_size, min(written, self.capacity), **sampler_kwargs)
                out = self._storage.gather(slots)
            except (RuntimeError, MemoryError) as exc:
                if not is_out_of_memory(exc):
                    raise
                raise _allocation_error(f"a batch of batch_size={batch_size} items", exc) from None
            out["index"] = torch_path.keys_of(slots, written, self.capacity)
        if weights is not None:
            out["weight"] = weights
        return out

    def _sample_native(self, n: int, written: int, beta: float | None) -> dict[str, Any]:
        # The hot path of small batches: every line here costs ~0.05-1 us of a 4-7 us call.
        s, st = self._sampler, self._storage
        layout, flat = st.new_output(n)
        args: tuple[Any, ...]
        if s.prioritized:
            args = (s.rng, s.trees, s.beta if beta is None else float(beta), n, written, st.packed, st.field_bytes,
                    flat, layout.offsets)
        else:
            args = (s.rng, written if written < s.capacity else s.capacity, n, written, st.packed, st.field_bytes,
                    flat, layout.offsets)
        # The kernel's compiled code, found once for this sampler and storage: every argument
        # is the buffer's own, of types fixed when they were made (native.compiled).
        call = self._sample_call
        if call is None or call[0] is not s or call[1] is not st.packed:
            kernel = kernels().sample_prioritized if s.prioritized else kernels().sample_uniform
            call = self._sample_call = (s, st.packed, compiled(kernel, *args))
        call[2](*args)
        # The batch: the fields, then "weight" (prioritized) and "index"; tensors or numpy arrays.
        return st.unpack(flat, layout, self._numpy_out, layout.weighted if s.prioritized else layout.indexed)

    def gather(self, slots: Any) -> dict[str, Any]:
        """Copy the items at ``slots`` (not keys; a tensor, array or list) out of storage, plus
        their keys as ``"index"``. An empty buffer raises :class:`BufferEmptyError`."""
        with self._lock:
            if self._written == 0:
                raise BufferEmptyError("cannot gather from an empty ExperienceBuffer: call extend() first")
            idx = field_checks.slot_array(slots, len(self))
            if self._native:
                st, n = self._storage, idx.shape[0]
                layout, flat = st.new_output(n)
                kernels().gather(idx, self._written, st.packed, st.field_bytes, flat, layout.offsets)
                return st.unpack(flat, layout, self._numpy_out, layout.indexed)
            host = torch.from_numpy(idx)
            out = self._storage.gather(host.to(self.device))
            out["index"] = torch_path.keys_of(host, self._written, self.capacity)
            return out

    def epoch(self, batch_size: int, shuffle: bool = True) -> Iterator[dict[str, Any]]:
        """Iterate over every stored item exactly once, in minibatches of ``batch_size``:
        shuffled, or (``shuffle=False``) from the oldest item to the newest.

        Bad arguments and an empty buffer raise here, not at the first ``next()``.
        """
        arguments.check_batch_size(batch_size)
        if len(self) == 0:
            raise BufferEmptyError("cannot iterate an empty ExperienceBuffer: call extend() first")
        return self._epoch(int(batch_size), shuffle)

    def _epoch(self, batch_size: int, shuffle: bool) -> Iterator[dict[str, Any]]:
        size = len(self)
        if shuffle:
            order = epoch_permutation(size, size, self._epoch_generator, torch.device("cpu"))
        else:  # oldest first: after wrap-around the oldest item is at the ring's head
            head = self._written % self.capacity if self._written > self.capacity else 0
            order = torch.arange(head, head + size).remainder_(self.capacity)
        for start in range(0, size, batch_size):
            slots = order[start : start + batch_size]
            yield self.gather(slots)

    # ---- priorities -----------------------------------------------------------------------------
    def update_priority(self, index: Any, priority: Any) -> int:
        """Set priorities of the items with keys ``index``; returns how many (key, priority) pairs
        were applied.

        ``index`` and ``priority`` are 1-D, or a column ``(n, 1)`` or row ``(1, n)`` of n values
        (a network's TD errors). Keys of items overwritten since they were sampled are dropped
        (and not counted). With duplicate keys the last occurrence wins; each occurrence counts.
        A buffer with the uniform sampler has no priorities: it raises :class:`BufferInputError`.
        """
        if self._sampler_name != "prioritized":
            priority_checks.refuse_priorities(self._sampler_name)
        with self._lock:
            s = self._sampler
            if self._native and s.prioritized:
                # A numpy batch's own "index" (1-D int64) and float32 or float64 priorities go to
                # the kernel as they are; it checks lengths and values (~0.3 us less than checking
                # here). Strided or read-only arrays get a compiled version of their own (once);
                # other dtypes, byte orders and shapes are converted below.
                if (type(index) is _NDARRAY and type(priority) is _NDARRAY and index.ndim == 1 and priority.ndim == 1
                        and index.dtype is _INT64 and ((dt := priority.dtype) is _FLOAT64 or dt is _FLOAT32)):
                    applied = kernels().update_priority(s.trees, s.params, index, priority, self._written, s.capacity)
                elif (at := priority_checks.priority_addresses(index, priority)) is not None:  # the usual tensors, read in place
                    applied = kernels().update_priority_at(s.trees, s.params, *at, self._written, s.capacity)
                else:
                    keys_np, prio_np = priority_checks.priority_arrays(index, priority)
                    applied = kernels().update_priority(s.trees, s.params, keys_np, prio_np, self._written, s.capacity)
                if applied < 0:  # nothing was written: explain what is wrong
                    keys_np, prio_np = priority_checks.priority_arrays(index, priority)
                    priority_checks.check_priority_update(index, priority, self._written)
                    priority_checks.check_priority_scale(float(prio_np.max()), s.alpha, s.eps, s.capacity)
                    raise invalid("priority", float(prio_np[-1 - applied]), f"a finite number in [0, {s.limit:g}]", BufferInputError)
                return applied
            return torch_path.update_priority(s, index, priority, self._written, self.capacity, self.device)

    # ---- checkpoints ----------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """Everything that restores this buffer: data, cursor, size, sampler state, RNG state."""
        with self._lock:
            return checkpoint.state_of(self)

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`state_dict` output into this buffer (same capacity and sampler).

        The state is restored into new storage, sampler and generator first: a malformed state
        raises :class:`CheckpointError` and leaves this buffer as it was.
        """
        with self._lock:
            checkpoint.restore(self, state)

    def save(self, path: str | Path) -> None:
        """Write a checkpoint atomically (temporary file, then rename)."""
        state_file.save_atomic(self.state_dict(), path)

    @classmethod
    def load(cls, path: str | Path, placement: str | None = None, output: str | None = None) -> ExperienceBuffer:
        """Load a checkpoint written by :meth:`save` (no pickled code is executed).

        ``placement`` and ``output`` default to the saved buffer's (checkpoints from before
        ``output`` existed: ``torch``)."""
        state = state_file.load_state(path)
        if placement is not None:
            placement_device(placement)  # a bad argument is the caller's error, not the file's
        if output is not None and output not in OUTPUTS:
            raise invalid("output", output, one_of(OUTPUTS))
        try:
            buf = cls(state["capacity"], placement or state["placement"], state["sampler"], state["seed"],
                      **state["sampler_kwargs"], output=output or state.get("output", "torch"))
        except PlacementUnavailableError:
            raise
        except (LookupError, TypeError, ValueError) as exc:
            raise CheckpointError(
                f"{str(path)!r} holds a malformed janus checkpoint: {type(exc).__name__}: {exc}"
            ) from None
        buf.load_state_dict(state)
        return buf


_WARM = False


def warm_up() -> None:
    """Load the kernels into this process now rather than in a buffer's first calls: Numba, LLVM
    and compiled code, ~0.4 s from the on-disk cache (seconds when it compiles). Once per process.

    For callers that time what follows: the runtime builds its buffer before its clock starts, and
    calls this there, so that no run (in ``compare``, the first) pays the load inside its timings.
    What is left for a buffer's own field count and sampler is ~5-10 ms.
    """
    global _WARM
    if _WARM:
        return
    _WARM = True
    scratch = ExperienceBuffer(2, "cpu_pageable", "prioritized", seed=0, fields={"x": ((), "float32")})
    scratch.extend({"x": np.zeros(1, np.float32)})
    index = scratch.sample(1)["index"]
    scratch.update_priority(index, torch.ones(1))  # tensors, read by address
    scratch.update_priority(index.numpy(), np.ones(1))  # numpy arrays


def _allocation_error(what: str, exc: BaseException) -> AllocationError:
    first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return AllocationError(f"cannot allocate {what}: {first}")
