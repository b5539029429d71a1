"""The two parties of a checkpoint's two-phase commit (:mod:`janus.runtime.checkpoints`): a
component's :class:`Checkpointer` (stage its part, restore the committed one) and the Orchestrator's
:class:`CheckpointSchedule` (when to begin a checkpoint, and the commit once every part is staged).
"""

from __future__ import annotations

import os
import time
from typing import Any

from janus.errors import CheckpointError
from janus.runtime import checkpoints
from janus.runtime.checkpoints import (
    ADVICE,
    RUN_STATE,
    current_run,
    pending_of_run,
    read_run_state,
    recorded_entry,
    verify_file,
)


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
        from janus.buffer.storage.state_file import save_atomic

        run = current_run(self.folder)
        save_atomic({**state, "tag": tag, "run_id": run}, pending_of_run(self.folder, self.name, run, tag), fmt=self.fmt)

    def restore(self) -> dict[str, Any] | None:
        """The committed state when resuming, verified against ``run_state.json`` (None when not
        resuming or when nothing was ever committed)."""
        if not self.resume:
            return None
        record = read_run_state(self.folder)
        if not record:
            return None
        from janus.buffer.storage.state_file import load_state

        entry = recorded_entry(self.folder, record, f"{self.name}.pt")
        verify_file(self.path, entry)
        state = load_state(self.path, fmt=self.fmt)
        for key in ("run_id", "tag", "trained", "inserted"):
            if key in state and key in record and state[key] != record[key]:
                raise CheckpointError(f"checkpoint {self.path} does not match {RUN_STATE} ({key} {state[key]!r:.40} "
                                      f"in the file, {record[key]!r:.40} in the record): {ADVICE}")
        return state


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
        checkpoints.commit(self.folder, self.names, self.seq, state)  # by the module: one commit, whoever calls it
        self.last = time.monotonic()
        return True
