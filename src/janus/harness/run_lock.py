"""The lock of a run folder: ``FOLDER/.janus.lock`` names the one live run that writes the folder.

Created with ``O_EXCL`` (pid, host, start time) while the run lasts: a second run into the folder
is refused at once, naming the owner; a lock whose process is dead (on this host) is taken over,
one process at a time (an ``flock`` on the folder). :func:`nested_lock_held` finds a live run's lock
anywhere below a folder, so a folder holding a running seed is never moved aside.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

from janus.errors import RunFolderError

LOCK_NAME = ".janus.lock"


class RunLock:
    """``FOLDER/.janus.lock``: this process writes the folder. Created with ``O_EXCL`` (pid, host,
    start time); released by :meth:`release`. A lock left by a dead process on this host is taken over."""

    def __init__(self, folder: Path, flag: str = "--out") -> None:
        self.folder = folder
        self.path = folder / LOCK_NAME
        self.flag = flag
        self.held = False

    def acquire(self) -> RunLock:
        with _serialized(self.folder, self.flag):
            try:
                self._create()
            except FileExistsError:
                owner = self._owner()
                if owner is None or _alive(owner):
                    raise RunFolderError(self._busy_message(owner)) from None
                print(f"janus: taking over the stale lock {self.path} of pid {owner.get('pid')} "
                      f"(that process is no longer running)", flush=True)
                os.unlink(self.path)
                self._create()
        self.held = True
        return self

    def _create(self) -> None:
        text = json.dumps({"pid": os.getpid(), "host": socket.gethostname(), "started": time.time()})
        try:
            fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o644)
        except FileExistsError:
            raise
        except OSError as exc:
            raise RunFolderError.naming(self.flag, self.folder, f"cannot write in this folder: {exc.strerror or exc}") from None
        with os.fdopen(fd, "w") as f:
            f.write(text)

    def busy(self) -> str | None:
        """Why another live run holds this folder (None: no lock, or a stale one)."""
        if not self.path.exists():
            return None
        owner = self._owner()
        return self._busy_message(owner) if owner is None or _alive(owner) else None

    def _owner(self) -> dict[str, Any] | None:
        try:
            data = json.loads(self.path.read_text()[:4096])
        except (OSError, ValueError):
            return None
        return data if isinstance(data, dict) and isinstance(data.get("pid"), int) else None

    def _busy_message(self, owner: dict[str, Any] | None) -> str:
        who = (f"pid {owner['pid']} on {owner.get('host')}, since "
               f"{datetime.fromtimestamp(float(owner.get('started', 0))):%Y-%m-%d %H:%M:%S}") if owner else "an unreadable lock"
        return (f"{self.flag} {str(self.folder)!r} is in use by another janus run ({who}): its lock {self.path} exists; "
                f"wait for that run to end, or delete the lock if no run is using the folder")

    def release(self) -> None:
        if self.held:
            self.held = False
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.path)

    def __enter__(self) -> RunLock:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def _alive(owner: dict[str, Any]) -> bool:
    """Whether the lock's process may still run (another host's process is assumed alive)."""
    if owner.get("host") != socket.gethostname():
        return True
    pid = int(owner["pid"])
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie (killed, not yet reaped by its parent) runs no more
        return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0] != "Z"
    except (OSError, IndexError):
        return True


@contextlib.contextmanager
def _serialized(folder: Path, flag: str) -> Iterator[None]:
    """Hold an exclusive ``flock`` on ``folder`` so two processes never take over one stale lock together."""
    try:
        import fcntl
    except ImportError:  # not POSIX: O_EXCL alone
        yield
        return
    try:
        fd = os.open(folder, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError as exc:
        raise RunFolderError.naming(flag, folder, f"cannot open the folder: {exc.strerror or exc}") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def nested_lock_held(path: Path) -> str | None:
    """Why a live janus run holds a folder under ``path`` (a ``.janus.lock`` anywhere below it whose
    process runs: a seed of ``janus train --seeds``, say), else None. Symlinks are not followed."""
    for root, dirs, files in os.walk(path, followlinks=False):
        if LOCK_NAME in files and Path(root) != path:
            owner = RunLock(Path(root))._owner()
            if owner is None or _alive(owner):
                who = f"pid {owner['pid']} on {owner.get('host')}" if owner else "an unreadable lock"
                return (f"--out {str(path)!r} is in use by another janus run: {who} holds {Path(root) / LOCK_NAME}; "
                        "wait for that run to end (or stop it), or delete the lock if no run is using the folder")
        dirs[:] = [d for d in dirs if not (Path(root) / d).is_symlink()]
    return None
