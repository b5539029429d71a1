"""The run folder as a unit of trust: who may write it, and when.

* A new run gets a fresh folder: an existing non-empty ``--out`` is refused unless ``--force``,
  which moves the old folder aside (``OUT.old-<time>``), never deletes it, and never moves
  a folder a live run holds (its lock, or one anywhere below it: :func:`nested_lock_held`). The default
  ``runs/<command>-<time>`` is claimed with an exclusive ``mkdir``, so two runs never share one.
* :class:`RunLock`: ``OUT/.janus.lock`` (pid and host), created with ``O_EXCL`` while the run lasts;
  a second run into the folder is refused at once; a lock whose process is dead is taken over.
* ``--resume``: :func:`check_resume` compares the stored configuration with the requested one
  before anything is written and refuses a change of anything the checkpoint fixes, or a budget
  the run has already reached. :class:`ResumeCommit` writes the new ``config.yaml`` only once the
  resumed run has committed a checkpoint; a resumed run that commits nothing leaves its checkpoint
  folder as it was.
* Bad ``--out`` paths (a file, a path under a file, a place that cannot be written) are errors
  naming the path, before any work.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import socket
import threading
import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

from janus import fileio
from janus.config import RunConfig, WorkloadConfig, from_dict, read_yaml
from janus.errors import CheckpointError, JanusError

LOCK_NAME = ".janus.lock"

# Configuration entries a resumed run may change (config path -> the flag that sets it): budgets,
# timing of checkpoints and liveness checks, where the components run. Everything else is fixed
# by the checkpoint (env, algorithm, network, buffer, hyperparameters, data path, seed).
MAY_CHANGE_ON_RESUME: dict[str, str] = {
    "name": "--name",
    "workload.total_env_steps": "--total_env_steps",
    "runtime.checkpoint_interval_s": "--checkpoint_interval_s",
    "runtime.results_interval_s": "--results_interval_s",  # how often the live results are rewritten
    "runtime.stall_timeout_s": "--stall_timeout_s",
    "runtime.ping_interval_s": "--ping_interval_s",
    "runtime.pong_timeout_s": "--pong_timeout_s",
    "runtime.backend": "--backend",
    "runtime.address": "--address",
    "runtime.workers_per_node": "--workers_per_node",
    "runtime.max_calls_in_flight": "--max_calls_in_flight",
    "workload.vector_env": "--vector_env",  # where the envs step, not what they do
    "runtime.eval_interval_steps": "--eval_interval_steps",
    "runtime.eval_episodes": "--eval_episodes",
    "runtime.allow_oversubscribe": "--allow_oversubscribe",  # the machine's bounds, not what the run does
}
NOT_COMPARED = {"runtime.checkpoint_dir", "runtime.resume", "runtime.best_dir",  # set per invocation by `janus train`
                "workload.preset"}  # the choice of values compared one by one (a run before presets has none)


class RunFolderError(JanusError, ValueError):
    """An output folder janus may not use (taken, locked, not a folder, not writable), or a resume
    that would change what its checkpoint fixes."""


def _flag_error(flag: str, path: Path, why: str) -> RunFolderError:
    return RunFolderError(f"{flag} {str(path)!r}: {why}")


RUN_FILES_ROOM = 256
"""Bytes a run folder's path leaves for what janus writes under it (seed-<s>/checkpoint/trajectory_manager/...,
a temporary name, OUT.old-<time> moved aside)."""


def check_out_path(path: Path, flag: str = "--out") -> None:
    """``path`` can be a run folder: not a file, not under a file, a name the file system takes, not so
    long or deep that the run's own files could not be written under it (nothing is created here)."""
    with fileio.checking_path(flag, path, RunFolderError, room=RUN_FILES_ROOM):
        if path.exists() and not path.is_dir():
            raise _flag_error(flag, path, "is a file, not a folder; choose another path")
        for parent in path.parents:
            if parent.exists():
                if not parent.is_dir():
                    raise _flag_error(flag, path, f"{str(parent)!r} is a file, not a folder; choose another path")
                break


