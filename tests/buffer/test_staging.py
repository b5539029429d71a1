"""ActorBuffer / LearnerBuffer: FIFO order, backpressure, thresholds, timeouts, close semantics.

Every blocking call has a timeout and every thread is joined and asserted dead, so a bug fails the
test instead of hanging it.
"""

from __future__ import annotations

import threading
import time

import pytest

from janus.buffer.staging.actor_buffer import ActorBuffer
from janus.buffer.staging.learner_buffer import LearnerBuffer
from janus.errors import JanusError, PipelineClosedError, StagingTimeout

pytestmark = pytest.mark.timeout(30)

JOIN_S = 5.0


class Worker(threading.Thread):
    """A thread that runs ``fn`` and records its result or exception; ``done`` is set at the end."""

    def __init__(self, fn, name: str = "worker") -> None:
        super().__init__(name=name, daemon=True)
        self.fn = fn
        self.result = None
        self.error: BaseException | None = None
        self.started_evt = threading.Event()
        self.done = threading.Event()

    def run(self) -> None:
        self.started_evt.set()
        try:
            self.result = self.fn()
        except BaseException as exc:  # noqa: BLE001 - inspected by the test
            self.error = exc
        finally:
            self.done.set()

    def finish(self) -> None:
        self.join(JOIN_S)
        assert not self.is_alive(), f"{self.name} still alive"


def start(fn, name: str = "worker") -> Worker:
    w = Worker(fn, name)
    w.start()
    assert w.started_evt.wait(JOIN_S)
    return w


# ---------------------------------------------------------------------------------------------
# ActorBuffer
# ---------------------------------------------------------------------------------------------


def test_staging_timeout_is_janus_and_timeout_error():
    assert issubclass(StagingTimeout, TimeoutError)
    assert issubclass(StagingTimeout, JanusError)


def test_actor_buffer_fifo_order():
    buf = ActorBuffer(max_pieces=16)
    for i in range(10):
        buf.put(f"piece{i}", size=i + 1, timeout=1)
    assert len(buf) == 10
    assert buf.transitions == sum(range(1, 11))
    out = buf.take(3, None, block=False)
    assert out == ["piece0", "piece1", "piece2"]
    assert buf.transitions == sum(range(4, 11))
    out = buf.take(7, None, timeout=1)
    assert out == [f"piece{i}" for i in range(3, 10)]
    assert len(buf) == 0 and buf.transitions == 0


def test_actor_buffer_put_blocks_when_full_until_take():
    buf = ActorBuffer(max_pieces=2)
    assert buf.put("a", timeout=1) == 0.0
    assert buf.put("b", timeout=1) == 0.0
    w = start(lambda: buf.put("c", timeout=10), "blocked-put")
    # The third put must not complete while the queue is full.
    assert not w.done.wait(0.3), "put on a full ActorBuffer returned without blocking"
    assert len(buf) == 2
    assert buf.take(1, None, block=False) == ["a"]
    assert w.done.wait(JOIN_S), "put did not complete after a take freed space"
    w.finish()
    assert w.error is None
    assert w.result >= 0.1  # it reports the seconds it was blocked
    assert buf.take(2, None, block=False) == ["b", "c"]


def test_actor_buffer_put_timeout_raises_staging_timeout():
    buf = ActorBuffer(max_pieces=1)
    buf.put("a", timeout=1)
    t0 = time.perf_counter()
    with pytest.raises(StagingTimeout) as info:
        buf.put("b", timeout=0.2)
    elapsed = time.perf_counter() - t0
    assert 0.15 <= elapsed < 3.0
    assert isinstance(info.value, TimeoutError)
    assert "ActorBuffer" in str(info.value)
    # The timed-out piece was not staged.
    assert len(buf) == 1
    assert buf.take(5, None, block=False) == []
    assert buf.take(1, None, block=False) == ["a"]


def test_actor_buffer_take_threshold_by_pieces():
    buf = ActorBuffer(max_pieces=8)
    buf.put("p0", size=100, timeout=1)
    buf.put("p1", size=100, timeout=1)
    # Plenty of transitions, but pieces=3 is the threshold.
    assert buf.take(3, None, block=False) == []
    assert len(buf) == 2
    buf.put("p2", size=1, timeout=1)
    assert buf.take(3, None, block=False) == ["p0", "p1", "p2"]


