"""What runs inside the ``ray`` backend's actors: the component actor, its outbox, and the
restart and death-watch machinery that creates and watches actors.

Each actor hosts :class:`~janus.runtime.component.Host` in a thread; ``post`` (a threaded actor
method) feeds its inbox. Calls from one sender are numbered per stream, so a receiver keeps them in
order although a threaded actor may run them out of order. An outbox keeps at most
``max_calls_in_flight`` calls carrying data outstanding (it waits on the oldest beyond that);
control messages never wait. Parameters go into Ray's object store once per version; messages
carry a small :class:`RayParams` handle, resolved (and cached) once per process.
"""

from __future__ import annotations

import collections
import os
import signal
import threading
import time
import uuid
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields, is_dataclass, replace
from typing import Any

import ray
import torch
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from janus.runtime.component import Component, Host
from janus.runtime.messages import WorkerDownMsg, WorkerUpMsg
from janus.runtime.orchestrator import Orchestrator
from janus.runtime.stats import MessageStats, payload_bytes
from janus.runtime.status import RunStatus
from janus.runtime.trajectory_manager import TrajectoryManager

WORKER_ENV = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
ACTOR_CPUS = 0.1  # small, so that many components fit on a 2-core machine
_OUTBOX: RayOutbox | None = None  # the outbox of the component hosted by this process
SPAWNED: dict[tuple[str, str], Any] = {}  # (namespace, name) -> handle of an actor this process created


@dataclass(frozen=True)
class RayParams:
    """A parameter snapshot in the object store; the container keeps Ray from dereferencing it."""

    version: int
    ref: Any  # ray.ObjectRef


def lookup_actor(name: str, namespace: str) -> Any:
    """The handle of a named actor, or None if it does not exist (any more)."""
    try:
        return ray.get_actor(name, namespace=namespace)
    except ValueError:
        return None


def ready_value(ref: Any) -> Any:
    """The value of a ref that is ready, or None (not ready, or its call failed)."""
    try:
        return ray.get(ref, timeout=0)
    except Exception:  # noqa: BLE001 - not ready (GetTimeoutError) or failed: nothing to report
        return None


def wait_all(refs: list[Any], timeout: float) -> None:
    """Wait until every ref is ready or ``timeout`` passed."""
    if refs:
        ray.wait(refs, num_returns=len(refs), timeout=timeout, fetch_local=False)


class RayOutbox:
    """Sends to named actors (handles cached), bounds calls in flight, shares/resolves parameters."""

    def __init__(self, namespace: str, sender: str, max_calls_in_flight: int,
                 lookup: Callable[[str], Any] | None = None) -> None:
        self.namespace = namespace
        self.lookup = lookup or (lambda name: lookup_actor(name, namespace))  # dest -> handle or None
        self.sender = sender
        self.max_calls = max(1, max_calls_in_flight)
        self.stats = MessageStats()
        self._routes: dict[str, list[Any]] = {}  # dest -> [handle, stream id, next seq]
        self._bulk: collections.deque[Any] = collections.deque()  # calls carrying data: at most max_calls
        self._control: collections.deque[Any] = collections.deque(maxlen=64)  # the latest control calls
        self._shared: dict[int, RayParams] = {}
        self._resolved: collections.OrderedDict[Any, Any] = collections.OrderedDict()
        self._lock = threading.RLock()  # a Host thread and a serve thread may send at once

    def send(self, dest: str, msg: Any) -> None:
        msg = to_wire(msg)
        self.stats.record(msg)
        with self._lock:
            route = self._routes.get(dest)
            if route is None:
                handle = self.lookup(dest)
                if handle is None:
                    self.stats.dropped += 1
                    return
                route = self._routes[dest] = [handle, f"{self.sender}:{uuid.uuid4().hex[:8]}", 0]
            handle, stream, seq = route
            route[2] += 1
            ref = handle.post.remote(stream, seq, msg)
            if not payload_bytes(msg):  # control: never waits (a pending restart must not stall pings)
                self._control.append(ref)
                return
            self._bulk.append(ref)
            while len(self._bulk) > self.max_calls:
                ray.wait([self._bulk.popleft()], fetch_local=False)

    def flush(self, timeout: float | None) -> None:
        """Wait until the calls sent lately have been received (or ``timeout`` passed)."""
        with self._lock:
            refs = [*self._bulk, *self._control]
        wait_all(refs, 3600.0 if timeout is None else timeout)

    def forget(self, dest: str) -> None:
        """Drop the cached handle of ``dest`` (it was restarted): the next send looks it up again."""
        with self._lock:
            self._routes.pop(dest, None)

    def share(self, snapshot: Any) -> RayParams:
        with self._lock:
            if snapshot.version not in self._shared:
                self._shared = {snapshot.version: RayParams(snapshot.version, ray.put(snapshot))}
            return self._shared[snapshot.version]

    def resolve(self, handle: RayParams) -> Any:
        with self._lock:
            key = handle.ref
            if key not in self._resolved:
                self._resolved[key] = ray.get(handle.ref)
                while len(self._resolved) > 3:
                    self._resolved.popitem(last=False)
            return self._resolved[key]


