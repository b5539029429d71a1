"""Marks of a command's phases on the wall clock, for ``benchmarks/startup.py``.

Only where the environment variable :data:`TIMELINE_ENV` names a file: each :func:`mark` appends
one JSON line ``{"event", "t" (time.time()), "pid"}`` to it, from any process of the run (the
process backend's workers inherit the variable). Unset, a mark costs one dictionary look-up and
writes nothing. The marks, in a run's order: ``command`` (the command's code starts: interpreter
and imports done), ``configured``, ``run_folder``, ``backend_started``, ``first_env_step`` (a
worker's first rollout begins), ``loop_end`` (the run's goal reached), ``shut_down`` (components
stopped, final checkpoint committed), ``results_written``.
"""

from __future__ import annotations

import json
import os
import time

TIMELINE_ENV = "JANUS_TIMELINE"
"""The file the marks are appended to; unset or empty: no marks."""


def mark(event: str) -> None:
    """Append ``event`` with the wall-clock time to the :data:`TIMELINE_ENV` file, if one is named."""
    path = os.environ.get(TIMELINE_ENV)
    if not path:
        return
    line = json.dumps({"event": event, "t": time.time(), "pid": os.getpid()}) + "\n"
    with open(path, "a", encoding="utf-8") as f:  # one short write: lines of processes do not interleave
        f.write(line)


def read(path: str) -> list[dict[str, float | str | int]]:
    """The marks in ``path`` in the order written (an absent file: none)."""
    try:
        with open(path, encoding="utf-8") as f:
            return [json.loads(line) for line in f if line.strip()]
    except FileNotFoundError:
        return []
