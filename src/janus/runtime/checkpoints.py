"""Consistent checkpoints of a training run: a two-phase commit driven by the Orchestrator.

Every ``checkpoint_interval_s`` the Orchestrator asks the Trainer and the TrajectoryManager to
checkpoint (:class:`~janus.runtime.messages.CheckpointMsg` with a sequence number as its tag).
Each writes ``<name>.pending-<run>-<tag>.pt`` atomically and acknowledges with its counters. Once
both have answered, the Orchestrator *commits*: it writes ``run_state.json`` — counters, learning
curve, and the commit record: the run id, the tag, a folder-wide commit number and, per file, its
size and SHA-256, all under a SHA-256 of the record itself — then renames the pending files to ``<name>.pt``.

``<run>`` is a random id drawn by :func:`start_run` for every ``janus train`` invocation, so no
two runs share a pending name (the stop-time tag ``final`` is reused by every run; with the run id
in the name a failed resumed run's parts can never pass for an earlier run's commit). Before a
resume, :func:`recover` promotes only the pending files of the committed run *and* tag whose
checksum matches the record (a commit a crash cut short), deletes every other pending or temporary
file, and checks every recorded file; :meth:`~janus.runtime.checkpoint_parties.Checkpointer.restore` verifies its file against the
record again before loading it. Anything else — a missing, altered or extra file, a run_state.json
that is not a commit record, counters that disagree with the files — is a
:class:`~janus.errors.CheckpointError` that names the file and says what to do, never a silent
restart from scratch or a mix of two instants. On stop every component stages ``final``; the
driver commits it only when every component staged it, so a failed run resumes from the last
commit. The parties' own sides (a component's :class:`~janus.runtime.checkpoint_parties.Checkpointer`,
the Orchestrator's :class:`~janus.runtime.checkpoint_parties.CheckpointSchedule`) are in
:mod:`janus.runtime.checkpoint_parties`; this module is the folder's: its record, commit and recovery.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
import secrets
import stat
import time
from pathlib import Path
from typing import Any

from janus.errors import CheckpointError
from janus.fileio import TMP_SUFFIX, file_digest, temp_name, write_text

RUN_STATE = "run_state.json"
RUN_FILE = "run.json"  # the id of the run writing this folder (start_run draws one per invocation)
FINAL = "final"  # the tag of the checkpoint staged on stop
STATE_FORMAT = "janus.run_state"
STATE_VERSION = 2
MAX_RUN_STATE_BYTES = 256 << 20  # a learning curve of millions of episodes fits; a hostile file is bounded
ADVICE = "the folder was modified or is corrupt; restore it from a backup or start a new run with --out"
_RUN = re.compile(r"^[0-9a-f]{16}$")
_NAME = re.compile(r"^[A-Za-z0-9_]+$")
_SHA = re.compile(r"^[0-9a-f]{64}$")
_PENDING = re.compile(r"^(?P<name>[A-Za-z0-9_]+)\.pending-(?:(?P<run>[0-9a-f]{16})-)?(?P<tag>\d+|final)\.pt$")
_TEMP = re.compile(r"^\..+\.[0-9a-f]{16}" + re.escape(TMP_SUFFIX) + "$")


def pending_path(folder: str | Path, name: str, tag: int | str) -> str:
    """Where the current run stages ``name``'s part of checkpoint ``tag``."""
    return pending_of_run(folder, name, current_run(folder), tag)


def pending_of_run(folder: str | Path, name: str, run: str, tag: int | str) -> str:
    """Where run ``run`` stages ``name``'s part of checkpoint ``tag``."""
    return os.path.join(folder, f"{name}.pending-{run}-{tag}.pt")


def write_json_atomic(path: str | Path, data: dict[str, Any]) -> None:
    """Write ``data`` as JSON atomically: a fresh temporary name, fsync, rename (never through a symlink)."""
    write_text(path, json.dumps(data))


def start_run(folder: str | Path, resume: bool) -> str:
    """Before a run: finish or verify the committed checkpoint when resuming (:func:`recover`),
    then draw this run's id (its pending files carry it). Returns the id."""
    if resume:
        recover(folder)
    run = secrets.token_hex(8)
    write_json_atomic(Path(folder) / RUN_FILE, {"run_id": run})
    return run


