"""A resumed run changes its folder only once it has committed a checkpoint: :class:`ResumeCommit`."""

from __future__ import annotations

import contextlib
import os
import threading
from pathlib import Path

from janus import fileio
from janus.errors import CheckpointError


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
            fileio.write_bytes(folder / "run.json", self.run_file)
