"""Ray's cluster plumbing for the ``ray`` backend: starting a local Ray or joining a cluster,
watching its GCS, and finding and killing the processes of a Ray this run started.

Nothing here hosts a component (that is :mod:`janus.runtime.backends.ray_actors`); the driver's
:class:`~janus.runtime.backends.ray.RayBackend` uses it to get a Ray to run on and to leave none
behind.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import socket
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import ray

from janus.errors import ConfigError, RunFailed

PRELOAD = ["torch", "janus.runtime.trainer", "janus.runtime.trajectory_manager"]  # imported by idle Ray workers before an actor lands


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


def kill_pid(pid: int) -> None:
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
        kill_pid(pid)
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

