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

Worker processes are not daemonic, because a daemonic process may not start processes of its own
and a worker may step its environments in subprocesses (``workload.vector_env: async``). What
daemonic processes got for free, this module does itself: at interpreter exit it kills the worker
processes still running (ones :meth:`ProcessBackend.shutdown` did not stop), before
multiprocessing would wait for them.
"""

from __future__ import annotations

import atexit
import multiprocessing as mp
import os
import signal
import sys
import threading
import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from multiprocessing.connection import Connection, wait
from multiprocessing.reduction import ForkingPickler
from typing import Any, cast

from janus.envs.in_process import shipment
from janus.runtime.backends.local import WORKER_STOP_S, LocalBackend, LocalOutbox
from janus.runtime.component import Component, Host, error_text
from janus.runtime.messages import InsertTransitionMsg, LoadParamsMsg, ParamsSnapshot, StartMsg, StopMsg, WorkerDownMsg, WorkerUpMsg
from janus.runtime.shm import (
    SHM_DIR,
    Layout,
    ParamStore,
    RingClosed,
    SlotRing,
    new_segment_name,
    remove_orphaned_segments,
    unlink_segment,
)
from janus.runtime.stats import MessageStats
from janus.spawn import caller_main_is_importable, without_caller_main

SLOTS_PER_WORKER = 8  # rollout pieces a worker may have in flight before it blocks
EXIT_WAIT_S = 2.0  # a worker whose pipe closed: how long to wait for its exit code (how it died)
WORKER_ENV = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
WORKER_PROCESS_VAR = "JANUS_WORKER_PROCESS"  # set in a worker process (read by janus.envs.vector)


class WorkerStartError(RuntimeError):
    """A worker process did not come up."""


_LIVE_WORKERS: weakref.WeakSet[Any] = weakref.WeakSet()
"""Worker processes started here and not yet joined (see the module doc)."""


@atexit.register  # registered after multiprocessing's own exit hook (imported above), so it runs first
def _kill_leftover_workers() -> None:
    for proc in list(_LIVE_WORKERS):
        if proc.is_alive():
            proc.kill()
            proc.join(5.0)


def _exited(proc: Any) -> str:
    """Why a worker process that exited before it was ready did, as far as the learner can tell."""
    proc.join(1.0)
    return (f"its process exited (exit code {proc.exitcode}) before it was ready; its traceback, if any, "
            "is on stderr above")


# ---- the worker process -------------------------------------------------------------------------
class WorkerOutbox:
    """A worker's outbox inside its process: pieces into the ring, the rest over the pipe."""

    def __init__(self, name: str, conn: Connection, slots: int, ring_name: str) -> None:
        self.name = name
        self.conn = conn
        self.slots = slots
        self.ring_name = ring_name
        self.ring: SlotRing | None = None
        self.store: ParamStore | None = None  # attached when the learner announces it
        self.stopping = threading.Event()
        self.lock = threading.Lock()  # the host thread and the receiver thread both send
        self.stats = {"pieces_via_ring": 0, "pieces_pickled": 0}

    def _send(self, item: tuple) -> None:
        with self.lock:
            self.conn.send(item)

    def send(self, dest: str, msg: Any) -> None:
        if isinstance(msg, InsertTransitionMsg):
            self._send_piece(dest, msg)
        else:
            self._send(("msg", dest, msg))

    def _send_piece(self, dest: str, msg: InsertTransitionMsg) -> None:
        arrays = msg.transitions
        if self.ring is None:
            self.ring = SlotRing.create(Layout.of(arrays), self.slots, self.ring_name)
            self._send(("ring", self.ring.layout, self.ring.slots))  # once: the learner attaches
        if not self.ring.layout.fits(arrays):  # a piece of another shape: correct, but pickled
            self.stats["pieces_pickled"] += 1
            self._send(("msg", dest, msg))
            return
        try:
            slot = self.ring.write(arrays, wait=lambda: not self.stopping.is_set())
        except RingClosed:
            return  # stopping while the learner no longer reads: the piece would be dropped anyway
        self.stats["pieces_via_ring"] += 1
        self._send(("piece", dest, slot, msg.source, msg.count, msg.params_version, msg.pieces))

    def attach_store(self, name: str, layout: Layout) -> None:
        """Map the learner's parameter store (announced once; again, harmlessly, at a race)."""
        if self.store is not None and self.store.name == name:
            return
        if self.store is not None:
            self.store.close()
        self.store = ParamStore.attach(name, layout)

    def share(self, snapshot: Any) -> Any:
        raise RuntimeError("a worker does not publish parameters")

    def resolve(self, handle: Any) -> Any:
        """The snapshot behind a :class:`SharedSnapshot`, copied out of the store: the store's latest
        version, which may be newer than the handle's (versions only grow); the snapshot says which."""
        if not isinstance(handle, SharedSnapshot):
            return handle  # already resolved (see _receive)
        if self.store is None:
            raise RuntimeError(f"{self.name} got parameters version {handle.version} before the learner "
                               "announced its parameter store")
        version, arrays = self.store.read()  # a private copy: the Trainer overwrites the store
        for a in arrays.values():
            a.setflags(write=False)
        return ParamsSnapshot(version, arrays)


