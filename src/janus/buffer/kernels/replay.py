"""The compiled CPU kernels of the replay buffer: one call per buffer operation.

Imported lazily (by :mod:`janus.buffer.kernels.native`) the first time a CPU buffer is used, so that
``import janus`` does not import Numba. Each kernel is compiled at its first call (a few hundred
ms) and cached on disk in one folder per user, ``~/.cache/janus/numba`` unless ``NUMBA_CACHE_DIR``
says where (:mod:`janus.buffer.kernels.cache`), whatever ``PYTHONDONTWRITEBYTECODE`` says; a compile
prints one line.

Conventions shared by every kernel:

* Storage is one packed ``uint8`` row per item (``store[slot]``); ``fields`` is an int64 ``(2, F)``
  array: field ``f`` at byte ``fields[0, f]`` of a row, ``fields[1, f]`` bytes long. Whatever the
  dtypes, a kernel sees bytes. Inputs of ``extend`` are a tuple of 1-D byte views (one compiled
  version per number of fields).
* Gathered rows go to one flat byte buffer ``out``: field ``f``'s block (contiguous rows of that
  field) at byte ``out_at[f]``, then the ``n`` int64 keys at ``out_at[F]`` and the ``n`` float32
  weights at ``out_at[F + 1]`` (the caller makes the result's arrays over the same bytes).
* Priority trees are the two rows of one float64 ``(2, 2 * P)`` array (``trees[0]`` the sum tree,
  ``trees[1]`` the min tree), ``P`` the power of two >= capacity; leaf of slot ``s`` at
  ``P + s``, root at 1. Sum-tree leaves start at 0, min-tree leaves at ``+inf``; inner nodes are
  recomputed from their children (never updated by deltas: no drift). ``params`` is float64
  ``[max priority, alpha, eps, limit]`` (see :func:`update_priority`); the kernels keep the
  running max in ``params[0]``.
* Arrays are packed into few arguments because Numba's dispatcher costs ~55 ns per array argument
  of a call (~15 ns per scalar): 22 arguments were a sixth of a prioritized sample+update of one.
* Random numbers: SplitMix64 on a one-element ``uint64`` state owned by the buffer (checkpointed
  with it), so a seed gives the same sequence in every process and thread.
* Slots of written items are ``[0, size)``; ``key = written - 1 - ((head - 1 - slot) mod capacity)``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from llvmlite import ir
from numba import carray, types, uint64
from numba.core import cgutils
from numba.extending import intrinsic

from janus.buffer.kernels.cache import cache_dir, njit, say_when_compiling

# cached in janus's per-user folder or NUMBA_CACHE_DIR, never next to the code (see _jit_cache)
say_when_compiling()
_JIT: dict[str, Any] = {"nogil": True, "cache": cache_dir() is not None,
                        "error_model": "numpy", "boundscheck": False}

_GOLDEN = uint64(0x9E3779B97F4A7C15)
_MIX1 = uint64(0xBF58476D1CE4E5B9)
_MIX2 = uint64(0x94D049BB133111EB)
_TO_UNIT = 1.0 / 9007199254740992.0  # 2**-53


@njit(**_JIT)
def _next_u64(state):
    z = state[0] + _GOLDEN
    state[0] = z
    z = (z ^ (z >> uint64(30))) * _MIX1
    z = (z ^ (z >> uint64(27))) * _MIX2
    return z ^ (z >> uint64(31))


@njit(**_JIT)
def _unit(state):
    """A float64 in [0, 1) with 53 random bits."""
    return np.float64(_next_u64(state) >> uint64(11)) * _TO_UNIT


@intrinsic
def _memcpy(typingctx, dst, dst_offset, src, src_offset, nbytes):
    """``dst.flat[dst_offset:+nbytes] = src.flat[src_offset:+nbytes]`` for C-contiguous uint8
    arrays, as one ``llvm.memcpy`` (numba's slice assignment copies byte by byte: 5-10x slower
    for image rows). ``src`` may instead be an integer: the address of C-contiguous bytes (a CPU
    tensor's ``data_ptr()``, alive for the whole call)."""
    sig = types.void(dst, dst_offset, src, src_offset, nbytes)
    from_address = isinstance(src, types.Integer)

    def codegen(context, builder, signature, args):
        d, d_off, s, s_off, n = args
        d_data = context.make_array(signature.args[0])(context, builder, d).data
        if from_address:
            s_data = builder.inttoptr(s, ir.IntType(8).as_pointer())
        else:
            s_data = context.make_array(signature.args[2])(context, builder, s).data
        cgutils.raw_memcpy(builder, builder.gep(d_data, [d_off]), builder.gep(s_data, [s_off]), n, 1)
        return context.get_dummy_value()

    return sig, codegen


@njit(**_JIT)
def _copy(dst, dst_offset, src, src_offset, nbytes):
    """:func:`_memcpy`, with the sizes of scalar fields as constants: LLVM then writes those as one
    load and store each, where a variable size is a call into libc (~10 ns; three of five fields
    of a typical transition are scalars)."""
    if nbytes == 4:
        _memcpy(dst, dst_offset, src, src_offset, 4)
    elif nbytes == 8:
        _memcpy(dst, dst_offset, src, src_offset, 8)
    elif nbytes == 1:
        _memcpy(dst, dst_offset, src, src_offset, 1)
    elif nbytes == 16:
        _memcpy(dst, dst_offset, src, src_offset, 16)
    else:
        _memcpy(dst, dst_offset, src, src_offset, nbytes)


@intrinsic
def _prefetch(typingctx, arr, offset):
    """Ask the CPU to bring the cache line of ``arr.flat[offset]`` (C-contiguous uint8) in
    (``llvm.prefetch``: a hint, it never faults)."""
    sig = types.void(arr, offset)

    def codegen(context, builder, signature, args):
        a, off = args
        data = context.make_array(signature.args[0])(context, builder, a).data
        i8p, i32 = ir.IntType(8).as_pointer(), ir.IntType(32)
        fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(ir.VoidType(), [i8p, i32, i32, i32]),
                                            "llvm.prefetch.p0i8")
        builder.call(fn, [builder.gep(data, [off]), i32(0), i32(3), i32(1)])  # read, keep in all caches, data
        return context.get_dummy_value()

    return sig, codegen


