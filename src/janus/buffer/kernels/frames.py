"""Compiled kernels of :class:`~janus.buffer.frames.replay.FrameStackReplay`: one call per operation.

Imported lazily, like :mod:`janus.buffer.kernels.replay`, whose conventions these follow (packed rows,
flat output buffers, SplitMix64 random state, binary sum/min trees). The kernels here are
self-contained on purpose: Numba's on-disk cache is keyed by the source file of the function it
compiled, so a kernel calling into another module would keep stale machine code after that module
changed. The four small helpers copied from ``_kernels`` (``_next_u64``, ``_unit``, the tree fix-up
and the one-draw descent ``_leaf_of``) must stay identical to theirs, which
``tests/buffer/test_frame_replay.py`` checks (their syntax trees, and that a seed draws the same
items as an :class:`~janus.buffer.replay.experience.ExperienceBuffer`). ``_memcpy`` here is the
array-to-array form of ``_kernels``' (which also copies from a tensor's address).

Frame storage (``F`` frames of ``fb`` bytes, a ring written in order; ``g`` is a frame's *global
index*, the number of frames written before it, and it lives at slot ``g % F``):

* ``frames[slot]``: the bytes; ``gen[slot]``: the global index of the frame there now;
* ``prev[slot]``: global index of the frame before it in its stack (itself at a stack's start, which
  reproduces a stack padded by repeating its oldest frame);
* ``users[slot]``: the largest row key whose ``obs`` or ``next_obs`` stack includes the frame (-1: none).

A stack of ``k`` frames is named by its newest frame ``g``: ``g, prev(g), prev(prev(g)), ...``
(``k`` frames, newest last in the output). A link is valid only while ``gen[link % F] == link``.

Rows: packed like ``_kernels`` (``store[slot]``), field 0 being two int64 (``obs`` and ``next_obs``
newest frames); ``store64`` is the same memory viewed as int64. ``meta = [frames_written,
live_from]``: rows with a key below ``live_from`` lost a frame to the ring and are never sampled.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from llvmlite import ir
from numba import types, uint64
from numba.core import cgutils
from numba.extending import intrinsic

from janus.buffer.kernels.cache import cache_dir, njit, say_when_compiling

say_when_compiling()
_JIT: dict[str, Any] = {"nogil": True, "cache": cache_dir() is not None,
                        "error_model": "numpy", "boundscheck": False}

_GOLDEN = uint64(0x9E3779B97F4A7C15)
_MIX1 = uint64(0xBF58476D1CE4E5B9)
_MIX2 = uint64(0x94D049BB133111EB)
_TO_UNIT = 1.0 / 9007199254740992.0  # 2**-53

OBS, NEXT = 0, 1  # roles of a stack in a row (each keeps its own search hint)


# ---- copied from _kernels (see the module doc) ---------------------------------------------------
@njit(**_JIT)
def _next_u64(state):
    z = state[0] + _GOLDEN
    state[0] = z
    z = (z ^ (z >> uint64(30))) * _MIX1
    z = (z ^ (z >> uint64(27))) * _MIX2
    return z ^ (z >> uint64(31))


@njit(**_JIT)
def _unit(state):
    return np.float64(_next_u64(state) >> uint64(11)) * _TO_UNIT


@intrinsic
def _memcpy(typingctx, dst, dst_offset, src, src_offset, nbytes):
    """``dst.flat[dst_offset:+nbytes] = src.flat[src_offset:+nbytes]`` (C-contiguous uint8), one ``llvm.memcpy``."""
    sig = types.void(dst, dst_offset, src, src_offset, nbytes)

    def codegen(context, builder, signature, args):
        d, d_off, s, s_off, n = args
        d_data = context.make_array(signature.args[0])(context, builder, d).data
        s_data = context.make_array(signature.args[2])(context, builder, s).data
        cgutils.raw_memcpy(builder, builder.gep(d_data, [d_off]), builder.gep(s_data, [s_off]), n, 1)
        return context.get_dummy_value()

    return sig, codegen


@njit(**_JIT)
def _fix_up(sum_t, min_t, lo, hi):
    while lo > 1:
        lo >>= 1
        hi >>= 1
        for j in range(lo, hi + 1):
            sum_t[j] = sum_t[2 * j] + sum_t[2 * j + 1]
            a, b = min_t[2 * j], min_t[2 * j + 1]
            min_t[j] = a if a < b else b


@njit(**_JIT)
def _leaf_of(sum_t, mass):
    p = sum_t.shape[0] // 2
    node = 1
    while node < p:
        left = sum_t[2 * node]
        if mass < left or not sum_t[2 * node + 1] > 0.0:
            node = 2 * node
        else:
            mass -= left
            node = 2 * node + 1
    return node


# ---- new here ------------------------------------------------------------------------------------
@intrinsic
def _memcmp(typingctx, a, a_offset, b, b_offset, nbytes):
    """libc ``memcmp`` of ``a.flat[a_offset:+nbytes]`` and ``b.flat[b_offset:+nbytes]`` (C-contiguous
    uint8): 0 when equal. Vectorised by libc, stops at the first difference."""
    sig = types.int32(a, a_offset, b, b_offset, nbytes)

    def codegen(context, builder, signature, args):
        x, x_off, y, y_off, n = args
        x_data = context.make_array(signature.args[0])(context, builder, x).data
        y_data = context.make_array(signature.args[2])(context, builder, y).data
        i8p = ir.IntType(8).as_pointer()
        fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(ir.IntType(32), [i8p, i8p, ir.IntType(64)]), "memcmp")
        return builder.call(fn, [builder.gep(x_data, [x_off]), builder.gep(y_data, [y_off]), n])

    return sig, codegen


@njit(**_JIT)
def _set_leaves(sum_t, min_t, first, count, value, min_value):
    p = sum_t.shape[0] // 2
    for s in range(first, first + count):
        sum_t[p + s] = value
        min_t[p + s] = min_value
    _fix_up(sum_t, min_t, p + first, p + first + count - 1)


@njit(**_JIT)
def _set_key_leaves(sum_t, min_t, lo, hi, capacity, value, min_value):
    """Leaves of the slots of keys ``[lo, hi)`` (fewer than ``capacity`` of them)."""
    if hi <= lo:
        return
    start = lo % capacity
    first = min(hi - lo, capacity - start)
    _set_leaves(sum_t, min_t, start, first, value, min_value)
    if first < hi - lo:
        _set_leaves(sum_t, min_t, 0, hi - lo - first, value, min_value)


@njit(**_JIT)
def _matches(frames, prev, gen, g, x, xrow, top, fb, limit):
    """Whether the frames ``g, prev(g), ...`` (``top + 1`` of them, all live and not older than
    ``limit``) equal frames ``top, top - 1, ..., 0`` of stack ``x[xrow]``."""
    F = frames.shape[0]
    for p in range(top, -1, -1):
        s = g % F
        if g < limit or gen[s] != g:
            return False
        if _memcmp(frames, s * fb, x, xrow * x.shape[1] + p * fb, fb) != 0:
            return False
        g = prev[s]
    return True


@njit(**_JIT)
def _append(frames, prev, gen, users, meta, hist, hist_len, stream, x, xrow, p, fb, link):
    """Store frame ``p`` of stack ``x[xrow]`` as the next frame of the ring, after frame ``link``
    (``-1``: a stack's start, linked to itself); evict the rows that used the frame it replaces."""
    F = frames.shape[0]
    g = meta[0]
    s = g % F
    if g >= F and users[s] >= meta[1]:
        meta[1] = users[s] + 1  # rows up to the last user of the old frame lose it: evicted
    _memcpy(frames, s * fb, x, xrow * x.shape[1] + p * fb, fb)
    prev[s] = g if link < 0 else link
    gen[s] = g
    users[s] = -1
    meta[0] = g + 1
    W = hist.shape[1]
    hist[stream, hist_len[stream] % W] = g
    hist_len[stream] += 1
    return g


@njit(**_JIT)
def _try(frames, prev, gen, users, meta, hist, hist_len, stream, x, xrow, k, fb, limit, m, j):
    """Place stack ``x[xrow]`` on candidate frame ``j``: ``m == 0`` reuses ``j`` if its stack equals
    it; ``m > 0`` appends the stack's newest ``m`` frames after ``j`` if ``j``'s newest ``k - m``
    frames equal its oldest ones. Returns the stack's newest frame, or -1."""
    if not _matches(frames, prev, gen, j, x, xrow, k - 1 - m, fb, limit):
        return -1
    g = j
    for p in range(k - m, k):
        g = _append(frames, prev, gen, users, meta, hist, hist_len, stream, x, xrow, p, fb, g)
    return g


@njit(**_JIT)
def _place(frames, prev, gen, users, meta, hist, hist_len, hint, stream, role, x, xrow, k, fb, max_age):
    """The newest frame of a stored stack equal to ``x[xrow]``, storing as few frames as it can.

    Candidates are the stream's recent frames (``hist``), tried first where the last stack of this
    role was placed (``hint``: ``(m, back)``), then all of them: reuse (``m = 0``), then append
    ``m = 1, 2, ...`` frames. Every candidate is verified byte for byte, so a wrong stream id, a
    reset or any gap only costs memory: the stack is then stored whole (its leading run of equal
    frames, e.g. Gymnasium's reset padding, as one self-linked frame).
    """
    W = hist.shape[1]
    n_hist = min(hist_len[stream], W)
    newest = hist_len[stream] - 1
    limit = meta[0] - max_age
    m0, b0 = hint[stream, role, 0], hint[stream, role, 1]
    hinted = m0 >= 0 and b0 < n_hist
    # A reuse stores nothing: look for one first. Only then may the hint's append (m0 > 0) be
    # taken without a search; taking it first would keep a stream appending for ever once a
    # reuse was missed (n-step >= k, repeated frames).
    if hinted and m0 == 0:
        g = _try(frames, prev, gen, users, meta, hist, hist_len, stream, x, xrow, k, fb, limit, 0, hist[stream, (newest - b0) % W])
        if g >= 0:
            return g
    for back in range(n_hist):
        if hinted and m0 == 0 and back == b0:
            continue
        g = _try(frames, prev, gen, users, meta, hist, hist_len, stream, x, xrow, k, fb, limit, 0, hist[stream, (newest - back) % W])
        if g >= 0:
            hint[stream, role, 0] = 0
            hint[stream, role, 1] = back
            return g
    if hinted and m0 > 0:
        g = _try(frames, prev, gen, users, meta, hist, hist_len, stream, x, xrow, k, fb, limit, m0, hist[stream, (newest - b0) % W])
        if g >= 0:
            return g
    row = xrow * x.shape[1]
    run = 0  # frames 0..run of the stack are equal: stored whole it needs k - run frames
    while run + 1 < k and _memcmp(x, row + (run + 1) * fb, x, row, fb) == 0:
        run += 1
    for m in range(1, k - run):
        for back in range(n_hist):
            g = _try(frames, prev, gen, users, meta, hist, hist_len, stream, x, xrow, k, fb, limit, m, hist[stream, (newest - back) % W])
            if g >= 0:
                hint[stream, role, 0] = m
                hint[stream, role, 1] = back
                return g
    g = _append(frames, prev, gen, users, meta, hist, hist_len, stream, x, xrow, run, fb, -1)
    for p in range(run + 1, k):
        g = _append(frames, prev, gen, users, meta, hist, hist_len, stream, x, xrow, p, fb, g)
    return g


@njit(**_JIT)
def _mark_users(prev, users, g, k, key):
    F = prev.shape[0]
    for _ in range(k):
        s = g % F
        users[s] = key
        g = prev[s]


@njit(**_JIT)
def insert(frames, prev, gen, users, meta, hist, hist_len, hint, streams, obs, nxt, k, max_age,
           store, store64, columns, row_bytes, srcs, written, sum_t, min_t, max_priority, alpha):
    """Write ``len(streams)`` rows with keys ``written, written + 1, ...``: place each row's ``obs``
    and ``next_obs`` stacks (``obs[i]``/``nxt[i]``: ``k`` frames of bytes), write its other fields
    (``srcs``, like ``_kernels.extend``), evict rows whose frames were overwritten.

    Prioritized (``sum_t`` not empty): new rows get the running max priority; evicted rows get leaf
    0 (sum) / inf (min), so the descent never reaches them. Returns the new ``live_from``.
    """
    capacity, stride = store.shape
    fb = obs.shape[1] // k
    n = streams.shape[0]
    live_before = meta[1]
    for i in range(n):
        key = written + i
        slot = key % capacity
        s = streams[i]
        og = _place(frames, prev, gen, users, meta, hist, hist_len, hint, s, OBS, obs, i, k, fb, max_age)
        ng = _place(frames, prev, gen, users, meta, hist, hist_len, hint, s, NEXT, nxt, i, k, fb, max_age)
        _mark_users(prev, users, og, k, key)
        _mark_users(prev, users, ng, k, key)
        store64[slot, 0] = og
        store64[slot, 1] = ng
        for f in range(len(srcs)):
            rb = row_bytes[f + 1]
            _memcpy(store, slot * stride + columns[f + 1], srcs[f], i * rb, rb)
    end = written + n
    if sum_t.shape[0]:
        _set_key_leaves(sum_t, min_t, written, end, capacity, max_priority[0] ** alpha, max_priority[0] ** alpha)
        _set_key_leaves(sum_t, min_t, max(live_before, end - capacity), min(meta[1], end), capacity, 0.0, np.inf)
    return meta[1]


@njit(**_JIT)
def _put(i, slot, written, store, store64, columns, row_bytes, out, out_offsets, keys, frames, prev, gen, stacks, k):
    """Copy row ``slot`` into row ``i`` of ``out`` (every field block) and rebuild its two stacks
    into ``stacks`` (flat bytes of ``[2, n, k, frame]``: obs then next_obs). Returns False if a frame is gone (never expected:
    such rows are evicted; checked so that a broken invariant cannot return wrong frames)."""
    capacity, stride = store.shape
    base = slot * stride
    for f in range(columns.shape[0]):
        rb = row_bytes[f]
        _memcpy(out, out_offsets[f] + i * rb, store, base + columns[f], rb)
    keys[i] = written - 1 - (written % capacity - 1 - slot) % capacity
    F, fb = frames.shape
    n = keys.shape[0]
    for role in range(2):
        g = store64[slot, role]
        at = (role * n + i) * k * fb
        for p in range(k - 1, -1, -1):
            s = g % F
            if gen[s] != g:
                return False
            _memcpy(stacks, at + p * fb, frames, s * fb, fb)
            g = prev[s]
    return True


@njit(**_JIT)
def gather(slots, written, store, store64, columns, row_bytes, out, out_offsets, keys, frames, prev, gen, stacks, k):
    """Rows at ``slots`` (live ones, checked by the caller) with their stacks; False if a frame is gone."""
    ok = True
    for i in range(slots.shape[0]):
        ok &= _put(i, slots[i], written, store, store64, columns, row_bytes, out, out_offsets, keys, frames, prev, gen, stacks, k)
    return ok


@njit(**_JIT)
def sample_uniform(state, live_from, written, store, store64, columns, row_bytes, out, out_offsets, keys,
                   frames, prev, gen, stacks, k):
    """Uniform draws among live rows (keys ``[lo, written)``), the ``i``-th draw mapped to the
    ``i``-th live slot in slot order: with nothing evicted early that is ``_kernels.sample_uniform``
    draw for draw (same seed, same items as an ExperienceBuffer)."""
    capacity = store.shape[0]
    lo = max(live_from, written - capacity)
    size = written - lo
    a, b = lo % capacity, written % capacity
    ok = True
    for i in range(keys.shape[0]):
        r = np.int64(_unit(state) * size)
        r = r if r < size else size - 1
        if size == capacity:
            slot = r
        elif a < b or b == 0:  # one segment [a, a + size)
            slot = a + r
        elif r < b:  # two segments [0, b) and [a, capacity), in slot order
            slot = r
        else:
            slot = a + r - b
        ok &= _put(i, slot, written, store, store64, columns, row_bytes, out, out_offsets, keys, frames, prev, gen, stacks, k)
    return ok


@njit(**_JIT)
def sample_prioritized(state, sum_t, min_t, beta, written, store, store64, columns, row_bytes, out, out_offsets, keys,
                       weights, frames, prev, gen, stacks, k):
    """Stratified proportional draws, as ``_kernels.sample_prioritized`` (evicted rows have leaf 0)."""
    p = sum_t.shape[0] // 2
    n = keys.shape[0]
    segment = sum_t[1] / n
    lowest = min_t[1]
    ok = True
    for i in range(n):
        node = _leaf_of(sum_t, (i + _unit(state)) * segment)
        weights[i] = (lowest / sum_t[node]) ** beta
        ok &= _put(i, node - p, written, store, store64, columns, row_bytes, out, out_offsets, keys, frames, prev, gen, stacks, k)
    return ok
