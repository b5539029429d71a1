"""Replay of stacked frame observations that stores every frame once: :class:`FrameStackReplay`.

An observation of ``k`` stacked frames (Atari: ``(4, 84, 84)`` uint8) shares ``k - 1`` frames with
the previous observation of its environment, and ``next_obs`` shares frames with ``obs``. Stored
whole, a transition costs ``2 k`` frames; here it costs about one. Frames live in a ring of their
own, each linked to the frame before it in its stack; a transition row holds the newest frame of
its ``obs`` and of its ``next_obs`` stack, and sampling rebuilds both stacks by following ``k - 1``
links. Every reuse of a stored frame is verified byte for byte when a row is written, and a row
whose frames the frame ring has overwritten is evicted before it can be sampled, so a sample is
exactly what a store of whole stacks returns (``docs/design.md``, "Frame-stack replay").

The interface is :class:`~janus.buffer.replay.experience.ExperienceBuffer`'s (``extend``, ``sample``,
``update_priority``, ``gather``, ``state_dict``/``load_state_dict``, ``save``/``load``, keys), for
CPU placements; :class:`~janus.buffer.pipeline.JanusBuffer` uses it with ``frame_stack=True``.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch

from janus.buffer import arguments
from janus.buffer.frames import checkpoint, state as frame_state
from janus.buffer.kernels.native import NativePrioritizedSampler, NativeSampler, kernels
from janus.buffer.replay import field_casts, field_checks, priority_checks
from janus.buffer.storage import state_file
from janus.buffer.storage.memory import HUGE_PAGE_MIN_BYTES, is_out_of_memory
from janus.buffer.storage.ring import FieldSpec, OutLayout, RingStorage, placement_device
from janus.errors import AllocationError, BufferEmptyError, BufferInputError, BufferTypeError, CheckpointError, invalid, one_of

SAMPLERS = ("uniform", "prioritized")
OBS, NEXT, STREAM = "obs", "next_obs", "stream"
LINKS = "_frames"  # internal row field: the newest frame of obs and of next_obs (int64 x 2)
FORMAT = "janus.frame_stack_replay"

_FK: Any = None


def frame_kernels() -> Any:
    """The compiled kernels (:mod:`janus.buffer.kernels.frames`), imported on first use."""
    global _FK
    if _FK is None:
        from janus.buffer.kernels import frames as _frame_kernels

        _FK = _frame_kernels
    return _FK


def default_frame_capacity(capacity: int) -> int:
    """Frames held by default: one per transition plus 1/16 (at least 4096) of headroom for the
    extra frames episodes start and end with and for frames still shared with newer transitions."""
    return capacity + max(capacity // 16, 4096)


class FrameStackReplay:
    """Replay storage for transitions whose ``obs``/``next_obs`` are stacks of frames.

    Example::

        replay = FrameStackReplay(1_000_000, sampler="prioritized", seed=0)
        replay.extend({"obs": obs, "action": a, "reward": r, "next_obs": next_obs,
                       "discount": d, "stream": env_ids})    # obs, next_obs: (n, 4, 84, 84) uint8
        batch = replay.sample(32)    # obs, next_obs (32, 4, 84, 84) uint8 + the other fields,
        replay.update_priority(batch["index"], td)   # "index" (keys) and "weight"

    Fields ``obs`` and ``next_obs`` are required, of one shape ``(n, k, *frame)`` and dtype (any;
    compared and stored as bytes, never converted). ``stream`` (optional, integers, one per row)
    names the environment a row comes from, e.g. ``worker * num_envs + env``: frames are looked
    for among that stream's recent frames. Without it every row is in one stream: still exact,
    but only a single environment's rows share frames. Other fields are stored as in an
    ExperienceBuffer whose fields the first ``extend`` fixes; ``stream`` is returned as well.

    Args:
        capacity: transitions held; the oldest go first.
        placement: ``cpu_pageable``, ``cpu_pinned`` or ``auto`` (= ``cpu_pageable``); frames live in
            host memory, ``cuda`` is refused (batches still move to a GPU learner).
        sampler, seed, alpha, beta, eps: as :class:`~janus.buffer.replay.experience.ExperienceBuffer`.
        frame_capacity: frames held (default :func:`default_frame_capacity`). A transition whose
            frames the ring overwrites is evicted with every older one, so with too few frames
            fewer than ``capacity`` transitions stay sampleable (``len()`` says how many).
        max_age: a stored frame is reused only while fewer than ``max_age`` frames were written
            after it (default: 3/4 of the headroom ``frame_capacity - capacity``, the rest for the
            frames episodes start and end with). A row that uses a frame of age ``a`` is evicted
            once ``frame_capacity - a`` more frames are written, with every older row: this bounds
            ``a``. Frames written by other streams between two pieces of one stream count too, so
            the headroom must exceed one round of pieces of all workers (default: >= 4096 frames).
        history: recent frames per stream searched for a match (>= n-step + 2 is plenty).
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
        frame_capacity: int | None = None,
        max_age: int | None = None,
        history: int = 16,
    ) -> None:
        arguments.check_capacity(capacity)
        arguments.check_seed(seed)
        if sampler not in SAMPLERS:
            raise invalid("sampler", sampler, one_of(SAMPLERS))
        if placement == "auto":
            placement = "cpu_pageable"
        if placement == "cuda":
            raise invalid("placement", placement, "cpu_pageable or cpu_pinned: FrameStackReplay keeps frames in host "
                          "memory (sampled batches still move to a CUDA learner); use an ExperienceBuffer for cuda "
                          "storage", BufferInputError)
        placement_device(placement)
        capacity = int(capacity)
        frame_capacity = default_frame_capacity(capacity) if frame_capacity is None else frame_capacity
        arguments.check_capacity(frame_capacity)  # same bounds, named below if wrong
        headroom = int(frame_capacity) - capacity
        if max_age is None:  # most of the headroom (see the docstring); a ring below capacity evicts early anyway
            max_age = max(3 * headroom // 4, 1) if headroom >= 64 else max(int(frame_capacity) // 8, 1)
        for name, value, high in (("max_age", max_age, 2**40), ("history", history, 4096)):
            arguments.check_int(name, value, 1, high, error=BufferInputError)
        self.capacity, self.placement, self.seed = capacity, placement, None if seed is None else int(seed)
        self.frame_capacity, self.max_age, self.history = int(frame_capacity), int(max_age), int(history)
        self._sampler_name = sampler
        self._sampler_kwargs = priority_checks.prioritized_settings(sampler, alpha, beta, eps)
        self._sampler = self._make_sampler(seed)
        self._lock = threading.RLock()
        self._written = 0
        self._f: frame_state.Frames | None = None  # allocated by the first extend (or a checkpoint)
        self._storage = RingStorage(capacity, placement)
        self._order: list[str] = []  # field names in the order extend got them (and sample returns them)

    def _make_sampler(self, seed: int | None) -> NativeSampler:
        if self._sampler_name == "prioritized":
            return NativePrioritizedSampler(self.capacity, seed, **self._sampler_kwargs)
        return NativeSampler(self.capacity, seed, False)

    # ---- properties -----------------------------------------------------------------------------
    @property
    def device(self) -> torch.device:
        return torch.device("cpu")

    @property
    def total_written(self) -> int:
        """Transitions written since creation (the next key)."""
        return self._written

    @property
    def frames_written(self) -> int:
        """Frames stored since creation (about one per transition when frames are shared)."""
        return 0 if self._f is None else int(self._f.meta[0])

    @property
    def fields(self) -> dict[str, tuple[tuple[int, ...], torch.dtype]]:
        """Each field's per-item shape and dtype, ``obs``/``next_obs`` included (empty before the first extend)."""
        if self._f is None:
            return {}
        user = {k: (s.shape, s.dtype) for k, s in self._storage.specs.items() if k != LINKS}
        stack = (self._f.stack_shape, self._f.dtype)
        return {k: stack if k in (OBS, NEXT) else user[k] for k in self._order}

    def _live_from(self) -> int:
        """Smallest key that may be sampled."""
        evicted = 0 if self._f is None else int(self._f.meta[1])
        return max(evicted, self._written - self.capacity, 0)

    def __len__(self) -> int:
        """Transitions that can be sampled: at most ``capacity``, fewer if frames were evicted early."""
        return self._written - self._live_from()

    def memory_bytes(self) -> dict[str, int]:
        """Bytes allocated, by part (``frames`` holds the pixels; the rest is bookkeeping)."""
        f, st = self._f, self._storage
        out = {"frames": 0, "frame_links": 0, "rows": 0, "priority_trees": 0, "streams": 0}
        if f is not None:
            out["frames"] = f.frames.nbytes
            out["frame_links"] = f.prev.nbytes + f.gen.nbytes + f.users.nbytes
            out["streams"] = f.hist.nbytes + f.hist_len.nbytes + f.hint.nbytes
        if st.packed is not None:
            out["rows"] = st.packed.nbytes
        if self._sampler.prioritized:
            out["priority_trees"] = self._sampler.sum_t.nbytes + self._sampler.min_t.nbytes
        return out

    def __repr__(self) -> str:
        return (f"FrameStackReplay(capacity={self.capacity}, frame_capacity={self.frame_capacity}, "
                f"sampler={self._sampler_name!r}, size={len(self)}, frames_written={self.frames_written})")

    # ---- writing --------------------------------------------------------------------------------
    def extend(self, data: Mapping[str, Any]) -> torch.Tensor:
        """Append transitions (field -> tensor or array with a leading batch dimension); return their keys.

        The first call fixes the fields, the stack shape and dtypes; later calls must match them.
        Invalid input raises, naming the field, before anything is written.
        """
        if not isinstance(data, Mapping) or not data:
            raise BufferTypeError(f"extend() takes a non-empty mapping of field name -> tensor, got {type(data).__name__}")
        field_checks.check_field_names(data, "extend()")
        missing = [k for k in (OBS, NEXT) if k not in data]
        if missing:
            raise BufferInputError(f"FrameStackReplay.extend() needs fields 'obs' and 'next_obs' (stacks of frames); missing {missing}")
        with self._lock:
            obs, nxt = (frame_state.stack_array(k, data[k]) for k in (OBS, NEXT))
            rest = {k: v for k, v in data.items() if k not in (OBS, NEXT)}
            if self._f is None:
                self._allocate_from(obs, nxt, rest, list(data))
            f = self._f
            assert f is not None
            n = f.check_stacks(obs, nxt)  # (checked on allocation too)
            field_checks.check_item_count(n, self.capacity)
            specs = {k: s for k, s in self._storage.specs.items() if k != LINKS}
            if set(rest) != set(specs):
                raise BufferInputError(f"extend() fields do not match the buffer's: missing {sorted(set(specs) - set(rest))}, "
                                       f"unexpected {sorted(set(rest) - set(specs))}")
            views, m = field_casts.coerce_batch(rest, specs, self.capacity, strict=True) if specs else ((), n)
            if m != n:
                raise BufferInputError(f"extend() fields have different batch sizes: obs has {n} items, the other fields {m}")
            streams = f.stream_indices(rest.get(STREAM), n)
            s, st = self._sampler, self._storage
            frame_kernels().insert(
                f.frames, f.prev, f.gen, f.users, f.meta, f.hist, f.hist_len, f.hint, streams,
                f.as_bytes(obs, n), f.as_bytes(nxt, n), f.k, f.max_age,
                st.packed, f.store64, st.columns, st.row_bytes, views, self._written,
                s.sum_t, s.min_t, s.max_priority, s.alpha,
            )
            keys = torch.arange(self._written, self._written + n)
            self._written += n
            return keys

    def _allocate_from(self, obs: np.ndarray, nxt: np.ndarray, rest: Mapping[str, Any], order: list[str]) -> None:
        if obs.ndim < 2:
            raise invalid("field 'obs' shape", obs.shape, "(n, k, *frame): a batch of stacks of k frames", BufferInputError)
        field_checks.check_reserved_names(rest, {LINKS: "the links of the stored frames"})
        _, specs = field_checks.check_batch(rest, {}, self.capacity, self.device) if rest else (None, {})
        f, storage = self._build(tuple(int(d) for d in obs.shape[1:]), obs.dtype, specs)
        f.check_stacks(obs, nxt)  # next_obs like obs, before anything is kept
        self._f, self._storage, self._order = f, storage, list(order)

    def _build(self, stack_shape: tuple[int, ...], dtype: Any, specs: Mapping[str, FieldSpec]) -> tuple[frame_state.Frames, RingStorage]:
        """New frame arrays and row storage (``specs``: the fields besides obs/next_obs)."""
        storage = RingStorage(self.capacity, self.placement)
        try:
            f = frame_state.Frames(stack_shape, dtype, self.frame_capacity, self.max_age, self.history, self.placement)
            storage.allocate({LINKS: FieldSpec((2,), torch.int64), **specs})
        except (RuntimeError, MemoryError) as exc:
            if not is_out_of_memory(exc):
                raise
            first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            raise AllocationError(f"cannot allocate a FrameStackReplay of capacity={self.capacity}, "
                                  f"frame_capacity={self.frame_capacity} frames of {stack_shape[1:]}: {first}") from None
        assert storage.packed is not None  # allocated above
        f.store64 = storage.packed.view(np.int64)
        return f, storage

    # ---- reading --------------------------------------------------------------------------------
    def sample(self, batch_size: int, **sampler_kwargs: Any) -> dict[str, torch.Tensor]:
        """Draw ``batch_size`` transitions with replacement (``beta=`` keyword: prioritized only).

        Returns every field (``obs``/``next_obs`` as ``(batch_size, k, *frame)`` in their dtype, memory
        no other live result shares), ``"index"`` (keys) and, prioritized, ``"weight"``: what an ExperienceBuffer of
        whole stacks returns, item for item with the same seed while no row was evicted early.
        """
        arguments.check_batch_size(batch_size)
        if sampler_kwargs:
            priority_checks.check_sampler_kwargs(self._sampler_name, sampler_kwargs)
        n = int(batch_size)
        with self._lock:
            if len(self) == 0:
                raise BufferEmptyError("cannot sample from an empty FrameStackReplay: call extend() first")
            s, st, f = self._sampler, self._storage, self._f
            assert f is not None
            layout, flat = st.new_output(n)
            offsets = layout.offsets
            keys = np.ndarray((n,), np.int64, flat, layout.keys_at)
            stacks = self._empty_stacks(n)
            fk = frame_kernels()
            if s.prioritized:
                weights = np.ndarray((n,), np.float32, flat, layout.weights_at)
                beta = s.beta if sampler_kwargs.get("beta") is None else float(sampler_kwargs["beta"])
                ok = fk.sample_prioritized(s.rng, s.sum_t, s.min_t, beta, self._written, st.packed, f.store64, st.columns,
                                           st.row_bytes, flat, offsets, keys, weights, f.frames, f.prev, f.gen, stacks, f.k)
            else:
                ok = fk.sample_uniform(s.rng, self._live_from(), self._written, st.packed, f.store64, st.columns,
                                       st.row_bytes, flat, offsets, keys, f.frames, f.prev, f.gen, stacks, f.k)
            return self._output(ok, flat, layout, stacks, keys, n, weights if s.prioritized else None)

    def gather(self, slots: Any) -> dict[str, torch.Tensor]:
        """Copy the transitions at ``slots`` (not keys; each must hold a sampleable transition)."""
        with self._lock:
            if self._f is None:
                raise BufferEmptyError("cannot gather from an empty FrameStackReplay: call extend() first")
            idx = field_checks.slot_array(slots, min(self._written, self.capacity))
            n = idx.shape[0]
            w, cap = self._written, self.capacity
            dead = idx[w - 1 - (w % cap - 1 - idx) % cap < self._live_from()]
            if dead.size:
                raise invalid("slots", dead[:5].tolist(), "slots of sampleable transitions (these lost frames to the "
                              "frame ring and were evicted)", BufferInputError)
            st, f = self._storage, self._f
            assert f is not None
            layout, flat = st.new_output(n)
            offsets = layout.offsets
            keys = np.ndarray((n,), np.int64, flat, layout.keys_at)
            stacks = self._empty_stacks(n)
            ok = frame_kernels().gather(idx, w, st.packed, f.store64, st.columns, st.row_bytes, flat, offsets, keys,
                                        f.frames, f.prev, f.gen, stacks, f.k)
            return self._output(ok, flat, layout, stacks, keys, n)

    def _empty_stacks(self, n: int) -> np.ndarray:
        f = self._f
        assert f is not None
        nbytes = 2 * n * f.k * f.frame_bytes
        if nbytes < HUGE_PAGE_MIN_BYTES:
            return np.empty(nbytes, np.uint8)
        return self._storage.result_memory.take(nbytes)

    def _output(self, ok: bool, flat: np.ndarray, layout: OutLayout, stacks: np.ndarray, keys: np.ndarray, n: int,
                weights: np.ndarray | None = None) -> dict[str, torch.Tensor]:
        if not ok:  # the kernels evict such rows first: reaching this is a bug, never a wrong batch
            raise RuntimeError("FrameStackReplay: a sampled transition lost a frame (internal invariant broken); nothing returned")
        f = self._f
        assert f is not None
        fields = self._storage.unpack(flat, layout)
        both = torch.from_numpy(stacks).view(f.dtype).view(2, n, *f.stack_shape)
        out = {}
        for name in self._order:
            out[name] = both[0] if name == OBS else both[1] if name == NEXT else fields[name]
        if weights is not None:  # the order of an ExperienceBuffer's batch
            out["weight"] = torch.from_numpy(weights)
        out["index"] = torch.from_numpy(keys)
        return out

    # ---- priorities -----------------------------------------------------------------------------
    def update_priority(self, index: Any, priority: Any) -> int:
        """Set the priorities of the transitions with keys ``index``; returns how many were applied.

        Keys of transitions overwritten or evicted since they were sampled are dropped; with
        duplicate keys the last wins. A replay with the uniform sampler has no priorities: it
        raises :class:`~janus.errors.BufferInputError`.
        """
        if self._sampler_name != "prioritized":
            priority_checks.refuse_priorities(self._sampler_name)
        with self._lock:
            keys, prio = priority_checks.priority_arrays(index, priority)
            if keys.size and (keys.min() < 0 or keys.max() >= self._written or not np.all((prio >= 0) & (prio < np.inf))):
                priority_checks.check_priority_update(index, priority, self._written)  # raises, naming the bad values
            live = keys >= self._live_from()
            if not live.all():
                keys, prio = np.ascontiguousarray(keys[live]), np.ascontiguousarray(prio[live])
            s = self._sampler
            if not s.prioritized or not keys.size:
                return int(keys.size)
            priority_checks.check_priority_scale(float(prio.max()), s.alpha, s.eps, self.capacity)
            return int(kernels().update_priority(s.trees, s.params, keys, prio, self._written, self.capacity))

    # ---- checkpoints ----------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """Everything that restores this replay: rows, frames and their links, streams, sampler state."""
        with self._lock:
            return checkpoint.state_of(self)

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`state_dict` output (same capacity, frame capacity and sampler).

        Restored into new arrays first: a malformed state raises :class:`CheckpointError` and
        leaves this replay as it was.
        """
        with self._lock:
            checkpoint.restore(self, state)

    def save(self, path: str | Path) -> None:
        """Write a checkpoint atomically (temporary file, then rename)."""
        state_file.save_atomic(self.state_dict(), path, fmt=FORMAT)

    @classmethod
    def load(cls, path: str | Path) -> FrameStackReplay:
        """Load a checkpoint written by :meth:`save` (no pickled code is executed)."""
        state = state_file.load_state(path, fmt=FORMAT)
        try:
            replay = cls(state["capacity"], state["placement"], state["sampler"], state["seed"],
                         frame_capacity=state["frame_capacity"], max_age=state["max_age"], history=state["history"],
                         **state["sampler_kwargs"])
        except (LookupError, TypeError, ValueError, BufferInputError) as exc:
            raise CheckpointError(f"{str(path)!r} holds a malformed frame-stack checkpoint: {type(exc).__name__}: {exc}") from None
        replay.load_state_dict(state)
        return replay
