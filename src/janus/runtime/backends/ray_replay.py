"""The Ray replay client: a Trainer's :class:`~janus.runtime.replay_client.ReplayClient` when the
replay host (the TrajectoryManager) runs in another Ray actor.

It keeps ``depth`` sample calls in flight to the host, so a batch is usually there when the
learner asks: the learner does not wait a round trip per batch. Each call waits at the host up to
``HOST_WAIT_S`` for a batch (the host's JanusBuffer paces it with its rate limiter) and returns
None when there is none yet; the client then asks again. Batches arrive as numpy from Ray's object
store and are moved to the learner device here: this client is the learner end of the replay.
Priorities go back as calls the client does not wait for.
"""

from __future__ import annotations

import collections
import time
from typing import Any

import numpy as np
import ray
import torch

from janus.errors import PipelineClosedError, StagingTimeout

HOST_WAIT_S = 0.2  # how long one sample call may wait at the host for a batch


class RemoteReplay:
    """Prefetching client of the replay host named ``host`` in Ray namespace ``namespace``."""

    def __init__(self, namespace: str, host: str, depth: int = 4, device: str = "cpu") -> None:
        self.namespace = namespace
        self.host_name = host
        self.depth = max(1, int(depth))
        self.device = torch.device(device)
        self.handle: Any = None
        self.in_flight: collections.deque[Any] = collections.deque()
        self.calls: collections.deque[Any] = collections.deque()  # priorities and versions sent
        self.closed = False

    @property
    def failure(self) -> BaseException | None:
        return None  # the host's own failure stops the run through its actor (the backend sees it)

    def _host(self) -> Any:
        if self.handle is None:
            try:
                self.handle = ray.get_actor(self.host_name, namespace=self.namespace)
            except ValueError:
                raise PipelineClosedError(f"the replay host {self.host_name!r} is gone") from None
        return self.handle

    def _fill(self) -> None:
        while len(self.in_flight) < self.depth:
            self.in_flight.append(self._host().replay_sample.remote(HOST_WAIT_S))

    def get(self, timeout: float | None = None) -> dict[str, torch.Tensor]:
        """The next batch on the learner device; :class:`StagingTimeout` past ``timeout``."""
        if self.closed:
            raise PipelineClosedError("the replay client is closed")
        deadline = None if timeout is None else time.perf_counter() + timeout
        while True:
            self._fill()
            remaining = None if deadline is None else max(0.0, deadline - time.perf_counter())
            ready, _ = ray.wait([self.in_flight[0]], timeout=remaining)
            if ready:
                try:
                    batch = ray.get(self.in_flight.popleft())
                except ray.exceptions.RayActorError:
                    raise PipelineClosedError(f"the replay host {self.host_name!r} stopped") from None
                if batch is not None:
                    self._fill()  # the next request leaves before this batch is trained on
                    return self._to_device(batch)
            if deadline is not None and time.perf_counter() >= deadline:
                raise StagingTimeout(f"no batch from the replay host {self.host_name!r} within {timeout:g}s")

    def _to_device(self, batch: dict[str, np.ndarray]) -> dict[str, torch.Tensor]:
        out = {k: torch.as_tensor(v) for k, v in batch.items()}
        if self.device.type != "cpu":
            out = {k: v.pin_memory().to(self.device, non_blocking=True) for k, v in out.items()}
        return out

    def update_priority(self, index: Any, priority: Any) -> int | None:
        """Send the priorities to the host (counted there); at most ``depth`` such calls in flight."""
        keys = index.cpu().numpy() if isinstance(index, torch.Tensor) else np.asarray(index)
        values = priority.cpu().numpy() if isinstance(priority, torch.Tensor) else np.asarray(priority)
        self._call(self._host().replay_update_priority.remote(keys, values))
        return None

    def _call(self, ref: Any) -> None:
        """Keep a call not waited for; at most ``depth`` of them in flight (their refs do not pile up)."""
        self.calls.append(ref)
        while len(self.calls) > self.depth:
            ray.wait([self.calls.popleft()], fetch_local=False)

    def set_learner_version(self, version: int) -> None:
        """Tell the host (a call not waited for; the host keeps the highest version it was told,
        as calls to a threaded actor may overtake each other)."""
        self._call(self._host().replay_set_learner_version.remote(version))

    def close(self) -> None:
        self.closed = True
        self.in_flight.clear()
