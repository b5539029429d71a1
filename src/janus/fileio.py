"""Safe file writes: atomic, never through a symlink, never to a predictable temporary name.

Every janus writer goes through :func:`atomic_open`: the data is written to a new file with a
random name, created with ``O_CREAT | O_EXCL | O_NOFOLLOW`` (so a planted file or symlink of that
name makes the create fail instead of redirecting the write), flushed and fsynced, then renamed
over the target. ``rename`` replaces a symlink at the target *itself*, never the file it points
to, so a planted ``results.json -> ~/.bashrc`` is replaced by a regular file and ``~/.bashrc`` is
untouched. A directory where the file should be is a clear :class:`~janus.errors.JanusError`.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import io
import os
import secrets
import stat
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any

from janus.errors import CheckpointError, ConfigError, JanusError, shown

TMP_SUFFIX = ".tmp"
_CREATE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)


PATH_MAX = 4096
"""Bytes of a path Linux takes (``PATH_MAX``); the file system's own limit when it says a smaller one."""
NAME_MAX = 255
"""Bytes of one folder or file name."""
MAX_PATH_PARTS = 256
"""Folders a path a user gives may nest (deeper ones are refused: ``pathlib``'s ``mkdir(parents=True)``
recursed once per missing folder and ended in a RecursionError at about 1,000)."""


def path_too_large(path: str | Path, room: int = 0) -> str | None:
    """Why ``path`` is too long or too deep to be used (with ``room`` bytes more for what goes under it),
    else None; nothing on disk is looked at and nothing recurses."""
    if "\x00" in str(path):  # os calls raise ValueError("embedded null byte") for it
        return "contains a NUL byte, which no file system takes in a name"
    parts = Path(path).parts
    if len(parts) > MAX_PATH_PARTS:
        return f"{len(parts):,} folders deep; accepted: at most {MAX_PATH_PARTS}"
    long = next((p for p in parts if len(os.fsencode(p)) > NAME_MAX), None)
    if long is not None:
        return (f"File name too long: a name of {len(os.fsencode(long)):,} bytes (a file system takes names of at "
                f"most {NAME_MAX} bytes per folder or file, and paths of {PATH_MAX:,})")
    size = len(os.fsencode(os.path.abspath(path))) + room
    if size >= PATH_MAX:
        what = f" with the {room} bytes of the files janus writes under it" if room else ""
        return (f"File name too long: {size:,} bytes long as an absolute path{what} (a file system takes paths "
                f"of at most {PATH_MAX:,} bytes)")
    return None


def check_path_size(flag: str, path: str | Path, error: Callable[[str], JanusError] = ConfigError, room: int = 0) -> None:
    """Refuse (``error`` naming ``flag``) a path too long or deep to use: :func:`path_too_large`."""
    why = path_too_large(path, room)
    if why is not None:
        raise error(f"invalid {flag}: {shown(str(path), 120)}: {why}")


def make_folders(path: Path, exist_ok: bool = True) -> None:
    """``path.mkdir(parents=True, exist_ok=exist_ok)`` without recursion: the missing parents one by one
    from the top (``FileExistsError`` for ``path`` itself when it exists and not ``exist_ok``)."""
    missing = []
    parent = path.parent
    while parent != parent.parent and not parent.is_dir():
        missing.append(parent)
        parent = parent.parent
    for folder in reversed(missing):
        with contextlib.suppress(FileExistsError):  # made meanwhile by another process (a file: the next mkdir says)
            folder.mkdir()
    try:
        path.mkdir()
    except FileExistsError:
        if not exist_ok or not path.is_dir():
            raise


@contextlib.contextmanager
def checking_path(flag: str, path: str | Path, error: Callable[[str], JanusError] = ConfigError,
                  room: int = 0) -> Iterator[None]:
    """Look at a path a user gave (``exists``, ``is_dir`` ...) inside this block: a path too long or
    deep (:func:`path_too_large`) is refused first, and an ``OSError`` the look raises (a name
    part longer than the file system allows, ENAMETOOLONG; a folder without search permission)
    becomes ``error`` naming ``flag``, the path and the reason, not a traceback. ``room``: bytes
    more for what goes under the path (:func:`path_too_large`)."""
    check_path_size(flag, path, error, room)
    try:
        yield
    except OSError as exc:
        if isinstance(exc, JanusError):
            raise
        why = exc.strerror or str(exc)
        if exc.errno == errno.ENAMETOOLONG:
            why += " (a file system takes names of at most 255 bytes per folder or file, and paths of 4096)"
        raise error(f"invalid {flag}: {shown(str(path), 200)}: {why}") from None


