"""Shared-memory transport between processes of one node: a slot ring and a parameter store.

:class:`SlotRing` is the actor-side staging of the ``process`` backend: a worker writes each rollout
piece into the next free slot of a pre-allocated ring (one segment, fixed-size slots) and sends only
the slot index; the learner process copies the slot out and marks it consumed. One producer and one
consumer per ring, so two counters suffice: ``produced`` (the producer's own) and ``consumed``
(written only by the consumer, read by the producer), and a full ring is backpressure.

:class:`ParamStore` holds the latest parameter snapshot: the Trainer writes each version once; any
process attaches by name and reads it under a sequence lock (an odd sequence number means a write is
in progress; a reader retries until it saw the same even number before and after copying). Workers
poll the version counter instead of asking for parameters by message.

Both rely on aligned 8-byte stores being atomic and stores not being reordered with each other,
which holds on x86-64 (TSO); other architectures would need explicit fences.
"""

from __future__ import annotations

import errno
import itertools
import os
import re
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from multiprocessing import shared_memory
from typing import cast

import numpy as np

from janus.errors import JanusError

ALIGN = 64  # bytes: fields and slots start on cache-line boundaries
HEADER = 64  # bytes reserved for counters at the start of a segment


def _aligned(n: int) -> int:
    return (n + ALIGN - 1) // ALIGN * ALIGN


@dataclass(frozen=True)
class Layout:
    """Where each field of a fixed-shape record lives: ``(name, dtype, shape, offset)``."""

    fields: tuple[tuple[str, str, tuple[int, ...], int], ...]
    nbytes: int

    @staticmethod
    def of(arrays: Mapping[str, np.ndarray]) -> Layout:
        fields, offset = [], 0
        for name, a in arrays.items():
            a = np.asarray(a)
            fields.append((name, a.dtype.str, tuple(a.shape), offset))
            offset += _aligned(a.nbytes)
        return Layout(tuple(fields), max(offset, ALIGN))

    def fits(self, arrays: Mapping[str, np.ndarray]) -> bool:
        """Whether ``arrays`` have exactly this layout's names, dtypes and shapes."""
        if len(arrays) != len(self.fields):
            return False
        for name, dtype, shape, _ in self.fields:
            a = arrays.get(name)
            if a is None or np.asarray(a).dtype.str != dtype or tuple(np.shape(a)) != shape:
                return False
        return True

    def views(self, buf: memoryview, base: int) -> dict[str, np.ndarray]:
        """Numpy views of one record that starts at byte ``base`` of ``buf``."""
        out = {}
        for name, dtype, shape, offset in self.fields:
            dt = np.dtype(dtype)
            count = int(np.prod(shape, dtype=np.int64))
            out[name] = np.frombuffer(buf, dtype=dt, count=count, offset=base + offset).reshape(shape)
        return out


SHM_DIR = "/dev/shm"
"""Where POSIX shared memory lives as files (Linux); elsewhere segments cannot be listed."""
_NAME = re.compile(r"^janus-[a-z]+-([0-9a-f]{4})([0-9a-f]+)-[0-9a-f]+$")
_serial = itertools.count()


def _namespace_tag() -> str:
    """4 hex digits naming this process's PID namespace (``0000`` where there is none to read):
    a PID means a process only within its namespace, and containers can share ``/dev/shm``."""
    try:
        return f"{os.stat('/proc/self/ns/pid').st_ino & 0xFFFF:04x}"
    except OSError:
        return "0000"


def new_segment_name(prefix: str) -> str:
    """A fresh segment name, ``janus-<prefix>-<owner>-<serial>`` (``/dev/shm/...`` on Linux).

    ``<owner>`` is this process's PID namespace tag and PID (hex): the process that will unlink
    the segment, so :func:`remove_orphaned_segments` can tell a leftover of a dead run from a
    segment in use. At most 30 characters for ``prefix`` up to 6 letters (macOS's limit is 31).
    """
    owner = f"{_namespace_tag()}{os.getpid():x}"
    while True:
        name = f"janus-{prefix}-{owner}-{next(_serial):x}"
        if not os.path.exists(os.path.join(SHM_DIR, name)):  # a dead process of this PID left it
            return name


class SharedMemoryFull(JanusError, OSError):
    """``/dev/shm`` has no room for a segment the process backend needs (a container's default
    is 64 MiB)."""


def free_bytes(shm_dir: str = SHM_DIR) -> int | None:
    """Bytes free for this user in ``shm_dir`` (``None`` where it cannot be read)."""
    try:
        st = os.statvfs(shm_dir)
    except OSError:
        return None
    return st.f_bavail * st.f_frsize


