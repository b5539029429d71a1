"""The ``ray`` backend: every component a Ray actor (its own process), messages as actor calls.

This module is the driver's side, :class:`RayBackend`: it gets a Ray to run on
(:mod:`~janus.runtime.backends.ray_cluster`), creates the actors
(:mod:`~janus.runtime.backends.ray_actors`), polls the Orchestrator's status and shuts the actors
down in data-flow order.

Actors are named, in a namespace of their own per run, and placed on Ray nodes by the layout's node
labels (``node-0`` on the head). The Orchestrator restarts a dead worker through a picklable
:class:`~janus.runtime.backends.ray_actors.Restarter` (``backend.restart``): it runs inside the
Orchestrator's actor. A worker whose component raises reports it; one whose process dies is
reported by a :class:`~janus.runtime.backends.ray_actors.DeathWatch`.

A :class:`~janus.runtime.backends.ray_cluster.GcsWatch` probes Ray's GCS (the cluster's
coordinator) from a thread of the driver: actors keep talking to each other without it, so a dead
GCS is otherwise noticed only when Ray gives up (minutes). Once it stops answering the run fails
with an error naming it, nothing asks the GCS again, and the processes of a Ray this run started
are killed (a joined cluster is left alone).
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import replace
from functools import partial
from typing import Any

from janus.errors import ConfigError, RunFailed
from janus.runtime.backends.local import ABANDONABLE, SHUTDOWN_ORDER, WORKER_STOP_S
from janus.runtime.component import Component
from janus.runtime.replay_client import ReplayClient
from janus.runtime.stats import MessageStats
from janus.runtime.status import RunStatus

RAY_MISSING = ("--backend ray needs Ray, which is not installed here: pip install 'janus-rl[ray]' "
               "(from a clone: .venv/bin/pip install -e '.[ray]'), or choose --backend local|process")
try:
    import ray
except ModuleNotFoundError as _exc:  # Ray itself missing; a broken install's own error is kept as it is
    if (_exc.name or "ray").split(".")[0] != "ray":
        raise
    raise ConfigError(RAY_MISSING) from None

# these import ray: after the check above
from janus.runtime.backends.ray_actors import (  # noqa: E402
    DEATHS,
    SPAWNED,
    RayOutbox,
    Restarter,
    lookup_actor,
    ready_value,
    wait_all,
)
from janus.runtime.backends.ray_cluster import (  # noqa: E402
    GCS_LOST_AFTER_S,
    GcsLost,
    GcsWatch,
    connect,
    kill_pid,
    kill_session,
    processes_of_sessions_started_here,
    run_bounded,
    start_local_ray,
)
from janus.runtime.backends.ray_replay import RemoteReplay  # noqa: E402


class RayBackend:
    """Hosts each component in a Ray actor; same interface as the local backend."""

    name = "ray"
    POLL_S = 0.5

    def __init__(self, address: str | None = None, max_calls_in_flight: int = 4) -> None:
        self.address = address
        self.roles: dict[str, str] = {}
        self.labels: dict[str, str] = {}
        self.restart = Restarter(f"janus-{uuid.uuid4().hex[:12]}", max_calls_in_flight)
        self.namespace = self.restart.namespace
        self.stats = MessageStats()
        self._fatal: tuple[str, str] | None = None
        self.handles: dict[str, Any] = {}  # as created by start(); restarted workers are looked up by name
        self.owns_ray = False  # this backend connected to Ray (it disconnects at shutdown)
        self.started_ray = False  # ... and started that Ray itself (its processes are this run's)
        self.gcs_watch: GcsWatch | None = None
        self.gcs_probe: Callable[[float], Any] | None = None  # replaces the GCS probe (tests)
        self.gcs_lost_after_s = GCS_LOST_AFTER_S
        self.outbox: RayOutbox | None = None
        self._watch: dict[Any, str] = {}  # wait_done ref -> name, for non-workers
        self._last_poll = 0.0
        self._status = RunStatus()  # the last one polled (a failure when the Orchestrator cannot be reached)
        self._final: dict[str, dict[str, Any]] | None = None
        self.released: dict[str, list[str]] = {}  # actor -> named resources its early exit clean-up removed

    def add(self, name: str, role: str, factory: Callable[[], Component], node: str = "node-0") -> None:
        """Register a component (created at :meth:`start` and again on restart)."""
        self.roles[name], self.labels[name] = role, node
        self.restart.specs[name] = (role, factory)

    def start(self, start_timeout: float = 120.0) -> None:
        """Connect to (or start) Ray, place node labels on Ray nodes, create every actor (and wait for it)."""
        if not ray.is_initialized():
            if self.address is None:
                earlier = set(processes_of_sessions_started_here())  # a Ray this process runs already: not ours
                try:
                    start_local_ray()
                except Exception as exc:  # its GCS or raylet died while it started, say
                    for pid in set(processes_of_sessions_started_here()) - earlier:
                        kill_pid(pid)
                    first = str(exc).strip().splitlines()
                    raise RunFailed(f"could not start a local Ray: {type(exc).__name__}: "
                                    f"{first[0] if first else ''}") from exc
                self.started_ray = True
            else:
                connect(self.address)
            self.owns_ray = True
        self.gcs_watch = GcsWatch(ray.get_runtime_context().gcs_address, self.gcs_probe,
                                  lost_after_s=self.gcs_lost_after_s)
        self.gcs_watch.start()
        self.outbox = RayOutbox(self.namespace, "driver", self.restart.max_calls_in_flight, self._lookup)
        try:
            self._place_labels()
            for name in self.roles:
                handle = self.handles[name] = self._ask_gcs(partial(self.restart.spawn, name), "spawn")
                if self.roles[name] != "worker":
                    self._watch[handle.wait_done.remote()] = name
            # every process up and every component constructed before the run starts
            self._wait_up([h.pid.remote() for h in self.handles.values()], start_timeout)
            for name, handle in self.handles.items():  # up: from now on a dead process is reported at once
                if self.roles[name] == "worker":
                    DEATHS.watch(handle, self.namespace, name, 0)
        except BaseException as exc:  # Ctrl-C included: leave no actor behind
            self.shutdown()
            if isinstance(exc, (ray.exceptions.RayError, TimeoutError)):
                raise RunFailed(f"the ray backend could not start its components: {exc}") from exc
            raise

    def _place_labels(self) -> None:
        """Map each node label to a live Ray node (``node-0`` to the head), for every component."""
        nodes = [n for n in self._ask_gcs(ray.nodes, "nodes") if n["Alive"]]
        nodes.sort(key=lambda n: ("node:__internal_head__" not in n["Resources"], n["NodeManagerAddress"], n["NodeID"]))
        labels = sorted(set(self.labels.values()), key=lambda s: int(s.rsplit("-", 1)[1]))
        by_label = {label: nodes[i % len(nodes)]["NodeID"] for i, label in enumerate(labels)}
        self.restart.node_ids.update({name: by_label[label] for name, label in self.labels.items()})

    def _wait_up(self, refs: list[Any], timeout: float) -> None:
        """Wait until every call in ``refs`` answered (the first error raised as Ray raises it),
        within ``timeout``; :class:`GcsLost` as soon as the GCS is (actors cannot start without it)."""
        deadline = time.monotonic() + timeout
        pending = list(refs)
        while pending:
            lost = self.gcs_lost
            if lost is not None:
                raise GcsLost(lost)
            if time.monotonic() > deadline:
                raise TimeoutError(f"{len(pending)} of {len(refs)} components did not start within {timeout:.0f}s")
            ready, pending = ray.wait(pending, num_returns=len(pending), timeout=0.5, fetch_local=False)
            ray.get(ready)

    def deliver(self, dest: str, msg: Any) -> None:
        assert self.outbox is not None, "start() the backend first"
        self.outbox.send(dest, msg)

    @property
    def gcs_lost(self) -> str | None:
        """Why the run's Ray cannot be used any more (its GCS stopped answering), or None."""
        return self.gcs_watch.lost if self.gcs_watch is not None else None

    def _ask_gcs(self, fn: Callable[[], Any], what: str) -> Any:
        """``fn()``, a call that needs the GCS; :class:`GcsLost` (never a hang) once it is lost."""
        if self.gcs_lost is not None:
            raise GcsLost(self.gcs_lost)
        return run_bounded(fn, lambda: self.gcs_lost, what)

    def _lookup(self, name: str) -> Any:
        return self._ask_gcs(lambda: lookup_actor(name, self.namespace), "lookup")

    def kill(self, name: str) -> None:
        """SIGKILL the process of component ``name`` (for fault tests)."""
        handle = self._lookup(name)
        if handle is not None:
            handle.die.remote()

    @property
    def fatal(self) -> tuple[str, str] | None:
        """(name, traceback) once a non-worker's host loop died with an error or its process died.

        Checks the ``wait_done`` calls started with the actors, without blocking, every POLL_S.
        """
        if (self._final is not None or self._fatal is not None or not self._watch or self.gcs_lost is not None
                or time.monotonic() - self._last_poll < self.POLL_S):
            return self._fatal  # after shutdown: as gathered then (Ray may be gone)
        self._last_poll = time.monotonic()
        ready, _ = ray.wait(list(self._watch), num_returns=len(self._watch), timeout=0)
        for ref in ready:
            name = self._watch.pop(ref)
            try:
                _, error = ray.get(ref)
            except ray.exceptions.RayError as exc:
                error = f"its process died: {exc}"
            if error and self._fatal is None:
                self._fatal = (name, error)
        return self._fatal

    def orchestrator_status(self) -> RunStatus:
        """The Orchestrator's status; a dead Orchestrator, or a lost GCS, reads as a failure.

        After :meth:`shutdown` this is the status taken while shutting down (Ray may be gone).
        """
        if self._final is not None:
            return self._status
        lost = self.gcs_lost
        if lost is not None:
            self._status = replace(self._status, finished=False, failure=lost)
            return self._status
        try:
            self._status = ray.get(self.handles["orchestrator"].status.remote(), timeout=30)
        except ray.exceptions.RayError as exc:
            self._status = replace(self._status, finished=False, failure=f"the orchestrator is unreachable: {exc}")
        return self._status

    def _gather(self, timeout: float) -> dict[str, dict[str, Any]]:
        handles = {n: h for n in self.roles if (h := self._lookup(n)) is not None}
        refs = {n: h.final.remote() for n, h in handles.items()}
        wait_all(list(refs.values()), timeout)
        out = {}
        for name, ref in refs.items():
            try:
                out[name] = ray.get(ref, timeout=0)
            except (ray.exceptions.RayError, TimeoutError):  # dead or stuck: no final counters
                pass
        return out

    def counters(self) -> dict[str, dict[str, float]]:
        final = self._final if self._final is not None else self._gather(10.0)  # GcsLost: none to give
        return {name: f["counters"] for name, f in final.items()}

    def remote_replay(self, host: str, depth: int, device: str) -> Callable[[], ReplayClient]:
        """The Trainer's prefetching client of the replay host (another actor)."""
        return partial(RemoteReplay, self.namespace, host, depth, device)

    def node_summary(self) -> dict[str, str]:
        """Component name -> Ray node id it ran on (from the actors when available)."""
        final = self._final or {}
        return {name: final.get(name, {}).get("node", self.restart.node_ids.get(name, "")) for name in self.roles}

    def shutdown(self, timeout: float = 10.0) -> list[str]:
        """Stop every component in data-flow order, gather counters and stats, kill every actor.

        As on the local backend, each role stops (and its outbox drains into the next role's
        inbox) before the next role gets its StopMsg, so nothing produced is dropped. Components
        that did not stop within ``timeout`` are killed too. Returns the actors still alive and the
        components whose ``close()`` raised. Once the GCS is lost it only cleans up (:meth:`_abandon`).
        """
        if self.outbox is None or self._final is not None or not ray.is_initialized():
            return []  # never started, or already shut down
        DEATHS.forget(self.namespace)
        try:
            return self._stop_components(timeout)
        except GcsLost:
            return self._abandon()
        finally:
            if self.gcs_watch is not None:
                self.gcs_watch.stop()

    def _stop_components(self, timeout: float) -> list[str]:
        """:meth:`shutdown` while the GCS answers (:class:`GcsLost` once it does not)."""
        from janus.runtime.messages import StopMsg

        outbox = self.outbox
        assert outbox is not None  # shutdown() returns early when it is
        deadline = time.monotonic() + timeout
        handles = {n: h for n in self.roles if (h := self._lookup(n)) is not None}
        for role in SHUTDOWN_ORDER:
            group = [n for n in handles if self.roles[n] == role]
            for name in group:
                outbox.send(name, StopMsg("shutdown"))
            left = max(0.1, deadline - time.monotonic())
            if role in ABANDONABLE:  # a worker or Evaluator not stopped in this time is hung: killed below, not waited for
                left = min(left, WORKER_STOP_S)
            wait_all([handles[n].wait_done.remote(left) for n in group], left)
        if "orchestrator" in handles:  # its status after the drain, for orchestrator_status()
            try:
                self._status = ray.get(handles["orchestrator"].status.remote(), timeout=max(1.0, deadline - time.monotonic()))
            except (ray.exceptions.RayError, TimeoutError):
                pass
        self._final = self._gather(max(1.0, deadline - time.monotonic()))
        for name, final in self._final.items():  # an error while draining is a failure of the run too
            if final["error"] and self.roles.get(name) != "worker" and self._fatal is None:
                self._fatal = (name, final["error"])
        for f in self._final.values():
            self.stats.merge(f["stats"])
            self.stats.dropped += f["stats"]["dropped"]
        self.stats.merge({"count": outbox.stats.count, "bytes": outbox.stats.bytes})
        self.stats.dropped += outbox.stats.dropped
        # what the actors' exits would remove (async sub-envs' semaphores and temp folders), before the kill skips it
        releases = {name: handle.release.remote() for name, handle in handles.items()}
        wait_all(list(releases.values()), 3.0)
        self.released = {name: paths for name, ref in releases.items() if (paths := ready_value(ref))}
        for handle in handles.values():
            try:
                ray.kill(handle, no_restart=True)
            except ray.exceptions.RayError:
                pass
        for key in [k for k in SPAWNED if k[0] == self.namespace]:
            del SPAWNED[key]
        left_alive = self._named_actors()
        while left_alive and time.monotonic() < deadline + 5.0:
            time.sleep(0.05)
            left_alive = self._named_actors()
        if self.owns_ray:
            ray.shutdown()
        return left_alive + [f["close_failure"] for f in self._final.values() if f.get("close_failure")]

    def _abandon(self) -> list[str]:
        """Shutdown without the GCS: no drain and no counters (the actors cannot be found). Kill the
        actors this driver holds handles of (a direct call), and every process of the Ray this run
        started; a cluster it joined (``--address``) is left running. Returns ``[]``: the run failed
        already, with the reason in its status."""
        self._final = {}
        for handle in self.handles.values():
            try:
                ray.kill(handle, no_restart=True)
            except Exception:  # noqa: BLE001 - its process is gone too
                pass
        for key in [k for k in SPAWNED if k[0] == self.namespace]:
            del SPAWNED[key]
        if self.started_ray:
            node = ray._private.worker._global_node
            if node is not None:
                kill_session(node)
        if self.owns_ray:  # Ray's disconnect waits for the dead GCS a few seconds; never longer than 15 s
            stopper = threading.Thread(target=ray.shutdown, name="janus-ray-shutdown", daemon=True)
            stopper.start()
            stopper.join(15.0)
        return []

    def _named_actors(self) -> list[str]:
        """Names of this run's actors that Ray still knows as alive."""
        actors = self._ask_gcs(lambda: ray.util.list_named_actors(all_namespaces=True), "list-actors")
        return sorted(a["name"] for a in actors if a["namespace"] == self.namespace)