def _mkdir(path: Path, flag: str, exist_ok: bool) -> None:
    try:
        fileio.make_folders(path, exist_ok=exist_ok)
    except FileExistsError:
        raise
    except OSError as exc:
        raise _flag_error(flag, path, f"cannot create the folder: {exc.strerror or exc}") from None


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
            raise _flag_error(self.flag, self.folder, f"cannot write in this folder: {exc.strerror or exc}") from None
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
        raise _flag_error(flag, folder, f"cannot open the folder: {exc.strerror or exc}") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _holds_files(path: Path) -> bool:
    """Whether folder ``path`` holds anything but a lock (a lone lock: a run killed as it started)."""
    try:
        return any(p.name != LOCK_NAME for p in path.iterdir())
    except OSError as exc:
        raise _flag_error("--out", path, f"cannot read the folder: {exc.strerror or exc}") from None


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
            raise _flag_error("--out", path, f"already holds a run (or other files); continue it with "
                              f"--resume {str(path)!r}, choose another --out, or add --force to move it aside")
        old = RunLock(path).acquire()  # never move a folder a live run is writing
        aside = _aside_name(path)
        try:
            os.rename(path, aside)
        except OSError as exc:
            old.release()
            raise _flag_error("--out", path, f"cannot move it aside: {exc.strerror or exc}") from None
        old.held = False  # the lock moved with the folder; a new lock at `path` is another run's
        os.unlink(aside / LOCK_NAME)
        print(f"janus: --force: moved the existing {path} aside to {aside}", flush=True)
    _mkdir(path, "--out", exist_ok=True)
    lock = RunLock(path).acquire()
    if _holds_files(path):  # another run filled it between the check and the lock
        lock.release()
        raise _flag_error("--out", path, "was filled by another run meanwhile; choose another --out")
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


def check_flags(args: argparse.Namespace) -> None:
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