@intrinsic
def _pointer(typingctx, address, like):
    """``address`` (an integer: a CPU tensor's ``data_ptr()``) as a pointer to ``like``'s dtype."""
    ptr = types.CPointer(like.dtype)
    sig = ptr(address, like)

    def codegen(context, builder, signature, args):
        return builder.inttoptr(args[0], context.get_value_type(ptr))

    return sig, codegen


@njit(**_JIT)
def _fix_up(sum_t, min_t, lo, hi):
    """Recompute the ancestors of tree nodes ``lo..hi`` (same level), level by level."""
    while lo > 1:
        lo >>= 1
        hi >>= 1
        for j in range(lo, hi + 1):
            sum_t[j] = sum_t[2 * j] + sum_t[2 * j + 1]
            a, b = min_t[2 * j], min_t[2 * j + 1]
            min_t[j] = a if a < b else b


@njit(**_JIT)
def _fill_leaves(sum_t, min_t, first, count, value):
    p = sum_t.shape[0] // 2
    for s in range(first, first + count):
        sum_t[p + s] = value
        min_t[p + s] = value
    _fix_up(sum_t, min_t, p + first, p + first + count - 1)


@njit(**_JIT)
def extend(store, fields, srcs, start, n, trees, params):
    """Write ``n`` items at ring position ``start`` (wrapping around the end); ``srcs``: each
    field's bytes, a tuple of 1-D uint8 arrays or of addresses (see :func:`_memcpy`).

    Prioritized buffers (``trees`` not empty) give the new items the running max priority
    ``params[0] ** alpha`` in both trees.
    """
    columns, row_bytes = fields[0], fields[1]
    capacity, stride = store.shape
    slot = start
    for i in range(n):  # row by row: each packed row is written whole, once
        for f in range(len(srcs)):
            rb = row_bytes[f]
            _copy(store, slot * stride + columns[f], srcs[f], i * rb, rb)
        slot += 1
        if slot == capacity:
            slot = 0
    if trees.shape[1]:
        sum_t, min_t = trees[0], trees[1]
        first = min(n, capacity - start)
        leaf = params[0] ** params[1]
        _fill_leaves(sum_t, min_t, start, first, leaf)
        if first < n:
            _fill_leaves(sum_t, min_t, 0, n - first, leaf)