def create_segment(name: str, size: int, what: str) -> shared_memory.SharedMemory:
    """A new segment of ``size`` bytes whose pages are reserved now.

    ``/dev/shm`` is a tmpfs: a segment larger than its free space is created without complaint,
    and the process that later touches a page past the limit dies of SIGBUS. So the space is
    checked first and reserved with ``posix_fallocate``; either failing is a
    :class:`SharedMemoryFull` that says how much ``what`` needs and what to do."""
    free = free_bytes()
    if free is not None and size > free:
        raise _full(size, what, free)
    shm = shared_memory.SharedMemory(name=name, create=True, size=size)
    path = os.path.join(SHM_DIR, shm.name.lstrip("/"))
    if hasattr(os, "posix_fallocate") and os.path.exists(path):
        fd = os.open(path, os.O_RDWR)
        try:
            os.posix_fallocate(fd, 0, size)
        except OSError as exc:
            if exc.errno not in (errno.ENOSPC, errno.ENOMEM, errno.EFBIG):
                return shm  # the filesystem cannot reserve (EOPNOTSUPP): keep the unreserved segment
            shm.close()
            shm.unlink()
            raise _full(size, what, free_bytes()) from None
        finally:
            os.close(fd)
    return shm


def _full(size: int, what: str, free: int | None) -> SharedMemoryFull:
    have = f"{free / 2**20:.1f} MiB are free" if free is not None else "it has no room"
    return SharedMemoryFull(
        f"the process backend needs {size / 2**20:.1f} MiB of shared memory in {SHM_DIR} for {what}, and "
        f"{have}: make it larger (docker run --shm-size=2g; a container's default is 64 MiB) or use --backend local")


def segment_owner(name: str) -> int | None:
    """The PID of the process that owns (and will unlink) the janus segment ``name``, if that
    process is in this PID namespace; None for any other name."""
    m = _NAME.match(name)
    if m is None or m.group(1) != _namespace_tag():
        return None
    return int(m.group(2), 16)


def segments_of(pids: Iterable[int], shm_dir: str = SHM_DIR) -> set[str]:
    """Names of the janus segments in ``shm_dir`` owned by the processes ``pids`` (a run's learner:
    it names every segment of its run), so that one run can be told apart from others on the machine."""
    wanted = set(pids)
    if not os.path.isdir(shm_dir):
        return set()
    return {n for n in os.listdir(shm_dir) if segment_owner(n) in wanted}


def remove_orphaned_segments(shm_dir: str = SHM_DIR) -> list[tuple[str, int]]:
    """Unlink the janus segments whose owner process no longer exists; returns ``(name, bytes)``.

    A run killed with SIGKILL together with Python's resource tracker (``kill -9`` of its process
    group, a job scheduler's kill) cannot unlink its segments, and ``/dev/shm`` holds them in RAM
    until reboot. Only segments of this user and this PID namespace whose owner PID is gone are
    removed; any other name (another namespace, a live owner, another program) is left alone.
    """
    if not os.path.isdir(shm_dir):
        return []
    removed: list[tuple[str, int]] = []
    for entry in os.scandir(shm_dir):
        owner = segment_owner(entry.name)
        if owner is None or _alive(owner):
            continue
        try:
            st = entry.stat(follow_symlinks=False)
            if st.st_uid != os.getuid():
                continue
            os.unlink(entry.path)
            removed.append((entry.name, st.st_size))
        except OSError:  # gone already, or not ours to remove
            continue
    return removed


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, someone else's
        return True
    return True


class _Segment:
    """One shared-memory segment and the int64 counters at its start (``self._counters``)."""

    def __init__(self, shm: shared_memory.SharedMemory, counters: int) -> None:
        self.shm = shm
        # the view is dropped (None) by close(), before the mapping closes; never used after that
        self._counters: np.ndarray = np.frombuffer(self._mapped(shm), dtype=np.int64, count=counters)

    @staticmethod
    def _mapped(shm: shared_memory.SharedMemory) -> memoryview:
        """The segment's memory (SharedMemory.buf is None only once closed, and then unused)."""
        return cast(memoryview, shm.buf)

    @property
    def name(self) -> str:
        return self.shm.name

    def close(self) -> None:
        """Unmap (idempotent); the counter view into the mapping is dropped first."""
        if self._counters is not None:
            self._counters = None  # type: ignore[assignment]  # a closed segment has no counters
            self.shm.close()

    def unlink(self) -> None:
        """Remove the segment (idempotent)."""
        try:
            self.shm.unlink()
        except FileNotFoundError:
            pass


