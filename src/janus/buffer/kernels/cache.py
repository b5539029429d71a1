"""Where the replay kernels' compiled code is kept on disk, and the one line said when they compile.

Numba compiles each kernel at its first call (seconds for all of them, up to ~20 s on a busy
machine) and can keep the machine code on disk. Left to itself it writes ``__pycache__`` next to
the code, which ``PYTHONDONTWRITEBYTECODE=1`` (Docker images, many CI machines) rules out, so every
process compiled again. Here the kernels are cached in one folder per user instead, whatever the
environment:

* ``NUMBA_CACHE_DIR`` when it is set (respected as given; numba reads it);
* else ``$XDG_CACHE_HOME/janus/numba`` (``~/.cache/janus/numba`` without ``XDG_CACHE_HOME``);
* else, when that cannot be written, ``<tmp>/janus-numba-<uid>`` (private to the user), said in
  one line on stderr; when nothing can be written, no cache (said too: every process compiles).

Only janus's kernels are pointed there (the folder is numba's ``config.CACHE_DIR`` only while they
are decorated): numba code of the caller keeps numba's own defaults, and no environment variable
is changed. Every process of a run (process-backend workers, forkserver sub-environments) makes
the same choice from the same environment, so all of them share one copy. Numba keys the cache
by the source file (path, size, time) and its own version, so a janus or numba upgrade compiles
once again.

When a kernel does compile in this process (a cache miss), :data:`COMPILE_NOTE` is printed once on
stderr, before the seconds it takes.
"""

from __future__ import annotations

import os
import stat
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numba
from numba.core import config as _numba_config, event

KERNEL_MODULES = ("janus.buffer.kernels.replay", "janus.buffer.kernels.frames")
COMPILE_NOTE = ("janus: compiling the replay kernels with Numba (a few seconds, more on a busy machine); "
                "they are cached in {where}, so this happens once per machine and janus/numba version")
NO_CACHE_NOTE = ("janus: compiling the replay kernels with Numba (a few seconds, more on a busy machine); "
                 "no cache folder could be written, so every process compiles them (set NUMBA_CACHE_DIR)")

numba_config: Any = _numba_config  # its settings are set at runtime, untyped
_chosen: list[str | None] = []  # [folder or None], filled once per process by cache_dir()


def user_cache_dir(environ: dict[str, str] | None = None) -> Path:
    """``$XDG_CACHE_HOME/janus/numba``, or ``~/.cache/janus/numba`` (XDG_CACHE_HOME unset or relative)."""
    env = os.environ if environ is None else environ
    xdg = env.get("XDG_CACHE_HOME", "")
    base = Path(xdg) if xdg and os.path.isabs(xdg) else Path(env.get("HOME") or Path.home()) / ".cache"
    return base / "janus" / "numba"


def _fallback_dir() -> Path:
    uid = os.getuid() if hasattr(os, "getuid") else os.getpid()
    return Path(tempfile.gettempdir()) / f"janus-numba-{uid}"


def _usable(path: Path, private: bool = False) -> str | None:
    """None when ``path`` is (made) a folder this process can write, else why not, in a few words.
    ``private``: also refuse a folder another user owns or can write (a shared tmp: numba loads
    pickled code from its cache)."""
    try:
        path.mkdir(parents=True, exist_ok=True, mode=0o700)
        if private and hasattr(os, "getuid"):
            st = path.stat()
            if st.st_uid != os.getuid() or st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
                return "it is not private to this user"
        tempfile.TemporaryFile(dir=path).close()
    except OSError as exc:
        return exc.strerror or type(exc).__name__
    return None


def cache_dir() -> str | None:
    """The folder janus's kernels are cached in (None: no cache), chosen once per process; a
    fallback or no cache is said in one line on stderr."""
    if _chosen:
        return _chosen[0]
    if numba_config.CACHE_DIR:  # NUMBA_CACHE_DIR, or numba.config.CACHE_DIR set by the caller
        _chosen.append(str(numba_config.CACHE_DIR))
        return _chosen[0]
    preferred = user_cache_dir()
    why = _usable(preferred)
    if why is None:
        _chosen.append(str(preferred))
        return _chosen[0]
    fallback = _fallback_dir()
    why_not = _usable(fallback, private=True)
    where = str(fallback) if why_not is None else None
    instead = f"using {where}" if where else f"nor in {fallback} ({why_not}): not cached, every process compiles them"
    print(f"janus: cannot cache the replay kernels in {preferred} ({why}); {instead} (set NUMBA_CACHE_DIR to choose)",
          file=sys.stderr, flush=True)
    _chosen.append(where)
    return where


def njit(**options: Any) -> Callable[[Callable[..., Any]], Any]:
    """``numba.njit(**options)`` whose on-disk cache (``cache=True`` is implied when there is a
    folder) is :func:`cache_dir`, for this function only."""
    folder = cache_dir()

    def decorate(fn: Callable[..., Any]) -> Any:
        if folder is None:
            return numba.njit(**{**options, "cache": False})(fn)
        before = numba_config.CACHE_DIR
        numba_config.CACHE_DIR = folder  # read once, as the dispatcher picks its cache locator
        try:
            return numba.njit(**{**options, "cache": True})(fn)
        finally:
            numba_config.CACHE_DIR = before

    return decorate


class _CompileNote(event.Listener):
    """Prints :data:`COMPILE_NOTE` at the first compile of a janus kernel in this process (numba
    fires ``numba:compile`` only on a cache miss)."""

    said = False

    def on_start(self, ev: Any) -> None:
        if _CompileNote.said:
            return
        dispatcher = (getattr(ev, "data", None) or {}).get("dispatcher")
        module = getattr(getattr(dispatcher, "py_func", None), "__module__", "")
        if module in KERNEL_MODULES:
            _CompileNote.said = True
            where = _chosen[0] if _chosen else None
            print(COMPILE_NOTE.format(where=where) if where else NO_CACHE_NOTE, file=sys.stderr, flush=True)

    def on_end(self, ev: Any) -> None:
        pass


_listener: list[_CompileNote] = []


def say_when_compiling() -> None:
    """Register the compile note's listener (once per process)."""
    if not _listener:
        _listener.append(_CompileNote())
        event.register("numba:compile", _listener[0])