def current_run(folder: str | Path) -> str:
    """The id of the run writing ``folder`` (one is drawn if :func:`start_run` was not called)."""
    path = Path(folder) / RUN_FILE
    for _ in range(2):
        try:
            data = _read_small_json(path, 4096)
        except FileNotFoundError:
            _create_exclusive(path, json.dumps({"run_id": secrets.token_hex(8)}))
            continue
        run = data.get("run_id") if isinstance(data, dict) else None
        if isinstance(run, str) and _RUN.match(run):
            return run
        raise CheckpointError(f"{path} does not name a run id: {ADVICE}")
    raise CheckpointError(f"cannot create {path}")


def _create_exclusive(path: Path, text: str) -> None:
    """Create ``path`` with ``text`` unless it exists (a hard link is atomic and never overwrites)."""
    tmp = temp_name(path)
    write_text(tmp, text)
    try:
        os.link(tmp, path)
    except FileExistsError:
        pass
    finally:
        os.unlink(tmp)


def _read_small_json(path: Path, limit: int) -> Any:
    """JSON from a regular file of at most ``limit`` bytes, opened without following a symlink."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    except FileNotFoundError:
        raise
    except OSError as exc:
        raise CheckpointError(f"cannot read {path}: {exc.strerror or type(exc).__name__} "
                              f"(a symlink or a directory where a file should be): {ADVICE}") from None
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        raise CheckpointError(f"{path} is not a regular file: {ADVICE}")
    with os.fdopen(fd, "rb") as f:
        if st.st_size > limit:
            raise CheckpointError(f"{path} is {st.st_size:,} bytes, more than a janus run state can be ({limit:,}): {ADVICE}")
        raw = f.read(limit + 1)
    try:
        return json.loads(raw)
    except (ValueError, RecursionError) as exc:
        raise CheckpointError(f"{path} is not valid JSON ({type(exc).__name__}: {str(exc)[:120]}): {ADVICE}") from None


def read_run_state(folder: str | Path) -> dict[str, Any]:
    """The committed counters, learning curve and commit record, validated ({} when nothing was
    ever committed). A folder with checkpoint files but no record, or a record that is not
    one, is a :class:`CheckpointError` naming the file."""
    folder = Path(folder)
    path = folder / RUN_STATE
    try:
        state = _read_small_json(path, MAX_RUN_STATE_BYTES)
    except FileNotFoundError:
        orphans = sorted(p.name for p in folder.glob("*.pt") if not _PENDING.match(p.name)) if folder.is_dir() else []
        if orphans:
            raise CheckpointError(f"{folder} holds {', '.join(orphans)[:200]} but no {RUN_STATE}: the files were never "
                                  f"committed or the record was deleted; {ADVICE.split('; ', 1)[1]}") from None
        return {}
    problem = _run_state_problem(state)
    if not problem and state.get("record_sha256") != record_digest(state):
        problem = "its record_sha256 does not match its contents: edited by hand or corrupt"
    if problem:
        raise CheckpointError(f"{path} is not a janus commit record ({problem}): {ADVICE}")
    return state


def record_digest(state: dict[str, Any]) -> str:
    """SHA-256 of a commit record without its own ``record_sha256`` (canonical JSON)."""
    body = {k: v for k, v in state.items() if k != "record_sha256"}
    return hashlib.sha256(json.dumps(body, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def _is_int(x: Any, low: int = 0) -> bool:
    return isinstance(x, int) and not isinstance(x, bool) and x >= low


def _is_number(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def _run_state_problem(state: Any) -> str | None:
    """What makes ``state`` not a commit record (None when it is one)."""
    if not isinstance(state, dict):
        return f"a JSON {type(state).__name__}, not an object"
    if state.get("format") != STATE_FORMAT or state.get("version") != STATE_VERSION:
        if "tag" in state and "files" not in state:
            return "written by an older janus, without per-file checksums; it cannot be resumed safely"
        return f"format {state.get('format')!r:.40} version {state.get('version')!r:.20}; expected {STATE_FORMAT!r} version {STATE_VERSION}"
    checks: list[tuple[str, bool]] = [
        ("run_id", isinstance(state.get("run_id"), str) and bool(_RUN.match(state["run_id"]))),
        ("tag", _is_int(state.get("tag"), 1) or state.get("tag") == FINAL),
        ("seq", _is_int(state.get("seq"), 1)),
        ("trained", _is_int(state.get("trained"))),
        ("env_steps", _is_int(state.get("env_steps"))),
        ("wall_s", _is_number(state.get("wall_s")) and state["wall_s"] >= 0),
        ("curve", isinstance(state.get("curve"), list) and all(
            isinstance(c, list) and len(c) == 3 and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in c)
            for c in state["curve"])),  # an episode return may be NaN or inf: JSON as written by Python keeps it
        ("inserted", "inserted" not in state or _is_int(state["inserted"])),
        ("restarts", isinstance(state.get("restarts", {}), dict)),
        ("evaluations", isinstance(state.get("evaluations", []), list) and all(
            isinstance(e, dict) and _is_int(e.get("env_steps")) and isinstance(e.get("mean_return"), (int, float))
            for e in state.get("evaluations", []))),
        ("train_metrics", isinstance(state.get("train_metrics", []), list) and all(
            isinstance(r, dict) and all(isinstance(k, str) and isinstance(v, (int, float)) and not isinstance(v, bool)
                                        for k, v in r.items())
            for r in state.get("train_metrics", []))),  # absent in records of janus before it was kept
        ("files", isinstance(state.get("files"), dict) and bool(state["files"]) and all(
            isinstance(n, str) and n.endswith(".pt") and bool(_NAME.match(n[:-3])) and isinstance(e, dict)
            and _is_int(e.get("size")) and isinstance(e.get("sha256"), str) and bool(_SHA.match(e["sha256"]))
            for n, e in state["files"].items())),
    ]
    bad = [field for field, ok in checks if not ok]
    if bad:
        return "missing or mistyped: " + ", ".join(bad)
    if "inserted" in state and "trajectory_manager.pt" not in state["files"]:
        return "'inserted' recorded without a trajectory_manager.pt"
    return None


def recorded_entry(folder: str | Path, record: dict[str, Any], file: str) -> dict[str, Any]:
    """The size and checksum the commit ``record`` of ``folder`` holds for ``file``."""
    entry = record["files"].get(file)
    if entry is None:
        raise CheckpointError(f"{Path(folder) / RUN_STATE} records no {file} (it lists {sorted(record['files'])}): "
                              "the folder belongs to a run of another algorithm or was modified; start a new run with --out")
    return entry


_DIGESTS: dict[tuple[int, ...], tuple[int, str]] = {}
_DIGESTS_KEPT = 64
RACY_S = 2.0  # a file changed this recently is never remembered (timestamps are as coarse as a clock tick)


def _digest(path: str | Path) -> tuple[int, str]:
    """:func:`~janus.fileio.file_digest`, remembered while the file is unchanged: same device,
    inode, size, mtime and ctime. A resume checks every file before it prints where it resumes
    from, again when it recovers and again when each component loads its part, and a replay
    checkpoint can be gigabytes: it is read once. Only a file last changed ``RACY_S`` before it
    was read is remembered (as git treats "racily clean" files): a later write or rename then
    moves its ctime past the remembered one even on a file system whose clock is coarse."""
    try:
        before = os.stat(path, follow_symlinks=False)
    except OSError:
        return file_digest(path)  # the error file_digest gives for it
    key = (before.st_dev, before.st_ino, before.st_size, before.st_mtime_ns, before.st_ctime_ns)
    if stat.S_ISREG(before.st_mode) and key in _DIGESTS:
        return _DIGESTS[key]
    started = time.time_ns()
    digest = file_digest(path)
    after = os.stat(path, follow_symlinks=False)
    settled = max(before.st_mtime_ns, before.st_ctime_ns) < started - int(RACY_S * 1e9)
    if settled and stat.S_ISREG(after.st_mode) and key == (after.st_dev, after.st_ino, after.st_size,
                                                             after.st_mtime_ns, after.st_ctime_ns):
        if len(_DIGESTS) >= _DIGESTS_KEPT:
            _DIGESTS.clear()
        _DIGESTS[key] = digest
    return digest


def verify_committed(folder: str | Path, record: dict[str, Any]) -> None:
    """Check every file the commit ``record`` of ``folder`` lists (:func:`read_run_state`), where
    :func:`recover` would take it from, without changing anything: a resume refuses a corrupt
    checkpoint before it says where it resumes from."""
    for file in record.get("files", {}):
        _committed_copy(Path(folder), record, file)


def _committed_copy(folder: Path, record: dict[str, Any], file: str) -> Path:
    """Where the committed bytes of ``file`` are, checked against ``record``: the pending file of
    the committed run and tag when it matches (a commit a crash cut short), else the file itself."""
    entry = record["files"][file]
    pending = Path(pending_of_run(folder, file[:-3], record["run_id"], record["tag"]))
    if pending.is_file() and not pending.is_symlink() and _matches(pending, entry):
        return pending
    verify_file(folder / file, entry)
    return folder / file


def verify_file(path: str | Path, entry: dict[str, Any]) -> None:
    """``path`` is exactly the committed file: same size, same SHA-256."""
    if not os.path.lexists(path):
        raise CheckpointError(f"checkpoint {path} is missing but {RUN_STATE} records it: {ADVICE}")
    size, sha = _digest(path)
    if size != entry["size"]:
        raise CheckpointError(f"checkpoint {path} does not match {RUN_STATE} (size {size:,} bytes, recorded "
                              f"{entry['size']:,}): {ADVICE}")
    if sha != entry["sha256"]:
        raise CheckpointError(f"checkpoint {path} does not match {RUN_STATE} (sha256 differs): {ADVICE}")


def _matches(path: str | Path, entry: dict[str, Any]) -> bool:
    try:
        verify_file(path, entry)
    except CheckpointError:
        return False
    return True


def staged(folder: str | Path, names: tuple[str, ...], tag: int | str) -> bool:
    """Whether every component wrote its part of checkpoint ``tag`` in this run."""
    return all(os.path.isfile(pending_path(folder, name, tag)) for name in names)


def commit(folder: str | Path, names: tuple[str, ...], tag: int | str, run_state: dict[str, Any]) -> None:
    """Phase two: record ``tag`` — with each part's size and checksum — as committed in
    ``run_state.json``, then promote its files."""
    folder = Path(folder)
    run = current_run(folder)
    files = {}
    for name in names:
        size, sha = file_digest(pending_of_run(folder, name, run, tag))
        files[f"{name}.pt"] = {"size": size, "sha256": sha}
    try:
        seq = int(read_run_state(folder).get("seq", 0)) + 1
    except CheckpointError:  # a fresh run over a folder whose record is unreadable: its files are replaced now
        seq = 1
    record = {**run_state, "format": STATE_FORMAT, "version": STATE_VERSION, "run_id": run, "tag": tag, "seq": seq,
              "files": files}
    record = json.loads(json.dumps(record))  # as it will read back (tuples become lists), for the digest
    write_json_atomic(folder / RUN_STATE, {**record, "record_sha256": record_digest(record)})
    for name in names:
        os.replace(pending_of_run(folder, name, run, tag), folder / f"{name}.pt")
    for entry in list(os.scandir(folder)):  # this run's earlier checkpoints that were never committed
        m = _PENDING.match(entry.name)
        if m and m["run"] == run and m["tag"] != FINAL and tag != FINAL and int(m["tag"]) < int(tag):
            os.remove(entry.path)


def recover(folder: str | Path) -> None:
    """Before resuming: promote the committed run's pending files of the committed tag whose
    checksum matches the record (a commit a crash cut short), check every recorded file, and
    delete every other pending or temporary file (parts of checkpoints never committed)."""
    folder = Path(folder)
    if not folder.is_dir():
        return
    record = read_run_state(folder)
    for file in record.get("files", {}):
        committed = _committed_copy(folder, record, file)
        if committed != folder / file:
            os.replace(committed, folder / file)
    for item in list(os.scandir(folder)):
        if _PENDING.match(item.name) or _TEMP.match(item.name):
            if item.is_dir(follow_symlinks=False):
                raise CheckpointError(f"{item.path} is a directory where a checkpoint file should be: {ADVICE}")
            os.remove(item.path)
