"""The shared-memory slot ring and parameter store, across real processes."""

from __future__ import annotations

import multiprocessing as mp
import os
import time
from pathlib import Path

import numpy as np
import pytest

from janus.runtime.shm import Layout, ParamStore, RingClosed, SlotRing, segments_of, unlink_segment

SHM = "/dev/shm"


def segments() -> set[str]:
    """This process's segments (other janus runs on the machine have their own, and come and go)."""
    return segments_of([os.getpid()])


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


def _dead_pid() -> int:
    """The PID of a process that has exited (and been reaped)."""
    proc = mp.get_context("spawn").Process(target=time.sleep, args=(0,))
    proc.start()
    proc.join(30)
    return proc.pid


def test_segments_of_a_dead_owner_are_removed_and_every_other_is_left_alone(tmp_path: Path) -> None:
    """In a folder of its own (a janus run starting beside it would remove the dead owner's
    segments from /dev/shm first)."""
    from janus.runtime import shm

    ns, dead = shm._namespace_tag(), _dead_pid()
    other_ns = f"{(int(ns, 16) + 1) & 0xFFFF:04x}"
    names = {
        "dead": f"janus-ring-{ns}{dead:x}-0", "dead_params": f"janus-params-{ns}{dead:x}-1",
        "live": f"janus-ring-{ns}{os.getpid():x}-0",  # this process: in use
        "other_namespace": f"janus-ring-{other_ns}{dead:x}-0",  # its PID means nothing here
        "old_format": "janus-ring-0123456789ab", "not_janus": f"other-ring-{ns}{dead:x}-0",
    }
    for name in names.values():
        (tmp_path / name).write_bytes(b"\0" * 4096)
    removed = shm.remove_orphaned_segments(str(tmp_path))
    assert sorted(removed) == sorted([(names["dead"], 4096), (names["dead_params"], 4096)])
    left = set(os.listdir(tmp_path))
    assert left == {names[k] for k in ("live", "other_namespace", "old_format", "not_janus")}
    assert shm.remove_orphaned_segments(str(tmp_path)) == []
    assert shm.segments_of([dead, os.getpid()], str(tmp_path)) == {names["live"]}


def test_segments_are_told_apart_by_their_owner() -> None:
    """A run's segments are named by its learner's PID: a test (or a tool) can list one run's
    segments while other janus runs share /dev/shm."""
    from janus.runtime import shm

    ns = shm._namespace_tag()
    other_ns = f"{(int(ns, 16) + 1) & 0xFFFF:04x}"
    assert shm.segment_owner(shm.new_segment_name("ring")) == os.getpid()
    assert shm.segment_owner(f"janus-params-{ns}{12345:x}-3") == 12345
    assert shm.segment_owner(f"janus-ring-{other_ns}{os.getpid():x}-0") is None  # a PID of another namespace
    assert shm.segment_owner("janus-ring-0123456789ab") is None and shm.segment_owner("psm_1234") is None
    ring = SlotRing.create(Layout.of(piece(0)), slots=2)
    try:
        assert ring.name.lstrip("/") in segments()
        assert ring.name.lstrip("/") not in shm.segments_of([os.getppid()])
    finally:
        ring.close()
        ring.unlink()
    assert ring.name.lstrip("/") not in segments()


def test_segment_names_name_their_owner_and_stay_within_macos_limit() -> None:
    from janus.runtime import shm

    a, b = shm.new_segment_name("params"), shm.new_segment_name("params")
    assert a != b and len(a) <= 30 and len(shm.new_segment_name("ring")) <= 30
    m = shm._NAME.match(a)
    assert m is not None and m.group(1) == shm._namespace_tag() and int(m.group(2), 16) == os.getpid()


@pytest.mark.skipif(not os.path.isdir(SHM), reason="needs /dev/shm (Linux) to list segments")
def test_a_name_left_by_a_dead_process_of_the_same_pid_is_not_reused() -> None:
    from janus.runtime import shm

    taken = shm.new_segment_name("ring")  # what this process would be handed next, one serial back
    prefix, serial = taken.rsplit("-", 1)
    stale = f"{prefix}-{int(serial, 16) + 1:x}"
    with open(os.path.join(SHM, stale), "wb"):
        pass
    try:
        assert shm.new_segment_name("ring") not in (taken, stale)
    finally:
        os.unlink(os.path.join(SHM, stale))


def test_a_segment_larger_than_the_free_space_is_refused_with_what_to_do(monkeypatch: pytest.MonkeyPatch) -> None:
    """tmpfs creates an oversized segment without complaint; the process touching a page past the
    limit then dies of SIGBUS. A container's /dev/shm is 64 MiB by default."""
    from janus.runtime import shm

    before = segments()
    monkeypatch.setattr(shm, "free_bytes", lambda shm_dir=shm.SHM_DIR: 4096)
    with pytest.raises(shm.SharedMemoryFull, match=r"needs 0\.1 MiB of shared memory in /dev/shm for the "
                                                   r"published parameters, and 0\.0 MiB are free.*--shm-size.*--backend local"):
        ParamStore.create({"w": np.zeros(20_000, np.float32)})
    with pytest.raises(shm.SharedMemoryFull, match="for a worker.s 8192 rollout slots"):
        SlotRing.create(Layout.of(piece(0)), 8 * 1024)
    assert segments() == before


@pytest.mark.skipif(not hasattr(os, "posix_fallocate") or not os.path.isdir(SHM), reason="needs Linux /dev/shm")
def test_a_segment_has_its_pages_reserved_when_made() -> None:
    """posix_fallocate: the space is taken at creation (an ENOSPC there is a clear error), not at a
    later write (a SIGBUS)."""
    ring = SlotRing.create(Layout.of(piece(0)), 64)
    try:
        st = os.stat(os.path.join(SHM, ring.name))
        assert st.st_blocks * 512 >= st.st_size > 0
    finally:
        ring.close()
        ring.unlink()
