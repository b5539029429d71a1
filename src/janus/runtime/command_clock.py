"""The user's clock: when the command that asked for a run started (``solved_at_s`` counts from it).

A run's own clock (``wall_s``) starts when its components do; a user's starts when they press
enter. For ``janus train`` that is the process's start, read from the operating system (Linux's
``/proc/self/stat``), so the interpreter, the imports and the set-up all count; :func:`janus.train`
marks its call instead (:func:`command_started_here`), since its process may have run for hours.
Times are Unix seconds (``time.time()``), the same in every process of a run.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterator

_marked: list[float] = []
"""The starts marked by :func:`command_started_here` (innermost last)."""
_PROCESS_START: float | None = None


def process_start() -> float | None:
    """When this process started (Unix seconds), from ``/proc`` where the OS has it, else None."""
    global _PROCESS_START
    if _PROCESS_START is None:
        try:
            with open("/proc/self/stat", "rb") as f:
                # the fields after the command name, which may hold spaces and parentheses
                fields = f.read().rsplit(b")", 1)[1].split()
            ticks = int(fields[19])  # field 22: start time, in clock ticks after boot
            with open("/proc/uptime", "rb") as f:
                uptime = float(f.read().split()[0])
            _PROCESS_START = time.time() - (uptime - ticks / os.sysconf("SC_CLK_TCK"))
        except (OSError, ValueError, IndexError):
            return None
    return _PROCESS_START


_IMPORTED_AT = time.time()  # the fallback where the OS does not say when the process started


def command_start() -> float:
    """When the command being run started (Unix seconds): the innermost :func:`command_started_here`,
    else the process's start (else the import of this module)."""
    if _marked:
        return _marked[-1]
    return process_start() or _IMPORTED_AT


@contextlib.contextmanager
def command_started_here(at: float | None = None) -> Iterator[float]:
    """Within this block, the command started ``at`` (now by default): a :func:`janus.train` call,
    one trial of ``janus tune``."""
    _marked.append(time.time() if at is None else at)
    try:
        yield _marked[-1]
    finally:
        _marked.pop()


def seconds_since_command(at: float | None = None) -> float:
    """Seconds from the command's start to ``at`` (now by default)."""
    return (time.time() if at is None else at) - command_start()