def _receive(host: Host, outbox: WorkerOutbox, conn: Connection) -> None:
    """Worker-process thread: feed the host's inbox from the pipe."""
    started = False  # a StartMsg passed: parameters from now on answer this instance's fetches
    while not host.done.is_set():
        try:
            item = conn.recv() if conn.poll(0.02) else None
        except (EOFError, OSError):  # the learner process is gone: nobody to work for
            os._exit(3)
        if item is None:
            continue
        kind = item[0]
        if kind == "msg":
            msg = item[1]
            if isinstance(msg, StopMsg):
                outbox.stopping.set()
            elif isinstance(msg, StartMsg):
                started = True
            elif isinstance(msg, LoadParamsMsg):
                if not started:  # the proxy answered a fetch of this worker's killed predecessor:
                    continue  # the Worker has no actor to load it into yet, and fetches when it starts
                # resolved here, so the message names the version of the arrays the store held
                # (maybe newer than asked for): the Worker records the version it actually loads
                snapshot = outbox.resolve(msg.params)
                msg = LoadParamsMsg(snapshot.version, snapshot)
            host.post(msg)
        elif kind == "store":
            outbox.attach_store(item[1], item[2])


def worker_main(name: str, factory: Callable[[], Component], conn: Connection, slots: int, ring_name: str,
                instance: int = 0, env_shipment: bytes | None = None) -> None:
    """Entry point of a worker process: host the component until it stops, then report.
    ``env_shipment``: an environment object given to :func:`janus.train`, to register here first
    (:func:`janus.envs.in_process.shipment`)."""
    # Ctrl-C, or a SIGTERM/SIGHUP to the whole process group (kill -- -PGID, scancel, a closed
    # terminal), reaches the learner too, which stops us cleanly and collects our counts; a worker
    # whose learner is gone exits by itself (_receive).
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)
    os.environ[WORKER_PROCESS_VAR] = "1"  # errors raised here can say where they were raised
    import torch

    torch.set_num_threads(1)
    outbox = WorkerOutbox(name, conn, slots, ring_name)
    try:
        if env_shipment is not None:
            from janus.envs.in_process import register_shipped

            register_shipped(env_shipment)
        component = factory()
        component.instance = instance  # its experience stream: a restarted worker's is not its predecessor's
        component.bind(outbox)
    except BaseException as exc:  # noqa: BLE001 - reported to the learner
        conn.send(("failed", name, error_text(exc)))
        return
    host = Host(component)
    try:
        conn.send(("ready", name))
    except (BrokenPipeError, OSError):  # the learner stopped while this process was starting
        return
    receiver = threading.Thread(target=_receive, args=(host, outbox, conn), name=f"{name}-receive", daemon=True)
    receiver.start()
    host.loop()  # in this thread until StopMsg or an error
    receiver.join(1.0)
    try:
        outbox._send(("done", name, dict(component.counters), host.error_text, outbox.stats, host.close_failure or ""))
    except (BrokenPipeError, OSError):
        pass
    for segment in (outbox.ring, outbox.store):  # the learner unlinks them
        if segment is not None:
            segment.close()


def died(exitcode: int | None) -> str | None:
    """A worker process that ended without reporting an error: how it ended (a crash of native
    code, the OOM killer), or None if it exited cleanly or still ran."""
    if not exitcode:
        return None
    if exitcode < 0:
        try:
            how = f"died of {signal.Signals(-exitcode).name}"
        except ValueError:
            how = f"died of signal {-exitcode}"
    else:
        how = "exited"
    return f"WorkerDied: its process {how} (exit code {exitcode}) without reporting an error"


