"""Sequences as rows of the ExperienceBuffer: items shaped ``[L, ...]`` (what R2D2 and recurrent PPO
store), with the recurrent state at each sequence's start beside them.

Each operation on such rows is ONE call into the compiled kernels, as for transitions: a piece
``[1, rows, L, ...]`` put into a JanusBuffer is one ``extend``; a uniform or prioritized sample of B
rows is one sample kernel; a priority update is one kernel; none loops over rows or steps in Python.
Counted by wrapping every kernel of :mod:`janus.buffer.kernels.replay` (and the compiled code a
sample calls directly). Contents are checked row by row: each row's values encode its key and step.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
import torch

from janus.buffer.kernels import native
from janus.buffer.pipeline import JanusBuffer
from janus.buffer.replay import experience
from janus.buffer.replay.experience import ExperienceBuffer
from janus.buffer.settings import JanusConfig

L = 8  # steps per sequence
STATE = 6  # recurrent state size (an LSTM of 3: h then c)
IMAGE = (84, 84)


class Counted:
    """A compiled kernel (or its compiled code) that records each call's name."""

    def __init__(self, fn: Any, name: str, calls: list[str]) -> None:
        self.fn, self.name, self.calls = fn, name, calls

    def __call__(self, *args: Any) -> Any:
        self.calls.append(self.name)
        return self.fn(*args)

    def __getattr__(self, attr: str) -> Any:  # the dispatcher's own attributes (compile ...)
        return getattr(self.fn, attr)


class KernelModule:
    """The kernels module, every compiled kernel in it counted."""

    def __init__(self, real: Any, calls: list[str]) -> None:
        self._real, self._calls = real, calls

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._real, name)
        return Counted(attr, name, self._calls) if hasattr(attr, "py_func") else attr


