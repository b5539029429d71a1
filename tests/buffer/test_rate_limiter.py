"""The replay's rate limiter: the ratio mode, the queue mode, and the JanusBuffer waiting on them.

Threads are real; every blocking call has a deadline or a timeout, and every thread is joined and
asserted dead. Nothing here asserts on time.
"""

from __future__ import annotations

import random
import threading
import time

import pytest
import torch
from hypothesis import given, settings, strategies as st

from janus import JanusBuffer, JanusConfig
from janus.buffer.pacing.queue_limiter import QueueLimiter
from janus.buffer.pacing.rate_limiter import SampleGrant
from janus.buffer.pacing.ratio_limiter import RatioLimiter
from janus.errors import BufferInputError, ConfigError, PipelineClosedError, StagingTimeout

pytestmark = pytest.mark.timeout(60)
JOIN_S = 10.0


def soon(seconds: float = 0.05) -> float:
    return time.perf_counter() + seconds


def run_threads(*fns) -> list[BaseException]:
    """Run ``fns`` in threads, join them; return the errors they raised."""
    errors: list[BaseException] = []

    def guard(fn):
        try:
            fn()
        except BaseException as exc:  # noqa: BLE001 - returned to the test
            errors.append(exc)

    threads = [threading.Thread(target=guard, args=(fn,), daemon=True) for fn in fns]
    for t in threads:
        t.start()
    for t in threads:
        t.join(JOIN_S)
        assert not t.is_alive(), "a test thread hung"
    return errors


def wait_until(condition, what: str) -> None:
    deadline = time.monotonic() + JOIN_S
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.005)


def insert(lim, n: int, version: int | None = None) -> None:
    lim.await_insert(n, soon(JOIN_S), version)
    lim.commit_insert(n)


# ---- ratio mode --------------------------------------------------------------------------------
def test_ratio_holds_within_the_error_buffer_under_real_threads() -> None:
    spi, min_size, eb, piece, batch = 4.0, 64, 96.0, 16, 8
    lim = RatioLimiter(min_size, batch, spi, eb, max_insert=piece)
    snapshots: list[tuple[int, int]] = []
    rng = random.Random(0)

    def producer() -> None:
        for _ in range(40):
            insert(lim, piece)
            state = lim.state_dict()
            snapshots.append((state["inserted"], state["sampled"]))
            time.sleep(rng.random() * 0.002)

    def consumer() -> None:
        while lim.sampled < spi * (40 * piece * 2 - min_size) - eb:  # what the two producers allow
            grant = lim.await_sample(3, soon(JOIN_S))
            assert 1 <= grant.count <= 3
            state = lim.state_dict()
            snapshots.append((state["inserted"], state["sampled"]))
            time.sleep(rng.random() * 0.002)

    assert run_threads(producer, producer, consumer) == []
    assert lim.inserted == 80 * piece
    for inserted, sampled in snapshots:
        diff = spi * (inserted - min_size) - sampled
        assert diff <= eb, (inserted, sampled)
        if sampled:
            assert diff >= -eb, (inserted, sampled)
            assert inserted >= min_size


def test_sampling_waits_for_min_size() -> None:
    lim = RatioLimiter(min_size_to_sample=10, sample_batch=4)
    insert(lim, 9)
    assert not lim.can_sample()
    with pytest.raises(StagingTimeout, match="min_size_to_sample=10"):
        lim.await_sample(1, soon())
    assert lim.sampled == 0, "a timed-out wait counts nothing"
    insert(lim, 1)
    assert lim.await_sample(5, soon()).count == 5, "no ratio: every batch asked for"
    assert lim.sampled == 20


def test_admitted_but_unwritten_transitions_are_not_sampled() -> None:
    lim = RatioLimiter(min_size_to_sample=4, sample_batch=4)
    lim.await_insert(4)
    assert not lim.can_sample(), "admitted, not written yet"
    lim.commit_insert(4)
    assert lim.can_sample()


def test_finish_inserts_lets_the_last_batches_through() -> None:
    lim = RatioLimiter(min_size_to_sample=8, sample_batch=4, samples_per_insert=1.0, error_buffer=8.0)
    insert(lim, 8)
    assert lim.await_sample(9, soon()).count == 2  # diff 0 + error_buffer 8: two batches of 4
    assert not lim.can_sample()
    with pytest.raises(StagingTimeout, match="ratio"):
        lim.await_sample(1, soon())
    waiter = threading.Thread(target=lambda: lim.await_sample(1, soon(JOIN_S)), daemon=True)
    waiter.start()
    wait_until(lambda: lim.sample_waiters == 1, "the sampler never waited")
    lim.finish_inserts()
    waiter.join(JOIN_S)
    assert not waiter.is_alive(), "finish_inserts did not wake the waiting sampler"
    assert lim.await_sample(4, soon()).count == 4


