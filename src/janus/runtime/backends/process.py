"""The ``process`` backend: workers in OS processes of this node, rollouts through shared memory.

Every Worker runs in a spawned process of its own (one torch thread). The other components —
WorkerProxy, TrajectoryManager, Trainer, Orchestrator — are threads of this, the learner process,
hosted exactly as on the ``local`` backend, so the Trainer consumes batches from the LearnerBuffer
on the learner device with no serialisation.

Between a worker process and the learner process:

* **rollouts** go through the worker's :class:`~janus.runtime.shm.SlotRing` (pre-allocated slots in
  shared memory); the pipe carries only the slot index and counts. The learner copies the slot out
  and frees it; a full ring blocks the worker (backpressure);
* **parameters** are fetched as on every backend (Worker -> its node's WorkerProxy -> Trainer, one
  fetch per node per version) but never pickled: the Trainer's ``share()`` writes each version once
  into a :class:`~janus.runtime.shm.ParamStore`, the :class:`LoadParamsMsg` the proxy forwards
  over the pipe carries a :class:`SharedSnapshot` that pickles as its version alone, and the worker
  process copies the arrays out of the store;
* **control messages** (start/stop, ping/pong, counts, credits) are pickled over a duplex pipe, one
  per worker, read by one receiver thread here that also watches the processes' sentinels.

A worker process ignores SIGINT (the learner stops it cleanly, draining what it produced) and exits
when the learner process's end of its pipe closes, so a killed learner leaves no orphan; the learner
unlinks every segment at shutdown. Killed alone, the learner leaves its segments to Python's
resource tracker, which unlinks them. Killed together with the tracker, it leaves them in
``/dev/shm``; their names carry the owner's PID, and the next process-backend run removes the
ones whose owner is gone (:func:`~janus.runtime.shm.remove_orphaned_segments`).
"""

from __future__ import annotations

import multiprocessing as mp
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from multiprocessing.connection import Connection, wait
from multiprocessing.reduction import ForkingPickler
from typing import Any, cast

from janus.envs.in_process import shipment
from janus.runtime.backends.local import WORKER_STOP_S, LocalBackend, LocalOutbox
from janus.runtime.backends.pipe import (
    BuildFailed,
    Deliver,
    Done,
    Forward,
    PieceInSlot,
    Ready,
    RingAnnounced,
    SharedSnapshot,
    StoreAnnounced,
    ToWorker,
    refused,
    stats_name,
)
from janus.runtime.backends.worker_process import WorkerProcess, WorkerStartError, died, exited_early, start_worker_process
from janus.runtime.component import Component, error_text
from janus.runtime.messages import InsertTransitionMsg, ParamsSnapshot, StopMsg, WorkerDownMsg, WorkerUpMsg
from janus.runtime.shm import SHM_DIR, ParamStore, SlotRing, remove_orphaned_segments, unlink_segment
from janus.runtime.stats import MessageStats
from janus.spawn import caller_main_is_importable

SLOTS_PER_WORKER = 8  # rollout pieces a worker may have in flight before it blocks
EXIT_WAIT_S = 2.0  # a worker whose pipe closed: how long to wait for its exit code (how it died)


class ProcessOutbox(LocalOutbox):
    """The outbox of a learner-process component: local delivery, parameters into shared memory."""

    backend: ProcessBackend

    def share(self, snapshot: ParamsSnapshot) -> Any:
        return self.backend.publish(snapshot)

    def resolve(self, handle: Any) -> Any:
        if isinstance(handle, SharedSnapshot):
            assert handle.snapshot is not None, "a SharedSnapshot built in this process holds its snapshot"
            return handle.snapshot
        return handle


