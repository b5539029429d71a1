"""The ``ray`` backend: every component a Ray actor (its own process), messages as actor calls.

Each actor hosts :class:`~janus.runtime.component.Host` in a thread; ``post`` (a threaded actor
method) feeds its inbox. Calls from one sender are numbered per stream, so a receiver keeps them in
order although a threaded actor may run them out of order. An outbox keeps at most
``max_calls_in_flight`` calls carrying data outstanding (it waits on the oldest beyond that);
control messages never wait. Parameters go into Ray's object store once per version; messages
carry a small :class:`RayParams` handle, resolved (and cached) once per process.

Actors are named, in a namespace of their own per run, and placed on Ray nodes by the layout's node
labels (``node-0`` on the head). The Orchestrator restarts a dead worker through a picklable
:class:`Restarter` (``backend.restart``): it runs inside the Orchestrator's actor. A worker whose
component raises reports it; one whose process dies is reported by a :class:`DeathWatch`.

A :class:`GcsWatch` probes Ray's GCS (the cluster's coordinator) from a thread of the driver: actors
keep talking to each other without it, so a dead GCS is otherwise noticed only when Ray gives up
(minutes). Once it stops answering the run fails with an error naming it, nothing asks the GCS
again, and the processes of a Ray this run started are killed (a joined cluster is left alone).
"""

from __future__ import annotations

import collections
import contextlib
import os
import re
import signal
import socket
import threading
import time
import uuid
import warnings
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field, fields, is_dataclass, replace
from functools import partial
from typing import Any

import torch

from janus.errors import ConfigError, RunFailed
from janus.runtime.backends.local import ABANDONABLE, SHUTDOWN_ORDER, WORKER_STOP_S
from janus.runtime.component import Component, Host
from janus.runtime.messages import WorkerDownMsg, WorkerUpMsg
from janus.runtime.replay_client import ReplayClient
from janus.runtime.stats import MessageStats, payload_bytes
from janus.runtime.trajectory_manager import TrajectoryManager

RAY_MISSING = ("--backend ray needs Ray, which is not installed here: pip install 'janus-rl[ray]' "
               "(from a clone: .venv/bin/pip install -e '.[ray]'), or choose --backend local|process")
try:
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy
except ModuleNotFoundError as _exc:  # Ray itself missing; a broken install's own error is kept as it is
    if (_exc.name or "ray").split(".")[0] != "ray":
        raise
    raise ConfigError(RAY_MISSING) from None

from janus.runtime.backends.ray_replay import RemoteReplay  # noqa: E402  imports ray: after the check above

WORKER_ENV = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
PRELOAD = ["torch", "janus.runtime.trainer", "janus.runtime.trajectory_manager"]  # imported by idle Ray workers before an actor lands
ACTOR_CPUS = 0.1  # small, so that many components fit on a 2-core machine
_OUTBOX: RayOutbox | None = None  # the outbox of the component hosted by this process
_SPAWNED: dict[tuple[str, str], Any] = {}  # (namespace, name) -> handle of an actor this process created


@contextlib.contextmanager
def keeping_stop_handlers() -> Iterator[Callable[[], None]]:
    """Keep this process's SIGINT/SIGTERM/SIGHUP handlers across ``ray.init``; yields a function
    that puts them back at once (call it while a helper thread runs ``ray.init``).

    ``ray.init`` in the main thread replaces the SIGTERM handler with ``sys.exit(15)`` (a local
    node's with one that kills Ray's processes and exits 1), and the driver's core worker installs
    a C++ failure handler that aborts on SIGTERM (janus exited 15, or died of SIGABRT or SIGSEGV,
    with no final checkpoint and no results). The handlers in place before it are put back (a
    signal handler set from Python is installed again with ``sigaction``, over the C++ one)."""
    from janus.stopping import STOP_SIGNALS

    if threading.current_thread() is not threading.main_thread():
        yield lambda: None
        return
    saved = {sig: signal.getsignal(sig) for sig in STOP_SIGNALS}

    def restore() -> None:
        for sig, handler in saved.items():
            if handler is not None:
                signal.signal(sig, handler)

    try:
        yield restore
    finally:
        restore()


