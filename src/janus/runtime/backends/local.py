"""The ``local`` backend: every component in a thread of this process, messages through queues.

Messages are passed by reference (no serialisation); parameter handles are the snapshots
themselves. This is the embedded default and what most tests use.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from janus.runtime.component import Component, Host, closing_failed, error_text
from janus.runtime.messages import WorkerDownMsg, WorkerUpMsg
from janus.runtime.stats import MessageStats
from janus.runtime.status import RunStatus

SHUTDOWN_ORDER = ("worker", "proxy", "trajectory_manager", "evaluator", "trainer", "orchestrator")
ABANDONABLE = ("worker", "evaluator")  # roles whose hung thread a shutdown leaves running (they hold no run data)
WORKER_STOP_S = 5.0  # how long a worker may take to stop at shutdown before it is abandoned (hung)


class LocalOutbox:
    """The outbox a local component sends through."""

    def __init__(self, backend: LocalBackend, sender: str) -> None:
        self.backend = backend
        self.sender = sender

    def send(self, dest: str, msg: Any) -> None:
        self.backend.deliver(dest, msg)

    def share(self, snapshot: Any) -> Any:
        return snapshot

    def resolve(self, handle: Any) -> Any:
        return handle


class LocalBackend:
    """Hosts components in threads; restarts workers on request; reports fatal errors.

    ``serial=True`` runs every component in one scheduler thread instead, in a fixed order (all
    queued messages, then one ``step``), so a seeded run makes the same decisions in the same order
    every time: the deterministic mode behind ``--seed`` with both overlaps off.
    """

    name = "local"
    outbox_type: type[LocalOutbox] = LocalOutbox  # what a hosted component sends through

    def __init__(self, serial: bool = False, worker_stop_s: float = WORKER_STOP_S, serial_hang_s: float = 0.0) -> None:
        self.serial = serial
        self.worker_stop_s = worker_stop_s
        self.serial_hang_s = serial_hang_s
        """Serial: a component inside one call (a message, a step) this long is hung, and fails the
        run (the one scheduler thread cannot go on without it); 0: never (the run's stall timeout)."""
        self._busy: tuple[str, float] | None = None  # serial: the component the scheduler is in, since when
        self.abandoned: list[str] = []
        """Workers that did not stop when told (hung, e.g. in ``env.step``): left running, never
        joined, as ``"<name> (instance <n>)"``; :func:`janus.runtime.run.run_runtime` reports them."""
        self._scheduler: threading.Thread | None = None
        self._halt = threading.Event()
        self.factories: dict[str, Callable[[], Component]] = {}
        self.roles: dict[str, str] = {}
        self.nodes: dict[str, str] = {}
        self.hosts: dict[str, Host] = {}
        self.retired: list[Host] = []
        self._killed: list[Host] = []  # hosts kill() crashed on purpose: their error is no fault
        self.stats = MessageStats()
        self.fatal: tuple[str, str] | None = None
        self._lock = threading.Lock()

    def add(self, name: str, role: str, factory: Callable[[], Component], node: str = "node-0") -> None:
        """Register a component (created from ``factory`` now and again on restart)."""
        self.factories[name] = factory
        self.roles[name] = role
        self.nodes[name] = node
        self.hosts[name] = self._host(name)

    def _host(self, name: str, instance: int = 0) -> Host:
        component = self.factories[name]()
        component.instance = instance
        component.bind(self.outbox_type(self, name))
        host = Host(component)
        host.instance = instance
        return host

    def start(self) -> None:
        if self.serial:
            self._scheduler = threading.Thread(target=self._serial_loop, name="host-serial", daemon=True)
            self._scheduler.start()
            return
        for host in self.hosts.values():
            host.start_thread(on_exit=self._on_exit)

    def _serial_loop(self) -> None:
        import queue

        import torch

        torch.set_num_threads(1)
        while not self._halt.is_set():
            progressed = False
            for name in list(self.hosts):
                host = self.hosts[name]
                c = host.component
                if host.done.is_set():
                    continue
                self._busy = (name, time.monotonic())
                try:
                    while not c.stopped:
                        try:
                            msg = host.inbox.get_nowait()
                        except queue.Empty:
                            break
                        c.receive(msg)
                        progressed = True
                    if c.started and not c.stopped and c.step():
                        progressed = True
                    if c.stopped:
                        host.done.set()  # first: closed once, whatever close() does
                        try:
                            c.close()
                        except Exception as exc:  # noqa: BLE001 - reported by shutdown, as a host thread's
                            host.close_failure = closing_failed(c.name, exc)
                except BaseException as exc:  # noqa: BLE001 - a worker is restarted, others fail the run
                    host.error, host.error_text = exc, error_text(exc)
                    close_component(host)  # as a host thread closes its component on the way out
                    self._on_exit(host)
                self._busy = None
            if not progressed:
                time.sleep(0.0005)

    def component(self, name: str) -> Component:
        return self.hosts[name].component

    def deliver(self, dest: str, msg: Any) -> None:
        self.stats.record(msg)
        with self._lock:
            host = self.hosts.get(dest)
        if host is None or host.done.is_set():
            self.stats.dropped += 1
            return
        host.post(msg)

    def restart(self, name: str) -> str | None:
        """Replace a (dead or stuck) worker with a fresh instance; returns the old instance's
        error traceback (None if it hung, or was killed by :meth:`kill`). A new instance whose
        factory raises is a failed instance (its error reported like a crash), not an error of the
        caller's."""
        with self._lock:
            old = self.hosts[name]
            error = old.error_text if old.done.is_set() and old.error is not None and old not in self._killed else None
            old.component.stopped = True
            self.retired.append(old)
            try:
                host = self._host(name, old.instance + 1)
            except Exception as exc:  # noqa: BLE001 - the Orchestrator counts it and tries again
                host = Host.of_failed_build(name, exc)
                host.instance = old.instance + 1
            self.hosts[name] = host
        if host.done.is_set():
            self._on_exit(host)
        else:
            if not self.serial:
                host.start_thread(on_exit=self._on_exit)
            self.deliver("orchestrator", WorkerUpMsg(name, host.instance))  # built: no spawn to wait for
        return error

    def kill(self, name: str) -> None:
        """Make a component's host exit as if its process had died (for fault tests)."""
        self._killed.append(self.hosts[name])
        self.hosts[name].post(_Crash())

    def _on_exit(self, host: Host) -> None:
        """A host ended: a non-worker's error fails the run; a worker's is reported to the
        Orchestrator, which replaces the worker at once."""
        if host.error is None:
            return
        name = host.component.name
        if self.roles.get(name) == "worker":
            self.deliver("orchestrator", WorkerDownMsg(name, host.instance))
        elif self.fatal is None:
            self.fatal = (name, host.error_text)

    def shutdown(self, timeout: float = 10.0) -> list[str]:
        """Stop every component in data-flow order, joining each role before the next.

        Workers stop first; everything they sent is then already queued ahead of the StopMsg of
        their proxy, whose stop flushes it to the TrajectoryManager, whose stop writes it to the
        buffer. Nothing produced is dropped. Components built but never started (a later one
        could not be built) are closed. Returns the threads still alive and the components whose
        ``close()`` raised.

        A worker or the Evaluator whose thread does not end within ``worker_stop_s`` (hung in its
        environment: Python cannot kill a thread), and a replaced worker still running, is *abandoned*, not
        joined: its daemon thread is left to the interpreter's exit, it is listed in
        :attr:`abandoned`, and the rest of the run stops with ``timeout`` of its own.
        """
        from janus.runtime.messages import StopMsg

        if self.serial:
            return self._shutdown_serial(time.monotonic() + timeout)
        alive: list[str] = []
        # first what only produces (workers) or only reads (the Evaluator): neither holds data of the
        # run, so one hung in its environment is abandoned after worker_stop_s, not waited for
        producers = [h for n, h in self.hosts.items() if self.roles[n] in ABANDONABLE]
        for host in producers:
            host.post(StopMsg("shutdown"))
        worker_deadline = time.monotonic() + self.worker_stop_s
        for host in producers + [h for h in self.retired if self.roles.get(h.component.name) == "worker"]:
            alive += self._join_worker(host, worker_deadline)
        deadline = time.monotonic() + timeout
        for role in [r for r in SHUTDOWN_ORDER if r not in ABANDONABLE]:
            group = [h for n, h in self.hosts.items() if self.roles[n] == role]
            for host in group:
                host.post(StopMsg("shutdown"))
            for host in group + [h for h in self.retired if self.roles.get(h.component.name) == role]:
                if host.thread is not None:
                    host.thread.join(max(0.0, deadline - time.monotonic()))
                    if host.thread.is_alive():
                        alive.append(host.thread.name)
                    elif host.close_failure is not None:
                        alive.append(host.close_failure)
                else:
                    alive += close_component(host)
        return alive

    def _join_worker(self, host: Host, deadline: float) -> list[str]:
        """Join a worker's thread until ``deadline``; abandon it (:attr:`abandoned`) if it is still
        running then. Returns how closing it failed, if it did."""
        if host.thread is None:
            return close_component(host)
        host.thread.join(max(0.0, deadline - time.monotonic()))
        if host.thread.is_alive():
            self.abandoned.append(f"{host.component.name} (instance {host.instance})")
            return []
        return [] if host.close_failure is None else [host.close_failure]

    def serial_hang(self) -> str | None:
        """Serial: why the run cannot go on, when the scheduler has been inside one component's call
        for longer than :attr:`serial_hang_s` (a hung ``env.step``), else None. A component other
        than a worker is excused while a checkpoint or an evaluation is open (a long save, a long
        evaluation: held on purpose, as the stall timeout excuses them)."""
        busy = self._busy
        if not self.serial or not self.serial_hang_s or busy is None:
            return None
        name, since = busy
        stuck = time.monotonic() - since
        if stuck <= self.serial_hang_s:
            return None
        orch: Any = self.hosts["orchestrator"].component
        if self.roles.get(name) != "worker" and (getattr(orch, "checkpoint_open", False)
                                                 or getattr(orch, "evaluation_pending", False)):
            return None
        return (f"{self.roles.get(name, 'component')} {name!r} did not return from a call for {stuck:.0f}s (hung: an "
                f"environment step that does not return?); the serial scheduler (both overlaps off: the reproducible "
                f"mode) runs every component in one thread and cannot replace it: turn an overlap on, or use the "
                f"process backend, where a hung worker is replaced")

    def _shutdown_serial(self, deadline: float) -> list[str]:
        from janus.runtime.messages import StopMsg

        if self.serial_hang() is not None:  # the scheduler will not come back: abandon it, close the rest here
            return self._abandon_serial()
        for role in SHUTDOWN_ORDER:
            group = [h for n, h in self.hosts.items() if self.roles[n] == role]
            for host in group:
                host.post(StopMsg("shutdown"))
            while any(not h.done.is_set() for h in group) and time.monotonic() < deadline:
                if self._scheduler is None or not self._scheduler.is_alive():
                    break
                time.sleep(0.001)
        self._halt.set()
        alive = []
        if self._scheduler is not None:
            self._scheduler.join(max(0.0, deadline - time.monotonic()))
            if self._scheduler.is_alive():
                alive.append(self._scheduler.name)
        for role in SHUTDOWN_ORDER:  # what the scheduler did not close (or never ran), and replaced instances
            for host in [*(h for n, h in self.hosts.items() if self.roles[n] == role),
                         *(h for h in self.retired if self.roles.get(h.component.name) == role)]:
                alive += close_component(host)
        return alive

    def _abandon_serial(self) -> list[str]:
        """Shutdown of a serial run whose scheduler is hung in a component: that component and the
        scheduler thread are abandoned (:attr:`abandoned`), every other component is closed here
        (nothing else runs them now). Nothing is drained: the run failed, and resumes from its
        last periodic commit."""
        self._halt.set()
        busy = self._busy
        hung = busy[0] if busy is not None else ""
        self.abandoned.append(f"{hung} (instance {self.hosts[hung].instance}, with the serial scheduler)" if hung in self.hosts
                              else "the serial scheduler")
        alive: list[str] = []
        for role in SHUTDOWN_ORDER:
            for host in [*(h for n, h in self.hosts.items() if self.roles[n] == role and n != hung),
                         *(h for h in self.retired if self.roles.get(h.component.name) == role)]:
                alive += close_component(host)
        return alive

    def orchestrator_status(self) -> RunStatus:
        orch: Any = self.hosts["orchestrator"].component  # the Orchestrator component
        status: RunStatus = orch.status()
        hung = self.serial_hang()
        if hung is not None and not status.failure:  # the Orchestrator, in the same thread, cannot see it
            status = replace(status, failure=hung)
        return status

    def counters(self) -> dict[str, dict[str, float]]:
        return {name: dict(h.component.counters) for name, h in self.hosts.items()}

    def remote_replay(self, host: str, depth: int, device: str) -> None:
        """None: the Trainer shares the replay host's process (and its JanusBuffer)."""
        return None

    def node_summary(self) -> dict[str, str]:
        return {}  # one node

    @property
    def gcs_lost(self) -> str | None:
        return None  # no cluster coordinator


def close_component(host: Host) -> list[str]:
    """Close the component of a host that runs no loop of its own (never started; the serial
    scheduler's) unless that was done (``host.done``). Returns how closing it failed, now or
    when it was closed before (e.g. threads that did not stop), or nothing."""
    if host.done.is_set():
        return [] if host.close_failure is None else [host.close_failure]
    try:
        host.component.close()
    except Exception as exc:  # noqa: BLE001 - reported like a thread left running; closing the others goes on
        host.close_failure = closing_failed(host.component.name, exc)
        return [host.close_failure]
    finally:
        host.done.set()
    return []


class _Crash:
    """A message no component handles: its host loop dies with an error (a simulated crash)."""
