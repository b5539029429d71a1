"""Consistent checkpoints of a training run: a two-phase commit driven by the Orchestrator.

Every ``checkpoint_interval_s`` the Orchestrator asks the Trainer and the TrajectoryManager to
checkpoint (:class:`~janus.runtime.messages.CheckpointMsg` with a sequence number as its tag).
Each writes ``<name>.pending-<tag>.pt`` atomically and acknowledges with its counters. Once both
have answered, the Orchestrator *commits*: it writes ``run_state.json`` (counters, learning curve
and the tag) atomically, then renames the pending files to ``<name>.pt``.

A crash at any moment leaves a consistent set: before ``run_state.json`` is replaced, the previous
commit's files are untouched; after it, :func:`recover` (run before a ``--resume``) promotes the
pending files of the committed tag. A resumed run therefore starts from the buffer contents and
counters of one instant, never from a mix. On stop every component stages ``pending-final``; the
driver commits it only when the run ended cleanly, so a failed run (a Trainer exception, say)
resumes from the last periodic commit rather than from parts written after the failure.
"""

from __future__ import annotations

import json
import os
import re
import time
from pathlib import Path
from typing import Any

RUN_STATE = "run_state.json"
FINAL = "final"  # the tag of the checkpoint staged on stop
_PENDING = re.compile(r"^(?P<name>.+)\.pending-(?P<tag>\d+|final)\.pt$")


class Checkpointer:
    """One component's checkpoint file in the run's checkpoint folder."""

    def __init__(self, folder: str, name: str, resume: bool) -> None:
        self.folder = folder
        self.name = name
        self.path = os.path.join(folder, f"{name}.pt")
        self.fmt = f"janus.{name}"
        self.resume = resume

    def stage(self, state: dict[str, Any], tag: int | str) -> None:
        """Write this component's part of checkpoint ``tag`` (a seq number, or FINAL on stop)."""
        from janus.buffer.checkpoint import save_atomic

        save_atomic({**state, "tag": tag}, pending_path(self.folder, self.name, tag), fmt=self.fmt)

    def restore(self) -> dict[str, Any] | None:
        """The saved state when resuming (None when not resuming or nothing was saved)."""
        if not self.resume or not os.path.exists(self.path):
            return None
        from janus.buffer.checkpoint import load_state

        return load_state(self.path, fmt=self.fmt)


def pending_path(folder: str | Path, name: str, tag: int | str) -> str:
    return os.path.join(folder, f"{name}.pending-{tag}.pt")


def write_json_atomic(path: str | Path, data: dict[str, Any]) -> None:
    """Write ``data`` as JSON to a temporary file, fsync, then rename over ``path``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w") as f:
        json.dump(data, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def read_run_state(folder: str | Path) -> dict[str, Any]:
    """The committed counters and learning curve ({} when there are none)."""
    path = Path(folder) / RUN_STATE
    return json.loads(path.read_text()) if path.is_file() else {}


def staged(folder: str | Path, names: tuple[str, ...], tag: int | str) -> bool:
    """Whether every component wrote its part of checkpoint ``tag``."""
    return all(os.path.exists(pending_path(folder, name, tag)) for name in names)


def commit(folder: str | Path, names: tuple[str, ...], tag: int | str, run_state: dict[str, Any]) -> None:
    """Phase two: record ``tag`` as committed in ``run_state.json``, then promote its files."""
    write_json_atomic(Path(folder) / RUN_STATE, {**run_state, "tag": tag})
    _promote(folder, str(tag), drop_others=False)


def recover(folder: str | Path) -> None:
    """Before resuming: promote the committed tag's pending files (a commit a crash cut short)
    and delete every other pending file (parts of checkpoints that were never committed)."""
    if Path(folder).is_dir():
        _promote(folder, str(read_run_state(folder).get("tag")), drop_others=True)


def _promote(folder: str | Path, tag: str, drop_others: bool) -> None:
    for entry in list(os.scandir(folder)):
        m = _PENDING.match(entry.name)
        if m is None:
            continue
        if m["tag"] == tag:
            os.replace(entry.path, os.path.join(folder, f"{m['name']}.pt"))
        elif drop_others or (m["tag"] != FINAL and tag != FINAL and int(m["tag"]) < int(tag)):
            os.remove(entry.path)


class CheckpointSchedule:
    """The Orchestrator's side: when to ask for a checkpoint and when one is complete."""

    def __init__(self, folder: str, names: tuple[str, ...], interval_s: float) -> None:
        self.folder = folder
        self.names = names
        self.interval_s = interval_s
        self.seq = 0  # the tag of the latest checkpoint begun
        self.last = time.monotonic()
        self.waiting: set[str] = set()
        self.acks: dict[str, dict[str, float]] = {}
        self.run_state: dict[str, Any] = {}

    def due(self) -> bool:
        return not self.waiting and time.monotonic() - self.last >= self.interval_s

    def begin(self, run_state: dict[str, Any]) -> int:
        """Start checkpoint ``seq + 1`` with the Orchestrator's counters of this instant."""
        self.seq += 1
        self.waiting = set(self.names)
        self.acks = {}
        self.run_state = run_state
        self.last = time.monotonic()
        return self.seq

    def ack(self, sender: str, seq: int, counters: dict[str, float]) -> bool:
        """Record one component's acknowledgement; commits and returns True when all are in."""
        if seq != self.seq or sender not in self.waiting:
            return False
        self.waiting.discard(sender)
        self.acks[sender] = counters
        if self.waiting:
            return False
        state = dict(self.run_state)
        for counters_of in self.acks.values():  # the components' own counters win (same instant as their files)
            state.update(counters_of)
        commit(self.folder, self.names, self.seq, state)
        self.last = time.monotonic()
        return True