def to_wire(msg: Any) -> Any:
    """``msg`` with torch tensors in its mapping payloads as numpy arrays (Ray moves numpy ~5x faster
    than tensors, and a CUDA tensor must leave the device before it leaves the process)."""
    if not is_dataclass(msg) or isinstance(msg, type):  # messages are dataclass instances
        return msg
    changes = {}
    for f in fields(msg):
        value = getattr(msg, f.name)
        if isinstance(value, Mapping) and any(isinstance(v, torch.Tensor) for v in value.values()):
            changes[f.name] = {k: (v.detach().cpu().numpy() if isinstance(v, torch.Tensor) else v) for k, v in value.items()}
    return replace(msg, **changes) if changes else msg


class ComponentActor:
    """One component in its own process: the Host loop in a thread, remote methods beside it."""

    def __init__(self, name: str, namespace: str, factory: Callable[[], Component], max_calls_in_flight: int,
                 role: str = "", instance: int = 0) -> None:
        global _OUTBOX
        import torch

        torch.set_num_threads(1)
        # Payloads arrive as read-only numpy views of Ray's object store; consumers only read them.
        warnings.filterwarnings("ignore", message="The given NumPy array is not writable")
        self.outbox = _OUTBOX = RayOutbox(namespace, name, max_calls_in_flight)
        self._next: dict[str, int] = {}
        self._held: dict[str, dict[int, Any]] = {}
        self._lock = threading.Lock()
        on_exit = self._report_failure if role == "worker" else None
        try:
            component = factory()
            component.instance = instance  # its experience stream: a restarted worker's is not its predecessor's
            component.bind(self.outbox)
            self.host = Host(component)
        except Exception as exc:
            if on_exit is None or instance == 0:  # a component that cannot start: the run cannot either
                raise
            self.host = Host.of_failed_build(name, exc)  # a restarted worker: counted like a crash
        self.host.instance = instance
        if self.host.done.is_set():
            self._report_failure(self.host)
        else:
            self.host.start_thread(on_exit=on_exit)
            if role == "worker" and instance > 0:  # a restart's actor is up: its pings time out as the first one's
                self.outbox.send("orchestrator", WorkerUpMsg(name, instance))

    def _report_failure(self, host: Host) -> None:
        """A worker's component raised: tell the Orchestrator, which replaces it at once (a worker
        whose process died cannot say so: the :class:`DeathWatch` does)."""
        if host.error is not None:
            self.outbox.send("orchestrator", WorkerDownMsg(host.component.name, host.instance))

    def post(self, stream: str, seq: int, msg: Any) -> None:
        """Queue ``msg``; messages of one stream reach the inbox in the order they were sent."""
        with self._lock:
            held = self._held.setdefault(stream, {})
            held[seq] = msg
            nxt = self._next.get(stream, 0)
            while nxt in held:
                self.host.post(held.pop(nxt))
                nxt += 1
            self._next[stream] = nxt

    def wait_done(self, timeout: float | None = None) -> tuple[bool, str]:
        """Whether the host loop has ended (within ``timeout``), and its error traceback if any.

        Once it has, the outbox is drained too: every message sent has reached its receiver's inbox.
        """
        done = self.host.done.wait(timeout)
        if done:
            self.outbox.flush(timeout)
        return done, self.host.error_text

    def status(self) -> RunStatus:
        """The hosted Orchestrator's status (the driver polls it)."""
        c = self.host.component
        if not isinstance(c, Orchestrator):
            raise TypeError(f"{c.name!r} is not the Orchestrator: status calls go to the Orchestrator")
        return c.status()

    def final(self) -> dict[str, Any]:
        """Counters, message stats and node id (gathered before the actor is killed)."""
        s = self.outbox.stats
        return {"counters": dict(self.host.component.counters), "node": ray.get_runtime_context().get_node_id(),
                "error": self.host.error_text, "close_failure": self.host.close_failure, "pid": os.getpid(),
                "stats": {"count": dict(s.count), "bytes": dict(s.bytes), "dropped": s.dropped}}

    def forget(self, name: str) -> None:
        self.outbox.forget(name)

    def release(self) -> list[str]:
        """Run multiprocessing's exit-time clean-up now: the driver kills this actor next, which
        skips it (``/dev/shm/sem.mp-*``, ``/tmp/pymp-*`` of async sub-envs; see
        :mod:`janus.runtime.exit_cleanup`). Returns the paths it was to remove."""
        from janus.runtime.exit_cleanup import run_exit_finalizers

        return run_exit_finalizers()

    # a replay client in another actor (backends/ray_replay.py) calls these on the replay host
    def replay_sample(self, timeout: float) -> Any:
        return self._replay_host().sample(timeout)

    def replay_update_priority(self, keys: Any, priorities: Any) -> int:
        return self._replay_host().update_priority(keys, priorities)

    def replay_set_learner_version(self, version: int) -> None:
        self._replay_host().set_learner_version(version)

    def _replay_host(self) -> TrajectoryManager:
        host = self.host.component
        if not isinstance(host, TrajectoryManager):
            raise TypeError(f"{host.name!r} is not a replay host: replay calls go to the TrajectoryManager")
        return host

    def pid(self) -> int:
        return os.getpid()

    def die(self) -> None:
        os.kill(os.getpid(), signal.SIGKILL)


