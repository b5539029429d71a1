"""``ExperienceBuffer(output="numpy")``: the same items, keys, weights and random sequence as the
torch output, as numpy arrays; errors where numpy cannot hold the result."""

from __future__ import annotations

import gc

import numpy as np
import pytest
import torch

from janus import ExperienceBuffer
from janus.errors import BufferInputError, CheckpointError, ConfigError

FIELDS = {"obs": ((3,), "float32"), "action": ((), "int64"), "reward": ((), "float32"), "done": ((), "bool")}


def pair(sampler: str, capacity: int = 50) -> tuple[ExperienceBuffer, ExperienceBuffer]:
    """A torch-output and a numpy-output buffer holding the same items (the ring wrapped once)."""
    bufs = tuple(ExperienceBuffer(capacity, sampler=sampler, seed=3, fields=FIELDS, output=out) for out in ("torch", "numpy"))
    rng = np.random.default_rng(0)
    for n in (30, 1, 40):
        data = {"obs": rng.normal(size=(n, 3)), "action": rng.integers(0, 4, n), "reward": rng.normal(size=n),
                "done": rng.random(n) < 0.2}
        keys = [b.extend(data) for b in bufs]
        assert isinstance(keys[0], torch.Tensor) and type(keys[1]) is np.ndarray
        np.testing.assert_array_equal(keys[0].numpy(), keys[1])
    return bufs  # type: ignore[return-value]


def assert_same(as_torch: dict, as_numpy: dict) -> None:
    assert as_torch.keys() == as_numpy.keys()
    for k, t in as_torch.items():
        a = as_numpy[k]
        assert type(a) is np.ndarray, k
        assert a.shape == tuple(t.shape) and a.dtype == t.numpy().dtype, k
        np.testing.assert_array_equal(a, t.numpy(), err_msg=k)


@pytest.mark.parametrize("sampler", ["uniform", "prioritized"])
def test_numpy_output_samples_the_same_items_in_the_same_sequence(sampler: str) -> None:
    t_buf, n_buf = pair(sampler)
    assert (t_buf.output, n_buf.output) == ("torch", "numpy")
    assert "output='numpy'" in repr(n_buf)
    for batch in (1, 7, 64):
        kw = {"beta": 0.9} if sampler == "prioritized" and batch == 7 else {}
        a, b = t_buf.sample(batch, **kw), n_buf.sample(batch, **kw)
        assert_same(a, b)
        if sampler == "prioritized":
            assert b["weight"].dtype == np.float32 and (b["weight"] <= 1).all()
            rng = np.random.default_rng(batch)
            prio = rng.random(batch) + 0.1
            # A batch's own index array goes straight back, as the tensor does.
            assert t_buf.update_priority(a["index"], torch.from_numpy(prio)) == n_buf.update_priority(b["index"], prio)
    if sampler == "prioritized":
        np.testing.assert_array_equal(t_buf.sampler.sum_t, n_buf.sampler.sum_t)


def test_numpy_output_gather_and_epoch_return_arrays() -> None:
    t_buf, n_buf = pair("uniform")
    slots = [0, 49, 7, 7]
    assert_same(t_buf.gather(torch.tensor(slots)), n_buf.gather(np.array(slots)))
    assert_same(t_buf.gather(torch.tensor(slots)), n_buf.gather(slots))
    t_batches, n_batches = list(t_buf.epoch(16)), list(n_buf.epoch(16))
    assert len(t_batches) == len(n_batches) == 4
    for a, b in zip(t_batches, n_batches):
        assert_same(a, b)
    assert sorted(np.concatenate([b["index"] for b in n_batches]).tolist()) == list(range(21, 71))


