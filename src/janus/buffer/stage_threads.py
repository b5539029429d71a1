"""The background threads of the data path's stages (collection, selection): how they start and fail.

Each runs with one intra-op torch thread (so it never competes with the learner's), and an error
it raises is handed to the pipeline (which closes every stage with it) instead of dying silently.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

import torch

from janus.errors import PipelineClosedError


def start_stage_thread(threads: list[threading.Thread], name: str, loop: Callable[[], None],
                       fail: Callable[[BaseException], None]) -> None:
    """Run ``loop`` in daemon thread ``name`` (added to ``threads`` before it starts); return once it
    runs. :class:`PipelineClosedError` ends it quietly; any other error goes to ``fail``."""
    ready = threading.Event()
    thread = threading.Thread(target=_guarded(loop, ready, fail), name=name, daemon=True)
    threads.append(thread)
    intra_op_threads = torch.get_num_threads()
    thread.start()
    ready.wait(10.0)
    # torch.set_num_threads() in the background thread also sets the default that every thread
    # started later inherits (the learner's too): restore it, the background thread keeps 1.
    torch.set_num_threads(intra_op_threads)


def _guarded(loop: Callable[[], None], ready: threading.Event, fail: Callable[[BaseException], None]) -> Callable[[], None]:
    def run() -> None:
        try:
            torch.set_num_threads(1)
        finally:
            ready.set()
        try:
            loop()
        except PipelineClosedError:
            pass
        except BaseException as exc:  # noqa: BLE001 - handed to the caller
            fail(exc)

    return run