def start_local_ray(**kwargs: Any) -> None:
    """Start a single-node Ray whose GCS, raylet and workers listen on 127.0.0.1 only.

    On Linux Ray replaces a loopback node IP with the machine's routable IP (and its servers then
    listen on every interface) unless its single-host mode is on, which its
    ``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0`` switch selects; we turn it on while Ray starts.
    """
    from ray._private import ray_constants as rc

    old_env, old_flag = os.environ.get(rc.ENABLE_RAY_CLUSTERS_ENV_VAR), rc.ENABLE_RAY_CLUSTER
    os.environ[rc.ENABLE_RAY_CLUSTERS_ENV_VAR], rc.ENABLE_RAY_CLUSTER = "0", False  # raylet and workers inherit it
    try:
        with keeping_stop_handlers():
            try:
                ray.init(address="local", _node_ip_address="127.0.0.1", include_dashboard=False,
                         logging_level="warning",  # type: ignore[arg-type]  # a level name works too; Ray types int
                         _system_config={"preload_python_modules": PRELOAD}, **kwargs)
            except BaseException as exc:  # Ctrl-C or SIGTERM as it starts: stop the node processes it started
                with contextlib.suppress(Exception):
                    ray.shutdown()
                if isinstance(exc, SystemExit) and exc.code == signal.SIGTERM:  # Ray's own handler, meanwhile
                    from janus.stopping import Terminated

                    raise Terminated("SIGTERM") from None
                raise
    finally:
        rc.ENABLE_RAY_CLUSTER = old_flag
        os.environ.pop(rc.ENABLE_RAY_CLUSTERS_ENV_VAR)
        if old_env is not None:
            os.environ[rc.ENABLE_RAY_CLUSTERS_ENV_VAR] = old_env


CONNECT_TIMEOUT_S = 10.0
"""How long joining a cluster (``--address``) may take before the run fails with an error naming it."""


GCS_PROBE_INTERVAL_S = 0.5
"""How often the driver asks Ray's GCS for a key (a call that answers in well under a millisecond)."""
GCS_LOST_AFTER_S = 5.0
"""The GCS is taken for lost once no probe has succeeded for this long (its restart fits within it)."""


class GcsLost(RunFailed):
    """Ray's GCS stopped answering: the run cannot go on (nor ask Ray anything that needs it)."""


class GcsWatch:
    """Probes Ray's GCS from a helper thread; :attr:`lost` says so once none answered for ``lost_after_s``.

    A call to a dead GCS can block inside Ray's C++ (``ray.get_actor`` does, for a minute): the
    probe is given a timeout, and :attr:`lost` is judged by the caller from the time of the last
    answer, so it is bounded even if the probe itself hangs.
    """

    def __init__(self, address: str, probe: Callable[[float], Any] | None = None,
                 interval_s: float = GCS_PROBE_INTERVAL_S, lost_after_s: float = GCS_LOST_AFTER_S) -> None:
        self.address = address
        self.probe = probe or _probe_gcs
        self.interval_s, self.lost_after_s = interval_s, lost_after_s
        self._last_ok = time.monotonic()
        self._last_error = "no answer"
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lost: str | None = None

    def start(self) -> None:
        self._last_ok = time.monotonic()
        self._thread = threading.Thread(target=self._loop, name="janus-ray-gcs-watch", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 3.0) -> None:
        """End the probing thread (waits up to ``timeout`` for a probe in progress)."""
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout)

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                self.probe(min(2.0, self.lost_after_s))
                self._last_ok = time.monotonic()
            except Exception as exc:  # noqa: BLE001 - any failure to answer counts the same
                text = str(exc).strip().splitlines()
                self._last_error = f"{type(exc).__name__}: {text[0] if text else ''}".rstrip(": .")
            self._stop.wait(self.interval_s)

    @property
    def lost(self) -> str | None:
        """None while the GCS answers; once it has not for ``lost_after_s``, why the run stops (stays set)."""
        if self._lost is None and self._thread is not None:
            silent = time.monotonic() - self._last_ok
            if silent > self.lost_after_s:
                self._lost = (f"Ray's GCS at {self.address} stopped answering: no answer for {silent:.0f}s "
                              f"({self._last_error}). The Ray cluster's coordinator died or hung, and the run cannot "
                              f"go on without it; no final checkpoint was written (--resume continues from the last "
                              f"committed one, if any)")
        return self._lost


