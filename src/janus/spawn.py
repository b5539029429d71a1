"""Start janus's own processes whatever the caller's ``__main__`` is.

Python's ``spawn`` and ``forkserver`` start methods prepare every child by importing the parent's
``__main__`` module again (from its file, or by name under ``python -m``), so that what the script
defines (an environment it registers, say) exists in the child too. That is only safe when the
script's own work sits under ``if __name__ == "__main__":``. A script that calls :func:`janus.train`
at module level trains again in every worker; one fed on stdin (``python - <<EOF``) has no file to
import, so its workers die at start.

Janus's children never need the caller's module to run: their targets (a Worker's loop, a
sub-env's loop) and arguments are janus's own functions and Gymnasium ids, importable by name. So
where importing the caller's ``__main__`` again is not safe (:func:`caller_main_is_importable`),
janus asks multiprocessing to skip that step for the processes it starts (this thread's starts
only: another thread of the caller's program that starts processes meanwhile is unaffected). The
rest of the preparation (``sys.path``, the working directory, the authkey) is kept. Where it is
safe (a guarded script, ``python -m janus``, a notebook, whose ``__main__`` has no file) nothing
changes, so an environment a guarded script registers is seen by the workers as before.
"""

from __future__ import annotations

import ast
import contextlib
import functools
import os
import sys
import threading
from collections.abc import Iterator
from multiprocessing import spawn as _mp_spawn
from types import FrameType, ModuleType
from typing import Any

MAIN_KEYS = ("init_main_from_path", "init_main_from_name")
"""The preparation entries with which a child imports the parent's ``__main__``."""

_state = threading.local()
_install_lock = threading.Lock()
_original: Any = None


def _preparation_data(name: str) -> dict[str, Any]:
    data = _original(name)
    if getattr(_state, "depth", 0):
        for key in MAIN_KEYS:
            data.pop(key, None)
    return data


def _install() -> None:
    """Wrap :func:`multiprocessing.spawn.get_preparation_data` once (the wrapper changes nothing
    outside :func:`without_caller_main`)."""
    global _original
    with _install_lock:
        if _original is None:
            _original = _mp_spawn.get_preparation_data
            _mp_spawn.get_preparation_data = _preparation_data


@contextlib.contextmanager
def without_caller_main(skip: bool = True) -> Iterator[None]:
    """Processes this thread starts in the block (``spawn``/``forkserver``) do not import the
    caller's ``__main__`` (with ``skip``; without it the block changes nothing)."""
    if not skip:
        yield
        return
    _install()
    _state.depth = getattr(_state, "depth", 0) + 1
    try:
        yield
    finally:
        _state.depth -= 1


def caller_main_is_importable() -> bool:
    """Whether a child may import the caller's ``__main__`` again without harm: it has no source a
    child would run (a notebook, the REPL, ``python -c``), it is a package's ``__main__`` (which
    multiprocessing never re-runs), or the main thread is inside an ``if __name__ == "__main__":``
    block of it. Not so for code fed on stdin, a script whose call is not under the guard, or a
    main module whose source cannot be read (then janus cannot tell, and does not import it)."""
    main = sys.modules.get("__main__")
    if main is None:
        return True
    spec = getattr(main, "__spec__", None)
    name = getattr(spec, "name", None)
    if name is not None and (name == "__main__" or name.endswith(".__main__")):
        return True  # multiprocessing skips a package's __main__ (python -m janus)
    path = getattr(spec, "origin", None) if name is not None else getattr(main, "__file__", None)
    if path is None:
        return True  # nothing to import: a notebook kernel, the REPL, python -c
    if not os.path.isfile(path):
        return False  # stdin (<stdin>), a path since removed
    line = _main_thread_line(main)
    if line is None:
        return False  # the main thread is not running the script's own lines: janus cannot tell
    return _guarded(os.path.abspath(path), os.path.getmtime(path), line)


def _main_thread_line(main: ModuleType) -> int | None:
    """The line of the main module's own code the main thread is executing now, or None."""
    frame: FrameType | None = sys._current_frames().get(threading.main_thread().ident or -1)
    found = None
    while frame is not None:
        if frame.f_globals is vars(main) and frame.f_code.co_name == "<module>":
            found = frame.f_lineno
        frame = frame.f_back
    return found


@functools.lru_cache(maxsize=16)
def _guarded(path: str, mtime: float, line: int) -> bool:
    """Whether ``line`` of the script at ``path`` lies in the body of a top-level
    ``if __name__ == "__main__":`` (``mtime``: a changed file is read anew)."""
    try:
        with open(path, encoding="utf-8") as f:
            tree = ast.parse(f.read(), path)
    except (OSError, SyntaxError, UnicodeDecodeError, ValueError):
        return False
    for stmt in tree.body:
        if isinstance(stmt, ast.If) and _is_main_test(stmt.test) and stmt.body:
            first, last = stmt.body[0].lineno, max(getattr(s, "end_lineno", s.lineno) or s.lineno for s in stmt.body)
            if first <= line <= last:
                return True
    return False


def _is_main_test(test: ast.expr) -> bool:
    """``__name__ == "__main__"`` (either side)."""
    if not (isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], ast.Eq)):
        return False
    sides = [test.left, test.comparators[0]]
    names = [s for s in sides if isinstance(s, ast.Name) and s.id == "__name__"]
    consts = [s for s in sides if isinstance(s, ast.Constant) and s.value == "__main__"]
    return len(names) == 1 and len(consts) == 1
