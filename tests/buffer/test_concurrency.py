"""ExperienceBuffer under concurrent extend / sample / update_priority, and prioritized checkpoints."""

from __future__ import annotations

import math
import threading
from pathlib import Path

import pytest
import torch

from janus import ExperienceBuffer

ROW = 16  # every row is [key, key, ..., key]: a torn row would mix two keys


def _rows(start: int, n: int) -> dict[str, torch.Tensor]:
    keys = torch.arange(start, start + n, dtype=torch.float64)
    return {"row": keys.unsqueeze(1).repeat(1, ROW), "key": keys.clone()}


@pytest.mark.parametrize("sampler", ["uniform", "prioritized"])
def test_concurrent_extend_sample_update_keep_invariants(sampler: str) -> None:
    buf = ExperienceBuffer(capacity=512, sampler=sampler, seed=0)
    buf.extend(_rows(0, 64))
    errors: list[BaseException] = []
    stop = threading.Event()
    start = threading.Barrier(6)
    next_key = [64]
    key_lock = threading.Lock()

    def writer() -> None:
        start.wait()
        for _ in range(150):
            with key_lock:  # keys given out in order, as the buffer assigns them
                first = next_key[0]
                next_key[0] += 32
                written = buf.extend(_rows(first, 32))
            assert written.tolist() == list(range(first, first + 32))

    def reader() -> None:
        start.wait()
        while not stop.is_set():
            batch = buf.sample(64)
            rows, keys = batch["row"], batch["index"].to(torch.float64)
            assert torch.equal(rows, keys.unsqueeze(1).expand_as(rows)), "torn row or key mismatch"
            assert torch.equal(batch["key"], keys)
            if sampler == "prioritized":
                assert bool((batch["weight"] > 0).all()) and bool((batch["weight"] <= 1).all())
                buf.update_priority(batch["index"], torch.rand(64) + 0.01)

    def guarded(fn):
        def run() -> None:
            try:
                fn()
            except BaseException as exc:  # noqa: BLE001
                errors.append(exc)
                stop.set()
        return run

    writers = [threading.Thread(target=guarded(writer)) for _ in range(2)]
    readers = [threading.Thread(target=guarded(reader)) for _ in range(4)]
    for t in writers + readers:
        t.start()
    for t in writers:
        t.join(60)
    stop.set()
    for t in readers:
        t.join(60)
    assert not any(t.is_alive() for t in writers + readers)
    assert not errors, errors[0]
    assert buf.total_written == 64 + 2 * 150 * 32 and len(buf) == 512
    if sampler == "prioritized":
        leaves = buf.sampler.priorities(torch.arange(512))
        assert math.isclose(buf.sampler.total(), leaves.sum().item(), rel_tol=1e-9), "tree total equals the sum of its leaves"


def test_prioritized_checkpoint_samples_the_same_sequence(tmp_path: Path) -> None:
    buf = ExperienceBuffer(capacity=300, sampler="prioritized", seed=3, alpha=0.7, beta=0.5)
    buf.extend(_rows(0, 200))
    buf.extend(_rows(200, 200))  # wraps: keys 100..399 live
    batch = buf.sample(50)
    buf.update_priority(batch["index"], torch.linspace(0.1, 5, 50))
    buf.save(tmp_path / "per.pt")
    loaded = ExperienceBuffer.load(tmp_path / "per.pt")
    assert len(loaded) == len(buf) == 300 and loaded.total_written == 400
    for _ in range(5):
        a, b = buf.sample(64), loaded.sample(64)
        assert torch.equal(a["index"], b["index"]) and torch.equal(a["weight"], b["weight"])
        assert torch.equal(a["row"], b["row"])
    assert buf.update_priority(torch.tensor([0, 1]), torch.tensor([1.0, 1.0])) == 0, "overwritten keys are dropped"
