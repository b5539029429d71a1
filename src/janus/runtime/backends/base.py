"""The interface every backend provides to ``runtime/run.py`` (local, process and ray)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol, runtime_checkable

from janus.runtime.component import Component
from janus.runtime.replay_client import ReplayClient
from janus.runtime.stats import MessageStats
from janus.runtime.status import RunStatus


@runtime_checkable
class Backend(Protocol):
    """Hosts components, delivers messages between them, restarts workers, reports failures.

    Lifecycle: :meth:`add` every component, :meth:`start`, :meth:`deliver` the StartMsg, poll
    :meth:`orchestrator_status` and :attr:`fatal`, then :meth:`shutdown` (always, also on error);
    :meth:`counters` is valid after shutdown.
    """

    name: str
    stats: MessageStats

    def add(self, name: str, role: str, factory: Callable[[], Component], node: str = "node-0") -> None:
        """Register a component; ``factory`` must be picklable where the backend crosses processes."""

    def start(self) -> None:
        """Create every component (and its process); return once all are up."""

    def deliver(self, dest: str, msg: Any) -> None:
        """Send ``msg`` to component ``dest`` from outside (the driver)."""

    def restart(self, name: str) -> str | None:
        """Replace worker ``name`` by a fresh instance (the Orchestrator calls this); return the
        replaced instance's error: its traceback, or how its process died (``WorkerDied: ...``)
        where the worker has a process of its own; None if it hung, or was crashed on purpose
        by the local backend's :meth:`kill`."""

    def kill(self, name: str) -> None:
        """Make component ``name`` die as if its process crashed (fault tests)."""

    @property
    def fatal(self) -> tuple[str, str] | None:
        """``(component, traceback)`` once a non-worker component failed, else None."""

    def orchestrator_status(self) -> RunStatus:
        """The Orchestrator's status (:meth:`janus.runtime.orchestrator.Orchestrator.status`)."""

    def shutdown(self, timeout: float = 10.0) -> list[str]:
        """Stop everything in data-flow order without dropping data; names of what is still alive."""

    def counters(self) -> dict[str, dict[str, float]]:
        """Every component's counters (workers' as last reported)."""

    def remote_replay(self, host: str, depth: int, device: str) -> Callable[[], ReplayClient] | None:
        """A (picklable) factory of the replay client with which a Trainer reaches the replay host
        ``host`` from another process, keeping ``depth`` batches in flight and delivering them on
        ``device``; None where this backend hosts the Trainer in the replay host's process (its
        client is then the host's JanusBuffer itself)."""

    def node_summary(self) -> dict[str, str]:
        """Component name -> the node it ran on, where the backend spans nodes (else empty)."""

    @property
    def gcs_lost(self) -> str | None:
        """Why the backend's cluster coordinator cannot be used any more, or None (always None
        for backends without one)."""