@njit(**_JIT)
def _put(i, slot, written, store, columns, row_bytes, out, out_at, keys):
    """Copy item ``slot`` into row ``i`` of every field block of ``out``; its key into ``keys``."""
    capacity, stride = store.shape
    base = slot * stride
    for f in range(columns.shape[0]):
        rb = row_bytes[f]
        _memcpy(out, out_at[f] + i * rb, store, base + columns[f], rb)
    keys[i] = written - 1 - (written % capacity - 1 - slot) % capacity


_AHEAD = 8  # rows prefetched ahead of the row being copied
_PREFETCH_BYTES = 1024  # of each such row; the hardware prefetcher streams the rest of a long row


@njit(**_JIT)
def _put_rows(slots, written, store, columns, row_bytes, out, out_at, keys):
    """:func:`_put` the items at ``slots`` into rows ``0, 1, ...``.

    Random rows of a large ring miss the cache one after the other; prefetching the rows
    ``_AHEAD`` draws ahead overlaps those misses (1.1-1.9x faster gathers of 32-4096 small rows,
    docs/benchmarks-log.md, "Before: the kernels overlap their cache misses"). ``slots`` may be
    ``keys`` itself: a slot is read before its row's key overwrites it.
    """
    count = slots.shape[0]
    stride = store.shape[1]
    reach = min(stride, _PREFETCH_BYTES)
    for j in range(1, min(_AHEAD, count)):  # row 0 is read at once: no time to prefetch it
        for c in range(0, reach, 64):
            _prefetch(store, slots[j] * stride + c)
    for j in range(count):
        if j + _AHEAD < count:
            for c in range(0, reach, 64):
                _prefetch(store, slots[j + _AHEAD] * stride + c)
        _put(j, slots[j], written, store, columns, row_bytes, out, out_at, keys)


@njit(**_JIT)
def _keys(out, out_at, n):
    """The int64 keys of an output of ``n`` rows (after the ``F`` field blocks)."""
    at = out_at[out_at.shape[0] - 2]
    return out[at : at + 8 * n].view(np.int64)


@njit(**_JIT)
def _weights(out, out_at, n):
    """The float32 importance weights of an output of ``n`` rows (after its keys)."""
    at = out_at[out_at.shape[0] - 1]
    return out[at : at + 4 * n].view(np.float32)


@njit(**_JIT)
def gather(slots, written, store, fields, out, out_at):
    """Copy the items at ``slots`` into ``out``, with their keys."""
    keys = _keys(out, out_at, slots.shape[0])
    _put_rows(slots, written, store, fields[0], fields[1], out, out_at, keys)


@njit(**_JIT)
def sample_uniform(state, size, n, written, store, fields, out, out_at):
    """``n`` uniform draws with replacement among slots ``[0, size)``, gathered with their keys."""
    keys = _keys(out, out_at, n)
    for i in range(n):  # the slots, in keys until their rows are copied
        s = np.int64(_unit(state) * size)
        keys[i] = s if s < size else size - 1
    _put_rows(keys, written, store, fields[0], fields[1], out, out_at, keys)


_FEW = 4  # fewer draws than this go down one at a time (_leaf_of)


@njit(**_JIT)
def _leaf_of(sum_t, mass):
    """The leaf (node index) of one draw of ``mass``: with a branch per level, whose predicted
    side the CPU loads ahead; faster than :func:`_descend` for a few draws."""
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


@njit(**_JIT)
def _descend(sum_t, masses, nodes, count):
    """The leaf (node index) of each of ``masses[:count]``, level by level across the draws.

    A descent is a chain of dependent loads, one per tree level, and deep levels of a large tree
    miss the cache. Taking one level of every draw at a time makes the draws' loads independent,
    so the CPU overlaps their misses; with the branch-free step below, 1.5-2.2x faster than one
    draw after the other from batch ~32 (docs/benchmarks-log.md, "Before: the kernels overlap
    their cache misses"). Same leaves as :func:`_leaf_of`.
    """
    p = sum_t.shape[0] // 2
    for j in range(count):
        nodes[j] = 1
    width = 1
    while width < p:  # every leaf is at the same depth
        for j in range(count):
            node = 2 * nodes[j]
            left = sum_t[node]
            mass = masses[j]
            # Right iff the mass is past the left subtree and the right one has mass; computed
            # without a branch (a random draw mispredicts half of them).
            right = (not mass < left) & (sum_t[node + 1] > 0.0)
            masses[j] = mass - left * right
            nodes[j] = node + right
        width *= 2


