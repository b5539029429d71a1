"""Large results' memory is used again, but never while anything can still read the last result."""

from __future__ import annotations

import gc
import threading

import numpy as np
import pytest
import torch

from janus import ExperienceBuffer
from janus.buffer.storage.memory import ResultMemory

ROW = (64, 1024)  # 64 KiB of uint8 per item: a sample of 64 or more items is a "large" result


def test_a_buffer_comes_back_only_after_every_view_of_it_is_gone() -> None:
    memory = ResultMemory(keep=2)
    first = memory.take(1 << 20)
    address = first.ctypes.data
    kept = [np.ndarray((16,), np.float32, first, 64), first[100:200], torch.from_numpy(first[8:16]).view(torch.int64)]
    del first
    while kept:
        gc.collect()
        assert memory.idle_bytes == 0  # a view of it still lives
        kept.pop()
    gc.collect()
    assert memory.idle_bytes == 1 << 20
    assert memory.take(1 << 20).ctypes.data == address


def test_only_a_buffer_of_the_same_size_is_used_and_at_most_keep_wait() -> None:
    memory = ResultMemory(keep=2)
    a, b, c = memory.take(1000), memory.take(2000), memory.take(3000)
    addresses = {1000: a.ctypes.data, 2000: b.ctypes.data, 3000: c.ctypes.data}
    del a, b, c
    gc.collect()
    assert memory.idle_bytes == 2000 + 3000  # the oldest released (1000) was freed
    d = memory.take(2000)
    assert d.ctypes.data == addresses[2000] and d.nbytes == 2000
    assert memory.take(1500).nbytes == 1500  # no idle buffer of this size: a new one
    with pytest.raises(ValueError, match="keep"):
        ResultMemory(keep=0)


def filled_buffer(sampler: str, capacity: int = 300) -> ExperienceBuffer:
    buf = ExperienceBuffer(capacity, sampler=sampler, seed=0, fields={"obs": (ROW, torch.uint8), "reward": ((), torch.float32)})
    gen = torch.Generator().manual_seed(1)
    for _ in range(3):
        n = capacity // 3
        buf.extend({"obs": torch.randint(0, 256, (n, *ROW), dtype=torch.uint8, generator=gen), "reward": torch.randn(n, generator=gen)})
    return buf


def assert_matches_storage(buf: ExperienceBuffer, batch: dict[str, torch.Tensor]) -> None:
    again = buf.gather(batch["index"] % buf.capacity)
    assert torch.equal(batch["obs"], again["obs"]) and torch.equal(batch["reward"], again["reward"])


@pytest.mark.parametrize("sampler", ["uniform", "prioritized"])
def test_held_results_and_their_views_keep_their_values_while_later_samples_reuse_memory(sampler: str) -> None:
    buf = filled_buffer(sampler)
    held = buf.sample(128)
    held_at = held["obs"].data_ptr()
    snapshot = {k: v.clone() for k, v in held.items()}
    row = held["obs"][5]  # a view outlives its dict
    row_copy = row.clone()
    addresses = set()
    for _ in range(20):
        out = buf.sample(128)
        addresses.add(out["obs"].data_ptr())
        assert_matches_storage(buf, out)
        del out
    assert held_at not in addresses  # never handed out while held
    assert len(addresses) <= 2  # dropped results' memory was used again
    for k in held:
        assert torch.equal(held[k], snapshot[k]), k
    del held
    gc.collect()
    for _ in range(5):
        addresses.add(buf.sample(128)["obs"].data_ptr())
    assert torch.equal(row, row_copy)  # the view still holds its memory
    assert held_at not in addresses
    del row
    gc.collect()
    assert buf._storage.result_memory.idle_bytes > 0
    assert buf.sample(128)["obs"].data_ptr() in addresses | {held_at}  # used again, not a fresh buffer


@pytest.mark.parametrize("sampler", ["uniform", "prioritized"])
def test_threads_that_hold_results_never_see_them_overwritten(sampler: str) -> None:
    buf = filled_buffer(sampler)
    errors: list[str] = []

    def learner(seed: int) -> None:
        gen = torch.Generator().manual_seed(seed)
        held: list[dict[str, torch.Tensor]] = []
        for i in range(25):
            held.append(buf.sample(64 + int(torch.randint(0, 3, (), generator=gen)) * 32))
            if len(held) > 3:
                held.pop(int(torch.randint(0, len(held), (), generator=gen)))
            for batch in held:
                again = buf.gather(batch["index"] % buf.capacity)
                if not torch.equal(batch["obs"], again["obs"]):
                    errors.append(f"thread {seed}, call {i}: a held batch changed")
                    return

    threads = [threading.Thread(target=learner, args=(s,)) for s in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not any(t.is_alive() for t in threads)
    assert errors == []
