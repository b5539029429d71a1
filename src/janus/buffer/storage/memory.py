"""Host memory for buffers: huge pages, memory reused for large results, failed allocations told apart.

Huge pages for large tensors (:func:`advise_huge_pages`), and memory for large results that is used
again once the result it last held is garbage (:class:`ResultMemory`); :func:`is_out_of_memory`
tells torch (or Python) failing to allocate from any other error.

A result in fresh memory pays for its pages before the copy writes them: the OS maps and zeroes
every page on first touch, which for a batch of images costs about as much as the copy itself.
glibc maps allocations of 32 MiB and more afresh on every call, and below that reuses freed
memory only as its heap happens to lie; the same sample of 256 Atari transitions (14 MiB) took
0.85 ms in one process and 1.25 ms in the next (docs/design.md; docs/benchmarks-log.md,
"Before: large results reuse their memory"). A :class:`ResultMemory` keeps the last few large
buffers whose results were dropped and hands them out again.

A buffer is handed out only when nothing can still read its previous result. Each hand-out is a
new numpy array over the buffer, whose base is a ``memoryview``: numpy makes every view, slice and
``torch.from_numpy`` tensor of it keep *that array* alive (it does not look through a
``memoryview``), so its finalizer, which returns the buffer, runs only after the last of them is
gone, whatever thread drops it.
"""

from __future__ import annotations

import ctypes
import mmap
import sys
import weakref
from collections import deque
from typing import Any

import numpy as np
import torch

# Host tensors from this size on are advised onto transparent huge pages (numpy does the same for
# its arrays): first writes fault in 2 MiB pages instead of 4 KiB ones, and random row reads miss
# the TLB less. A multi-GB ring fills several times faster, and a large gather result, which
# malloc often maps afresh for every call (always from 32 MiB, glibc's largest mmap threshold), is
# written ~4x faster (benchmarks/buffer_peers.py). Where malloc reuses mapped memory instead, the
# madvise call costs ~2%.
HUGE_PAGE_MIN_BYTES = 4 << 20
_MADV_HUGEPAGE = 14


def _load_madvise() -> Any:
    """libc ``madvise`` where transparent huge pages are opt-in (``[madvise]``), else ``None``."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        with open("/sys/kernel/mm/transparent_hugepage/enabled") as f:
            if "[madvise]" not in f.read():
                return None  # "always": nothing to ask; "never": nothing to get
        madvise = ctypes.CDLL(None, use_errno=True).madvise
    except (OSError, AttributeError):
        return None
    madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    madvise.restype = ctypes.c_int
    return madvise


_madvise = _load_madvise()


def advise_huge_pages(t: torch.Tensor) -> torch.Tensor:
    """Best effort: back a large, not yet written CPU tensor with transparent huge pages."""
    nbytes = t.numel() * t.element_size()
    if _madvise is not None and nbytes >= HUGE_PAGE_MIN_BYTES and t.device.type == "cpu":
        start = -(-t.data_ptr() // mmap.PAGESIZE) * mmap.PAGESIZE
        stop = (t.data_ptr() + nbytes) // mmap.PAGESIZE * mmap.PAGESIZE
        _madvise(start, stop - start, _MADV_HUGEPAGE)  # a hint: failure changes nothing
    return t


class ResultMemory:
    """A small cache of flat byte buffers for large results (one per :class:`RingStorage`).

    Holds at most ``keep`` idle buffers, the most recently released; an older one is freed. Safe
    to use from several threads: it only appends to and pops from a ``deque``.
    """

    def __init__(self, keep: int = 2) -> None:
        if keep < 1:
            raise ValueError(f"keep must be >= 1, got {keep}")
        self._idle: deque[np.ndarray] = deque(maxlen=keep)

    def take(self, nbytes: int) -> np.ndarray:
        """A flat uint8 array of ``nbytes`` (uninitialised) that no live result shares."""
        idle, buffer = self._idle, None
        for _ in range(len(idle)):  # find one of this size; put the others back
            try:
                candidate = idle.popleft()
            except IndexError:  # another thread took the last one
                break
            if candidate.nbytes == nbytes:
                buffer = candidate
                break
            idle.append(candidate)
        if buffer is None:
            buffer = advise_huge_pages(torch.from_numpy(np.empty(nbytes, np.uint8))).numpy()
        handed = np.frombuffer(buffer.data, np.uint8)  # .data: the array's memoryview
        weakref.finalize(handed, idle.append, buffer).atexit = False
        return handed

    @property
    def idle_bytes(self) -> int:
        """Bytes held by buffers waiting to be handed out again."""
        return sum(b.nbytes for b in list(self._idle))


def is_out_of_memory(exc: BaseException) -> bool:
    """Whether ``exc`` is torch (or Python) failing to allocate memory (host, pinned or GPU)."""
    text = str(exc)
    return isinstance(exc, (MemoryError, torch.OutOfMemoryError)) or any(
        s in text for s in ("can't allocate memory", "out of memory", "overflow")
    )