def test_actor_buffer_take_threshold_by_transitions():
    buf = ActorBuffer(max_pieces=8)
    buf.put("p0", size=3, timeout=1)
    buf.put("p1", size=3, timeout=1)
    assert buf.take(None, 8, block=False) == []  # 6 < 8
    assert buf.transitions == 6
    buf.put("p2", size=3, timeout=1)
    buf.put("p3", size=3, timeout=1)
    # 12 >= 8: pops pieces until at least 8 transitions are taken, leaving the rest staged.
    assert buf.take(None, 8, block=False) == ["p0", "p1", "p2"]
    assert buf.transitions == 3 and len(buf) == 1


def test_actor_buffer_blocking_take_waits_for_threshold():
    buf = ActorBuffer(max_pieces=8)
    w = start(lambda: buf.take(2, None, timeout=10), "blocked-take")
    buf.put("x", timeout=1)
    assert not w.done.wait(0.3), "take returned below its threshold"
    buf.put("y", timeout=1)
    assert w.done.wait(JOIN_S)
    w.finish()
    assert w.error is None and w.result == ["x", "y"]


def test_actor_buffer_min_transitions_admits_pieces_beyond_the_piece_bound():
    # A collector waiting for 10 transitions must be able to get them even with a 1-piece bound.
    buf = ActorBuffer(max_pieces=1, min_transitions=10)
    for i in range(3):
        assert buf.put(f"p{i}", size=4, timeout=1) == 0.0  # 0, 4, 8 staged < 10: never blocks
    assert buf.transitions == 12
    with pytest.raises(StagingTimeout):  # 12 >= 10 and 3 >= 1 pieces: now it is full
        buf.put("p3", size=4, timeout=0.2)
    assert buf.take(None, 10, block=False) == ["p0", "p1", "p2"]
    buf.put("p3", size=4, timeout=1)


def test_actor_buffer_take_timeout():
    buf = ActorBuffer(max_pieces=4)
    buf.put("x", timeout=1)
    with pytest.raises(StagingTimeout):
        buf.take(2, None, timeout=0.2)
    assert len(buf) == 1  # nothing was removed


def test_actor_buffer_nonblocking_take_below_threshold_returns_empty():
    buf = ActorBuffer(max_pieces=4)
    assert buf.take(1, None, block=False) == []
    buf.put("x", size=2, timeout=1)
    assert buf.take(2, None, block=False) == []
    assert buf.take(None, 3, block=False) == []
    assert len(buf) == 1 and buf.transitions == 2


def test_actor_buffer_close_drains_then_raises_closed():
    buf = ActorBuffer(max_pieces=8)
    for p in ("a", "b", "c"):
        buf.put(p, timeout=1)
    buf.close()
    assert buf.closed
    with pytest.raises(PipelineClosedError):
        buf.put("d", timeout=1)
    # Below the threshold, a closed buffer still hands out what is staged (nothing is lost).
    assert buf.take(10, None, timeout=1) == ["a", "b", "c"]
    with pytest.raises(PipelineClosedError):
        buf.take(10, None, timeout=1)
    with pytest.raises(PipelineClosedError):
        buf.take(1, None, timeout=1)


def test_actor_buffer_close_wakes_blocked_take_with_remaining_pieces():
    buf = ActorBuffer(max_pieces=8)
    buf.put("a", timeout=1)
    w = start(lambda: buf.take(4, None, timeout=10), "blocked-take")
    assert not w.done.wait(0.2)
    buf.close()
    assert w.done.wait(JOIN_S)
    w.finish()
    assert w.error is None and w.result == ["a"]


def test_actor_buffer_close_wakes_blocked_take_on_empty():
    buf = ActorBuffer(max_pieces=8)
    w = start(lambda: buf.take(1, None, timeout=10), "blocked-take")
    assert not w.done.wait(0.2)
    buf.close()
    assert w.done.wait(JOIN_S)
    w.finish()
    assert isinstance(w.error, PipelineClosedError)