@njit(**_JIT)
def sample_prioritized(state, trees, beta, n, written, store, fields, out, out_at):
    """``n`` stratified proportional draws (one per equal segment of the total priority),
    their importance weights ``(min leaf / leaf) ** beta`` (max 1) and the gathered rows.

    Draw ``i`` takes random number ``i`` of the stream, whichever descent finds its leaf. A
    descent only enters subtrees of positive mass, so it never lands on an unwritten (zero) leaf,
    whatever the float rounding.
    """
    sum_t, min_t = trees[0], trees[1]
    columns, row_bytes = fields[0], fields[1]
    keys, weights = _keys(out, out_at, n), _weights(out, out_at, n)
    p = sum_t.shape[0] // 2
    segment = sum_t[1] / n
    lowest = min_t[1]
    if n < _FEW:  # nothing to overlap: one draw after the other, straight into the output
        for i in range(n):
            node = _leaf_of(sum_t, (i + _unit(state)) * segment)
            weights[i] = (lowest / sum_t[node]) ** beta
            _put(i, node - p, written, store, columns, row_bytes, out, out_at, keys)
        return
    masses = np.empty(n, np.float64)
    for j in range(n):
        masses[j] = (j + _unit(state)) * segment
    _descend(sum_t, masses, keys, n)  # keys: scratch for the leaves, then the slots, then the keys
    for j in range(n):
        node = keys[j]
        weights[j] = (lowest / sum_t[node]) ** beta
        keys[j] = node - p  # its slot
    _put_rows(keys, written, store, columns, row_bytes, out, out_at, keys)


LENGTHS_DIFFER = -(1 << 62)  # update_priority: as many keys as priorities are needed


@njit(**_JIT)
def update_priority(trees, params, keys, priority, written, capacity):
    """Set the priority of the items with ``keys``: leaf ``(p + eps) ** alpha``, in order (the
    last duplicate wins); keys older than ``written - capacity`` (overwritten) are dropped.
    ``params`` is ``[max priority, alpha, eps, limit]``; the running max is updated in place.

    Returns the number applied, or ``-1 - i`` for the first invalid pair ``i`` (a key outside
    ``[0, written)``, or a priority that is not a finite number in ``[0, limit]``, the largest
    that cannot overflow the sum tree), or :data:`LENGTHS_DIFFER`: nothing is written then.
    """
    n = keys.shape[0]
    if priority.shape[0] != n:
        return LENGTHS_DIFFER
    sum_t, min_t = trees[0], trees[1]
    alpha, eps, limit = params[1], params[2], params[3]
    for i in range(n):
        k, p = keys[i], np.float64(priority[i])
        if k < 0 or k >= written or not (p >= 0.0 and p < np.inf and p <= limit):
            return -1 - i
    leaves = sum_t.shape[0] // 2
    oldest = written - capacity
    applied = 0
    for i in range(n):
        k = keys[i]
        if k < oldest:
            continue
        node = leaves + k % capacity
        leaf = (np.float64(priority[i]) + eps) ** alpha
        sum_t[node] = leaf
        min_t[node] = leaf
        _fix_up(sum_t, min_t, node, node)
        applied += 1
    # The running max counts the values that won (a duplicate overwritten later does not).
    top = params[0]
    for i in range(n):
        k = keys[i]
        if k >= oldest:
            v = np.float64(priority[i]) + eps
            if v > top and sum_t[leaves + k % capacity] == v**alpha:
                top = v
    params[0] = top
    return applied


_KEYS_LIKE = np.zeros(0, np.int64)


@njit(**_JIT)
def update_priority_at(trees, params, keys_at, priority_at, n, priority_like, written, capacity):
    """:func:`update_priority` of ``n`` int64 keys and ``n`` priorities of ``priority_like``'s dtype
    read at addresses (contiguous CPU tensors, alive for the call): no numpy view per call."""
    keys = carray(_pointer(keys_at, _KEYS_LIKE), n)
    priority = carray(_pointer(priority_at, priority_like), n)
    return update_priority(trees, params, keys, priority, written, capacity)