def _flat(data: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in data.items():
        path = f"{prefix}{key}"
        if isinstance(value, dict):
            out.update(_flat(value, path + "."))
        else:
            out[path] = value
    return out


def flag_of(path: str) -> str:
    """The command-line flag (or config entry) behind configuration path ``path``."""
    if path in MAY_CHANGE_ON_RESUME:
        return MAY_CHANGE_ON_RESUME[path]
    section, _, key = path.rpartition(".")
    if section == "algorithm":  # every hyperparameter has its flag (janus.cli), the network two
        return {"hidden": "--net_arch/--hidden_size/--num_layers", "critic_hidden": "--critic_net_arch"}.get(key, f"--{key}")
    if path == "workload.algo":
        return "--algo"
    if path == "workload.num_actors":
        return "--num_actors/--num_workers"
    return f"--{key}"


def check_resume_request(args: argparse.Namespace, requested: RunConfig) -> None:
    """``janus train --resume``, before the config is validated or anything written: flags that
    contradict ``--resume`` and changes of what the checkpoint fixes are errors naming the flag."""
    check_flags(args)
    folder = Path(args.resume)
    stored = stored_config(folder)
    check_resumable(folder, stored)
    check_changes(folder, stored, requested)


def _with_defaults(cfg: RunConfig, keys: set[str]) -> dict[str, Any]:
    """``cfg`` as a dict whose ``algorithm`` section also holds ``keys`` left at their default (a
    config.yaml lists only the hyperparameters that were set)."""
    from janus.algorithms.base import algorithm

    out = cfg.to_dict()
    defaults = algorithm(cfg.workload.algo).defaults()
    out["algorithm"] = {**{k: v for k, v in defaults.items() if k in keys}, **cfg.algorithm}
    return json.loads(json.dumps(out))


def check_changes(folder: Path, stored: RunConfig, requested: RunConfig) -> None:
    """Refuse a resume of the run in ``folder`` that changes what its checkpoint fixes (restating
    a value it already has is no change)."""
    keys = set(stored.algorithm) | set(requested.algorithm)
    old = _flat(_with_defaults(stored, keys))
    new = _flat(_with_defaults(requested, keys))
    changed = sorted(p for p in set(old) | set(new) if p not in NOT_COMPARED and old.get(p) != new.get(p))
    fixed = [p for p in changed if p not in MAY_CHANGE_ON_RESUME]
    if fixed:
        what = "; ".join(f"{flag_of(p)}: {old.get(p)!r:.60} in the run, {new.get(p)!r:.60} asked" for p in fixed)
        allowed = ", ".join(sorted(set(MAY_CHANGE_ON_RESUME.values())) + ["--tensorboard", "--wandb"])
        raise RunFolderError(
            f"--resume {str(folder)!r} cannot change {', '.join(flag_of(p) for p in fixed)} ({what}): the run's "
            f"checkpoint fixes it. A resumed run may change only {allowed}; start a new run with --out to train "
            f"with other settings. {folder} was not changed")


def results_missing(folder: Path, state: dict[str, Any]) -> str | None:
    """Why the results of the run in ``folder`` are not those of its commit ``state`` (no
    results.json, one that cannot be read, not ``finished``, or of another update count); None
    when they are."""
    path = folder / "results.json"
    if not path.is_file():
        return "there is no results.json"
    try:
        last = json.loads(path.read_text())["runs"][-1]
        status, counts = last["status"], last["counts"]
        updates = int(counts.get("run_updates", counts["updates"]))
    except (OSError, ValueError, TypeError, KeyError, IndexError, AttributeError) as exc:
        return f"its results.json cannot be read ({type(exc).__name__})"
    if status != "finished":
        return f"its results.json says {status!r}"
    if updates != int(state.get("trained", -1)):
        return f"its results.json records {updates:,} updates, its final checkpoint {int(state.get('trained', 0)):,}"
    return None


def check_budget(folder: Path, requested: RunConfig, state: dict[str, Any], total_updates: int, budget_flag: str) -> None:
    """Refuse a resume whose budget (``total_updates`` learner updates) the run in ``folder``,
    at the commit ``state``, has already reached."""
    trained, steps = int(state.get("trained", 0)), int(state.get("env_steps", 0))
    if state and trained >= total_updates:
        raise RunFolderError(
            f"--resume {str(folder)!r}: the run is already at {steps:,} env steps ({trained:,} updates), which "
            f"reaches its budget {budget_flag} {_budget_value(requested, budget_flag):,} ({total_updates:,} updates); "
            f"raise {budget_flag} past {steps:,} to train further. {folder} was not changed "
            "(results.json and results.csv are as they were)")


def check_resumable(folder: Path, stored: RunConfig) -> None:
    """Refuse to resume the run in ``folder`` (its config ``stored``) when its algorithm checkpoints
    nothing (the synthetic workload): it would run again from scratch and replace the run's results
    under its name."""
    from janus.algorithms.base import algorithm

    algo = algorithm(stored.workload.algo)
    if algo.has_policy:
        return
    raise RunFolderError(
        f"--resume {str(folder)!r}: --algo {algo.name} keeps no checkpoint (it measures throughput: there is no "
        f"policy or replay to continue), so its run cannot be resumed; resuming would run it again from scratch and "
        f"replace its results. Start a new run with --out. {folder} was not changed")


def check_checkpoint_kept(folder: Path, checkpoint_dir: str, state: dict[str, Any]) -> None:
    """Refuse to resume a run that wrote results but whose checkpoint folder is gone or empty.

    Starting from scratch would replace the run's results with those of a new run under the old
    name. A run killed before its first commit (its periodic results.json may be there) still has
    the checkpoint folder it made at start, and does start from scratch."""
    ckpt = Path(checkpoint_dir)
    if state or not (folder / "results.json").is_file() or (ckpt.is_dir() and any(ckpt.iterdir())):
        return
    try:
        runs = json.loads((folder / "results.json").read_text()).get("runs") or [{}]
        steps = f"{int(runs[-1]['counts']['env_steps']):,} env steps"
    except (OSError, ValueError, TypeError, KeyError, IndexError, AttributeError):
        steps = "a finished run"
    raise RunFolderError(
        f"--resume {str(folder)!r}: results.json records {steps}, but its checkpoint folder {checkpoint_dir} is "
        f"{'empty' if ckpt.is_dir() else 'gone'} (deleted or moved?), so the run cannot continue; resuming would start from scratch and "
        f"replace its results. Put the checkpoint folder back, or start a new run with --out. {folder} was not "
        "changed")


def _budget_value(cfg: RunConfig, flag: str) -> int:
    return int(getattr(cfg.workload, flag.lstrip("-")))


class ResumeCommit:
    """A resumed run's folder changes only once the run has committed a checkpoint.

    :meth:`start` before the run, :meth:`finish` after it (whatever the outcome). Between them a
    thread writes ``config.yaml`` as soon as ``run_state.json`` shows a commit newer than the one
    resumed from. If the run commits nothing, :meth:`finish` puts ``run.json`` back and removes
    every file the run added to the checkpoint folder (parts of checkpoints never committed).
    """

    def __init__(self, config_path: Path, config_text: str, checkpoint_dir: Path | None, best_file: Path | None = None) -> None:
        self.config_path = config_path
        self.config_text = config_text
        self.checkpoint_dir = checkpoint_dir
        self.best_file = best_file  # periodic evaluation's best policy: put back as it was if nothing commits
        self.best0 = self._read(best_file) if best_file else None
        self.seq0 = self._seq()
        self.run_file = self._read(checkpoint_dir / "run.json") if checkpoint_dir else None
        self.files0 = set(os.listdir(checkpoint_dir)) if checkpoint_dir and checkpoint_dir.is_dir() else set()
        self.written = False
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="janus-resume-commit", daemon=True)

    @staticmethod
    def _read(path: Path) -> bytes | None:
        try:
            return path.read_bytes()
        except FileNotFoundError:
            return None

    def _seq(self) -> int:
        from janus.runtime.checkpoints import read_run_state

        if self.checkpoint_dir is None:
            return 0
        try:
            return int(read_run_state(self.checkpoint_dir).get("seq", 0))
        except (CheckpointError, OSError):
            return -1

    def committed(self) -> bool:
        """Whether the resumed run has committed a checkpoint (always true without checkpoints)."""
        return self.checkpoint_dir is None or self._seq() > self.seq0

    def _write_config(self) -> None:
        from janus import fileio

        with self._lock:
            if not self.written:
                fileio.write_text(self.config_path, self.config_text)
                self.written = True

    def _watch(self) -> None:
        while not self._stop.wait(0.2):
            if self.committed():
                self._write_config()
                return

    def start(self) -> None:
        self._thread.start()

    def finish(self) -> None:
        """After the run: write the config if it committed, else undo what it added."""
        self._stop.set()
        self._thread.join()
        if self.committed():
            self._write_config()
            return
        if self.best_file is not None and self._read(self.best_file) != self.best0:
            from janus import fileio

            if self.best0 is None:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(self.best_file)
            else:
                fileio.write_bytes(self.best_file, self.best0)
        folder = self.checkpoint_dir
        if folder is None or not folder.is_dir():
            return
        for name in set(os.listdir(folder)) - self.files0:
            with contextlib.suppress(FileNotFoundError, IsADirectoryError, PermissionError):
                os.unlink(folder / name)
        if self.run_file is not None and self._read(folder / "run.json") != self.run_file:
            from janus import fileio

            fileio.write_bytes(folder / "run.json", self.run_file)


def stored_config(folder: Path) -> RunConfig:
    """The configuration ``janus train`` saved in ``folder/config.yaml`` (on its algorithm's preset,
    as ``janus.cli.config_from_args`` reads it)."""
    from janus.algorithms.base import algorithm

    raw = read_yaml(folder / "config.yaml")
    name = (raw.get("workload") or {}).get("algo", WorkloadConfig().algo)
    preset = algorithm(name).preset if isinstance(name, str) else {}
    base = from_dict(preset) if preset else RunConfig()
    return from_dict(raw, base=base) if raw else base


def open_out_dir(args: argparse.Namespace, label: str) -> tuple[Path, RunLock]:
    """The run folder of this command, locked: a fresh one, or the one ``--resume`` names."""
    check_flags(args)
    if getattr(args, "resume", None) is not None:
        out_dir = Path(args.resume)
        return out_dir, open_resumed(out_dir)
    if args.out is None:
        out_dir = claim_default(label)
        return out_dir, RunLock(out_dir).acquire()
    return open_new(Path(args.out), getattr(args, "force", False))
