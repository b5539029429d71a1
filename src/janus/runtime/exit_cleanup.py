"""Multiprocessing's exit-time clean-up, run early in a process that is about to be killed.

A process that uses ``multiprocessing`` with the ``forkserver`` or ``spawn`` start method (a worker
stepping its environments in subprocesses: ``workload.vector_env: async``) owns *named* resources
whose removal multiprocessing leaves to finalizers that run at interpreter exit: each ``SemLock``'s
``/dev/shm/sem.mp-*`` (a lock of the shared-memory arrays) and the forkserver's ``/tmp/pymp-*``
folder. A Ray actor never exits that way: the driver kills it (``ray.kill``: SIGKILL), so those
were left behind after every run, and a resource tracker killed with it left its bookkeeping
half-done (``KeyError`` tracebacks from a restarted tracker). :func:`run_exit_finalizers` runs
those finalizers while the process and its tracker still live.
"""

from __future__ import annotations

import threading

FINALIZE_WAIT_S = 2.0


def named_resources() -> list[str]:
    """The paths of this process's named multiprocessing resources that its exit would remove: the
    ``/dev/shm/sem.mp-*`` of its live ``SemLock`` objects, and the forkserver's temp folder."""
    import gc
    import multiprocessing
    import os
    from multiprocessing.synchronize import SemLock

    paths = []
    for obj in gc.get_objects():
        if isinstance(obj, SemLock):
            name = getattr(obj._semlock, "name", None)  # type: ignore[attr-defined]  # None where unlinked at creation
            if name:
                paths.append(f"/dev/shm/sem.{name.lstrip('/')}")
    tempdir = multiprocessing.current_process()._config.get("tempdir")  # type: ignore[attr-defined]  # util.get_temp_dir's
    if tempdir:
        paths.append(str(tempdir))
    return sorted(p for p in set(paths) if os.path.exists(p))


def run_exit_finalizers(timeout_s: float = FINALIZE_WAIT_S) -> list[str]:
    """Run this process's multiprocessing finalizers now, as its exit would (semaphores unlinked,
    the forkserver's temp folder removed), bounded by ``timeout_s`` (a finalizer that joins a stuck
    thread must not hold the caller). Returns the paths they were to remove (:func:`named_resources`).
    Call it only once the process's components are closed (their subprocesses joined): it is
    about to be killed."""
    from multiprocessing import util

    paths = named_resources()
    done = threading.Event()

    def finalize() -> None:
        try:
            util._run_finalizers(0)  # type: ignore[attr-defined]  # what util._exit_function runs first (priority >= 0)
            util._run_finalizers()  # type: ignore[attr-defined]  # then the rest: the temp folder (priority -100)
        finally:
            done.set()

    threading.Thread(target=finalize, name="janus-exit-finalizers", daemon=True).start()
    done.wait(timeout_s)
    return paths
