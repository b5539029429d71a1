"""What the parent of a seed's process (:mod:`janus.harness.seeds.runs`) sends it: the seed's request
and its checked configuration, pickled onto the child's stdin (:mod:`janus.harness.seeds.child` reads them)."""

from __future__ import annotations

import pickle
from typing import IO, TYPE_CHECKING

if TYPE_CHECKING:
    from janus.config import RunConfig
    from janus.config.request import RunRequest


def send_payload(stream: IO[bytes], request: RunRequest, cfg: RunConfig, parent: int) -> None:
    """Write a seed's request ``request``, its configuration ``cfg`` and its ``parent`` pid to the
    child's stdin ``stream`` (which the parent keeps open: its end is the child's signal to stop)."""
    pickle.dump({"request": request, "config": cfg, "parent": parent}, stream, protocol=pickle.HIGHEST_PROTOCOL)
    stream.flush()


def payload_error(request: RunRequest, cfg: RunConfig) -> str | None:
    """Why ``request`` or ``cfg`` cannot travel to a seed's process (a value that does not pickle), else None."""
    try:
        pickle.dumps((request, cfg), protocol=pickle.HIGHEST_PROTOCOL)
    except Exception as exc:  # noqa: BLE001 - any value pickle refuses, in its own words
        return f"{type(exc).__name__}: {exc}"
    return None