# max_concurrency: an actor option Ray takes (threaded actors) that its ray.remote overloads omit
_RemoteActor = ray.remote(max_restarts=0, max_task_retries=0, max_concurrency=16)(ComponentActor)  # type: ignore[call-overload]


class DeathWatch:
    """Tells the Orchestrator at once when a worker's actor process dies (SIGKILL, the OOM killer,
    a native crash), which the component cannot report itself.

    Each watched actor has one ``wait_done`` call outstanding; Ray fails it with a
    ``RayActorError`` as soon as it sees the process gone, and a thread here then sends
    ``WorkerDownMsg(name, instance)``. An actor that ends normally (or whose component raised, and
    said so itself) answers the call and is dropped. One per process that starts workers: the
    driver (instance 0) and the Orchestrator's actor (restarts). A hung worker is still found by
    its pings."""

    def __init__(self) -> None:
        self._refs: dict[Any, tuple[str, str, int]] = {}  # wait_done ref -> (namespace, name, instance)
        self._outboxes: dict[str, RayOutbox] = {}
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    def watch(self, handle: Any, namespace: str, name: str, instance: int) -> None:
        with self._lock:
            self._refs[handle.wait_done.remote()] = (namespace, name, instance)
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._loop, name="janus-ray-death-watch", daemon=True)
                self._thread.start()

    def forget(self, namespace: str) -> None:
        """Stop watching the actors of run ``namespace`` (it is shutting down: its kills are no news)."""
        with self._lock:
            self._refs = {ref: w for ref, w in self._refs.items() if w[0] != namespace}
            self._outboxes.pop(namespace, None)
            last = self._thread if not self._refs else None
        if last is not None and last is not threading.current_thread():
            last.join(timeout=2.0)  # it sees no actor left within one wait (0.5 s) and ends

    def _loop(self) -> None:
        """Runs while there is an actor to watch: the thread ends with the last run's watch (the
        next :meth:`watch` starts another), so no thread outlives the runs of this process."""
        while True:
            with self._lock:
                refs = list(self._refs)
                if not refs:
                    self._thread = None
                    return
            try:
                ready, _ = ray.wait(refs, num_returns=1, timeout=0.5)
                for ref in ready:
                    self._settle(ref)
            except Exception:  # noqa: BLE001 - Ray shutting down under us: the pings remain
                time.sleep(0.5)

    def _settle(self, ref: Any) -> None:
        with self._lock:
            watched = self._refs.pop(ref, None)
        if watched is None:
            return
        try:
            ray.get(ref, timeout=0)
            return  # the host loop ended; a component error was reported by the actor itself
        except ray.exceptions.RayActorError:
            pass
        namespace, name, instance = watched
        with self._lock:
            outbox = self._outboxes.get(namespace)
            if outbox is None:
                outbox = self._outboxes[namespace] = RayOutbox(namespace, "death-watch", 1)
        outbox.send("orchestrator", WorkerDownMsg(name, instance))