def test_close_wakes_every_waiter() -> None:
    lim = RatioLimiter(min_size_to_sample=4, sample_batch=4, samples_per_insert=1.0, error_buffer=4.0)
    insert(lim, 4)
    insert(lim, 4)  # diff = 4 = error_buffer: inserts wait for a sample
    lim2 = RatioLimiter(min_size_to_sample=100, sample_batch=4)  # samples wait for data
    started = threading.Barrier(3, timeout=JOIN_S)

    def wait_insert() -> None:
        started.wait()
        lim.await_insert(4)

    def wait_sample() -> None:
        started.wait()
        lim2.await_sample(1)

    def closer() -> None:
        started.wait()
        wait_until(lambda: lim.insert_waiters == 1 and lim2.sample_waiters == 1, "the waiters never waited")
        lim.close()
        lim2.close()

    errors = run_threads(wait_insert, wait_sample, closer)
    assert len(errors) == 2 and all(isinstance(e, PipelineClosedError) for e in errors), errors
    assert lim.closed and lim2.closed


@pytest.mark.parametrize("spi,error_buffer,least", [(4.0, 63.0, "64 = max"), (0.25, 7.0, "8 = max")])
def test_deadlocking_settings_are_refused_when_built(spi: float, error_buffer: float, least: str) -> None:
    """At least one largest insert's worth (4 x 16 = 64) and one batch (8)."""
    with pytest.raises(ConfigError, match=f"error_buffer.*at least {least}.*deadlock"):
        RatioLimiter(16, 8, samples_per_insert=spi, error_buffer=error_buffer, max_insert=16)
    with pytest.raises(ConfigError, match="error_buffer.*None"):
        RatioLimiter(16, 8, samples_per_insert=4.0)


def test_an_insert_that_could_never_be_admitted_is_refused_at_that_insert() -> None:
    lim = RatioLimiter(16, 8, samples_per_insert=4.0, error_buffer=64.0)  # largest insert unknown
    insert(lim, 16)
    with pytest.raises(ConfigError, match="insert of 17 transitions.*error_buffer=64.*at most 16"):
        lim.await_insert(17, soon())
    assert not lim.can_insert(17)


def test_restore_continues_the_ratio() -> None:
    lim = RatioLimiter(min_size_to_sample=8, sample_batch=4, samples_per_insert=1.0, error_buffer=8.0)
    insert(lim, 8)
    insert(lim, 8)
    lim.await_sample(2, soon())
    resumed = RatioLimiter(min_size_to_sample=8, sample_batch=4, samples_per_insert=1.0, error_buffer=8.0)
    resumed.load_state_dict(lim.state_dict())
    assert (resumed.inserted, resumed.sampled) == (16, 8)
    # diff = 1 x (16 - 8) - 8 = 0: two more batches, not the four a fresh count would allow
    assert resumed.await_sample(9, soon()).count == 2
    assert not resumed.can_sample() and resumed.can_insert(8)
    with pytest.raises(ConfigError, match="inserted"):
        resumed.restore(-1, 0)


@settings(max_examples=100, deadline=None)
@given(spi=st.floats(0.05, 50.0), piece=st.integers(1, 64), batch=st.integers(1, 64), min_size=st.integers(1, 500),
       slack=st.floats(1.0, 3.0), steps=st.lists(st.booleans(), min_size=20, max_size=200))
def test_accepted_settings_never_deadlock(spi, piece, batch, min_size, slack, steps) -> None:
    lim = RatioLimiter(min_size, batch, spi, slack * max(spi * piece, batch), max_insert=piece)
    for prefer_insert in steps:
        can_insert, can_sample = lim.can_insert(piece), lim.can_sample()
        assert can_insert or can_sample, f"deadlock at {lim.state_dict()}"
        if can_insert and (prefer_insert or not can_sample):
            insert(lim, piece)
        else:
            lim.await_sample(1, soon())


# ---- queue mode --------------------------------------------------------------------------------
def test_queue_serves_each_item_serve_times_in_fifo_order_under_real_threads() -> None:
    q = QueueLimiter(item_size=8, batches_per_item=2, serve_times=3, capacity=2)
    items, grants = 6, []
    rng = random.Random(1)

    def producer() -> None:
        for _ in range(items * 2):  # pieces of 4: two per item
            insert(q, 4)
            time.sleep(rng.random() * 0.002)

    def consumer() -> None:
        while len(grants) < items * 3 * 2:
            grant = q.await_sample(1, soon(JOIN_S))
            grants.append(grant)
            q.sample_done(grant)
            time.sleep(rng.random() * 0.002)

    assert run_threads(producer, consumer) == []
    expected = [SampleGrant(1, i, s, b) for i in range(items) for s in range(3) for b in range(2)]
    assert grants == expected
    assert q.sampled == items * 8 * 3 and q.head == items