def _probe_gcs(timeout_s: float) -> None:
    """Read one key from the GCS of the connected Ray (raises once it does not answer in ``timeout_s``)."""
    worker = ray._private.worker.global_worker
    worker.gcs_client.internal_kv_get(b"janus-gcs-probe", b"janus", timeout=timeout_s)  # type: ignore[attr-defined]  # set once connected


def run_bounded(fn: Callable[[], Any], give_up: Callable[[], str | None], what: str) -> Any:
    """``fn()`` in a helper thread, waited for until it returns or ``give_up()`` names a reason
    (then :class:`GcsLost` with it; the thread is left to Ray's own timeout)."""
    outcome: list[Any] = []
    done = threading.Event()

    def call() -> None:
        try:
            outcome.append((True, fn()))
        except BaseException as exc:  # noqa: BLE001 - handed to the waiting thread
            outcome.append((False, exc))
        finally:
            done.set()

    threading.Thread(target=call, name=f"janus-ray-{what}", daemon=True).start()
    while not done.wait(0.05):
        reason = give_up()
        if reason is not None:
            raise GcsLost(reason)
    ok, value = outcome[0]
    if not ok:
        raise value
    return value


def session_processes(node: Any) -> list[int]:
    """PIDs of every process of the local Ray session ``node`` (a ``ray._private.node.Node``
    this process started): its GCS, raylet, dashboard and monitors, every process they started
    (workers, agents) and any process that names the session's folder (an agent whose raylet is
    gone and who was handed to init). Linux (/proc); elsewhere only the node's own processes."""
    own = {p.process.pid for procs in node.all_processes.values() for p in procs if p.process is not None}
    session_dir = str(getattr(node, "_session_dir", "") or "")
    table = _process_table()
    if session_dir:
        own |= {pid for pid, (_, cmd) in table.items() if session_dir in cmd}
    return _with_descendants(own, table)


def processes_of_sessions_started_here() -> list[int]:
    """PIDs of the processes of every Ray session this process started (a session folder is
    named ``session_<date>_<time>_<microseconds>_<pid of its starter>``), with their descendants:
    what to kill when ``ray.init`` fails half-way and no node object is left to ask."""
    named = re.compile(rf"session_\d{{4}}-\d\d-\d\d_\d\d-\d\d-\d\d_\d+_{os.getpid()}(?!\d)")
    table = _process_table()
    return _with_descendants({pid for pid, (_, cmd) in table.items() if named.search(cmd)}, table)


def _with_descendants(pids: set[int], table: dict[int, tuple[int, str]]) -> list[int]:
    """``pids`` and every process below them in ``table`` (:func:`_process_table`), but this one."""
    found, todo = set(pids), list(pids)
    while todo:
        pid = todo.pop()
        for child, (ppid, _) in table.items():
            if ppid == pid and child not in found:
                found.add(child)
                todo.append(child)
    found.discard(os.getpid())
    return sorted(found)


