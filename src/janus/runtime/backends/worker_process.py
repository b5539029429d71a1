"""The worker process of the ``process`` backend: its entry point, its outbox (pieces into the
shared-memory ring, the rest over the pipe) and the thread that feeds its inbox from the pipe.

A worker process ignores SIGINT/SIGTERM/SIGHUP (the learner stops it cleanly, draining what it
produced) and exits when the learner process's end of its pipe closes, so a killed learner leaves no
orphan. What crosses the pipe is a record of :mod:`janus.runtime.backends.pipe`. The learner's side
of one worker process is here too: starting it (:func:`start_worker_process`), its handle
(:class:`WorkerProcess`) and how it ended (:func:`died`).

Worker processes are not daemonic, because a daemonic process may not start processes of its own
and a worker may step its environments in subprocesses (``workload.vector_env: async``). What
daemonic processes got for free, this module does itself: at interpreter exit it kills the worker
processes still running (ones :meth:`ProcessBackend.shutdown` did not stop), before
multiprocessing would wait for them.
"""

from __future__ import annotations

import atexit
import os
import signal
import threading
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from multiprocessing.context import SpawnContext
from typing import Any

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
    ToLearner,
    refused,
)
from janus.runtime.component import Component, Host, error_text
from janus.runtime.messages import InsertTransitionMsg, LoadParamsMsg, ParamsSnapshot, StartMsg, StopMsg
from janus.runtime.shm import Layout, ParamStore, RingClosed, SlotRing, new_segment_name
from janus.spawn import without_caller_main

WORKER_PROCESS_VAR = "JANUS_WORKER_PROCESS"  # set in a worker process (read by janus.envs.vector)
WORKER_ENV = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


class WorkerStartError(RuntimeError):
    """A worker process did not come up."""


_LIVE_WORKERS: weakref.WeakSet[Any] = weakref.WeakSet()
"""Worker processes started here and not yet joined (see :data:`WORKER_ENV`'s module doc)."""


@atexit.register  # registered after multiprocessing's own exit hook (imported above), so it runs first
def _kill_leftover_workers() -> None:
    for proc in list(_LIVE_WORKERS):
        if proc.is_alive():
            proc.kill()
            proc.join(5.0)


def exited_early(proc: Any) -> str:
    """Why a worker process that exited before it was ready did, as far as the learner can tell."""
    proc.join(1.0)
    return (f"its process exited (exit code {proc.exitcode}) before it was ready; its traceback, if any, "
            "is on stderr above")


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

    def send_record(self, record: ToLearner) -> None:
        """Put one record on the pipe to the learner."""
        with self.lock:
            self.conn.send(record)

    def send(self, dest: str, msg: Any) -> None:
        if isinstance(msg, InsertTransitionMsg):
            self._send_piece(dest, msg)
        else:
            self.send_record(Forward(dest, msg))

    def _send_piece(self, dest: str, msg: InsertTransitionMsg) -> None:
        arrays = msg.transitions
        if self.ring is None:
            self.ring = SlotRing.create(Layout.of(arrays), self.slots, self.ring_name)
            self.send_record(RingAnnounced(self.ring.layout, self.ring.slots))  # once: the learner attaches
        if not self.ring.layout.fits(arrays):  # a piece of another shape: correct, but pickled
            self.stats["pieces_pickled"] += 1
            self.send_record(Forward(dest, msg))
            return
        try:
            slot = self.ring.write(arrays, wait=lambda: not self.stopping.is_set())
        except RingClosed:
            return  # stopping while the learner no longer reads: the piece would be dropped anyway
        self.stats["pieces_via_ring"] += 1
        self.send_record(PieceInSlot(dest, slot, msg.source, msg.count, msg.params_version, msg.pieces))

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
            return handle  # already resolved (see take_record)
        if self.store is None:
            raise RuntimeError(f"{self.name} got parameters version {handle.version} before the learner "
                               "announced its parameter store")
        version, arrays = self.store.read()  # a private copy: the Trainer overwrites the store
        for a in arrays.values():
            a.setflags(write=False)
        return ParamsSnapshot(version, arrays)