class UnsafePathError(JanusError, OSError):
    """A path janus was asked to write is not a place for a regular file (a directory, say)."""


def temp_name(path: Path) -> Path:
    """A fresh, unpredictable temporary name next to ``path`` (hidden, ending in ``.tmp``)."""
    return path.with_name(f".{path.name}.{secrets.token_hex(8)}{TMP_SUFFIX}")


def _create_temp(path: Path) -> tuple[int, Path]:
    for _ in range(16):
        tmp = temp_name(path)
        try:
            return os.open(tmp, _CREATE, 0o644), tmp
        except FileExistsError:  # a collision (or a planted name): draw another
            continue
    raise UnsafePathError(f"cannot create a temporary file next to {str(path)!r}: every name drawn exists")


@contextlib.contextmanager
def atomic_open(path: str | Path, mode: str = "wb", **kwargs: Any) -> Iterator[IO[Any]]:
    """Open a new temporary file for writing; on success fsync it and rename it over ``path``.

    ``mode`` is ``"w"`` (text, ``kwargs`` as for :func:`open`) or ``"wb"``. On any exception the
    temporary file is removed and ``path`` is left as it was.
    """
    if mode not in ("w", "wb"):
        raise ValueError(f"atomic_open writes whole files: mode 'w' or 'wb', got {mode!r}")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.is_dir() and not path.is_symlink():
        raise UnsafePathError(f"cannot write {str(path)!r}: it is a directory; remove it or choose another --out")
    fd, tmp = _create_temp(path)
    try:
        with os.fdopen(fd, mode, **kwargs) as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        try:
            os.replace(tmp, path)  # replaces a symlink at `path` itself, never its target
        except IsADirectoryError:
            raise UnsafePathError(f"cannot write {str(path)!r}: it is a directory; remove it or choose another --out") from None
        _fsync_dir(path.parent)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def _fsync_dir(folder: Path) -> None:
    """Make a rename durable (best effort: some filesystems refuse to fsync a directory)."""
    try:
        fd = os.open(folder, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def write_bytes(path: str | Path, data: bytes) -> None:
    """Atomically replace ``path`` with ``data`` (see :func:`atomic_open`)."""
    with atomic_open(path, "wb") as f:
        f.write(data)


def write_text(path: str | Path, text: str) -> None:
    """Atomically replace ``path`` with ``text`` (UTF-8; see :func:`atomic_open`)."""
    with atomic_open(path, "w", encoding="utf-8") as f:
        f.write(text)


def file_digest(path: str | Path, chunk: int = 1 << 20) -> tuple[int, str]:
    """``(size, sha256 hex)`` of a regular file, read without following a symlink."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    except OSError as exc:
        raise CheckpointError(f"cannot read {str(path)!r}: {_reason(exc)}") from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise CheckpointError(f"cannot read {str(path)!r}: it is not a regular file (a directory?)")
    h = hashlib.sha256()
    size = 0
    with io.FileIO(fd, "r") as f:
        while block := f.read(chunk):
            h.update(block)
            size += len(block)
    return size, h.hexdigest()


def _reason(exc: OSError) -> str:
    if exc.errno == errno.ELOOP:
        return "it is a symlink (janus does not follow links in a checkpoint folder)"
    if exc.errno == errno.EISDIR:
        return "it is a directory, not a file"
    return exc.strerror or type(exc).__name__


def save_figure(fig: Any, path: str | Path, **kwargs: Any) -> None:
    """``fig.savefig`` through :func:`atomic_open` (the format from the file name's suffix)."""
    with atomic_open(path, "wb") as f:
        fig.savefig(f, format=Path(path).suffix.lstrip(".") or "png", **kwargs)