def test_queue_capacity_holds_inserts_until_the_head_is_served_and_read() -> None:
    q = QueueLimiter(item_size=4, batches_per_item=2, serve_times=1, capacity=1)
    insert(q, 4)
    assert not q.can_insert(2)
    first = q.await_sample(2, soon())
    assert first == SampleGrant(2, 0, 0, 0)
    assert not q.can_insert(2), "released before its batches were read"
    q.sample_done(first)
    assert q.can_insert(2)


def test_queue_first_serve_reads_batches_as_their_slots_are_written() -> None:
    q = QueueLimiter(item_size=8, batches_per_item=4, serve_times=2)
    insert(q, 2)
    assert q.await_sample(1, soon()) == SampleGrant(1, 0, 0, 0)
    with pytest.raises(StagingTimeout, match="2 of 8 transitions written"):
        q.await_sample(1, soon())


def test_queue_refuses_an_insert_that_overshoots_its_item() -> None:
    q = QueueLimiter(item_size=8, batches_per_item=2)
    insert(q, 6)
    with pytest.raises(BufferInputError, match="overshoot.*6 of 8.*4 more"):
        q.await_insert(4, soon())


def test_stale_items_are_dropped_and_counted_never_served() -> None:
    q = QueueLimiter(item_size=4, capacity=5, max_staleness=1)
    for version in (0, 1, 2, None, 3):
        insert(q, 4, version)
    q.set_learner_version(3)
    served = []
    for _ in range(3):
        grant = q.await_sample(1, soon())
        served.append(grant.item)
        q.sample_done(grant)
    assert served == [2, 3, 4], "items 0 and 1 lag 3 and 2 versions: dropped; no version: never stale"
    assert q.dropped_items == 2 and q.dropped_transitions == 8
    assert q.state_dict()["dropped_items"] == 2


def test_queue_restore_starts_at_an_item_boundary() -> None:
    q = QueueLimiter(item_size=8, batches_per_item=2, serve_times=2)
    q.restore(16, 64)
    assert q.head == 2 and q.can_insert(8)
    with pytest.raises(ConfigError, match="item boundary"):
        q.restore(12, 0)


@pytest.mark.parametrize("kw,name", [({"item_size": 6, "batches_per_item": 4}, "item_size"),
                                     ({"item_size": 8, "serve_times": 0}, "serve_times"),
                                     ({"item_size": 8, "max_staleness": -1}, "max_staleness")])
def test_queue_settings_are_checked_naming_them(kw, name) -> None:
    with pytest.raises(ConfigError, match=name):
        QueueLimiter(**kw)


# ---- inside the JanusBuffer --------------------------------------------------------------------
def piece(first: int, steps: int = 2, envs: int = 2) -> dict[str, torch.Tensor]:
    ids = torch.arange(first, first + steps * envs).reshape(steps, envs)
    return {"id": ids, "obs": ids.to(torch.float32)[..., None]}


def replay(oc: int = 0, os_: int = 0, **kw) -> JanusBuffer:
    cfg = JanusConfig(overlap_collect=oc, overlap_select=os_, batch_size=4, buffer_capacity=1000, actor_buffer_size=2,
                      prefetch=1, placement="cpu_pageable", learner_device="cpu")
    return JanusBuffer(cfg, seed=0, **kw)


@pytest.mark.parametrize("oc,os_", [(0, 0), (0, 1), (1, 0), (1, 1)])
def test_janus_buffer_holds_the_ratio_with_real_actors_and_learner(oc, os_) -> None:
    spi, eb = 2.0, 16.0
    with replay(oc, os_, min_size=8, samples_per_insert=spi, error_buffer=eb) as jb:
        rng = random.Random(oc * 2 + os_)
        rounds = 10  # 80 transitions: the learner's 36 batches make room for every one

        def actor(a: int) -> None:
            for i in range(rounds):
                jb.put(piece((a * rounds + i) * 4), timeout=JOIN_S)
                time.sleep(rng.random() * 0.002)

        def learner() -> None:
            for _ in range(36):
                jb.get(timeout=JOIN_S)
                state = jb.rate_limiter.state_dict()
                diff = spi * (state["inserted"] - 8) - state["sampled"]
                assert -eb <= diff <= eb, state

        assert run_threads(lambda: actor(0), lambda: actor(1), learner) == []
        assert jb.stats.batches_delivered == 36
        selected = jb.stats.batches_selected  # prefetched batches count as sampled when selected
        assert jb.rate_limiter.sampled == selected * 4