def receive_from_learner(host: Host, outbox: WorkerOutbox, conn: Connection) -> None:
    """Worker-process thread: feed the host's inbox from the pipe."""
    started = False  # a StartMsg passed: parameters from now on answer this instance's fetches
    while not host.done.is_set():
        try:
            record = conn.recv() if conn.poll(0.02) else None
        except (EOFError, OSError):  # the learner process is gone: nobody to work for
            os._exit(3)
        if record is not None:
            started = take_record(host, outbox, record, started)


def take_record(host: Host, outbox: WorkerOutbox, record: object, started: bool) -> bool:
    """Act on one record from the learner; returns whether a StartMsg has passed (``started``
    before it). A record of an unknown type is refused (:class:`TypeError`)."""
    match record:
        case Deliver(msg=msg):
            if isinstance(msg, StopMsg):
                outbox.stopping.set()
            elif isinstance(msg, StartMsg):
                started = True
            elif isinstance(msg, LoadParamsMsg):
                if not started:  # the proxy answered a fetch of this worker's killed predecessor:
                    return started  # the Worker has no actor to load it into yet, and fetches when it starts
                # resolved here, so the message names the version of the arrays the store held
                # (maybe newer than asked for): the Worker records the version it actually loads
                snapshot = outbox.resolve(msg.params)
                msg = LoadParamsMsg(snapshot.version, snapshot)
            host.post(msg)
        case StoreAnnounced(name=name, layout=layout):
            outbox.attach_store(name, layout)
        case _:
            raise refused(record, "the learner")
    return started


def worker_main(name: str, factory: Callable[[], Component], conn: Connection, slots: int, ring_name: str,
                instance: int = 0, env_shipment: bytes | None = None) -> None:
    """Entry point of a worker process: host the component until it stops, then report.
    ``env_shipment``: an environment object given to :func:`janus.train`, to register here first
    (:func:`janus.envs.in_process.shipment`)."""
    # Ctrl-C, or a SIGTERM/SIGHUP to the whole process group (kill -- -PGID, scancel, a closed
    # terminal), reaches the learner too, which stops us cleanly and collects our counts; a worker
    # whose learner is gone exits by itself (receive_from_learner).
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
        conn.send(BuildFailed(name, error_text(exc)))
        return
    host = Host(component)
    try:
        conn.send(Ready(name))
    except (BrokenPipeError, OSError):  # the learner stopped while this process was starting
        return
    receiver = threading.Thread(target=receive_from_learner, args=(host, outbox, conn), name=f"{name}-receive", daemon=True)
    receiver.start()
    host.loop()  # in this thread until StopMsg or an error
    receiver.join(1.0)
    try:
        outbox.send_record(Done(name, dict(component.counters), host.error_text, outbox.stats, host.close_failure or ""))
    except (BrokenPipeError, OSError):
        pass
    for segment in (outbox.ring, outbox.store):  # the learner unlinks them
        if segment is not None:
            segment.close()


def start_worker_process(ctx: SpawnContext, name: str, factory: Callable[[], Component], slots: int, instance: int,
                         env_shipment: bytes | None, skip_caller_main: bool) -> WorkerProcess:
    """Spawn the process of worker ``name`` (instance ``instance``), which builds its component
    from ``factory``; its ring is named here and created by the worker at its first piece."""
    mine, theirs = ctx.Pipe(duplex=True)
    ring_name = new_segment_name("ring")
    saved = {k: os.environ.get(k) for k in WORKER_ENV}
    os.environ.update(WORKER_ENV)  # the child's torch/BLAS read these at import
    try:
        proc = ctx.Process(target=worker_main, args=(name, factory, theirs, slots, ring_name, instance, env_shipment),
                           name=f"janus-{name}", daemon=False)  # its envs may be subprocesses
        with without_caller_main(skip_caller_main):  # janus.spawn: unguarded scripts and stdin too
            proc.start()
        _LIVE_WORKERS.add(proc)
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    theirs.close()
    return WorkerProcess(name, proc, mine, ring_name=ring_name, instance=instance)