def test_actor_buffer_close_with_error_wakes_blocked_put_and_take():
    buf = ActorBuffer(max_pieces=1)
    buf.put("a", timeout=1)
    putter = start(lambda: buf.put("b", timeout=10), "blocked-put")
    empty = ActorBuffer(max_pieces=1)
    taker = start(lambda: empty.take(1, None, timeout=10), "blocked-take")
    assert not putter.done.wait(0.2) and not taker.done.wait(0.01)

    err = ValueError("collector exploded")
    buf.close(err)
    empty.close(err)
    for w in (putter, taker):
        assert w.done.wait(JOIN_S)
        w.finish()
        assert w.error is err
    # Later calls raise the error too, even though a piece is still staged.
    with pytest.raises(ValueError, match="collector exploded"):
        buf.take(1, None, block=False)
    with pytest.raises(ValueError, match="collector exploded"):
        buf.put("c", timeout=1)


def test_actor_buffer_close_error_is_sticky_over_plain_close():
    buf = ActorBuffer(max_pieces=2)
    err = RuntimeError("first")
    buf.close(err)
    buf.close()
    buf.close(RuntimeError("second"))
    with pytest.raises(RuntimeError, match="first"):
        buf.put("x", timeout=1)


# ---------------------------------------------------------------------------------------------
# LearnerBuffer
# ---------------------------------------------------------------------------------------------


def test_learner_buffer_get_returns_batches_in_order():
    buf = LearnerBuffer(max_bundles=4)
    buf.put(["b0", "b1", "b2"], timeout=1)
    buf.put(["b3"], timeout=1)
    assert buf.ready() == 4
    got = [buf.get(timeout=1)[0] for _ in range(4)]
    assert got == ["b0", "b1", "b2", "b3"]
    assert buf.ready() == 0


def test_learner_buffer_bundles_bound_backpressure():
    buf = LearnerBuffer(max_bundles=1)
    buf.put(["a0", "a1"], timeout=1)
    w = start(lambda: buf.put(["b0"], timeout=10), "blocked-put")
    assert not w.done.wait(0.3), "put on a full LearnerBuffer returned without blocking"
    # Getting the first batch pulls the whole bundle out of the queue, making room.
    assert buf.get(timeout=1)[0] == "a0"
    assert w.done.wait(JOIN_S)
    w.finish()
    assert w.error is None
    assert [buf.get(timeout=1)[0] for _ in range(2)] == ["a1", "b0"]


def test_learner_buffer_get_blocks_until_bundle_arrives():
    buf = LearnerBuffer(max_bundles=2)
    w = start(lambda: buf.get(timeout=10), "blocked-get")
    assert not w.done.wait(0.3), "get on an empty LearnerBuffer returned"
    buf.put(["x", "y"], timeout=1)
    assert w.done.wait(JOIN_S)
    w.finish()
    assert w.error is None
    batch, waited = w.result
    assert batch == "x"
    assert waited >= 0.1
    assert buf.get(timeout=1) == ("y", 0.0)


def test_learner_buffer_get_timeout():
    buf = LearnerBuffer(max_bundles=2)
    t0 = time.perf_counter()
    with pytest.raises(StagingTimeout):
        buf.get(timeout=0.2)
    assert 0.15 <= time.perf_counter() - t0 < 3.0


def test_learner_buffer_close_with_error_wakes_blocked_get():
    buf = LearnerBuffer(max_bundles=2)
    w = start(lambda: buf.get(timeout=10), "blocked-get")
    assert not w.done.wait(0.2)
    err = KeyError("selection failed")
    buf.close(err)
    assert w.done.wait(JOIN_S)
    w.finish()
    assert w.error is err
    with pytest.raises(KeyError):
        buf.get(timeout=1)
    with pytest.raises(KeyError):
        buf.put(["z"], timeout=1)


def test_learner_buffer_plain_close_wakes_blocked_get():
    buf = LearnerBuffer(max_bundles=2)
    w = start(lambda: buf.get(timeout=10), "blocked-get")
    assert not w.done.wait(0.2)
    buf.close()
    assert w.done.wait(JOIN_S)
    w.finish()
    assert isinstance(w.error, PipelineClosedError)


def test_learner_buffer_error_wins_over_staged_batches():
    buf = LearnerBuffer(max_bundles=2)
    buf.put(["a", "b"], timeout=1)
    assert buf.get(timeout=1)[0] == "a"
    buf.close(RuntimeError("boom"))
    with pytest.raises(RuntimeError, match="boom"):
        buf.get(timeout=1)
