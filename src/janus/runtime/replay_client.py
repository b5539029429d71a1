"""The replay client: what the Trainer reads batches from and writes priorities to, on every backend.

In one process (``local``, ``process``) the client is the :class:`~janus.buffer.pipeline.JanusBuffer`
itself: its LearnerBuffer hands batches, already on the learner device, to the Trainer by
reference. Across processes (``ray``) it is a remote client that keeps a few requests in flight
to the replay host, so that the learner does not wait a round trip per batch
(:class:`janus.runtime.backends.ray_replay.RemoteReplay`). The Trainer cannot tell them apart.
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

import torch

from janus.runtime.component import Component


@runtime_checkable
class ReplayClient(Protocol):
    """Batches in, priorities out."""

    def get(self, timeout: float | None = None) -> dict[str, torch.Tensor]:
        """The next batch on the learner device; raises
        :class:`~janus.errors.StagingTimeout` past ``timeout`` and
        :class:`~janus.errors.PipelineClosedError` once the replay is closed."""
        ...

    def update_priority(self, index: Any, priority: Any) -> int | None:
        """Set the priorities of a delivered batch's keys; how many were applied (None: not known
        here, the replay host counts them)."""
        ...

    def set_learner_version(self, version: int) -> None:
        """The learner's parameter version now (the replay's limiter bounds staleness by it)."""
        ...

    @property
    def failure(self) -> BaseException | None:
        """The error that stopped the replay's pipeline, if any."""
        ...


def set_priorities(component: Component, replay: ReplayClient, keys: Any, priorities: Any) -> None:
    """Set priorities through ``replay``; count in ``component`` how many were applied and how many
    dropped (keys of items overwritten since they were sampled), where the client knows."""
    applied = replay.update_priority(keys, priorities)
    if applied is not None:
        component.count("priorities_applied", applied)
        component.count("priorities_dropped", len(keys) - applied)
