"""Which folder a run writes, checked and locked before any work: a new one, or the one it resumes.

* A new run gets a fresh folder: an existing non-empty ``--out`` is refused unless ``--force``,
  which moves the old folder aside (``OUT.old-<time>``), never deletes it, and never moves
  a folder a live run holds (its lock, or one anywhere below it). The default
  ``runs/<command>-<time>`` is claimed with an exclusive ``mkdir``, so two runs never share one.
* The folder is held by its lock while the run lasts (:mod:`janus.harness.run_lock`); a resumed run
  is checked by :mod:`janus.harness.resume_checks` and changes its folder only once it commits
  (:mod:`janus.harness.resume_commit`).
* Bad ``--out`` paths (a file, a path under a file, a place that cannot be written) are errors
  naming the path, before any work; a run's outputs never lead out of its folder (:func:`inside`).
* A new run that fails before its first env step leaves nothing behind (:func:`clear_unstarted`).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING

from janus import fileio
from janus.errors import JanusError, RunFolderError
from janus.harness.run_lock import LOCK_NAME, RunLock, nested_lock_held

if TYPE_CHECKING:
    from janus.config.request import RunRequest

RUN_FILES_ROOM = 256
"""Bytes a run folder's path leaves for what janus writes under it (seed-<s>/checkpoint/trajectory_manager/...,
a temporary name, OUT.old-<time> moved aside)."""


def check_out_path(path: Path, flag: str = "--out") -> None:
    """``path`` can be a run folder: not a file, not under a file, a name the file system takes, not so
    long or deep that the run's own files could not be written under it (nothing is created here)."""
    with fileio.checking_path(flag, path, RunFolderError, room=RUN_FILES_ROOM):
        if path.exists() and not path.is_dir():
            raise RunFolderError.naming(flag, path, "is a file, not a folder; choose another path")
        for parent in path.parents:
            if parent.exists():
                if not parent.is_dir():
                    raise RunFolderError.naming(flag, path, f"{str(parent)!r} is a file, not a folder; choose another path")
                break


def _mkdir(path: Path, flag: str, exist_ok: bool) -> None:
    try:
        fileio.make_folders(path, exist_ok=exist_ok)
    except FileExistsError:
        raise
    except OSError as exc:
        raise RunFolderError.naming(flag, path, f"cannot create the folder: {exc.strerror or exc}") from None


def claim_default(label: str, root: Path = Path("runs")) -> Path:
    """Create ``runs/<label>-<YYYYmmdd-HHMMSS>`` (``-2``, ``-3``... when taken) exclusively."""
    base = root / f"{label}-{datetime.now():%Y%m%d-%H%M%S}"
    path, n = base, 2
    check_out_path(base)
    while True:
        try:
            _mkdir(path, "--out", exist_ok=False)
            return path
        except FileExistsError:
            path, n = base.with_name(f"{base.name}-{n}"), n + 1


def _aside_name(path: Path) -> Path:
    base = path.with_name(f"{path.name}.old-{datetime.now():%Y%m%d-%H%M%S}")
    aside, n = base, 2
    while aside.exists():
        aside, n = base.with_name(f"{base.name}-{n}"), n + 1
    return aside


def _holds_files(path: Path) -> bool:
    """Whether folder ``path`` holds anything but a lock (a lone lock: a run killed as it started)."""
    try:
        return any(p.name != LOCK_NAME for p in path.iterdir())
    except OSError as exc:
        raise RunFolderError.naming("--out", path, f"cannot read the folder: {exc.strerror or exc}") from None


def inside(folder: Path, name: str, flag: str) -> Path:
    """``folder/name``, where a run writes its ``flag`` output (``tensorboard``, ``wandb``...): refused
    when it is a symbolic link or otherwise leads out of ``folder``, so a run never writes elsewhere."""
    path = folder / name
    if path.is_symlink() or not path.resolve().is_relative_to(folder.resolve()):
        target = os.readlink(path) if path.is_symlink() else str(path.resolve())
        raise RunFolderError(f"{flag}: {path} is a link to {target!r}, outside the run folder {str(folder)!r}; janus "
                             f"writes only inside its run folder: remove the link (or move it aside) and run again")
    return path


def open_new(path: Path, force: bool) -> tuple[Path, RunLock]:
    """The locked, empty folder of a new run at ``path`` (an existing one moved aside with ``force``)."""
    check_out_path(path)
    if path.is_dir() and _holds_files(path):
        busy = RunLock(path).busy() or nested_lock_held(path)
        if busy is not None:
            raise RunFolderError(busy)
        if not force:
            raise RunFolderError.naming("--out", path, f"already holds a run (or other files); continue it with "
                              f"--resume {str(path)!r}, choose another --out, or add --force to move it aside")
        old = RunLock(path).acquire()  # never move a folder a live run is writing
        aside = _aside_name(path)
        try:
            os.rename(path, aside)
        except OSError as exc:
            old.release()
            raise RunFolderError.naming("--out", path, f"cannot move it aside: {exc.strerror or exc}") from None
        old.held = False  # the lock moved with the folder; a new lock at `path` is another run's
        os.unlink(aside / LOCK_NAME)
        print(f"janus: --force: moved the existing {path} aside to {aside}", flush=True)
    _mkdir(path, "--out", exist_ok=True)
    lock = RunLock(path).acquire()
    if _holds_files(path):  # another run filled it between the check and the lock
        lock.release()
        raise RunFolderError.naming("--out", path, "was filled by another run meanwhile; choose another --out")
    return path, lock


