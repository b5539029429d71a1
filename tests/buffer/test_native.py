"""The compiled CPU kernels (janus.buffer.kernels.native / _kernels) against a plain Python reference.

The reference below re-implements every CPU operation in the simplest way: one numpy array per
field, a Python list of leaves, prefix sums for the prioritized search, the same SplitMix64
stream. Hypothesis drives random sequences of extend / sample / update_priority through both and
compares keys, rows, weights, priorities and the trees' root after every step.
"""

from __future__ import annotations

import copy
import math
import pydoc

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings, strategies as st
from tests.buffer.test_prioritized import chi2_critical

from janus import ExperienceBuffer
from janus.buffer.kernels.native import kernels, seeded_state
from janus.buffer.pipeline import JanusBuffer
from janus.errors import BufferInputError, BufferTypeError

MASK = (1 << 64) - 1
FIELDS = {"obs": ((3,), "float32"), "act": ((), "int64"), "flag": ((), "bool"), "img": ((2, 2), "uint8"),
          "pair": ((2,), "float64"), "half": ((), "int16")}  # 12, 8, 1, 4, 16 and 2 bytes a row


class Reference:
    """Plain-Python replay: what every kernel must compute."""

    def __init__(self, capacity: int, seed: int, prioritized: bool, alpha=0.6, beta=0.4, eps=1e-6):
        self.capacity, self.prioritized = capacity, prioritized
        self.alpha, self.beta, self.eps = alpha, beta, eps
        self.state = int(seeded_state(seed)[0])
        self.rows: dict[str, np.ndarray] = {}
        self.written = 0
        self.leaves = [0.0] * capacity
        self.max_p = 1.0

    def _next(self) -> float:
        self.state = (self.state + 0x9E3779B97F4A7C15) & MASK
        z = self.state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK
        return ((z ^ (z >> 31)) >> 11) * 2.0**-53

    def extend(self, batch: dict[str, np.ndarray]) -> list[int]:
        n = len(next(iter(batch.values())))
        for name, values in batch.items():
            if name not in self.rows:
                self.rows[name] = np.zeros((self.capacity, *values.shape[1:]), values.dtype)
            for i in range(n):
                self.rows[name][(self.written + i) % self.capacity] = values[i]
        for i in range(n):
            self.leaves[(self.written + i) % self.capacity] = self.max_p**self.alpha
        keys = list(range(self.written, self.written + n))
        self.written += n
        return keys

    def key_of(self, slot: int) -> int:
        head = self.written % self.capacity
        return self.written - 1 - (head - 1 - slot) % self.capacity

    def sample(self, n: int, beta=None):
        size = min(self.written, self.capacity)
        if not self.prioritized:
            slots = [min(int(self._next() * size), size - 1) for _ in range(n)]
            return slots, None
        leaves = np.array(self.leaves)
        prefix = np.cumsum(leaves)
        total = prefix[-1]
        written_leaves = leaves[:size]
        slots, weights = [], []
        for i in range(n):
            mass = (i + self._next()) * (total / n)
            slot = int(np.searchsorted(prefix, mass, side="right"))
            slot = min(slot, size - 1)
            slots.append(slot)
            weights.append((written_leaves.min() / leaves[slot]) ** (self.beta if beta is None else beta))
        return slots, np.array(weights, np.float32)

    def update(self, keys: list[int], prios: list[float]) -> int:
        live = [(k, p) for k, p in zip(keys, prios) if k >= self.written - self.capacity]  # stale: dropped
        last = {k % self.capacity: p + self.eps for k, p in live}  # the last duplicate wins
        for slot, v in last.items():
            self.leaves[slot] = v**self.alpha
            self.max_p = max(self.max_p, v)
        return len(live)


def batch_of(keys: list[int]) -> dict[str, np.ndarray]:
    k = np.asarray(keys, dtype=np.int64)
    return {
        "obs": np.stack([k * 1.5, -k, k + 0.25], axis=1).astype(np.float32),
        "act": k * 7,
        "flag": k % 3 == 0,
        "img": (k[:, None, None] + np.arange(4).reshape(2, 2)).astype(np.uint8),
        "pair": np.stack([k * 0.5, -2.0 * k], axis=1),  # float64: 16 bytes
        "half": (k % 1000).astype(np.int16),  # 2 bytes: no constant size in _copy
    }