def _kill(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except OSError:  # gone already
        pass


def _process_table() -> dict[int, tuple[int, str]]:
    """pid -> (parent pid, command line) of this user's processes (empty where /proc is missing)."""
    table: dict[int, tuple[int, str]] = {}
    if not os.path.isdir("/proc"):
        return table
    uid = os.getuid()
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            if entry.stat().st_uid != uid:
                continue
            with open(f"/proc/{entry.name}/stat", "rb") as f:
                stat = f.read().decode(errors="replace")
            with open(f"/proc/{entry.name}/cmdline", "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:  # gone meanwhile
            continue
        fields_after_name = stat.rsplit(")", 1)[-1].split()
        if fields_after_name and fields_after_name[0] != "Z":
            table[int(entry.name)] = (int(fields_after_name[1]), cmd)
    return table


def kill_session(node: Any) -> list[int]:
    """SIGKILL every process of the local Ray session ``node`` (see :func:`session_processes`) and
    reap the ones this process started; returns their PIDs."""
    pids = session_processes(node)
    for pid in pids:
        _kill(pid)
    for procs in node.all_processes.values():
        for p in procs:
            if p.process is not None:
                try:
                    p.process.wait(timeout=5)
                except Exception:  # noqa: BLE001 - not reaped: a zombie until this process exits
                    pass
    return pids


def split_address(address: str) -> tuple[str, int]:
    """``(host, port)`` of ``HOST:PORT``; a ConfigError naming ``--address`` otherwise."""
    host, sep, port = address.rpartition(":")
    host = host.strip("[]")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ConfigError(f"invalid --address: got {address!r}; accepted: 'auto' or HOST:PORT of a Ray head "
                          f"(e.g. 127.0.0.1:6379)")
    return host, int(port)


def _probe(address: str, timeout_s: float) -> None:
    """Fail fast, naming ``address``, when nothing accepts a TCP connection there (Ray itself would
    retry for minutes inside C++ code, where neither Ctrl-C nor SIGTERM reach Python)."""
    host, port = split_address(address)
    try:
        with socket.create_connection((host, port), timeout=timeout_s):
            pass
    except ConnectionRefusedError:
        raise RunFailed(f"--address {address}: nothing is listening there (connection refused); start a Ray head "
                        f"there (ray start --head --port {port}) or leave out --address to start a local Ray") from None
    except socket.gaierror as exc:
        raise RunFailed(f"--address {address}: cannot resolve host {host!r} ({exc.strerror})") from None
    except OSError as exc:  # timeout, unreachable network...
        reason = f"no answer within {timeout_s:.0f}s" if isinstance(exc, TimeoutError) else (exc.strerror or str(exc))
        raise RunFailed(f"--address {address}: cannot reach a Ray head there: {reason}") from None


def _auto_address() -> str | None:
    """The cluster ``--address auto`` would join (RAY_ADDRESS, else the latest one started on this
    machine), or None if there is none."""
    try:
        from ray._private.services import get_ray_address_from_environment

        return get_ray_address_from_environment("auto", None)
    except (ConnectionError, ImportError):
        return None


def connect(address: str, timeout_s: float = CONNECT_TIMEOUT_S) -> None:
    """Join the Ray cluster at ``address`` (``auto`` or ``HOST:PORT``) within ``timeout_s``.

    Raises :class:`RunFailed` naming the address when there is no cluster, nothing listens there or
    no Ray answers in time. ``ray.init`` runs in a helper thread so that this (main) thread waits
    interruptibly: Ctrl-C and SIGTERM stop the attempt at once.
    """
    deadline = time.monotonic() + timeout_s
    target = address
    if address == "auto":
        found = _auto_address()
        if found is None:
            raise RunFailed("--address auto: no running Ray cluster found (none started on this machine with "
                            "`ray start --head`, and RAY_ADDRESS is not set); start one, pass --address HOST:PORT, "
                            "or leave out --address to start a local Ray")
        target = found
    _probe(target, max(0.5, min(5.0, deadline - time.monotonic())))
    outcome: list[BaseException | None] = []
    done = threading.Event()

    def attempt() -> None:
        try:
            ray.init(address=address, logging_level="warning")  # type: ignore[arg-type]  # a level name works too
            outcome.append(None)
        except BaseException as exc:  # noqa: BLE001 - handed to the waiting thread
            outcome.append(exc)
        finally:
            done.set()

    helper = threading.Thread(target=attempt, name="janus-ray-connect", daemon=True)
    with keeping_stop_handlers() as restore:
        helper.start()
        try:
            while not done.wait(max(0.0, min(0.05, deadline - time.monotonic()))) and time.monotonic() < deadline:
                restore()  # ray.init's core worker, starting in the helper, installs a handler that aborts on SIGTERM
        except BaseException:  # Ctrl-C, SIGTERM: stop waiting; leave Ray as whole as it can be left
            _abandon(done)
            raise
    if not done.is_set():
        raise RunFailed(f"--address {address}: no Ray cluster answered at {target} within {timeout_s:.0f}s "
                        f"(is it the GCS port of a Ray head, `ray start --head --port PORT`?)")
    if outcome[0] is not None:
        exc = outcome[0]
        raise RunFailed(f"--address {address}: could not join the Ray cluster at {target}: "
                        f"{type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc).strip() else ''}") from exc


def _abandon(done: threading.Event, grace_s: float = 2.0) -> None:
    """A connect the user stopped: give ``ray.init`` ``grace_s`` to finish and disconnect it, so
    the interpreter does not exit (and run Ray's own exit hook) in the middle of its start-up."""
    if done.wait(grace_s) and ray.is_initialized():
        with contextlib.suppress(Exception):
            ray.shutdown()


@dataclass(frozen=True)
class RayParams:
    """A parameter snapshot in the object store; the container keeps Ray from dereferencing it."""

    version: int
    ref: Any  # ray.ObjectRef


def _lookup(name: str, namespace: str) -> Any:
    """The handle of a named actor, or None if it does not exist (any more)."""
    try:
        return ray.get_actor(name, namespace=namespace)
    except ValueError:
        return None


def _ready_value(ref: Any) -> Any:
    """The value of a ref that is ready, or None (not ready, or its call failed)."""
    try:
        return ray.get(ref, timeout=0)
    except Exception:  # noqa: BLE001 - not ready (GetTimeoutError) or failed: nothing to report
        return None


def _wait_all(refs: list[Any], timeout: float) -> None:
    """Wait until every ref is ready or ``timeout`` passed."""
    if refs:
        ray.wait(refs, num_returns=len(refs), timeout=timeout, fetch_local=False)


class RayOutbox:
    """Sends to named actors (handles cached), bounds calls in flight, shares/resolves parameters."""

    def __init__(self, namespace: str, sender: str, max_calls_in_flight: int,
                 lookup: Callable[[str], Any] | None = None) -> None:
        self.namespace = namespace
        self.lookup = lookup or (lambda name: _lookup(name, namespace))  # dest -> handle or None
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
        _wait_all(refs, 3600.0 if timeout is None else timeout)

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

    def status(self) -> dict[str, Any]:
        c = self.host.component
        out = c.summary() if hasattr(c, "summary") else {}
        return out | {"finished": getattr(c, "finished", c.stopped)}

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


_DEATHS = DeathWatch()


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
                _SPAWNED[(self.namespace, name)] = handle  # Ray collects an actor once its creator drops it
                return handle
            except ValueError:  # name still taken
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)

    def __call__(self, name: str) -> str | None:
        """Kill ``name`` (if alive), start a fresh one, make every sender look it up again.
        Returns the old actor's error traceback, ``WorkerDied`` if its process died, or None if it
        hung."""
        old = _lookup(name, self.namespace)
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
            _DEATHS.watch(handle, self.namespace, name, self.instances[name])
        if _OUTBOX is not None:
            _OUTBOX.forget(name)
        refs = [h.forget.remote(name) for n in self.specs if n != name and (h := _lookup(n, self.namespace))]
        _wait_all(refs, 5.0)
        return error


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
        self._status: dict[str, Any] = {}
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
                        _kill(pid)
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
                    _DEATHS.watch(handle, self.namespace, name, 0)
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
        return self._ask_gcs(lambda: _lookup(name, self.namespace), "lookup")

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

    def orchestrator_status(self) -> dict[str, Any]:
        """The Orchestrator's summary plus ``finished``; a dead Orchestrator, or a lost GCS, reads as
        a failure.

        After :meth:`shutdown` this is the summary taken while shutting down (Ray may be gone).
        """
        if self._final is not None:
            return self._status
        lost = self.gcs_lost
        if lost is not None:
            self._status = {"trained": 0, **self._status, "finished": False, "failure": lost}
            return self._status
        try:
            self._status = ray.get(self.handles["orchestrator"].status.remote(), timeout=30)
        except ray.exceptions.RayError as exc:
            self._status = {"trained": 0, **self._status, "finished": False,
                            "failure": f"the orchestrator is unreachable: {exc}"}
        return self._status

    def _gather(self, timeout: float) -> dict[str, dict[str, Any]]:
        handles = {n: h for n in self.roles if (h := self._lookup(n)) is not None}
        refs = {n: h.final.remote() for n, h in handles.items()}
        _wait_all(list(refs.values()), timeout)
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
        _DEATHS.forget(self.namespace)
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
            _wait_all([handles[n].wait_done.remote(left) for n in group], left)
        if "orchestrator" in handles:  # its summary after the drain, for orchestrator_status()
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
        _wait_all(list(releases.values()), 3.0)
        self.released = {name: paths for name, ref in releases.items() if (paths := _ready_value(ref))}
        for handle in handles.values():
            try:
                ray.kill(handle, no_restart=True)
            except ray.exceptions.RayError:
                pass
        for key in [k for k in _SPAWNED if k[0] == self.namespace]:
            del _SPAWNED[key]
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
        for key in [k for k in _SPAWNED if k[0] == self.namespace]:
            del _SPAWNED[key]
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
