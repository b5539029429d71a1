"""What the parent of a seed's process (:mod:`janus.harness.seeds.runs`) sends it: the seed's parsed
arguments and its checked configuration, pickled onto the child's stdin (:mod:`janus.harness.seeds.child`
reads them). Apart from the child so the parent's side imports nothing of the CLI."""

from __future__ import annotations

import argparse
import pickle
from typing import IO, TYPE_CHECKING

if TYPE_CHECKING:
    from janus.config import RunConfig


def send_payload(stream: IO[bytes], args: argparse.Namespace, cfg: RunConfig, parent: int) -> None:
    """Write a seed's arguments ``args``, its configuration ``cfg`` and its ``parent`` pid to the
    child's stdin ``stream`` (which the parent keeps open: its end is the child's signal to stop)."""
    pickle.dump({"args": args, "config": cfg, "parent": parent}, stream, protocol=pickle.HIGHEST_PROTOCOL)
    stream.flush()


def payload_error(args: argparse.Namespace, cfg: RunConfig) -> str | None:
    """Why ``args`` or ``cfg`` cannot travel to a seed's process (a value that does not pickle), else None."""
    try:
        pickle.dumps((args, cfg), protocol=pickle.HIGHEST_PROTOCOL)
    except Exception as exc:  # noqa: BLE001 - any value pickle refuses, in its own words
        return f"{type(exc).__name__}: {exc}"
    return None