def check_sample(out: dict[str, torch.Tensor], ref: Reference, slots: list[int], weights) -> None:
    keys = [ref.key_of(s) for s in slots]
    assert out["index"].tolist() == keys
    for name, rows in ref.rows.items():
        np.testing.assert_array_equal(out[name].numpy(), rows[slots], err_msg=name)
        assert out[name].dtype == torch.from_numpy(rows[:0]).dtype
    if weights is None:
        assert "weight" not in out
    else:
        np.testing.assert_allclose(out["weight"].numpy(), weights, rtol=1e-6)


ops = st.lists(
    st.one_of(
        st.tuples(st.just("extend"), st.one_of(st.integers(1, 9), st.integers(40, 120))),
        # batches around the kernels' cuts: one-by-one descents below 4, chunks of 64
        st.tuples(st.just("sample"), st.one_of(st.integers(1, 20), st.integers(60, 140))),
        st.tuples(st.just("update"), st.lists(st.tuples(st.integers(0, 40), st.integers(0, 6)), max_size=12)),
    ),
    max_size=25,
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(capacity=st.one_of(st.integers(1, 9), st.integers(100, 300)), prioritized=st.booleans(), seed=st.integers(0, 2**62),
       steps=ops, numpy_updates=st.booleans())
def test_kernels_match_reference(capacity, prioritized, seed, steps, numpy_updates):
    """extend (wrap-around), sample (keys, rows, weights), update_priority (stale and duplicate
    keys, applied counts; tensors read by address, or numpy arrays handed over as they are)
    against the reference, with integer priorities plus eps=0.5: every leaf and prefix sum is
    exact, so the two searches agree draw for draw."""
    kind = "prioritized" if prioritized else "uniform"
    settings = {"alpha": 1.0, "beta": 0.7, "eps": 0.5} if prioritized else {}
    buf = ExperienceBuffer(capacity, sampler=kind, seed=seed, fields=FIELDS, **settings)
    ref = Reference(capacity, seed, prioritized, alpha=1.0, beta=0.7, eps=0.5)
    for op, arg in steps:
        if op == "extend":
            n = min(arg, capacity)
            keys = list(range(ref.written, ref.written + n))
            assert buf.extend(batch_of(keys)).tolist() == ref.extend(batch_of(keys))
        elif op == "sample" and ref.written:
            out = buf.sample(arg)
            check_sample(out, ref, *ref.sample(arg))
        elif op == "update" and ref.written and arg and not prioritized:  # a uniform buffer has no priorities
            with pytest.raises(BufferInputError, match="sampler='prioritized'"):
                buf.update_priority(torch.tensor([0]), torch.tensor([1.0]))
        elif op == "update" and ref.written and arg:
            keys = [k % ref.written for k, _ in arg]
            prios = [float(p) for _, p in arg]
            if numpy_updates:
                applied = buf.update_priority(np.array(keys, np.int64), np.array(prios))
            else:
                applied = buf.update_priority(torch.tensor(keys), torch.tensor(prios))
            assert applied == ref.update(keys, prios)
        assert len(buf) == min(ref.written, capacity) and buf.total_written == ref.written
        if prioritized:
            size = len(buf)
            got = buf.sampler.priorities(torch.arange(capacity)).numpy()
            np.testing.assert_array_equal(got[:size], np.array(ref.leaves)[:size])
            assert buf.sampler.total() == sum(ref.leaves)  # exact: half-integers


def test_capacity_one_and_wrap_around():
    buf = ExperienceBuffer(1, sampler="prioritized", seed=0, fields={"x": ((), "int64")})
    for k in range(5):
        assert buf.extend({"x": k}).tolist() == [k]
        out = buf.sample(4)
        assert out["x"].tolist() == [k] * 4 and out["index"].tolist() == [k] * 4
        assert out["weight"].tolist() == [1.0] * 4
    assert buf.update_priority([3, 4], [2.0, 5.0]) == 1  # key 3 was overwritten
    # one extend that wraps around the end of the ring (capacity 4, 3 + 3 items)
    buf = ExperienceBuffer(4, seed=0, fields={"x": ((), "int64")})
    buf.extend({"x": [0, 1, 2]})
    buf.extend({"x": [3, 4, 5]})
    rows = buf.gather(torch.arange(4))
    assert rows["x"].tolist() == [4, 5, 2, 3] and rows["index"].tolist() == [4, 5, 2, 3]


def test_duplicate_and_stale_keys():
    buf = ExperienceBuffer(4, sampler="prioritized", seed=0, alpha=1.0, eps=1e-9, fields={"x": ((), "int64")})
    buf.extend({"x": np.arange(4)})
    buf.extend({"x": np.arange(2)})  # keys 0..5 written; 0, 1 overwritten
    assert buf.update_priority([2, 2, 0, 3, 2], [1.0, 9.0, 7.0, 2.0, 3.0]) == 4  # key 0 stale
    pr = buf.sampler.priorities(torch.arange(4)).tolist()
    assert pr[2] == pytest.approx(3.0) and pr[3] == pytest.approx(2.0)  # last duplicate wins
    assert buf.sampler.max_priority[0] == pytest.approx(3.0)  # only winning values count (as on CUDA)
    with pytest.raises(BufferInputError, match="index"):
        buf.update_priority([6], [1.0])  # not written yet
    with pytest.raises(BufferInputError, match="priority"):
        buf.update_priority([5, 4], [1.0, math.nan])
    assert buf.sampler.priorities(torch.arange(4)).tolist() == pr  # nothing applied on error


@pytest.mark.parametrize("make", [
    lambda v: torch.tensor(v, dtype=torch.float32),
    lambda v: torch.tensor(v, dtype=torch.float64),
    lambda v: np.array(v, np.float32),
    lambda v: np.array(v, np.float64),
    lambda v: torch.tensor(v, dtype=torch.float32, requires_grad=True),  # a td error straight from the loss
    lambda v: torch.tensor(v, dtype=torch.bfloat16),
    lambda v: torch.tensor(v, dtype=torch.float32).reshape(-1, 1),  # (n, 1), as a critic outputs
    lambda v: torch.tensor([x for x in v for _ in "ab"], dtype=torch.float32)[::2],  # not contiguous
    lambda v: list(v),
])
def test_priorities_of_every_float_input_land_as_their_float64_value(make):
    """float32 priorities go to the kernel without a copy; every kind gives the leaf of its value."""
    values = [0.5, 2.0, 7.25]  # exact in bfloat16, float32 and float64
    buf = ExperienceBuffer(4, sampler="prioritized", seed=0, alpha=0.7, eps=1e-3, fields={"x": ((), "int64")})
    keys = buf.extend({"x": np.arange(3)})
    assert buf.update_priority(keys, make(values)) == 3
    expected = [(v + 1e-3) ** 0.7 for v in values]
    assert buf.sampler.priorities(torch.arange(3)).tolist() == pytest.approx(expected, rel=1e-12)
    assert buf.sampler.max_priority[0] == pytest.approx(7.25 + 1e-3)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_priorities_read_by_address_match_the_numpy_path(dtype):
    """Contiguous CPU tensors reach the kernel by address, anything else as numpy arrays: with
    duplicate and stale keys, both leave the same trees, max priority and applied counts."""
    from janus.buffer.replay import priority_checks

    gen = np.random.default_rng(0)
    bufs = [ExperienceBuffer(50, sampler="prioritized", seed=0, fields={"x": ((), "int64")}) for _ in range(2)]
    for buf in bufs:
        buf.extend({"x": np.arange(40)})
        buf.extend({"x": np.arange(40, 80)})  # keys 0-29 are stale
    for _ in range(20):
        keys = torch.from_numpy(gen.integers(0, 80, 40))
        prio = torch.from_numpy(gen.random(40) * 5).to(dtype)
        assert priority_checks.priority_addresses(keys, prio) is not None  # the tensors take the address path
        by_address = bufs[0].update_priority(keys, prio)
        as_arrays = bufs[1].update_priority(keys.numpy(), prio.numpy())
        assert by_address == as_arrays == int((keys >= 30).sum())
    np.testing.assert_array_equal(bufs[0].sampler.sum_t, bufs[1].sampler.sum_t)
    np.testing.assert_array_equal(bufs[0].sampler.min_t, bufs[1].sampler.min_t)
    assert bufs[0].sampler.max_priority[0] == bufs[1].sampler.max_priority[0]


def test_priority_limit_is_checked_in_the_kernel_with_nothing_written():
    """The largest safe priority is accepted; the next float up (float64 or float32) is refused,
    naming the overflow, and nothing is written."""
    from janus.buffer.kernels.native import priority_limit

    buf = ExperienceBuffer(8, sampler="prioritized", seed=0, alpha=10.0, eps=1e-6, fields={"x": ((), "int64")})
    keys = buf.extend({"x": np.arange(4)})
    limit = priority_limit(10.0, 1e-6, 8)  # ~1e30: representable in float32 too
    assert buf.sampler.limit == limit and 1e20 < limit < 1e38
    above32 = np.float32(limit)
    if float(above32) <= limit:
        above32 = np.nextafter(above32, np.float32(np.inf))
    before = buf.sampler.priorities(torch.arange(4)).tolist()
    for prio in (np.array([1.0, np.nextafter(limit, np.inf)]), np.array([above32], np.float32)):
        with pytest.raises(BufferInputError, match="priorities too large"):
            buf.update_priority(keys[: len(prio)], prio)
        assert buf.sampler.priorities(torch.arange(4)).tolist() == before
    assert buf.update_priority(keys[:1], [limit]) == 1
    assert math.isfinite(buf.sampler.total())


def _tensor_inputs(n):
    """Field values as tensors of every kind extend() may see, with the numpy values they hold."""
    g = torch.Generator().manual_seed(n)
    obs = torch.rand(n, 3, 2, generator=g)
    z = torch.complex(torch.rand(n, 2, generator=g), torch.rand(n, 2, generator=g))
    cases = {
        # Complex fields are never read by address, so only "conjugate bit" has one: any other
        # case would take the copying path whatever its obs.
        "contiguous": {"obs": obs},
        "not contiguous": {"obs": obs.transpose(1, 2).contiguous().transpose(1, 2)},
        "requires grad": {"obs": obs.clone().requires_grad_(True)},
        "conjugate bit": {"obs": obs, "z": z.conj()},  # a lazy conjugate: its bytes are not the values
        "negative bit": {"obs": torch._neg_view(obs)},
    }
    return cases


@pytest.mark.parametrize("case", ["contiguous", "not contiguous", "requires grad", "conjugate bit", "negative bit"])
@pytest.mark.parametrize("n", [1, 5])
def test_tensor_inputs_read_by_address_or_copied_store_their_values(case, n):
    """All-tensor extends are read by address when they can be; whatever they are, the stored
    rows are the tensors' values (a lazy conjugate or negation is never stored as raw bytes)."""
    data = dict(_tensor_inputs(n)[case], a=torch.arange(n) * 7, d=torch.arange(n) % 2 == 0)
    fields = {k: (tuple(v.shape[1:]), v.dtype) for k, v in data.items()}
    expected = {k: v.detach().resolve_conj().resolve_neg().numpy().copy() for k, v in data.items()}
    for declared in (True, False):
        buf = ExperienceBuffer(8, seed=0, fields=fields if declared else None)
        buf.extend({k: torch.zeros(2, *shape, dtype=dtype) for k, (shape, dtype) in fields.items()})
        assert buf.extend(data).tolist() == list(range(2, 2 + n))
        rows = buf.gather(torch.arange(2, 2 + n))
        for k, v in expected.items():
            np.testing.assert_array_equal(rows[k].numpy(), v)


def test_one_item_without_batch_dimension_and_mixed_inputs():
    fields = {"obs": ((4,), "float32"), "r": ((), "float32")}
    buf = ExperienceBuffer(4, seed=0, fields=fields)
    buf.extend({"obs": torch.arange(4.0), "r": torch.tensor(2.5)})  # tensors by address, no batch dimension
    buf.extend({"obs": np.arange(4.0, 8.0, dtype=np.float32), "r": torch.tensor([3.5])})  # mixed: copied
    rows = buf.gather(torch.arange(2))
    assert rows["obs"].tolist() == [[0, 1, 2, 3], [4, 5, 6, 7]] and rows["r"].tolist() == [2.5, 3.5]
    with pytest.raises(BufferInputError, match="batch sizes"):
        buf.extend({"obs": torch.zeros(2, 4), "r": torch.zeros(3)})
    undeclared = ExperienceBuffer(4, seed=0)
    undeclared.extend({"obs": torch.zeros(1, 4)})
    with pytest.raises(BufferInputError, match="shape"):
        undeclared.extend({"obs": torch.zeros(4)})  # undeclared fields keep needing the batch dimension


def test_sampling_frequencies_chi_square():
    size = 40
    buf = ExperienceBuffer(64, sampler="prioritized", seed=1, alpha=0.5, eps=1e-6, fields={"x": ((), "int64")})
    keys = buf.extend({"x": np.arange(size)})
    prio = np.arange(1, size + 1, dtype=np.float64)
    buf.update_priority(keys, prio)
    draws = np.concatenate([buf.sample(997)["x"].numpy() for _ in range(60)])
    expected_p = np.sqrt(prio + 1e-6) / np.sqrt(prio + 1e-6).sum()
    counts = np.bincount(draws, minlength=size)
    assert counts.shape[0] == size  # unwritten slots are never drawn
    expected = expected_p * draws.size
    critical = chi2_critical(size - 1)
    assert float(((counts - expected) ** 2 / expected).sum()) < critical
    uniform = np.full(size, draws.size / size)  # the test can fail: uniform counts are rejected
    assert float(((uniform - expected) ** 2 / expected).sum()) > 10 * critical
    # uniform sampling is uniform
    ubuf = ExperienceBuffer(64, seed=2, fields={"x": ((), "int64")})
    ubuf.extend({"x": np.arange(size)})
    counts = np.bincount(np.concatenate([ubuf.sample(1000)["x"].numpy() for _ in range(40)]), minlength=size)
    expected = np.full(size, counts.sum() / size)
    assert counts.shape[0] == size and float(((counts - expected) ** 2 / expected).sum()) < critical


def test_importance_weights():
    buf = ExperienceBuffer(8, sampler="prioritized", seed=0, alpha=0.5, beta=0.4, eps=1e-6, fields={"x": ((), "int64")})
    keys = buf.extend({"x": np.arange(4)})
    prio = np.array([1.0, 2.0, 3.0, 4.0])
    buf.update_priority(keys, prio)
    leaf = (prio + 1e-6) ** 0.5
    for beta in (None, 0.0, 1.0):
        out = buf.sample(256, beta=beta)
        b = 0.4 if beta is None else beta
        expect = (leaf.min() / leaf[out["x"].numpy()]) ** b
        np.testing.assert_allclose(out["weight"].numpy(), expect, rtol=1e-6)
        assert out["weight"].dtype == torch.float32 and float(out["weight"].max()) <= 1.0


def test_seeds_and_checkpoints_replay_the_same_sequence(tmp_path):
    def make(seed):
        b = ExperienceBuffer(50, sampler="prioritized", seed=seed, fields={"x": ((), "int64")})
        b.extend({"x": np.arange(50)})
        b.extend({"x": np.arange(30)})  # wraps
        return b

    a, b, c = make(5), make(5), make(6)
    assert torch.equal(a.sample(32)["index"], b.sample(32)["index"])
    assert not torch.equal(a.sample(32)["index"], c.sample(32)["index"])
    a.save(tmp_path / "a.pt")
    loaded = ExperienceBuffer.load(tmp_path / "a.pt")
    for _ in range(3):
        x, y = a.sample(16), loaded.sample(16)
        assert torch.equal(x["index"], y["index"]) and torch.equal(x["weight"], y["weight"])


@pytest.mark.parametrize("sampler", ["uniform", "prioritized"])
def test_a_buffer_that_sampled_then_loads_a_checkpoint_samples_from_the_loaded_state(sampler):
    """A sample calls the kernel's compiled code directly (``native.compiled``), with the buffer's
    sampler and storage as arguments; a loaded checkpoint replaces both, and the next samples
    must read the new ones, the same draws as the buffer the checkpoint came from."""
    def make(seed, rows):
        b = ExperienceBuffer(40, sampler=sampler, seed=seed, fields={"x": ((), "int64"), "y": ((3,), "float32")})
        b.extend({"x": np.arange(rows), "y": np.ones((rows, 3))})
        return b

    src, dst = make(1, 40), make(2, 7)
    dst.sample(4)  # dst's own storage and sampler, used once
    dst.load_state_dict(src.state_dict())
    for n in (1, 5):
        a, b = src.sample(n), dst.sample(n)
        assert a.keys() == b.keys()
        for k in a:
            assert torch.equal(a[k], b[k]), k
    assert len(set(dst.sample(64)["x"].tolist())) > 7  # rows the old storage never held


def test_every_sample_output_buffer_has_the_type_the_compiled_sample_takes():
    """The compiled sample trusts its output buffer's type: small results' ``np.empty`` and
    large results' reused memory must type alike (a uint8, 1-D, contiguous, writable array)."""
    from numba import typeof

    from janus.buffer.storage.memory import ResultMemory

    memory = ResultMemory()
    large = memory.take(1 << 23)
    assert typeof(large) == typeof(np.empty(64, np.uint8))
    del large
    assert typeof(memory.take(1 << 23)) == typeof(np.empty(64, np.uint8))  # and once used again


def test_loaded_and_copied_priority_settings_are_the_ones_the_kernels_use():
    """alpha, eps and the max priority live in the array the kernels read (``sampler.params``):
    a checkpoint's values replace the constructor's, and a copy of a sampler keeps its trees
    and settings in step with each other."""
    src = ExperienceBuffer(8, sampler="prioritized", seed=0, alpha=0.5, eps=0.25, fields={"x": ((), "int64")})
    src.extend({"x": np.arange(4)})
    src.update_priority(np.array([1]), np.array([3.75]))  # max |p| + eps = 4
    dst = ExperienceBuffer(8, sampler="prioritized", seed=0, fields={"x": ((), "int64")})  # alpha 0.6, eps 1e-6
    dst.load_state_dict(src.state_dict())
    s = dst.sampler
    assert (s.alpha, s.eps, float(s.max_priority[0])) == (0.5, 0.25, 4.0)
    dst.update_priority(np.array([2]), np.array([0.75]))
    dst.extend({"x": np.array([9])})  # key 4: gets the max priority
    assert s.priorities(torch.tensor([2, 4])).tolist() == [1.0, 2.0]  # (0.75 + 0.25) ** 0.5, 4 ** 0.5
    assert s.total() == pytest.approx(1 + 2 + 1 + 1 + 2)  # keys 0-4: max 1 at first, 4, 1, 1, 4

    twin = copy.deepcopy(s)
    kernels().update_priority(twin.trees, twin.params, np.array([0]), np.array([15.75]), 5, 8)
    assert twin.total() == pytest.approx(s.total() - 1.0 + 4.0) and float(twin.max_priority[0]) == 16.0
    assert float(s.max_priority[0]) == 4.0  # the original is untouched


def test_checkpoint_with_a_torch_generator_state_still_loads():
    """Checkpoints written before the kernels (or on a CUDA placement) hold a torch generator
    state: the buffer loads them and draws a deterministic sequence derived from it."""
    buf = ExperienceBuffer(10, seed=0, fields={"x": ((), "int64")})
    buf.extend({"x": np.arange(10)})
    state = buf.state_dict()
    state["sampler_state"]["rng_state"] = torch.Generator().manual_seed(3).get_state()
    a, b = ExperienceBuffer(10, seed=1), ExperienceBuffer(10, seed=2)
    a.load_state_dict(state)
    b.load_state_dict(state)
    assert torch.equal(a.sample(20)["index"], b.sample(20)["index"])


# ---- the API: declared fields, casting, clear errors --------------------------------------------
def test_declared_fields_cast_compatible_inputs():
    buf = ExperienceBuffer(10, seed=0, fields={
        "obs": ((4,), torch.float32), "action": ((), "int64"), "reward": (1, np.float32), "done": ((), "float32"),
    })
    assert buf.fields["reward"] == ((1,), torch.float32)
    one = {"obs": [1, 2, 3, 4], "action": 2, "reward": [0.5], "done": True}  # lists, scalars, bool
    assert buf.extend(one).tolist() == [0]
    two = {"obs": np.ones((2, 4)), "action": np.array([1, 2], np.int32), "reward": torch.ones(2, 1, dtype=torch.float64),
           "done": torch.tensor([False, True])}  # float64, int32, bool: cast
    assert buf.extend(two).tolist() == [1, 2]
    rows = buf.gather(torch.arange(3))
    assert rows["obs"].dtype == torch.float32 and rows["obs"][0].tolist() == [1, 2, 3, 4]
    assert rows["action"].tolist() == [2, 1, 2] and rows["done"].tolist() == [1.0, 0.0, 1.0]
    grad = torch.ones(1, 4, requires_grad=True)
    buf.extend({**one, "obs": grad * 2})  # tensors needing grad are detached
    assert buf.gather(torch.tensor([3]))["obs"].tolist() == [[2.0] * 4]


@pytest.mark.parametrize("value, err, match", [
    (np.ones((2, 4)), BufferInputError, "'action' dtype"),  # float -> int does not cast
    ([1.5, 2.5], BufferInputError, "'action' dtype"),
    (np.array(["a", "b"]), BufferTypeError, "'action' dtype"),
    ([[1], [2, 3]], BufferTypeError, "'action'"),
    (np.ones((2, 3), np.int64), BufferInputError, "'action' shape"),
])
def test_incompatible_inputs_name_the_field(value, err, match):
    buf = ExperienceBuffer(10, seed=0, fields={"obs": ((4,), "float32"), "action": ((), "int64")})
    with pytest.raises(err, match=match):
        buf.extend({"obs": np.ones((2, 4), np.float32), "action": value})
    assert len(buf) == 0
    with pytest.raises(BufferInputError, match="different batch sizes"):
        buf.extend({"obs": np.ones((2, 4)), "action": [1, 2, 3]})
    with pytest.raises(BufferInputError, match="missing \\['action'\\]"):
        buf.extend({"obs": np.ones((2, 4))})


def test_bad_field_declarations():
    with pytest.raises(BufferTypeError, match="dtype"):
        ExperienceBuffer(4, fields={"x": ((), "not-a-dtype")})
    with pytest.raises(BufferInputError, match="shape"):
        ExperienceBuffer(4, fields={"x": ((0,), "float32")})
    with pytest.raises(BufferTypeError):
        ExperienceBuffer(4, fields={"x": "float32"})
    assert ExperienceBuffer(4, fields={"x": {"shape": 2, "dtype": torch.bfloat16}}).fields == {"x": ((2,), torch.bfloat16)}


def test_torch_only_dtypes_and_empty_checkpoint_keep_declared_fields():
    buf = ExperienceBuffer(4, seed=0, fields={"x": ((2,), torch.bfloat16), "y": ((), "float16")})
    buf.extend({"x": [[1.5, 2.0]], "y": [0.25]})
    out = buf.sample(3)
    assert out["x"].dtype == torch.bfloat16 and out["x"][0].tolist() == [1.5, 2.0] and out["y"].tolist() == [0.25] * 3
    empty = ExperienceBuffer(4, seed=0, fields={"x": ((2,), "float32")})
    empty.load_state_dict(ExperienceBuffer(4, seed=0).state_dict())
    assert empty.fields == {"x": ((2,), torch.float32)}


def test_auto_placement_and_help_show_the_api():
    buf = ExperienceBuffer(4, placement="auto")
    assert buf.placement == ("cuda" if torch.cuda.is_available() else "cpu_pageable")
    text = pydoc.render_doc(ExperienceBuffer)
    for word in ("fields", "beta", "update_priority", "extend", "sample", "state_dict", "auto"):
        assert word in text, word
    text = pydoc.render_doc(JanusBuffer)
    for word in ("update_priority", "put", "get", "flush", "close"):
        assert word in text, word


@pytest.mark.parametrize("env, where", [
    ({"PYTHONDONTWRITEBYTECODE": "1"}, "home/.cache/janus/numba"),  # a per-user folder, never next to the code
    ({"PYTHONDONTWRITEBYTECODE": "1", "NUMBA_CACHE_DIR": "mine"}, "mine"),  # where the user says
    ({}, "home/.cache/janus/numba"),  # the same folder when Python writes bytecode
])
def test_jit_cache_policy(env, where, tmp_path):
    """Cached in every environment (tests/buffer/test_jit_cache.py: that it is written and loaded)."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    base = {k: v for k, v in os.environ.items() if k not in ("PYTHONDONTWRITEBYTECODE", "NUMBA_CACHE_DIR",
                                                             "XDG_CACHE_HOME")}
    env = {k: (str(tmp_path / v) if k == "NUMBA_CACHE_DIR" else v) for k, v in env.items()}
    src = str(Path(__file__).resolve().parents[2] / "src")
    code = "import janus.buffer.kernels.replay as k, janus.buffer.kernels.cache as c; print(k._JIT['cache'], c.cache_dir())"
    out = subprocess.run([sys.executable, "-c", code], env={**base, **env, "PYTHONPATH": src,
                                                             "HOME": str(tmp_path / "home")},
                         capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["True", str(tmp_path / where)]