class ProcessBackend(LocalBackend):
    """Workers in spawned processes over shared memory; every other component a local thread."""

    name = "process"
    outbox_type = ProcessOutbox

    def __init__(self, cfg: Any = None, slots_per_worker: int = SLOTS_PER_WORKER, start_timeout_s: float = 120.0) -> None:
        super().__init__(serial=False, worker_stop_s=cfg.runtime.pong_timeout_s if cfg is not None else WORKER_STOP_S)
        self.slots = slots_per_worker
        self.start_timeout_s = start_timeout_s
        self.ctx = mp.get_context("spawn")
        self.workers: dict[str, WorkerProcess] = {}
        self.retired_workers: list[WorkerProcess] = []
        self.store: ParamStore | None = None
        self.store_lock = threading.Lock()
        self.worker_counters: dict[str, dict[str, float]] = {}
        self.pipe_stats = MessageStats()  # what crossed the pipes to the workers: pickled bytes per type
        self._receiver: threading.Thread | None = None
        self._stop_receiving = threading.Event()
        self._closing = threading.Event()  # shutdown began: no more (re)starts
        self._wlock = threading.RLock()
        self.skip_caller_main = False  # decided in start(): see janus.spawn
        # an environment given to janus.train as a factory or an instance: its registration, pickled for the workers
        self.env_shipment = shipment(cfg.workload.env) if cfg is not None else None

    # -- registration and start-up --
    def add(self, name: str, role: str, factory: Callable[[], Component], node: str = "node-0") -> None:
        """Register a component. Every one is built in :meth:`start`: workers in their processes,
        the others here while those processes start (spawning a worker imports torch: ~1 s)."""
        self.factories[name], self.roles[name], self.nodes[name] = factory, role, node

    def _spawn(self, name: str, instance: int = 0) -> WorkerProcess:
        wp = start_worker_process(self.ctx, name, self.factories[name], self.slots, instance, self.env_shipment,
                                  self.skip_caller_main)
        # The store is announced before the worker can be reached by name (a proxy may answer a
        # fetch of its predecessor's at once), and again if publish() created it meanwhile without
        # seeing this worker; the worker ignores a second announcement of the same store.
        announced = self._announce_store(wp)
        with self._wlock:
            self.workers[name] = wp
        if not announced:
            self._announce_store(wp)
        return wp

    def _announce_store(self, wp: WorkerProcess) -> bool:
        store = self.store
        return store is not None and self._to_worker(wp, StoreAnnounced(store.name, store.layout))

    def start(self) -> None:
        """Remove segments that killed runs left behind, spawn every worker, build the other
        components meanwhile, wait until each worker has built its own, then start the threads."""
        orphans = remove_orphaned_segments()
        if orphans:
            print(f"janus: removed {len(orphans)} shared-memory segment(s) of killed runs "
                  f"({sum(size for _, size in orphans) / 2**20:.1f} MiB) from {SHM_DIR}", file=sys.stderr)
        self.skip_caller_main = not caller_main_is_importable()
        if self.skip_caller_main:
            print("janus: the worker processes start without importing this program's __main__ (its janus call is "
                  "not under `if __name__ == \"__main__\":`, or it has no file), so they do not see what it "
                  "defines or registers: register such an environment in a module (env='module:Id')", flush=True)
        for name, role in self.roles.items():
            if role == "worker":
                self._spawn(name)
        try:  # the components of this process, built while the workers' processes import and build
            for name, role in self.roles.items():
                if role != "worker":
                    self.hosts[name] = self._host(name)
        except BaseException:
            self.shutdown(timeout=5.0)
            raise
        self._receiver = threading.Thread(target=self._receive_loop, name="process-receive", daemon=True)
        self._receiver.start()
        deadline = time.monotonic() + self.start_timeout_s
        for wp in list(self.workers.values()):
            while not wp.ready.wait(0.05):
                if wp.error or wp.closed or time.monotonic() > deadline:
                    why = wp.error or (exited_early(wp.process) if wp.closed else f"not ready within {self.start_timeout_s:.0f}s")
                    self.shutdown(timeout=5.0)
                    raise WorkerStartError(f"worker {wp.name!r} could not start: {why}")
        super().start()

    # -- delivery --
    def deliver(self, dest: str, msg: Any) -> None:
        wp = self.workers.get(dest)
        if wp is None:
            super().deliver(dest, msg)
            return
        self.stats.record(msg)
        if not self._to_worker(wp, Deliver(msg)):
            self.stats.dropped += 1

    def _to_worker(self, wp: WorkerProcess, record: ToWorker) -> bool:
        """Pickle ``record`` onto ``wp``'s pipe (what ``conn.send`` does), counting its bytes in
        :attr:`pipe_stats`; False if the worker's pipe is closed."""
        if wp.closed:
            return False
        data = ForkingPickler.dumps(record)
        try:
            with wp.send_lock:
                wp.conn.send_bytes(data)
        except (BrokenPipeError, OSError):
            return False
        self.pipe_stats.record(stats_name(record), size=len(data))
        return True

    def publish(self, snapshot: ParamsSnapshot) -> SharedSnapshot:
        """Write a parameter version into the store (created, and announced to every worker, at the
        first version) once. Announced before the handle exists: a worker's pipe carries the store
        ahead of any LoadParamsMsg that names a version in it."""
        with self.store_lock:
            fresh = self.store is None
            if self.store is None:
                self.store = ParamStore.create(snapshot.arrays)
            self.store.publish(snapshot.version, snapshot.arrays)
        if fresh:
            with self._wlock:
                targets = list(self.workers.values())
            for wp in targets:
                self._announce_store(wp)
        return SharedSnapshot(snapshot.version, snapshot)

    # -- the receiver thread --
    def _receive_loop(self) -> None:
        while not self._stop_receiving.is_set():
            with self._wlock:
                live = {wp.conn: wp for wp in [*self.workers.values(), *self.retired_workers] if not wp.closed}
            if not live:
                time.sleep(0.01)
                continue
            for ready in wait(list(live), timeout=0.05):
                conn = cast(Connection, ready)  # wait() returns the objects it was given
                wp = live[conn]
                try:
                    while not wp.closed and conn.poll():
                        self._handle(wp, conn.recv())
                except (EOFError, OSError):
                    wp.closed = True
                    if not wp.done.is_set():  # it ended without reporting: it died, or failed to build
                        wp.done.set()
                        self._report_down(wp)
                except BaseException as exc:  # noqa: BLE001 - a bad piece fails the run, visibly
                    self.fatal = self.fatal or ("process-receive", error_text(exc))

    def _report_down(self, wp: WorkerProcess) -> None:
        """Tell the Orchestrator that a running worker's process failed (once per instance; not for
        a retired instance, nor once shutdown has begun), so it is replaced at once."""
        with self._wlock:
            if wp.down_reported or self._closing.is_set() or self.workers.get(wp.name) is not wp:
                return
            wp.down_reported = True
        self.deliver("orchestrator", WorkerDownMsg(wp.name, wp.instance))

    def _handle(self, wp: WorkerProcess, record: object) -> None:
        """Act on one record from worker ``wp``'s pipe, by its type; any other type is refused
        (:class:`TypeError`: the receiver thread then fails the run, naming it)."""
        match record:
            case PieceInSlot():
                assert wp.ring is not None, f"{wp.name} sent a piece before announcing its ring"
                self.deliver(record.dest, InsertTransitionMsg(record.source, wp.ring.read(record.slot), record.count,
                                                              record.params_version, record.pieces))
            case RingAnnounced(layout=layout, slots=slots):
                wp.ring = SlotRing.attach(wp.ring_name, layout, slots)
            case Forward(dest=dest, msg=msg):
                self.deliver(dest, msg)
            case Ready():
                wp.ready.set()
                if wp.instance > 0:  # a restart's process is up: its pings time out as the first one's
                    self.deliver("orchestrator", WorkerUpMsg(wp.name, wp.instance))
            case Done():
                wp.error, wp.close_failure = record.error, record.close_failure
                self.worker_counters[wp.name] = {**record.counters, **{f"ipc.{k}": v for k, v in record.stats.items()}}
                wp.done.set()
                if record.error:
                    self._report_down(wp)
            case BuildFailed(error=error):
                wp.error = error
            case _:
                raise refused(record, f"worker {wp.name!r}")

    # -- faults and restarts --
    def restart(self, name: str) -> str | None:
        """Kill worker ``name`` (if still alive) and spawn a fresh one in its place (not once
        shutdown has begun: stopped workers miss pings, and must not come back). Returns the old
        process's error traceback, else how it died (:func:`died`: also a SIGKILL by :meth:`kill`),
        else None (it hung: killed here)."""
        with self._wlock:  # shutdown sets _closing under this lock: no spawn slips past it
            if self._closing.is_set():
                return None
            old = self.workers.get(name)
            exitcode = None
            if old is not None:
                self.retired_workers.append(old)
                if old.down_reported:  # its pipe closed: the process is exiting, its exit code comes in a moment
                    old.process.join(EXIT_WAIT_S)
                exitcode = old.process.exitcode  # before the kill below: None while it runs (hung)
                if old.process.is_alive():
                    old.process.kill()
                old.process.join(5.0)
            self._spawn(name, old.instance + 1 if old is not None else 0)
        if old is None:
            return None
        return old.error or died(exitcode)

    def kill(self, name: str) -> None:
        """SIGKILL a worker's process, or crash a learner-process component (fault tests)."""
        wp = self.workers.get(name)
        if wp is None:
            super().kill(name)
        elif wp.process.is_alive():
            os.kill(wp.process.pid, signal.SIGKILL)

    def worker_pids(self) -> dict[str, int]:
        return {n: wp.process.pid for n, wp in self.workers.items()}

    # -- shutdown --
    def shutdown(self, timeout: float = 10.0) -> list[str]:
        """Stop the workers first (each drains its pieces into the pipe), then the local threads
        in data-flow order; unlink every shared-memory segment. Returns what is still alive and
        the components whose ``close()`` raised.
        A second call (the caller's, after :meth:`start` shut down on an error) does nothing."""
        deadline = time.monotonic() + timeout
        with self._wlock:
            if self._closing.is_set():
                return []
            self._closing.set()
            workers = list(self.workers.values())
        for wp in workers:
            self._to_worker(wp, Deliver(StopMsg("shutdown")))
        # Done arrives after every piece the worker sent; one that does not stop within
        # worker_stop_s is hung (e.g. in env.step) and is killed below, not waited for
        workers_deadline = min(deadline, time.monotonic() + self.worker_stop_s)
        for wp in workers:
            while not wp.done.wait(0.02):
                if not wp.process.is_alive() and not wp.conn.poll():
                    break
                if time.monotonic() > workers_deadline or self._receiver is None or not self._receiver.is_alive():
                    break
        alive = []
        for wp in [*workers, *self.retired_workers]:
            hung = not wp.done.is_set() and time.monotonic() > workers_deadline  # waited out: killed at once
            wp.process.join(max(0.0, min(0.0 if hung else 2.0, deadline - time.monotonic())))
            if wp.process.is_alive():
                wp.process.kill()
                wp.process.join(10.0)  # unmapping a large process can take seconds on a loaded machine
            if wp.process.is_alive():
                state = "retired" if wp in self.retired_workers else "current"
                alive.append(f"process {wp.process.name} (pid {wp.process.pid}, {state}, "
                             f"ready={wp.ready.is_set()}, done={wp.done.is_set()})")
            elif wp.close_failure:
                alive.append(wp.close_failure)
        time.sleep(0)  # let the receiver take the last pipe contents
        self._drain_pipes()
        alive += super().shutdown(max(1.0, deadline - time.monotonic()))
        self._stop_receiving.set()
        if self._receiver is not None:
            self._receiver.join(2.0)
        self._release()
        return alive

    def _drain_pipes(self) -> None:
        """Read what exited workers left in their pipes (the receiver may have stopped)."""
        if self._receiver is not None and self._receiver.is_alive():
            deadline = time.monotonic() + 2.0
            while time.monotonic() < deadline and any(
                    not wp.closed and wp.conn.poll() for wp in [*self.workers.values(), *self.retired_workers]):
                time.sleep(0.005)

    def _release(self) -> None:
        for wp in [*self.workers.values(), *self.retired_workers]:
            wp.conn.close()
        for wp in [*self.workers.values(), *self.retired_workers]:
            if wp.ring is not None:
                wp.ring.close()
                wp.ring.unlink()
                wp.ring = None
            else:  # never announced (the worker died first, or sent nothing): remove it if it exists
                unlink_segment(wp.ring_name)
        if self.store is not None:
            self.store.close()
            self.store.unlink()
            self.store = None

    def counters(self) -> dict[str, dict[str, float]]:
        out = super().counters()
        for name in self.workers:
            out[name] = dict(self.worker_counters.get(name, {}))
        return out