# ---- the learner process's side -----------------------------------------------------------------
@dataclass
class WorkerProcess:
    """The learner's handle on one worker process."""

    name: str
    process: Any
    conn: Connection
    send_lock: threading.Lock = field(default_factory=threading.Lock)
    ready: threading.Event = field(default_factory=threading.Event)
    done: threading.Event = field(default_factory=threading.Event)
    closed: bool = False  # its pipe reached EOF (process exited or died)
    ring_name: str = ""  # named by the learner at spawn, created by the worker at its first piece
    ring: SlotRing | None = None  # the learner's mapping of it, once announced
    error: str = ""
    close_failure: str = ""  # its component's close() raised (reported by shutdown)
    instance: int = 0  # 0 the first process of this worker, +1 per restart
    down_reported: bool = False  # the Orchestrator was told this instance failed


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


@dataclass(frozen=True)
class SharedSnapshot:
    """A parameter version published in the backend's :class:`~janus.runtime.shm.ParamStore`.

    In the learner process it holds the snapshot itself (its components resolve it by reference).
    Pickled, on its way to a worker process, it is its version alone: the arrays never cross a pipe,
    the worker copies them out of the store (:meth:`WorkerOutbox.resolve`).
    """

    version: int
    snapshot: ParamsSnapshot | None = None  # None in a worker process

    def __reduce__(self) -> tuple[Any, tuple[int]]:
        return SharedSnapshot, (self.version,)


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
        mine, theirs = self.ctx.Pipe(duplex=True)
        ring_name = new_segment_name("ring")
        saved = {k: os.environ.get(k) for k in WORKER_ENV}
        os.environ.update(WORKER_ENV)  # the child's torch/BLAS read these at import
        try:
            proc = self.ctx.Process(target=worker_main, args=(name, self.factories[name], theirs, self.slots, ring_name, instance,
                                                                   self.env_shipment),
                                    name=f"janus-{name}", daemon=False)  # its envs may be subprocesses
            with without_caller_main(self.skip_caller_main):  # janus.spawn: unguarded scripts and stdin too
                proc.start()
            _LIVE_WORKERS.add(proc)
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
        theirs.close()
        wp = WorkerProcess(name, proc, mine, ring_name=ring_name, instance=instance)
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
        return store is not None and self._to_worker(wp, ("store", store.name, store.layout))

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
                    why = wp.error or (_exited(wp.process) if wp.closed else f"not ready within {self.start_timeout_s:.0f}s")
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
        if not self._to_worker(wp, ("msg", msg)):
            self.stats.dropped += 1

    def _to_worker(self, wp: WorkerProcess, item: tuple) -> bool:
        """Pickle ``item`` onto ``wp``'s pipe (what ``conn.send`` does), counting its bytes in
        :attr:`pipe_stats`; False if the worker's pipe is closed."""
        if wp.closed:
            return False
        data = ForkingPickler.dumps(item)
        try:
            with wp.send_lock:
                wp.conn.send_bytes(data)
        except (BrokenPipeError, OSError):
            return False
        self.pipe_stats.record(item[1] if item[0] == "msg" else f"<{item[0]}>", size=len(data))
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

    def _handle(self, wp: WorkerProcess, item: tuple) -> None:
        kind = item[0]
        if kind == "piece":
            _, dest, slot, source, count, version, pieces = item
            assert wp.ring is not None, f"{wp.name} sent a piece before announcing its ring"
            self.deliver(dest, InsertTransitionMsg(source, wp.ring.read(slot), count, version, pieces))
        elif kind == "ring":
            wp.ring = SlotRing.attach(wp.ring_name, item[1], item[2])
        elif kind == "msg":
            self.deliver(item[1], item[2])
        elif kind == "ready":
            wp.ready.set()
            if wp.instance > 0:  # a restart's process is up: its pings time out as the first one's
                self.deliver("orchestrator", WorkerUpMsg(wp.name, wp.instance))
        elif kind == "done":
            _, _, counters, error, stats, wp.close_failure = item
            wp.error = error
            self.worker_counters[wp.name] = {**counters, **{f"ipc.{k}": v for k, v in stats.items()}}
            wp.done.set()
            if error:
                self._report_down(wp)
        elif kind == "failed":
            wp.error = item[2]

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
            self._to_worker(wp, ("msg", StopMsg("shutdown")))
        # "done" arrives after every piece the worker sent; one that does not stop within
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