def test_inline_mode_never_blocks_with_timeout_zero() -> None:
    """One thread drives everything (a deterministic scheduler): put(timeout=0) and get(timeout=0)
    return or raise at once, never wait for a thread that does not exist."""
    with replay(0, 0, min_size=8, samples_per_insert=1.0, error_buffer=8.0) as jb:
        put = 0
        with pytest.raises(StagingTimeout, match="ActorBuffer.*put"):
            while True:  # the ratio admits 16 transitions, then 2 pieces stay staged: the third put is refused
                jb.put(piece(put * 4), timeout=0)
                put += 1
        assert put == 6 and jb.rate_limiter.inserted == 16 and len(jb.actor_buffer) == 2
        got = 0
        with pytest.raises(StagingTimeout, match="ratio holds sampling back.*finish_inserts"):
            while True:
                jb.get(timeout=0)  # each get writes the staged pieces its sample made room for
                got += 1
        assert len(jb.actor_buffer) == 0 and jb.rate_limiter.inserted == 24
        assert got == 6, "diff may drift to -error_buffer: (24 - 8) + 8 sampled transitions = 6 batches"
        jb.finish_inserts()
        jb.get(timeout=0)
        with pytest.raises(PipelineClosedError, match="finish_inserts"):
            jb.put(piece(0), timeout=0)


def test_janus_buffer_refuses_a_piece_the_ratio_could_never_admit_and_goes_on() -> None:
    with replay(1, 1, min_size=4, samples_per_insert=4.0, error_buffer=16.0) as jb:
        with pytest.raises(ConfigError, match="insert of 8 transitions.*at most 4"):
            jb.put(piece(0, steps=4), timeout=1)
        jb.put(piece(0, steps=1), timeout=1)
        jb.put(piece(2, steps=1), timeout=1)
        assert jb.get(timeout=JOIN_S)["id"].shape == (4,)
        assert jb.failure is None


def test_flush_does_not_hang_when_the_ratio_holds_pieces_back() -> None:
    with replay(1, 0, min_size=4, samples_per_insert=1.0, error_buffer=4.0) as jb:
        for i in range(3):
            jb.put(piece(4 * i), timeout=JOIN_S)
        jb.flush()  # the third piece waits for a sample: flush returns, it stays staged
        assert jb.rate_limiter.inserted == 8 and len(jb.actor_buffer) == 1
        wait_until(lambda: jb.rate_limiter.insert_waiters == 1, "the collector never waited on the ratio")
        jb.get(timeout=JOIN_S)
        wait_until(lambda: jb.rate_limiter.inserted == 12, "the sample made room: the collector writes the piece")
        assert jb.stats.insert_wait_s > 0 and len(jb.actor_buffer) == 0


def test_on_policy_stale_rollouts_are_dropped_and_counted() -> None:
    cfg = JanusConfig(is_on_policy=True, overlap_collect=0, overlap_select=0, g_collect=1, g_select=1,
                      num_minibatches=2, actor_buffer_size=2, placement="cpu_pageable", learner_device="cpu")
    with JanusBuffer(cfg, rollout_size=4, num_epochs=1, seed=0, max_staleness=0) as jb:
        jb.put(piece(0), version=0)
        jb.set_learner_version(1)  # the learner moved on before it read the rollout
        jb.put(piece(4), version=1)
        ids = sorted(i for _ in range(2) for i in jb.get(timeout=0)["id"].tolist())
        assert ids == [4, 5, 6, 7], "the stale rollout was served"
        assert jb.stats.items_dropped_stale == 1
    with pytest.raises(ConfigError, match="max_staleness"):
        replay(max_staleness=1)


@pytest.mark.parametrize("os_", [0, 1])
def test_a_checkpoint_loaded_into_the_storage_counts_for_min_size(os_) -> None:
    """The runtime loads a checkpoint straight into ``experience`` after the selector started
    waiting: the waiting sample must see it (a resumed run hung here, no insert to come)."""
    with replay(0, 0) as source:
        for i in range(3):
            source.put(piece(4 * i))
        state = source.experience.state_dict()
    with replay(1, os_, min_size=12) as jb:
        learner = threading.Thread(target=lambda: batches.append(jb.get(timeout=JOIN_S)), daemon=True)
        batches: list[dict[str, torch.Tensor]] = []
        learner.start()
        wait_until(lambda: jb.rate_limiter.sample_waiters == 1, "the sampler never waited")
        jb.experience.load_state_dict(state)
        learner.join(JOIN_S)
        assert not learner.is_alive() and len(batches) == 1
        assert set(batches[0]["id"].tolist()) <= set(range(12))
