"""The shared-memory slot ring and parameter store, across real processes."""

from __future__ import annotations

import multiprocessing as mp
import os
import time

import numpy as np
import pytest

from janus.runtime.shm import Layout, ParamStore, RingClosed, SlotRing, unlink_segment

SHM = "/dev/shm"


def segments() -> set[str]:
    return {n for n in os.listdir(SHM) if n.startswith("janus-")} if os.path.isdir(SHM) else set()


def piece(i: int) -> dict[str, np.ndarray]:
    return {"obs": np.full((4, 2, 3), i, np.float32), "id": np.full((4, 2), i, np.int64), "flag": np.array([i % 2], np.bool_)}


def _produce(name: str, layout: Layout, slots: int, n: int, conn) -> None:
    ring = SlotRing.attach(name, layout, slots)
    for i in range(n):
        slot = ring.write(piece(i), wait=lambda: True)
        conn.send(slot)
    conn.send(None)
    ring.close()


def test_ring_moves_every_piece_in_order_through_wraparound_and_backpressure() -> None:
    layout = Layout.of(piece(0))
    ring = SlotRing.create(layout, slots=3)
    mine, theirs = mp.get_context("spawn").Pipe()
    proc = mp.get_context("spawn").Process(target=_produce, args=(ring.name, layout, 3, 40, theirs))
    proc.start()
    try:
        seen = []
        while (slot := mine.recv()) is not None:
            if len(seen) % 7 == 0:
                time.sleep(0.02)  # a slow consumer: the producer must wait for free slots, not overwrite
            got = ring.read(slot)
            seen.append(int(got["id"][0, 0]))
            assert all(np.array_equal(got[k], v) for k, v in piece(seen[-1]).items()), "a torn or overwritten slot"
        assert seen == list(range(40))
    finally:
        proc.join(10)
        ring.close()
        ring.unlink()
    assert proc.exitcode == 0 and ring.name.lstrip("/") not in segments()


def test_full_ring_gives_up_when_told_to() -> None:
    ring = SlotRing.create(Layout.of(piece(0)), slots=2)
    try:
        ring.write(piece(0), wait=lambda: True)
        ring.write(piece(1), wait=lambda: True)
        assert ring.free_slots() == 0
        with pytest.raises(RingClosed):
            ring.write(piece(2), wait=lambda: False)
        assert int(ring.read(0)["id"][0, 0]) == 0 and ring.free_slots() == 1
        assert ring.write(piece(2), wait=lambda: False) == 0  # the freed slot is reused
    finally:
        ring.close()
        ring.unlink()


def test_layout_rejects_other_shapes_and_dtypes() -> None:
    layout = Layout.of(piece(0))
    assert layout.fits(piece(5))
    assert not layout.fits({**piece(0), "obs": np.zeros((4, 2, 3), np.float64)})
    assert not layout.fits({**piece(0), "obs": np.zeros((5, 2, 3), np.float32)})
    assert not layout.fits({k: v for k, v in piece(0).items() if k != "flag"})


def _read_versions(name: str, layout: Layout, reads: int, conn) -> None:
    store = ParamStore.attach(name, layout)
    conn.send("ready")
    torn, last = 0, -1
    for _ in range(reads):
        version, arrays = store.read()
        # every element of every array equals the version it was published as
        if any(not np.all(a == version) for a in arrays.values()):
            torn += 1
        assert version >= last
        last = version
    store.close()
    conn.send((torn, last))


def test_param_store_readers_never_see_a_torn_version() -> None:
    arrays = {"w": np.zeros((256, 256), np.float32), "b": np.zeros(256, np.float32)}
    store = ParamStore.create(arrays)
    # version 0 exists before the reader starts: an unpublished store (version -1, zeros) is not a tear
    store.publish(0, {k: np.zeros_like(a) for k, a in arrays.items()})
    ctx = mp.get_context("spawn")
    mine, theirs = ctx.Pipe()
    proc = ctx.Process(target=_read_versions, args=(store.name, store.layout, 500, theirs))
    proc.start()
    try:
        assert mine.recv() == "ready"
        version = 1
        while not mine.poll():  # publish while the reader reads, so copies overlap writes
            store.publish(version, {k: np.full_like(a, version) for k, a in arrays.items()})
            version += 1
            time.sleep(0)  # yield now and then: a writer that never pauses starves the reader's retries
        torn, last = mine.recv()
        assert torn == 0 and 0 <= last < version
    finally:
        proc.join(10)
        store.close()
        store.unlink()
    other = ParamStore.create(arrays)
    try:
        with pytest.raises(ValueError, match="layout"):
            other.publish(1, {"w": np.zeros(3, np.float32), "b": arrays["b"]})
    finally:
        other.close()
        other.unlink()


def test_unlink_segment_removes_a_leftover_and_ignores_a_missing_one() -> None:
    ring = SlotRing.create(Layout.of(piece(0)), slots=1)
    name = ring.name
    ring.close()
    assert unlink_segment(name) is True
    assert unlink_segment(name) is False
    assert name.lstrip("/") not in segments()
