"""What a run folder says when its run failed rather than stopped: never ``running``.

A run's periodic results (``results.json``, ``results.csv``) say ``running`` while it trains. A stop
signal or a callback's stop writes the run so far with its status; a failure (a component's error,
a full disk at a checkpoint commit) has no run so far to write, so :func:`mark_failed` turns every
``running`` entry into ``failed`` with the error as its ``stop_reason``, keeping what it measured.
"""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path
from typing import Any

from janus import fileio

RUNNING, FAILED = "running", "failed"


def reason_of_failure(exc: BaseException) -> str:
    """A failure in one line, for ``stop_reason``: its first line and, where it carries a component's
    traceback, the traceback's last line (the error itself: ``OSError: [Errno 28] No space left ...``)."""
    lines = [line.strip() for line in str(exc).strip().splitlines() if line.strip()]
    head = f"failed: {type(exc).__name__}" + (f": {lines[0]}" if lines else "")
    return f"{head} {lines[-1]}" if len(lines) > 1 else head


def _failed_csv(path: Path) -> str | None:
    """``results.csv`` with every ``running`` status ``failed``; None when none is (or it cannot be read)."""
    try:
        rows = list(csv.DictReader(io.StringIO(path.read_text(encoding="utf-8"))))
    except (OSError, ValueError, csv.Error):
        return None
    if not rows or not any(row.get("status") == RUNNING for row in rows):
        return None
    out = io.StringIO(newline="")
    writer = csv.DictWriter(out, fieldnames=list(rows[0]))
    writer.writeheader()
    writer.writerows({**row, "status": FAILED if row.get("status") == RUNNING else row.get("status")} for row in rows)
    return out.getvalue()


def mark_failed(out_dir: Path, reason: str) -> bool:
    """Turn the ``running`` runs of ``out_dir/results.json`` (and results.csv) into ``failed`` with
    ``reason``; returns whether there were any. Each file is replaced whole (results.json last)."""
    path = out_dir / "results.json"
    try:
        doc: Any = json.loads(path.read_text(encoding="utf-8"))
        runs = [r for r in doc["runs"] if isinstance(r, dict) and r.get("status") == RUNNING]
    except (OSError, ValueError, TypeError, KeyError):
        return False
    if not runs:
        return False
    for run in runs:
        run["status"], run["stop_reason"] = FAILED, reason
    table = _failed_csv(out_dir / "results.csv")
    if table is not None:
        fileio.write_text(out_dir / "results.csv", table)
    fileio.write_text(path, json.dumps(doc, indent=2) + "\n")
    return True