def took_no_step(folder: Path, checkpoint_dir: str | None) -> bool:
    """Whether the new run writing ``folder`` has committed no checkpoint and recorded no env step:
    what it wrote then holds nothing a rerun could want (see :func:`clear_unstarted`)."""
    from janus.runtime import checkpoints

    try:
        if checkpoint_dir is not None and checkpoints.read_run_state(checkpoint_dir):
            return False
        data = json.loads((folder / "results.json").read_text())
    except FileNotFoundError:
        return True
    except (OSError, ValueError, JanusError):
        return False  # something is there that janus cannot read: keep it
    runs = data.get("runs") if isinstance(data, dict) else None
    if not isinstance(runs, list):
        return False
    for run in runs:
        counts = run.get("counts") if isinstance(run, dict) else None
        steps = counts.get("run_env_steps", counts.get("env_steps", 0)) if isinstance(counts, dict) else None
        if not isinstance(steps, (int, float)) or steps > 0:
            return False
    return True


def clear_unstarted(folder: Path, checkpoint_dir: str | None) -> bool:
    """A new run that failed before its first env step: remove what it wrote (``folder`` was empty
    when it started, see :func:`open_new`; a ``checkpoint_dir`` chosen outside it was empty too,
    see :func:`check_new_checkpoint_dir`), so the same command or ``janus.train`` call can run
    again without ``--force``. Returns whether it did; a run that took a step keeps its files."""
    if not took_no_step(folder, checkpoint_dir):
        return False
    places = [folder] + ([Path(checkpoint_dir)] if checkpoint_dir is not None else [])
    for place in places:
        with contextlib.suppress(OSError):
            for entry in place.iterdir():
                if entry.name == LOCK_NAME:
                    continue
                if entry.is_dir() and not entry.is_symlink():
                    shutil.rmtree(entry, ignore_errors=True)
                else:
                    entry.unlink(missing_ok=True)
    return True


def check_new_checkpoint_dir(checkpoint_dir: str | None) -> None:
    """A new run's checkpoint folder chosen outside its run folder (``runtime.checkpoint_dir``)
    must not hold another run's checkpoint: its files would be replaced."""
    if checkpoint_dir is None:
        return
    path = Path(checkpoint_dir)
    with fileio.checking_path("runtime.checkpoint_dir", path, RunFolderError):
        taken = path.exists() and (not path.is_dir() or any(path.iterdir()))
    if taken:
        raise RunFolderError(f"runtime.checkpoint_dir {str(path)!r} already holds files (another run's checkpoint?); "
                             "continue that run with --resume, or choose an empty or new checkpoint_dir")


def open_resumed(path: Path) -> RunLock:
    """The lock of the run folder ``path`` being resumed."""
    check_out_path(path, "--resume")
    return RunLock(path, "--resume").acquire()


def check_flags(args: RunRequest) -> None:
    """Flags that contradict ``--resume``: each is an error naming it, never silently ignored."""
    resume = getattr(args, "resume", None)
    if resume is None:
        return
    if args.out is not None and Path(args.out).resolve() != Path(resume).resolve():
        raise RunFolderError(f"--out {str(args.out)!r} with --resume {str(resume)!r}: a resumed run writes into "
                             "its own folder; drop --out (or start a new run with --out and no --resume)")
    if getattr(args, "quick", False):
        raise RunFolderError("--quick with --resume: --quick sizes a new run; a resumed run keeps its own "
                             "settings; drop --quick (raise the budget with --total_env_steps)")
    if getattr(args, "force", False):
        raise RunFolderError("--force with --resume: --force moves an old run aside for a new one; "
                             "drop --force to continue the run")
    if getattr(args, "config", None) is not None:
        raise RunFolderError(f"--config with --resume: a resumed run keeps {Path(resume) / 'config.yaml'}; "
                             "change its budget with flags such as --total_env_steps")


def open_out_dir(args: RunRequest, label: str) -> tuple[Path, RunLock]:
    """The run folder of this command, locked: a fresh one, or the one ``--resume`` names."""
    check_flags(args)
    if args.resume is not None:
        out_dir = Path(args.resume)
        return out_dir, open_resumed(out_dir)
    if args.out is None:
        out_dir = claim_default(label)
        return out_dir, RunLock(out_dir).acquire()
    return open_new(Path(args.out), getattr(args, "force", False))
