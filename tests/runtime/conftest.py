"""Shared fixtures for the runtime tests: one local Ray instance for the whole test session."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest


@pytest.fixture(scope="session")
def ray_session() -> Iterator[Any]:
    """A local Ray bound to 127.0.0.1, started once per session (skips without Ray).

    Backends created while it runs reuse it (they leave it running but kill their actors). If Ray
    was already initialised by someone else, that instance is used and left alone.
    """
    ray = pytest.importorskip("ray")
    from janus.runtime.backends.ray_cluster import start_local_ray

    started = not ray.is_initialized()
    if started:
        start_local_ray(num_cpus=2)
    try:
        yield ray
    finally:
        if started:
            ray.shutdown()