class SlotRing(_Segment):
    """A ring of fixed-size slots in one shared-memory segment (one producer, one consumer).

    The producer creates it (:meth:`create`) from the layout of its first record; the consumer
    attaches by name (:meth:`attach`). ``unlink`` removes the segment; the consumer's process owns
    that, so a ring outlives a producer that was killed.
    """

    def __init__(self, shm: shared_memory.SharedMemory, layout: Layout, slots: int) -> None:
        super().__init__(shm, counters=1)  # [consumed]
        self.layout = layout
        self.slots = slots
        self.slot_bytes = _aligned(layout.nbytes)
        self.produced = 0  # producer side only

    @classmethod
    def create(cls, layout: Layout, slots: int, name: str | None = None) -> SlotRing:
        if slots < 1:
            raise ValueError(f"slots must be >= 1, got {slots}")
        size = HEADER + slots * _aligned(layout.nbytes)
        shm = create_segment(name or new_segment_name("ring"), size, f"a worker's {slots} rollout slots")
        ring = cls(shm, layout, slots)
        ring._counters[:] = 0
        return ring

    @classmethod
    def attach(cls, name: str, layout: Layout, slots: int) -> SlotRing:
        return cls(shared_memory.SharedMemory(name=name), layout, slots)

    @property
    def consumed(self) -> int:
        return int(self._counters[0])

    def free_slots(self) -> int:
        return self.slots - (self.produced - self.consumed)

    def write(self, arrays: Mapping[str, np.ndarray], wait: Callable[[], bool], poll_s: float = 0.0002) -> int:
        """Copy one record into the next slot; returns the slot index.

        While the ring is full, calls ``wait()`` between polls; it returns False to give up
        (the run is stopping), and then ``write`` raises :class:`RingClosed`.
        """
        while self.free_slots() <= 0:
            if not wait():
                raise RingClosed(f"ring {self.name} is full and its consumer is gone")
            time.sleep(poll_s)
        slot = self.produced % self.slots
        for name, view in self.layout.views(self._mapped(self.shm), HEADER + slot * self.slot_bytes).items():
            np.copyto(view, arrays[name], casting="no")
        self.produced += 1
        return slot

    def read(self, slot: int) -> dict[str, np.ndarray]:
        """Copy the record in ``slot`` out of the ring and mark it consumed (consumer side)."""
        out = {k: v.copy() for k, v in self.layout.views(self._mapped(self.shm), HEADER + slot * self.slot_bytes).items()}
        self._counters[0] += 1
        return out


class RingClosed(RuntimeError):
    """A producer gave up waiting for a free slot."""


@dataclass(frozen=True)
class ShmParams:
    """A picklable handle to a parameter version in a :class:`ParamStore`."""

    version: int
    store: str
    layout: Layout


class ParamStore(_Segment):
    """The latest parameter snapshot in shared memory, published once per version.

    Header: ``[seq, version]`` (int64). The writer makes ``seq`` odd, copies, sets ``version``,
    makes ``seq`` even again. Readers copy under that sequence lock.
    """

    def __init__(self, shm: shared_memory.SharedMemory, layout: Layout) -> None:
        super().__init__(shm, counters=2)  # [seq, version]
        self.layout = layout

    @classmethod
    def create(cls, arrays: Mapping[str, np.ndarray]) -> ParamStore:
        layout = Layout.of(arrays)
        shm = create_segment(new_segment_name("params"), HEADER + layout.nbytes, "the published parameters")
        store = cls(shm, layout)
        store._header[:] = (0, -1)
        return store

    @classmethod
    def attach(cls, name: str, layout: Layout) -> ParamStore:
        return cls(shared_memory.SharedMemory(name=name), layout)

    @property
    def _header(self) -> np.ndarray:
        assert self._counters is not None, "the store was closed"
        return self._counters

    @property
    def version(self) -> int:
        """The version last published (-1: none yet)."""
        return int(self._header[1])

    def publish(self, version: int, arrays: Mapping[str, np.ndarray]) -> ShmParams:
        """Write ``arrays`` as ``version`` (one writer only)."""
        if not self.layout.fits(arrays):
            raise ValueError("parameter shapes changed between versions; the store holds one layout")
        self._header[0] += 1  # odd: writing
        for name, view in self.layout.views(self._mapped(self.shm), HEADER).items():
            np.copyto(view, arrays[name], casting="no")
        self._header[1] = version
        self._header[0] += 1  # even: consistent
        return ShmParams(version, self.name, self.layout)

    def read(self) -> tuple[int, dict[str, np.ndarray]]:
        """A consistent copy of the latest version: ``(version, arrays)``."""
        while True:
            before = int(self._header[0])
            if before % 2:
                time.sleep(0)
                continue
            arrays = {k: v.copy() for k, v in self.layout.views(self._mapped(self.shm), HEADER).items()}
            version = int(self._header[1])
            if int(self._header[0]) == before:
                return version, arrays


def unlink_segment(name: str) -> bool:
    """Remove the segment ``name`` if it exists (one a killed producer may have left); True if it did."""
    try:
        shm = shared_memory.SharedMemory(name=name)
    except FileNotFoundError:
        return False
    shm.close()
    shm.unlink()
    return True