def test_numpy_priority_updates_drop_stale_keys_and_check_their_input() -> None:
    buf = ExperienceBuffer(10, sampler="prioritized", seed=0, fields={"x": ((), "float32")}, output="numpy")
    buf.extend({"x": np.arange(10.0)})
    old = buf.sample(5)["index"]
    buf.extend({"x": np.arange(10.0)})  # every old key is overwritten
    assert buf.update_priority(old, np.ones(5)) == 0
    assert buf.update_priority(buf.sample(4)["index"], np.full(4, 2.0, np.float32)) == 4
    fresh = np.arange(12, 16)  # distinct live keys
    assert buf.update_priority(fresh.astype(np.int32), [1.0, 2.0, 3.0, 4.0]) == 4  # other key dtypes convert
    leaf = buf.sampler.priorities(fresh % 10)
    np.testing.assert_allclose(leaf.numpy(), (np.array([1.0, 2.0, 3.0, 4.0]) + 1e-6) ** 0.6)
    # Strided views (every other key) are read as they are, not as contiguous memory.
    every_other = np.repeat(fresh, 2)[::2]
    assert buf.update_priority(every_other, np.array([5.0, 0, 6.0, 0, 7.0, 0, 8.0, 0])[::2]) == 4
    np.testing.assert_allclose(buf.sampler.priorities(fresh % 10).numpy(), (np.arange(5.0, 9.0) + 1e-6) ** 0.6)
    # Read-only, big-endian, half-precision and column priorities: the same leaves.
    for prio in (np.arange(1.0, 5.0), np.arange(1.0, 5.0).astype(">f8"), np.arange(1.0, 5.0).astype(np.float16),
                 np.arange(1.0, 5.0).reshape(4, 1)):
        buf.update_priority(fresh, np.zeros(4))
        prio.setflags(write=False)
        keys = fresh.copy()
        keys.setflags(write=False)
        assert buf.update_priority(keys, prio) == 4, prio.dtype
        np.testing.assert_allclose(buf.sampler.priorities(fresh % 10).numpy(), (np.arange(1.0, 5.0) + 1e-6) ** 0.6)
    with pytest.raises(BufferInputError, match="lengths differ"):
        buf.update_priority(fresh, np.ones(3))
    with pytest.raises(BufferInputError, match="lengths differ"):
        buf.update_priority(fresh[:3], np.ones(4, np.float32))
    assert buf.update_priority(fresh[:0], np.ones(0)) == 0
    with pytest.raises(BufferInputError, match="priority"):
        buf.update_priority(fresh, np.array([1.0, np.nan, 1.0, 1.0]))
    with pytest.raises(BufferInputError, match="index dtype"):
        buf.update_priority(fresh.astype(np.float64), np.ones(4))


def test_a_held_numpy_result_keeps_its_memory_from_later_samples() -> None:
    # Results of 4 MiB and more reuse dropped results' memory: a view must keep its memory alive.
    buf = ExperienceBuffer(300, seed=0, fields={"obs": ((64, 1024), "uint8")}, output="numpy")
    buf.extend({"obs": np.random.default_rng(0).integers(0, 256, (300, 64, 1024), dtype=np.uint8)})
    held = buf.sample(128)
    row = held["obs"][5]
    row_copy, address = row.copy(), held["obs"].ctypes.data
    del held
    gc.collect()
    addresses = set()
    for _ in range(6):
        out = buf.sample(128)
        addresses.add(out["obs"].ctypes.data)
        np.testing.assert_array_equal(out["obs"], buf.gather(out["index"] % 300)["obs"])
        del out
    assert address not in addresses
    np.testing.assert_array_equal(row, row_copy)


def test_numpy_output_is_refused_where_numpy_cannot_hold_the_result() -> None:
    with pytest.raises(ConfigError, match="output"):
        ExperienceBuffer(10, output="jax")
    with pytest.raises(BufferInputError, match="bfloat16"):
        ExperienceBuffer(10, fields={"x": ((2,), torch.bfloat16)}, output="numpy")
    buf = ExperienceBuffer(10, output="numpy")  # undeclared: the first extend fixes the fields
    with pytest.raises(BufferInputError, match="bfloat16"):
        buf.extend({"x": torch.zeros(3, 2, dtype=torch.bfloat16)})
    assert len(buf) == 0 and buf.fields == {}
    buf.extend({"x": np.zeros((3, 2), np.float32)})
    assert type(buf.sample(2)["x"]) is np.ndarray
    # auto: CUDA where available, but numpy arrays live in host memory.
    assert ExperienceBuffer(10, "auto", output="numpy").placement == "cpu_pageable"


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA: the cuda placement cannot be created here")
def test_numpy_output_with_the_cuda_placement_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="host memory"):
        ExperienceBuffer(10, "cuda", output="numpy")


def test_checkpoints_keep_the_output_and_load_can_change_it(tmp_path) -> None:
    _, n_buf = pair("prioritized")
    n_buf.save(tmp_path / "b.pt")
    again = ExperienceBuffer.load(tmp_path / "b.pt")
    assert again.output == "numpy"
    assert_same(ExperienceBuffer.load(tmp_path / "b.pt", output="torch").sample(5), again.sample(5))
    with pytest.raises(ConfigError, match="output"):
        ExperienceBuffer.load(tmp_path / "b.pt", output="list")
    bf = ExperienceBuffer(4, fields={"x": ((), torch.bfloat16)})
    bf.extend({"x": torch.ones(2, dtype=torch.bfloat16)})
    bf.save(tmp_path / "bf.pt")
    with pytest.raises(CheckpointError, match="output='torch'"):
        ExperienceBuffer.load(tmp_path / "bf.pt", output="numpy")
    with pytest.raises(CheckpointError, match="output='torch'"):
        ExperienceBuffer(4, output="numpy").load_state_dict(bf.state_dict())
