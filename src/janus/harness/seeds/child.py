"""One seed's run of ``janus train --seeds``, as its own process that dies with its parent.

The parent (:mod:`janus.harness.seeds.runs`) starts ``python -m janus.harness.seeds.child`` and writes
the seed's request and its checked configuration to its stdin as data (a pickled
:class:`~janus.config.request.RunRequest` and :class:`~janus.config.RunConfig`: no command line is rebuilt as text,
so a value such as ``--out=-dash`` or ``name="-x"`` arrives as it was given, and no config file is
read again), then keeps that pipe open for the child's whole life.

The child stops as on SIGTERM (a clean stop: final checkpoint, results written, status
``interrupted``) as soon as its parent is gone, so no seed outlives a killed ``janus train --seeds``
and writes on into a folder another run may have taken since:

* on Linux the kernel sends it SIGTERM when the parent dies (``prctl(PR_SET_PDEATHSIG)``);
* everywhere, a watchdog thread reads the pipe: end of file means the parent has exited, however
  it ended (SIGKILL included), and the watchdog sends the SIGTERM itself.
"""

from __future__ import annotations

import ctypes
import os
import pickle
import signal
import sys
import threading
import time
from typing import IO, Any

PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def _stop_self(grace_s: float = 1.0) -> None:
    """SIGTERM to this process, unless the kernel's parent-death signal, sent as the pipe closed,
    is handled within ``grace_s`` (one signal, not two: the second would only print a note)."""
    from janus import stopping

    deadline = time.monotonic() + grace_s
    while not stopping.signalled() and time.monotonic() < deadline:
        time.sleep(0.02)
    if not stopping.signalled():
        os.kill(os.getpid(), signal.SIGTERM)


def die_with_parent(parent: int, pipe: IO[bytes]) -> bool:
    """Arrange a SIGTERM to this process when ``parent`` dies: the kernel's parent-death signal
    where there is one (Linux), and a watchdog thread that waits for the end of ``pipe``. Returns
    False when the parent is already gone (nothing should start)."""
    if sys.platform.startswith("linux"):
        try:
            ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0)
        except (OSError, AttributeError):  # no prctl in this libc: the watchdog alone
            pass
    if os.getppid() != parent:  # it died before the parent-death signal was set
        return False

    def watch() -> None:
        try:
            while pipe.read(65536):
                pass
        except (OSError, ValueError):
            pass
        _stop_self()

    threading.Thread(target=watch, name="janus-seed-parent-watchdog", daemon=True).start()
    return True


def main() -> int:
    """Read the seed's request from stdin, follow the parent, run it as ``janus train`` does."""
    from janus.harness.console import output_that_may_go_unread
    from janus.harness.launch import run_request
    from janus.stopping import StopSignals

    signals = StopSignals().install()  # before anything slow, as the CLI does
    stdin = sys.stdin.buffer
    payload: dict[str, Any] = pickle.load(stdin)
    request, parent = payload["request"], int(payload["parent"])
    if not die_with_parent(parent, stdin):
        print(f"janus train: seed {request.seed}: the janus train --seeds process (pid {parent}) ended before this "
              "seed's run started; nothing was run", file=sys.stderr)
        return 143
    with output_that_may_go_unread():
        return run_request(request, signals, payload["config"])


if __name__ == "__main__":
    sys.exit(main())
