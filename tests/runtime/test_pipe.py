"""The process backend's pipe records: typed at both ends, and a record of any other type is
refused with an error that names it (no worker process is spawned here)."""

from __future__ import annotations

import multiprocessing
import pickle
import threading
import time

import numpy as np
import pytest

from janus.runtime.backends.pipe import Deliver, Done, Forward, Ready, SharedSnapshot, StoreAnnounced, stats_name
from janus.runtime.backends.process import ProcessBackend
from janus.runtime.backends.worker_process import WorkerOutbox, WorkerProcess, take_record
from janus.runtime.component import Component, Host
from janus.runtime.messages import StartMsg, StopMsg
from janus.runtime.shm import Layout


def test_the_learner_refuses_a_record_of_an_unknown_type_naming_it_and_the_worker() -> None:
    mine, theirs = multiprocessing.Pipe(duplex=True)
    backend = ProcessBackend()
    wp = WorkerProcess("worker-0", None, mine)
    try:
        with pytest.raises(TypeError, match=r"worker 'worker-0' sent tuple over its pipe, which is no record of the "
                                            r"process backend's pipe \(janus.runtime.backends.pipe\); refused"):
            backend._handle(wp, ("ready", "worker-0"))  # the string-tagged tuple the pipe once carried
        backend._handle(wp, Ready("worker-0"))
        assert wp.ready.is_set()
    finally:
        mine.close()
        theirs.close()


def test_a_refused_record_fails_the_run_through_the_receiver_thread() -> None:
    """The learner's receiver thread reads the pipe: a record it refuses fails the run (``fatal``),
    naming the record, rather than being skipped without a word."""
    mine, theirs = multiprocessing.Pipe(duplex=True)
    backend = ProcessBackend()
    backend.workers["worker-0"] = WorkerProcess("worker-0", None, mine)
    receiver = threading.Thread(target=backend._receive_loop, daemon=True)
    receiver.start()
    try:
        theirs.send(Forward("orchestrator", StopMsg()))  # a known record: delivered (nobody there)
        theirs.send({"kind": "piece"})
        deadline = time.monotonic() + 10
        while backend.fatal is None and time.monotonic() < deadline:
            time.sleep(0.01)
        assert backend.fatal is not None and backend.fatal[0] == "process-receive"
        assert "worker 'worker-0' sent dict over its pipe" in backend.fatal[1]
        assert backend.stats.dropped == 1  # the Forward reached deliver(): no orchestrator in this backend
    finally:
        backend._stop_receiving.set()
        receiver.join(5)
        mine.close()
        theirs.close()


def test_the_worker_refuses_a_record_of_an_unknown_type() -> None:
    mine, theirs = multiprocessing.Pipe(duplex=True)
    host = Host(Component("worker-0"))
    outbox = WorkerOutbox("worker-0", theirs, 2, "unused")
    try:
        with pytest.raises(TypeError, match="the learner sent tuple over its pipe"):
            take_record(host, outbox, ("msg", StartMsg()), started=False)
        assert take_record(host, outbox, Deliver(StartMsg()), started=False) is True
        assert take_record(host, outbox, Deliver(StopMsg()), started=True) is True and outbox.stopping.is_set()
        assert [type(host.inbox.get_nowait()) for _ in range(2)] == [StartMsg, StopMsg]
    finally:
        mine.close()
        theirs.close()


def test_records_pickle_and_count_under_the_names_the_pipe_statistics_used() -> None:
    layout = Layout.of({"w": np.zeros(3, np.float32)})
    for record in (Deliver(StartMsg()), StoreAnnounced("janus-store-x", layout), Ready("worker-1"),
                   Done("worker-1", {"rollouts": 2.0}, "", {"pieces_via_ring": 2}, "")):
        assert pickle.loads(pickle.dumps(record)) == record
    assert stats_name(Deliver(StartMsg())) == StartMsg()  # counted as its message's type, as before
    assert stats_name(StoreAnnounced("janus-store-x", layout)) == "<store>"
    assert pickle.loads(pickle.dumps(Deliver(SharedSnapshot(3)))).msg == SharedSnapshot(3)