@pytest.fixture
def kernel_calls(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """The names of the kernel calls made while the test runs (cleared by the test as it goes)."""
    calls: list[str] = []
    monkeypatch.setattr(native, "_KERNELS", KernelModule(native.kernels(), calls))

    def compiled(kernel: Any, *args: Any) -> Counted:
        return Counted(native.compiled(kernel.fn, *args), kernel.name, calls)

    monkeypatch.setattr(experience, "compiled", compiled)
    yield calls


def sequences(first_key: int, rows: int, image: bool = False) -> dict[str, np.ndarray]:
    """``rows`` sequences whose values say which key and step they are: ``obs[r, t] = key * 100 + t``."""
    keys = np.arange(first_key, first_key + rows)
    steps = keys[:, None] * 100 + np.arange(L)[None, :]  # [rows, L]
    obs_shape = IMAGE if image else (4,)
    obs = np.broadcast_to(steps.reshape(rows, L, *[1] * len(obs_shape)), (rows, L, *obs_shape))
    return {
        "obs": (obs % 251).astype(np.uint8) if image else obs.astype(np.float32),
        "action": (steps % 3).astype(np.int64),
        "reward": steps.astype(np.float32) / 10,
        "mask": np.arange(L)[None, :] < L - (keys[:, None] % 3),  # padded tails after an episode end
        "state": np.repeat(keys[:, None].astype(np.float32), STATE, axis=1),  # the state at the sequence's start
    }


def fields(image: bool = False) -> dict[str, Any]:
    return {"obs": ((L, *(IMAGE if image else (4,))), "uint8" if image else "float32"), "action": ((L,), "int64"),
            "reward": ((L,), "float32"), "mask": ((L,), "bool"), "state": ((STATE,), "float32")}


def assert_rows_hold_their_keys(batch: dict[str, Any], image: bool = False) -> None:
    """Every sampled row is the sequence written under its key, whole."""
    keys = np.asarray(batch["index"].cpu() if isinstance(batch["index"], torch.Tensor) else batch["index"])
    expected = sequences(0, int(keys.max()) + 1, image)
    for name, values in expected.items():
        got = batch[name].cpu().numpy() if isinstance(batch[name], torch.Tensor) else batch[name]
        np.testing.assert_array_equal(got, values[keys], err_msg=name)


@pytest.mark.parametrize("image", [False, True], ids=["vec4", "img84"])
@pytest.mark.parametrize("sampler", ["uniform", "prioritized"])
def test_each_operation_on_sequence_rows_is_one_kernel_call(image: bool, sampler: str, kernel_calls: list[str]) -> None:
    buf = ExperienceBuffer(64, sampler=sampler, seed=0, fields=fields(image))
    assert buf.extend(sequences(0, 40, image)).tolist() == list(range(40))
    assert kernel_calls == ["extend"]
    for batch_size in (1, 3, 32, 128):  # one at a time, the few-draws path and the overlapped path
        kernel_calls.clear()
        batch = buf.sample(batch_size)
        assert kernel_calls == ["sample_prioritized" if sampler == "prioritized" else "sample_uniform"]
        assert batch["obs"].shape == (batch_size, L, *(IMAGE if image else (4,)))
        assert batch["state"].shape == (batch_size, STATE) and batch["mask"].dtype == torch.bool
        assert_rows_hold_their_keys(batch, image)
        if sampler == "prioritized":
            assert batch["weight"].shape == (batch_size,)
            kernel_calls.clear()
            assert buf.update_priority(batch["index"], torch.rand(batch_size)) == batch_size
            assert kernel_calls == ["update_priority_at"]  # tensors, read in place
            kernel_calls.clear()
            buf.update_priority(batch["index"].numpy(), np.ones(batch_size))
            assert kernel_calls == ["update_priority"]
    kernel_calls.clear()
    assert_rows_hold_their_keys(buf.gather([0, 39, 17]), image)
    assert kernel_calls == ["gather"]


def test_sequence_rows_wrap_around_the_ring_in_one_call(kernel_calls: list[str]) -> None:
    buf = ExperienceBuffer(10, seed=1, fields=fields())
    buf.extend(sequences(0, 7))
    kernel_calls.clear()
    buf.extend(sequences(7, 7))  # keys 7-13: slots 7, 8, 9, then 0-3
    assert kernel_calls == ["extend"]
    batch = buf.gather(list(range(10)))
    assert batch["index"].tolist() == [10, 11, 12, 13, 4, 5, 6, 7, 8, 9]
    assert_rows_hold_their_keys(batch)


def test_priorities_are_per_sequence() -> None:
    """One sequence's priority decides how often the whole sequence is drawn: all but key 5 at 0."""
    buf = ExperienceBuffer(16, sampler="prioritized", seed=2, fields=fields())
    buf.extend(sequences(0, 12))
    priority = np.zeros(12)
    priority[5] = 1.0
    assert buf.update_priority(np.arange(12), priority) == 12
    batch = buf.sample(64)
    keys = batch["index"].numpy()
    assert (keys == 5).mean() > 0.95  # leaves (1e-6) ** 0.6 against 1: ~0.3% of the mass elsewhere
    assert_rows_hold_their_keys(batch)
    # the favoured sequence weighs (min leaf / its leaf) ** beta, the least
    assert batch["weight"][keys == 5].tolist() == pytest.approx([(1e-6**0.6 / 1.0) ** 0.4] * int((keys == 5).sum()))


def test_a_piece_of_sequences_goes_through_the_janus_buffer_in_one_call_each_way(kernel_calls: list[str]) -> None:
    """An actor's piece ``[1, rows, L, ...]`` (``time_major_dims=2``) is one extend of ``rows`` rows;
    the learner's batch of B sequences is one sample, its priorities one update."""
    cfg = JanusConfig(is_on_policy=False, overlap_collect=0, overlap_select=0, batch_size=16, buffer_capacity=64,
                      actor_buffer_size=4, prefetch=2, placement="cpu_pageable", learner_device="cpu")
    jb = JanusBuffer(cfg, sampler="prioritized", seed=3, min_size=16, fields=fields())
    try:
        for first in (0, 10, 20):
            kernel_calls.clear()
            jb.put({k: torch.from_numpy(v)[None] for k, v in sequences(first, 10).items()})  # [1, 10, L, ...]
            jb.flush()
            assert kernel_calls == ["extend"]
        assert len(jb.experience) == 30
        kernel_calls.clear()
        batch = jb.get(timeout=10)
        assert kernel_calls == ["sample_prioritized"]
        assert batch["obs"].shape == (16, L, 4) and batch["state"].shape == (16, STATE)
        assert_rows_hold_their_keys(batch)
        kernel_calls.clear()
        assert jb.update_priority(batch["index"], torch.rand(16)) == 16
        assert kernel_calls == ["update_priority_at"]
    finally:
        jb.close()


@pytest.mark.parametrize("sampler", ["uniform", "prioritized"])
def test_sequence_rows_checkpoint_and_resume(sampler: str, tmp_path: Any, kernel_calls: list[str]) -> None:
    """Saved and loaded, a buffer of sequences holds the same rows, trees and random state: the next
    samples are the same as the original buffer's, and still one kernel call each."""
    buf = ExperienceBuffer(20, sampler=sampler, seed=4, fields=fields(image=True))
    buf.extend(sequences(0, 13, image=True))
    buf.extend(sequences(13, 13, image=True))  # wrapped: keys 6-25 stored
    if sampler == "prioritized":
        buf.update_priority(np.arange(6, 26), np.linspace(0.1, 3.0, 20))
    buf.save(tmp_path / "seq.pt")
    loaded = ExperienceBuffer.load(tmp_path / "seq.pt")
    assert loaded.fields == buf.fields and loaded.total_written == 26 and len(loaded) == 20
    for _ in range(3):
        kernel_calls.clear()
        a, b = buf.sample(12), loaded.sample(12)
        assert len(kernel_calls) == 2  # one each
        assert a.keys() == b.keys()
        for k in a:
            assert torch.equal(a[k], b[k]), k
        assert_rows_hold_their_keys(b, image=True)
    loaded.extend(sequences(26, 3, image=True))  # resumed writing continues the keys
    assert_rows_hold_their_keys(loaded.gather([6, 7, 8]), image=True)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA not available on this machine")
@pytest.mark.parametrize("sampler", ["uniform", "prioritized"])
def test_sequence_rows_on_the_cuda_placement(sampler: str, tmp_path: Any) -> None:
    """The ``cuda`` placement (batched torch ops, no kernels) stores and samples the same rows."""
    buf = ExperienceBuffer(20, "cuda", sampler=sampler, seed=5, fields=fields())
    buf.extend(sequences(0, 13))
    buf.extend(sequences(13, 13))  # wrapped
    batch = buf.sample(16)
    assert batch["obs"].device.type == "cuda" and batch["obs"].shape == (16, L, 4)
    assert_rows_hold_their_keys(batch)
    if sampler == "prioritized":
        assert buf.update_priority(batch["index"], torch.rand(16, device="cuda")) > 0
    buf.save(tmp_path / "seq.pt")
    loaded = ExperienceBuffer.load(tmp_path / "seq.pt", placement="cpu_pageable")
    assert_rows_hold_their_keys(loaded.gather(list(range(20))))
