"""The console of a command: its output goes on being written, or dropped, when nobody reads it."""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator
from typing import Any, TextIO


class UnreadOutput:
    """A text stream (stdout, stderr) that drops what it is given once nobody reads it: a closed
    pipe (``janus train | head``, or a ``| tee log`` killed by the same Ctrl-C or SIGTERM as janus).
    Printing there raised BrokenPipeError, which ended the run and lost its results; now the run
    goes on (or stops as signalled) and writes its files as ever."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream
        self.unread = False

    def write(self, text: str) -> int:
        if not self.unread:
            try:
                return self.stream.write(text)
            except BrokenPipeError:
                self._drop()
        return len(text)

    def flush(self) -> None:
        if not self.unread:
            try:
                self.stream.flush()
            except BrokenPipeError:
                self._drop()

    def _drop(self) -> None:
        """From now on write nothing; point the descriptor at /dev/null so the bytes still buffered
        do not fail again when the interpreter flushes at exit."""
        self.unread = True
        with contextlib.suppress(OSError, ValueError):
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, self.stream.fileno())
            os.close(devnull)

    def __getattr__(self, name: str) -> Any:  # isatty, fileno, encoding ...: the stream's own
        return getattr(self.stream, name)


@contextlib.contextmanager
def output_that_may_go_unread() -> Iterator[None]:
    """sys.stdout and sys.stderr as :class:`UnreadOutput` while a command runs."""
    saved = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = UnreadOutput(sys.stdout), UnreadOutput(sys.stderr)
    try:
        yield
    finally:
        sys.stdout, sys.stderr = saved