DEATHS = DeathWatch()


@dataclass
class Restarter:
    """Picklable restart callback (runs in the driver or in the Orchestrator's actor)."""

    namespace: str
    max_calls_in_flight: int
    specs: dict[str, tuple[str, Callable[[], Component]]] = field(default_factory=dict)  # name -> (role, factory)
    node_ids: dict[str, str] = field(default_factory=dict)
    instances: dict[str, int] = field(default_factory=dict)  # restarts so far (counted where they run)

    def spawn(self, name: str, retry_s: float = 10.0) -> Any:
        """Create the actor ``name`` on its node (retrying while a killed namesake still holds the name)."""
        role, factory = self.specs[name]
        opts: dict[str, Any] = {"name": name, "namespace": self.namespace, "num_cpus": ACTOR_CPUS,
                                "scheduling_strategy": NodeAffinitySchedulingStrategy(self.node_ids[name], soft=False)}
        if role == "worker":
            opts["runtime_env"] = {"env_vars": WORKER_ENV}
        deadline = time.monotonic() + retry_s
        while True:
            try:
                handle = _RemoteActor.options(**opts).remote(name, self.namespace, factory, self.max_calls_in_flight,
                                                             role, self.instances.get(name, 0))
                SPAWNED[(self.namespace, name)] = handle  # Ray collects an actor once its creator drops it
                return handle
            except ValueError:  # name still taken
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)

    def __call__(self, name: str) -> str | None:
        """Kill ``name`` (if alive), start a fresh one, make every sender look it up again.
        Returns the old actor's error traceback, ``WorkerDied`` if its process died, or None if it
        hung."""
        old = lookup_actor(name, self.namespace)
        error = None
        if old is not None:
            try:  # an actor whose component raised is alive and says why; a dead one cannot
                done, text = ray.get(old.wait_done.remote(0), timeout=2.0)
                error = (text or None) if done else None
            except ray.exceptions.RayActorError as exc:  # its process died: a native crash, the OOM killer
                error = f"WorkerDied: its actor process died without reporting an error ({type(exc).__name__})"
            except Exception:  # noqa: BLE001 - too busy to answer (hung): no error to report
                error = None
            ray.kill(old, no_restart=True)
        self.instances[name] = self.instances.get(name, 0) + 1
        handle = self.spawn(name)
        if self.specs[name][0] == "worker":
            DEATHS.watch(handle, self.namespace, name, self.instances[name])
        if _OUTBOX is not None:
            _OUTBOX.forget(name)
        refs = [h.forget.remote(name) for n in self.specs if n != name and (h := lookup_actor(n, self.namespace))]
        wait_all(refs, 5.0)
        return error


