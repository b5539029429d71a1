"""JanusBuffer: Dual-End Staging end to end, for every overlap_collect x overlap_select setting.

Each transition carries a unique integer ``id`` (and an ``obs`` derived from it), so the tests can
check exactly which transitions were written, sampled and consumed. Every blocking call has a
timeout, races are gated with ``threading.Event``, and every thread (the test's and the buffer's)
is joined and asserted dead at the end.
"""

from __future__ import annotations

import collections
import threading
import time
import traceback
from fractions import Fraction

import numpy as np
import pytest
import torch

from janus import ExperienceBuffer, JanusBuffer, JanusConfig
from janus.errors import BufferInputError, ConfigError, PipelineClosedError, StagingTimeout

pytestmark = pytest.mark.timeout(60)

T, E = 4, 2  # steps x envs per put piece (off-policy)
JOIN_S = 10.0
GET_S = 10.0

OVERLAPS = [(0, 0), (0, 1), (1, 0), (1, 1)]
OVERLAP_IDS = [f"oc{c}-os{s}" for c, s in OVERLAPS]


# ---------------------------------------------------------------------------------------------
# helpers
# ---------------------------------------------------------------------------------------------


class Worker(threading.Thread):
    """Runs ``fn``; records its result or exception; ``done`` is set when it returns."""

    def __init__(self, fn, name: str) -> None:
        super().__init__(name=name, daemon=True)
        self.fn = fn
        self.result = None
        self.error: BaseException | None = None
        self.done = threading.Event()

    def run(self) -> None:
        try:
            self.result = self.fn()
        except BaseException as exc:  # noqa: BLE001 - inspected by the test
            self.error = exc
        finally:
            self.done.set()

    def finish(self, check: bool = True) -> None:
        self.join(JOIN_S)
        assert not self.is_alive(), f"test thread {self.name} still alive"
        if check and self.error is not None:
            raise self.error


def start(fn, name: str = "worker") -> Worker:
    w = Worker(fn, name)
    w.start()
    return w


def piece(ids, steps: int, envs: int) -> dict[str, torch.Tensor]:
    """A rollout piece ``[steps, envs, ...]`` whose transitions are ``ids``."""
    ids = torch.as_tensor(ids, dtype=torch.long).reshape(steps, envs)
    obs = ids.to(torch.float32)[..., None] + torch.tensor([0.0, 0.5])
    return {"id": ids, "obs": obs}


def check_batch(b: dict[str, torch.Tensor]) -> None:
    """Rows are internally consistent: never poisoned storage, obs derived from id."""
    assert not torch.isnan(b["obs"]).any(), "sampled unwritten (NaN-poisoned) storage"
    assert (b["id"] >= 0).all(), "sampled unwritten (-1-poisoned) storage"
    expected = b["id"].to(torch.float32)[:, None] + torch.tensor([0.0, 0.5])
    assert torch.equal(b["obs"], expected)


def assert_closed_cleanly(jb: JanusBuffer) -> None:
    for t in jb.threads:
        t.join(JOIN_S)
    alive = [t.name for t in jb.threads if t.is_alive()]
    assert not alive, f"JanusBuffer threads still alive: {alive}"
    assert len(jb.threads) == jb.config.overlap_collect + jb.config.overlap_select


def close_quickly(jb: JanusBuffer, limit_s: float = 5.0) -> None:
    """close() must return (not hang) and leave no thread behind."""
    w = start(jb.close, "closer")
    assert w.done.wait(limit_s + JOIN_S), "JanusBuffer.close() hung"
    w.finish()
    assert_closed_cleanly(jb)


def off_policy(oc: int, os_: int, **kw) -> JanusConfig:
    base = dict(
        is_on_policy=False, overlap_collect=oc, overlap_select=os_, batch_size=8,
        buffer_capacity=10_000, actor_buffer_size=4, prefetch=2, placement="cpu_pageable",
        learner_device="cpu",
    )
    base.update(kw)
    return JanusConfig(**base)


def on_policy(oc: int, os_: int, g_collect, g_select, **kw) -> JanusConfig:
    base = dict(
        is_on_policy=True, overlap_collect=oc, overlap_select=os_, g_collect=g_collect,
        g_select=g_select, num_minibatches=4, actor_buffer_size=4, prefetch=2,
        placement="cpu_pageable", learner_device="cpu",
    )
    base.update(kw)
    return JanusConfig(**base)


@pytest.fixture
def cleanup():
    """Closes every buffer a test registers, even when the test fails, so no thread leaks."""
    buffers: list[JanusBuffer] = []
    yield buffers.append
    for jb in buffers:
        try:
            jb.close()
        except Exception:  # noqa: BLE001 - the test already reported the real failure
            pass


# ---------------------------------------------------------------------------------------------
# off-policy
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("oc,os_", OVERLAPS, ids=OVERLAP_IDS)
def test_off_policy_conservation(oc, os_, cleanup):
    jb = JanusBuffer(off_policy(oc, os_), seed=0)
    cleanup(jb)
    actors, pieces_each, batches = 3, 10, 25
    per_piece = T * E

    def actor(a: int) -> None:
        for p in range(pieces_each):
            first = (a * pieces_each + p) * per_piece
            jb.put(piece(range(first, first + per_piece), T, E), timeout=GET_S)

    workers = [start(lambda a=a: actor(a), f"actor{a}") for a in range(actors)]
    got = [jb.get(timeout=GET_S) for _ in range(batches)]
    for w in workers:
        w.finish()
    jb.close()
    assert_closed_cleanly(jb)

    total = actors * pieces_each * per_piece
    written = set(range(total))
    assert jb.stats.pieces_put == actors * pieces_each
    assert jb.stats.transitions_put == total
    assert jb.stats.transitions_collected == total, "a staged transition was never collected"
    assert jb.stats.pieces_dropped_on_close == 0
    assert jb.experience.total_written == total
    stored = torch.cat([m["id"] for m in jb.experience.epoch(1000, shuffle=False)])
    assert sorted(stored.tolist()) == sorted(written)
    assert jb.stats.batches_delivered == batches
    key_to_id: dict[int, int] = {}
    for b in got:
        assert b["id"].shape == (8,) and b["obs"].shape == (8, 2)
        check_batch(b)
        assert set(b["id"].tolist()) <= written, "sampled an id that was never written"
        for key, id_ in zip(b["index"].tolist(), b["id"].tolist()):
            assert key_to_id.setdefault(key, id_) == id_, "one key, two different transitions"
    assert len(set(key_to_id.values())) == len(key_to_id)  # distinct keys, distinct transitions


@pytest.mark.parametrize("g", [1, 2, 4])
@pytest.mark.parametrize("oc,os_", OVERLAPS, ids=OVERLAP_IDS)
def test_off_policy_granularity(oc, os_, g, cleanup):
    jb = JanusBuffer(off_policy(oc, os_, g_collect=g, g_select=g, actor_buffer_size=2), seed=1)
    cleanup(jb)
    extend_sizes, sample_sizes = [], []
    exp = jb.experience
    real_extend, real_sample = exp.extend, exp.sample
    exp.extend = lambda data: (extend_sizes.append(next(iter(data.values())).shape[0]), real_extend(data))[1]
    exp.sample = lambda n, **kw: (sample_sizes.append(n), real_sample(n, **kw))[1]

    actors, pieces_each, batches = 2, 8, 12  # 16 pieces and 12 batches: multiples of g
    per_piece = T * E

    def actor(a: int) -> None:
        for p in range(pieces_each):
            first = (a * pieces_each + p) * per_piece
            jb.put(piece(range(first, first + per_piece), T, E), timeout=GET_S)

    workers = [start(lambda a=a: actor(a), f"actor{a}") for a in range(actors)]
    got = [jb.get(timeout=GET_S) for _ in range(batches)]
    for w in workers:
        w.finish()
    jb.close()
    assert_closed_cleanly(jb)
    s = jb.stats

    pieces = actors * pieces_each
    assert s.collect_calls == pieces // g
    assert s.transitions_collected == pieces * per_piece
    assert extend_sizes == [g * per_piece] * (pieces // g), "each collection writes g pieces in one extend"

    assert s.select_calls * g == s.batches_selected
    assert sample_sizes == [g * 8] * s.select_calls, "each selection gathers g batches in one sample"
    assert s.batches_delivered == batches
    if os_ == 0:
        assert s.select_calls == batches // g and s.batches_selected == batches
    else:  # the background selector prefetches (bounded by prefetch bundles)
        assert batches <= s.batches_selected <= batches + (jb.config.prefetch + 2) * g
    for b in got:
        assert b["id"].shape == (8,)
        check_batch(b)


@pytest.mark.parametrize("oc,os_", OVERLAPS, ids=OVERLAP_IDS)
def test_off_policy_close_writes_pieces_below_granularity(oc, os_, cleanup):
    jb = JanusBuffer(off_policy(oc, os_, g_collect=4), seed=0)
    cleanup(jb)
    per_piece = T * E
    for p in range(3):  # below g_collect=4: nothing is collected yet
        jb.put(piece(range(p * per_piece, (p + 1) * per_piece), T, E), timeout=GET_S)
    time.sleep(0.1)  # give a background collector the chance to (wrongly) collect early
    assert jb.stats.transitions_collected == 0 and len(jb.experience) == 0
    assert jb.stats.collect_calls == 0
    jb.close()
    assert_closed_cleanly(jb)
    assert jb.stats.transitions_collected == 3 * per_piece, "staged pieces were lost on close"
    assert jb.stats.collect_calls == 1
    assert jb.stats.pieces_dropped_on_close == 0
    stored = torch.cat([m["id"] for m in jb.experience.epoch(100, shuffle=False)])
    assert sorted(stored.tolist()) == list(range(3 * per_piece))


def test_off_policy_flush_writes_below_granularity(cleanup):
    jb = JanusBuffer(off_policy(0, 0, g_collect=4), seed=0)
    cleanup(jb)
    jb.put(piece(range(8), T, E), timeout=GET_S)
    assert len(jb.experience) == 0
    jb.flush()
    assert len(jb.experience) == 8 and jb.stats.collect_calls == 1
    b = jb.get(timeout=GET_S)
    check_batch(b)
    jb.close()
    assert_closed_cleanly(jb)


@pytest.mark.parametrize("oc,os_", OVERLAPS, ids=OVERLAP_IDS)
def test_off_policy_min_size_gates_first_sample(oc, os_, cleanup):
    jb = JanusBuffer(off_policy(oc, os_, batch_size=4), seed=0, min_size=3 * T * E)
    cleanup(jb)
    learner = start(lambda: jb.get(timeout=GET_S), "learner")
    for p in range(2):
        jb.put(piece(range(p * T * E, (p + 1) * T * E), T, E), timeout=GET_S)
    assert not learner.done.wait(0.3), "sampled before min_size transitions were stored"
    jb.put(piece(range(2 * T * E, 3 * T * E), T, E), timeout=GET_S)
    assert learner.done.wait(GET_S)
    learner.finish()
    check_batch(learner.result)
    close_quickly(jb)


# ---------------------------------------------------------------------------------------------
# on-policy
# ---------------------------------------------------------------------------------------------

ON_POLICY_G = [
    (Fraction(1, 4), Fraction(1, 4)),
    (Fraction(1, 2), Fraction(1, 2)),
    (1, 1),
    (Fraction(1, 4), 1),
    (1, Fraction(1, 4)),
    (Fraction(1, 2), Fraction(3, 4)),
]


@pytest.mark.parametrize("epochs", [1, 2, 3])
@pytest.mark.parametrize("gc,gs", ON_POLICY_G, ids=[f"gc{a}-gs{b}" for a, b in ON_POLICY_G])
@pytest.mark.parametrize("oc,os_", OVERLAPS, ids=OVERLAP_IDS)
def test_on_policy_every_transition_once_per_epoch(oc, os_, gc, gs, epochs, cleanup):
    actors, steps, envs, m, rollouts = 2, 8, 2, 4, 3
    n = actors * steps * envs  # transitions per rollout (all actors)
    cfg = on_policy(oc, os_, str(gc), str(gs), num_minibatches=m)
    jb = JanusBuffer(cfg, rollout_size=n, num_epochs=epochs, seed=3)
    cleanup(jb)
    piece_steps = int(steps * gc)

    def actor(a: int) -> None:
        for r in range(rollouts):
            for s0 in range(0, steps, piece_steps):
                base = ((r * actors + a) * steps + s0) * envs
                jb.put(piece(range(base, base + piece_steps * envs), piece_steps, envs), timeout=GET_S)

    workers = [start(lambda a=a: actor(a), f"actor{a}") for a in range(actors)]
    total_batches = rollouts * epochs * m
    got = [jb.get(timeout=GET_S) for _ in range(total_batches)]
    for w in workers:
        w.finish()
    assert jb.stats.batches_selected == total_batches  # selection never runs past written data
    jb.close()
    assert_closed_cleanly(jb)

    mb = n // m
    seen_rollouts = []
    for r in range(rollouts):
        chunk = got[r * epochs * m : (r + 1) * epochs * m]
        rollout_ids = None
        for e in range(epochs):
            epoch_ids = []
            for b in chunk[e * m : (e + 1) * m]:
                assert b["id"].shape == (mb,)
                check_batch(b)
                epoch_ids += b["id"].tolist()
            assert len(set(epoch_ids)) == n, f"rollout {r} epoch {e}: a transition repeated or missing"
            if rollout_ids is None:
                rollout_ids = set(epoch_ids)
            assert set(epoch_ids) == rollout_ids, f"rollout {r} epoch {e} covers a different rollout"
        seen_rollouts.append(rollout_ids)
        counts = collections.Counter(i for b in chunk for i in b["id"].tolist())
        assert set(counts.values()) == {epochs}
    all_ids = set().union(*seen_rollouts)
    assert all_ids == set(range(rollouts * n)), "every transition put is consumed"
    assert sum(len(s) for s in seen_rollouts) == rollouts * n  # rollouts are disjoint
    assert jb.stats.transitions_collected == rollouts * n
    assert jb.stats.collect_calls == rollouts * round(1 / Fraction(gc))


@pytest.mark.parametrize("gs", [Fraction(1, 4), Fraction(1, 2)])
@pytest.mark.parametrize("oc,os_", OVERLAPS, ids=OVERLAP_IDS)
def test_on_policy_update_starts_before_rollout_complete(oc, os_, gs, cleanup):
    steps, envs, m = 8, 2, 4
    n = steps * envs
    jb = JanusBuffer(on_policy(oc, os_, "1/4", str(gs), num_minibatches=m), rollout_size=n, num_epochs=1, seed=0)
    cleanup(jb)
    before_final, release, final_started = threading.Event(), threading.Event(), threading.Event()
    ps = steps // 4  # 4 pieces of 2 steps

    def actor() -> None:
        for i in range(4):
            if i == 3:
                before_final.set()
                assert release.wait(GET_S), "test never released the actor"
                final_started.set()
            jb.put(piece(range(i * ps * envs, (i + 1) * ps * envs), ps, envs), timeout=GET_S)

    w = start(actor, "actor")
    assert before_final.wait(GET_S)
    first = jb.get(timeout=GET_S)  # the learner is served while the rollout is 3/4 written
    assert not final_started.is_set(), "the first minibatch waited for the whole rollout"
    check_batch(first)
    assert first["id"].shape == (n // m,)
    assert max(first["id"].tolist()) < 3 * ps * envs, "a minibatch included unwritten transitions"
    release.set()
    rest = [jb.get(timeout=GET_S) for _ in range(m - 1)]
    w.finish()
    ids = [i for b in [first, *rest] for i in b["id"].tolist()]
    assert sorted(ids) == list(range(n))
    close_quickly(jb)


@pytest.mark.parametrize("oc,os_", OVERLAPS, ids=OVERLAP_IDS)
def test_on_policy_whole_epoch_selection_waits_for_rollout(oc, os_, cleanup):
    """With g_select = 1 nothing can be served before the rollout is complete (get times out),
    and a timed-out get consumes nothing."""
    steps, envs, m = 8, 2, 4
    n = steps * envs
    jb = JanusBuffer(on_policy(oc, os_, "1/2", 1, num_minibatches=m), rollout_size=n, num_epochs=2, seed=0)
    cleanup(jb)
    jb.put(piece(range(n // 2), steps // 2, envs), timeout=GET_S)
    t0 = time.perf_counter()
    with pytest.raises(StagingTimeout):
        jb.get(timeout=0.3)
    assert time.perf_counter() - t0 < 5.0
    jb.put(piece(range(n // 2, n), steps // 2, envs), timeout=GET_S)
    got = [jb.get(timeout=GET_S) for _ in range(2 * m)]
    for e in range(2):
        ids = sorted(i for b in got[e * m : (e + 1) * m] for i in b["id"].tolist())
        assert ids == list(range(n))
    close_quickly(jb)


@pytest.mark.parametrize("gc", [1, Fraction(1, 2)])
@pytest.mark.parametrize("oc,os_", OVERLAPS, ids=OVERLAP_IDS)
def test_on_policy_more_pieces_per_collection_than_actor_buffer_size(oc, os_, gc, cleanup):
    """One collection needs a piece from each of 6 actors, the actor queue holds 2 pieces: the
    queue must still admit enough pieces for the collector to proceed (no deadlock)."""
    actors, steps, envs, m = 6, 2, 2, 4
    n = actors * steps * envs
    cfg = on_policy(oc, os_, str(gc), 1, actor_buffer_size=2, num_minibatches=m)
    jb = JanusBuffer(cfg, rollout_size=n, num_epochs=1, seed=0)
    cleanup(jb)
    ps = int(steps * gc)

    def actor(a: int) -> None:
        for r in range(2):
            for s0 in range(0, steps, ps):
                base = ((r * actors + a) * steps + s0) * envs
                jb.put(piece(range(base, base + ps * envs), ps, envs), timeout=GET_S)

    workers = [start(lambda a=a: actor(a), f"actor{a}") for a in range(actors)]
    got = [jb.get(timeout=GET_S) for _ in range(2 * m)]
    for w in workers:
        w.finish()
    ids = sorted(i for b in got for i in b["id"].tolist())
    assert ids == list(range(2 * n))
    close_quickly(jb)


def test_on_policy_rollout_size_must_split_into_minibatches():
    with pytest.raises(ConfigError, match="rollout_size"):
        JanusBuffer(on_policy(0, 0, 1, 1, num_minibatches=4), rollout_size=18)
    with pytest.raises(ConfigError, match="rollout_size"):
        JanusBuffer(on_policy(0, 0, 1, 1, num_minibatches=4), rollout_size=None)
    for bad in (-8, 16.0, True):  # -8 % 4 == 0; 16.0 used to fail as 'invalid capacity'
        with pytest.raises(ConfigError, match="rollout_size"):
            JanusBuffer(on_policy(0, 0, 1, 1, num_minibatches=4), rollout_size=bad)


@pytest.mark.parametrize("name, bad, policy", [
    ("num_epochs", 0, "on"),  # served minibatches of the first rollout for ever, never released it
    ("num_epochs", 1.5, "on"),
    ("time_major_dims", 0, "on"),  # counted a piece as 1 transition: the rollout was never complete
    ("time_major_dims", -1, "off"),
    ("min_size", 0, "off"),  # a prefetching selector sampled the empty buffer and failed the pipeline
    ("min_size", -3, "off"),
    ("min_size", 10_001, "off"),  # more than the capacity: get() waited for ever
    ("min_size", 2.5, "off"),
])
def test_constructor_arguments_are_checked(name, bad, policy):
    """JanusBuffer's own arguments are refused at construction, naming them, instead of a hang or
    a failure of the running pipeline later."""
    cfg = on_policy(0, 1, 1, 1) if policy == "on" else off_policy(0, 1)
    kwargs = {"rollout_size": 16} if policy == "on" else {}
    with pytest.raises(ConfigError, match=f"invalid {name}: got"):
        JanusBuffer(cfg, seed=0, **kwargs, **{name: bad})
    assert not [t for t in threading.enumerate() if t.name.startswith("janus-")]


def test_min_size_may_be_the_capacity():
    jb = JanusBuffer(off_policy(0, 0, buffer_capacity=16, batch_size=4), seed=0, min_size=16)
    jb.put(piece(range(16), 8, 2))
    assert jb.get(timeout=GET_S)["id"].shape == (4,)
    jb.close()


# ---------------------------------------------------------------------------------------------
# errors
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("os_", [0, 1])
@pytest.mark.parametrize("policy", ["off", "on"])
def test_preprocess_error_in_background_collection_reaches_learner_and_actor(policy, os_, cleanup):
    raised: list[BaseException] = []

    def exploding_preprocess(batch):
        err = ValueError("preprocess exploded on purpose")
        raised.append(err)
        raise err

    if policy == "off":
        cfg, kw = off_policy(1, os_), {}
    else:
        cfg, kw = on_policy(1, os_, "1/2", "1/4"), {"rollout_size": 2 * T * E}
    jb = JanusBuffer(cfg, preprocess=exploding_preprocess, seed=0, **kw)
    cleanup(jb)
    learner = start(lambda: jb.get(timeout=GET_S), "learner")
    jb.put(piece(range(T * E), T, E), timeout=GET_S)
    assert learner.done.wait(GET_S + 5)
    learner.finish(check=False)
    assert len(raised) == 1
    err = raised[0]
    assert learner.error is err, f"learner got {learner.error!r}, not the collection error"
    assert jb.failure is err
    text = "".join(traceback.format_exception(learner.error))
    assert "exploding_preprocess" in text and "preprocess exploded on purpose" in text
    with pytest.raises(ValueError, match="preprocess exploded") as info:
        jb.put(piece(range(T * E), T, E), timeout=GET_S)
    assert info.value is err
    with pytest.raises(ValueError):
        jb.get(timeout=GET_S)
    close_quickly(jb)
    with pytest.raises(ValueError):  # the failure stays visible after close
        jb.get(timeout=GET_S)


def test_preprocess_error_inline_collection_reaches_the_actor(cleanup):
    def exploding_preprocess(batch):
        raise ValueError("inline preprocess exploded")

    jb = JanusBuffer(off_policy(0, 0), preprocess=exploding_preprocess, seed=0)
    cleanup(jb)
    with pytest.raises(ValueError, match="inline preprocess exploded") as info:
        jb.put(piece(range(T * E), T, E), timeout=GET_S)
    assert "exploding_preprocess" in "".join(traceback.format_exception(info.value))
    close_quickly(jb)


@pytest.mark.parametrize("os_", [0, 1])
@pytest.mark.parametrize("oc", [0, 1])
@pytest.mark.parametrize("policy", ["off", "on"])
def test_selection_error_reaches_get(policy, oc, os_, cleanup):
    err = RuntimeError("gather failed on purpose")

    def failing(*args, **kwargs):
        raise err

    if policy == "off":
        jb = JanusBuffer(off_policy(oc, os_), seed=0)
        method = "sample"
    else:
        jb = JanusBuffer(on_policy(oc, os_, 1, "1/2"), rollout_size=T * E, seed=0)
        method = "gather"
    cleanup(jb)
    setattr(jb.experience, method, failing)  # both the inline and the threaded selector read it
    try:
        jb.put(piece(range(T * E), T, E), timeout=GET_S)
    except RuntimeError as exc:
        # Inline collection + background selection: the selector can fail while this put is
        # still collecting its piece; the put then reports the pipeline's failure. Fine too.
        assert exc is err and oc == 0 and os_ == 1
    with pytest.raises(RuntimeError, match="gather failed on purpose") as info:
        jb.get(timeout=GET_S)
    assert info.value is err
    assert "failing" in "".join(traceback.format_exception(info.value))
    close_quickly(jb)


@pytest.mark.parametrize("oc,os_", OVERLAPS, ids=OVERLAP_IDS)
def test_bad_piece_shape_is_refused_by_its_put_and_the_pipeline_goes_on(oc, os_, cleanup):
    """A piece whose item shape differs from the first piece's is refused by its own put (also with
    overlap_collect=1, where it used to be accepted and then fail the collector for every producer)."""
    jb = JanusBuffer(off_policy(oc, os_), seed=0)
    cleanup(jb)
    jb.put(piece(range(T * E), T, E), timeout=GET_S)
    bad = {"id": torch.zeros(T, E, 3, dtype=torch.long), "obs": torch.zeros(T, E, 2)}  # id item shape differs
    with pytest.raises(ValueError, match="'id'"):
        jb.put(bad, timeout=GET_S)
    jb.put(piece(range(T * E, 2 * T * E), T, E), timeout=GET_S)
    assert jb.failure is None
    batch = jb.get(timeout=GET_S)
    assert set(batch["id"].tolist()) <= set(range(2 * T * E))
    close_quickly(jb)


# ---------------------------------------------------------------------------------------------
# shutdown
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("policy", ["off", "on"])
@pytest.mark.parametrize("oc,os_", OVERLAPS, ids=OVERLAP_IDS)
def test_close_wakes_blocked_learner(oc, os_, policy, cleanup):
    if policy == "off":
        jb = JanusBuffer(off_policy(oc, os_), seed=0)
    else:
        jb = JanusBuffer(on_policy(oc, os_, "1/2", "1/2"), rollout_size=T * E, seed=0)
    cleanup(jb)
    learner = start(lambda: jb.get(timeout=30), "learner")
    assert not learner.done.wait(0.3), "get returned without data"
    t0 = time.perf_counter()
    close_quickly(jb)
    assert learner.done.wait(5.0), "close() did not wake the blocked learner"
    assert time.perf_counter() - t0 < 5.0
    learner.finish(check=False)
    assert isinstance(learner.error, PipelineClosedError)


@pytest.mark.parametrize("os_", [0, 1])
@pytest.mark.parametrize("oc", [0, 1])
def test_close_wakes_blocked_actors_on_policy(oc, os_, cleanup):
    """On-policy actors block once a rollout is written and nobody reads it; close() frees them."""
    n = 2 * T * E
    jb = JanusBuffer(on_policy(oc, os_, "1/2", "1/2", actor_buffer_size=1), rollout_size=n, seed=0)
    cleanup(jb)
    progress = [0, 0]

    def actor(a: int) -> None:
        for i in range(100):
            jb.put(piece(range(T * E), T, E), timeout=30)
            progress[a] = i + 1

    actors = [start(lambda a=a: actor(a), f"actor{a}") for a in range(2)]
    # Wait until the actors stop making progress: they are blocked.
    last, stable_since = None, time.perf_counter()
    deadline = time.perf_counter() + GET_S
    while time.perf_counter() - stable_since < 0.3:
        assert time.perf_counter() < deadline, "actors never blocked"
        now = tuple(progress)
        if now != last:
            last, stable_since = now, time.perf_counter()
        time.sleep(0.02)
    assert not any(a.done.is_set() for a in actors), "an actor finished: nothing blocked it"
    assert sum(progress) < 200
    close_quickly(jb)
    for a in actors:
        assert a.done.wait(5.0), "close() did not wake a blocked actor"
        a.finish(check=False)
        assert isinstance(a.error, PipelineClosedError), a.error


@pytest.mark.parametrize("oc,os_", OVERLAPS, ids=OVERLAP_IDS)
def test_close_wakes_blocked_actors_off_policy(oc, os_, cleanup):
    """A slow collector fills the tiny actor queue; close() mid-stream frees the actors."""

    def slow_preprocess(batch):
        time.sleep(0.02)
        return batch

    jb = JanusBuffer(off_policy(oc, os_, actor_buffer_size=1), preprocess=slow_preprocess, seed=0)
    cleanup(jb)
    started = threading.Event()

    def actor() -> None:
        for i in range(10_000):
            jb.put(piece(range(T * E), T, E), timeout=30)
            started.set()

    actors = [start(actor, f"actor{a}") for a in range(2)]
    assert started.wait(GET_S)
    time.sleep(0.2)
    assert not any(a.done.is_set() for a in actors)
    close_quickly(jb)
    for a in actors:
        assert a.done.wait(5.0)
        a.finish(check=False)
        assert isinstance(a.error, PipelineClosedError), a.error
    assert jb.stats.transitions_collected + jb.stats.pieces_dropped_on_close * T * E == jb.stats.transitions_put


@pytest.mark.parametrize("policy", ["off", "on"])
@pytest.mark.parametrize("oc,os_", OVERLAPS, ids=OVERLAP_IDS)
def test_close_mid_stream_with_busy_actors_and_learner(oc, os_, policy, cleanup):
    if policy == "off":
        jb = JanusBuffer(off_policy(oc, os_, actor_buffer_size=2), seed=0)
    else:
        jb = JanusBuffer(on_policy(oc, os_, "1/2", "1/4", actor_buffer_size=2), rollout_size=2 * T * E, num_epochs=2, seed=0)
    cleanup(jb)
    delivered = threading.Event()

    def actor() -> None:
        while True:
            jb.put(piece(range(T * E), T, E), timeout=30)

    def learner() -> None:
        while True:
            jb.get(timeout=30)
            delivered.set()
            time.sleep(0.005)

    threads = [start(actor, "actor0"), start(actor, "actor1"), start(learner, "learner")]
    assert delivered.wait(GET_S)
    time.sleep(0.1)
    close_quickly(jb)
    for t in threads:
        assert t.done.wait(5.0), f"{t.name} not woken by close()"
        t.finish(check=False)
        assert isinstance(t.error, PipelineClosedError), (t.name, t.error)


@pytest.mark.parametrize("policy", ["off", "on"])
@pytest.mark.parametrize("oc,os_", OVERLAPS, ids=OVERLAP_IDS)
def test_put_and_get_after_close_raise(oc, os_, policy, cleanup):
    if policy == "off":
        jb = JanusBuffer(off_policy(oc, os_, g_select=2), seed=0)
    else:
        jb = JanusBuffer(on_policy(oc, os_, 1, "1/2"), rollout_size=T * E, num_epochs=3, seed=0)
    cleanup(jb)
    jb.put(piece(range(T * E), T, E), timeout=GET_S)
    check_batch(jb.get(timeout=GET_S))  # a bundle is now (partly) staged for the learner
    time.sleep(0.05)
    jb.close()
    assert_closed_cleanly(jb)
    with pytest.raises(PipelineClosedError):
        jb.put(piece(range(T * E), T, E), timeout=1)
    with pytest.raises(PipelineClosedError):
        jb.get(timeout=1)
    jb.close()  # idempotent
    with pytest.raises(PipelineClosedError):
        jb.get()


def test_context_manager_closes(cleanup):
    with JanusBuffer(off_policy(1, 1), seed=0) as jb:
        cleanup(jb)
        jb.put(piece(range(T * E), T, E), timeout=GET_S)
        check_batch(jb.get(timeout=GET_S))
    assert_closed_cleanly(jb)
    with pytest.raises(PipelineClosedError):
        jb.put(piece(range(T * E), T, E), timeout=1)


@pytest.mark.parametrize("policy", ["off", "on"])
@pytest.mark.parametrize("oc,os_", OVERLAPS, ids=OVERLAP_IDS)
def test_get_timeout_is_honoured_without_data(oc, os_, policy, cleanup):
    if policy == "off":
        jb = JanusBuffer(off_policy(oc, os_), seed=0)
    else:
        jb = JanusBuffer(on_policy(oc, os_, 1, "1/4"), rollout_size=T * E, seed=0)
    cleanup(jb)
    learner = start(lambda: jb.get(timeout=0.3), "learner")
    assert learner.done.wait(5.0), "get(timeout=0.3) did not return (inline selection ignores the timeout?)"
    learner.finish(check=False)
    assert isinstance(learner.error, StagingTimeout), learner.error
    # Nothing broke: data then flows.
    jb.put(piece(range(T * E), T, E), timeout=GET_S)
    check_batch(jb.get(timeout=GET_S))
    close_quickly(jb)


# ---------------------------------------------------------------------------------------------
# stats
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("oc,os_", OVERLAPS, ids=OVERLAP_IDS)
def test_stats_actor_blocked_when_actors_outrun_slow_learner(oc, os_, cleanup):
    steps, envs, m, rollouts = 4, 2, 4, 8  # the pipeline buffers ~3 rollouts; the rest must wait
    n = 2 * steps * envs
    jb = JanusBuffer(on_policy(oc, os_, "1/2", "1/4", actor_buffer_size=1, num_minibatches=m), rollout_size=n, seed=0)
    cleanup(jb)

    def actor(a: int) -> None:
        for r in range(rollouts):
            for half in range(2):  # g_collect = 1/2: two pieces per actor per rollout
                jb.put(piece(range(steps * envs // 2), steps // 2, envs), timeout=GET_S)

    workers = [start(lambda a=a: actor(a), f"actor{a}") for a in range(2)]
    for _ in range(rollouts * m):
        jb.get(timeout=GET_S)
        time.sleep(0.02)  # a slow learner
    for w in workers:
        w.finish()
    jb.close()
    assert_closed_cleanly(jb)
    s = jb.stats
    for name in ("collect_s", "select_s", "learner_wait_s", "actor_blocked_s"):
        assert getattr(s, name) >= 0.0, name
    assert s.actor_blocked_s > 0.05, s.as_dict()
    assert s.batches_delivered == rollouts * m
    assert s.as_dict()["transitions_collected"] == rollouts * n


@pytest.mark.parametrize("oc,os_", OVERLAPS, ids=OVERLAP_IDS)
def test_stats_learner_wait_when_learner_starves(oc, os_, cleanup):
    jb = JanusBuffer(off_policy(oc, os_), seed=0)
    cleanup(jb)
    waiting = threading.Event()

    def late_actor() -> None:
        assert waiting.wait(GET_S)
        time.sleep(0.25)
        jb.put(piece(range(T * E), T, E), timeout=GET_S)

    w = start(late_actor, "actor")
    waiting.set()
    check_batch(jb.get(timeout=GET_S))
    w.finish()
    jb.close()
    assert_closed_cleanly(jb)
    s = jb.stats
    assert s.learner_wait_s >= 0.1, s.as_dict()
    for name in ("collect_s", "select_s", "actor_blocked_s"):
        assert getattr(s, name) >= 0.0, name
    assert s.collect_s < 5 and s.select_s < 5


@pytest.mark.parametrize("os_", [0, 1], ids=["inline", "background"])
def test_select_s_counts_the_batches_taken_and_the_rest_is_selection_ahead(os_, cleanup):
    """A bundle of 4 of which the learner takes 1: its selection time is split 1 to 3 between
    select_s and select_ahead_s, so select_s fits within the time the learner was running
    (the report's ideal bound relies on it) and no selection time is lost."""
    jb = JanusBuffer(off_policy(0, os_, g_select=4), seed=0)
    cleanup(jb)
    jb.put(piece(range(T * E), T, E), timeout=GET_S)
    jb.flush()
    check_batch(jb.get(timeout=GET_S))
    if os_:  # the selection thread fills the prefetch queue (2 bundles)
        deadline = time.perf_counter() + GET_S
        while jb.stats.batches_selected < 8 and time.perf_counter() < deadline:
            time.sleep(0.01)
    jb.close()
    s = jb.stats
    total = s.select_s + s.select_ahead_s
    assert s.batches_delivered == 1 and s.batches_selected >= 4
    assert 0 < s.select_s <= total / 4 * (1 + 1e-9), s.as_dict()
    assert s.select_ahead_s >= 3 * s.select_s * (1 - 1e-9), s.as_dict()
    # every batch taken: nothing is ahead
    jb2 = JanusBuffer(off_policy(0, 0, g_select=4), seed=0)
    cleanup(jb2)
    jb2.put(piece(range(T * E), T, E), timeout=GET_S)
    jb2.flush()
    for _ in range(4):
        check_batch(jb2.get(timeout=GET_S))
    assert jb2.stats.select_s > 0 and abs(jb2.stats.select_ahead_s) < 1e-9, jb2.stats.as_dict()


def test_background_threads_do_not_change_torch_threads_of_other_threads(cleanup):
    def fresh_thread_num_threads() -> int:
        out = {}
        t = threading.Thread(target=lambda: out.setdefault("n", torch.get_num_threads()))
        t.start()
        t.join(JOIN_S)
        return out["n"]

    original = torch.get_num_threads()
    torch.set_num_threads(3)  # a known process default, not 1 (the background threads' own setting)
    try:
        assert fresh_thread_num_threads() == 3
        jb = JanusBuffer(off_policy(1, 1), seed=0)
        cleanup(jb)
        jb.put(piece(range(T * E), T, E), timeout=GET_S)
        jb.get(timeout=GET_S)  # both background threads have run
        assert torch.get_num_threads() == 3
        assert fresh_thread_num_threads() == 3, "a learner thread started now would be throttled to 1"
        close_quickly(jb)
    finally:
        torch.set_num_threads(original)


def test_inline_operator_failure_reaches_a_blocked_learner():
    """overlap_collect=0: the actor's own collection fails; a learner waiting in get() hears of it."""
    def broken(batch):
        raise ValueError("preprocess exploded inline")

    jb = JanusBuffer(JanusConfig(overlap_collect=0, overlap_select=1, batch_size=8, buffer_capacity=64), preprocess=broken, seed=0)
    caught = []

    def learner():
        try:
            jb.get(timeout=20)
        except BaseException as exc:  # noqa: BLE001
            caught.append(exc)

    t = threading.Thread(target=learner)
    t.start()
    with pytest.raises(ValueError, match="exploded inline"):
        jb.put({"x": torch.zeros(4, 4)})
    t.join(20)
    assert not t.is_alive()
    assert caught and isinstance(caught[0], ValueError) and "exploded inline" in str(caught[0])
    jb.close()
    assert not any(th.is_alive() for th in jb.threads)


def test_update_priority_is_public_and_steers_sampling():
    """JanusBuffer.update_priority(keys of a delivered batch, priorities) reaches the experience
    buffer: applied counts, and an item given all the priority is what later batches hold."""
    jb = JanusBuffer(off_policy(0, 0, g_collect=1, g_select=1), sampler="prioritized", seed=0, alpha=1.0)
    try:
        jb.put(piece(range(32), 4, 8))
        jb.flush()
        batch = jb.get(timeout=10)
        keys = torch.arange(32)
        prios = torch.zeros(32)
        prios[5] = 1.0
        assert jb.update_priority(keys, prios) == 32
        assert set(jb.get(timeout=10)["index"].tolist()) == {5}
        assert "weight" in batch
    finally:
        jb.close()


@pytest.mark.parametrize("oc,os_", OVERLAPS, ids=OVERLAP_IDS)
def test_get_timeout_says_collection_waits_for_g_collect_pieces_and_names_flush(oc, os_, cleanup):
    """One piece staged with g_collect=4: get() timed out "waiting to get a batch" (or for stored
    transitions), which hid the cause. It now says collection waits for g_collect pieces, how
    many are staged, and that flush() writes them; after flush() the batch comes."""
    jb = JanusBuffer(off_policy(oc, os_, g_collect=4, g_select=1), seed=0)
    cleanup(jb)
    jb.put(piece(range(T * E), T, E), timeout=GET_S)
    with pytest.raises(StagingTimeout, match=r"g_collect=4 pieces.*1 piece\(s\) \(8 transitions\).*flush\(\)"):
        jb.get(timeout=0.3)
    jb.flush()
    assert len(jb.get(timeout=GET_S)["id"]) == 8


def test_on_policy_get_timeout_names_the_transitions_collection_waits_for(cleanup):
    """On-policy, collection writes a fraction g_collect of the rollout at a time: a get that times
    out with less staged says how many transitions it waits for."""
    jb = JanusBuffer(on_policy(0, 0, "1/2", 1), rollout_size=16, seed=0)
    cleanup(jb)
    jb.put(piece(range(4), 2, 2), timeout=GET_S)
    with pytest.raises(StagingTimeout, match=r"8 transitions \(g_collect=0.5 of a rollout\).*flush\(\)"):
        jb.get(timeout=0.3)


@pytest.mark.parametrize("oc,os_", OVERLAPS, ids=OVERLAP_IDS)
def test_beta_schedule_anneals_the_importance_exponent_batch_by_batch(oc, os_, cleanup):
    """``--per_beta`` promised annealing to 1 and the exponent stayed fixed. With a beta_schedule the
    n-th batch's weights are ``(min leaf / leaf) ** schedule(n)``: recovered from the weights here,
    batch after batch, up to the final value (and :attr:`JanusBuffer.beta` says the next one)."""
    from janus.buffer.replay.prioritized import LinearSchedule

    schedule = LinearSchedule(0.4, 1.0, 6, offset=1)  # a resumed run: one batch was trained before
    jb = JanusBuffer(off_policy(oc, os_, g_collect=1, g_select=1, batch_size=64, prefetch=1), sampler="prioritized",
                     seed=0, alpha=1.0, min_size=8, beta_schedule=schedule)
    cleanup(jb)
    assert jb.beta == pytest.approx(0.5)  # the first batch's
    jb.put(piece(range(32), 4, 8))
    jb.flush()
    leaf = torch.arange(1.0, 33.0, dtype=torch.float64)  # priority of key k: k + 1 (alpha 1)
    jb.update_priority(torch.arange(32), leaf - 1e-6)  # eps 1e-6 is added back
    for n in range(8):  # batches come in the order they were selected: the n-th got schedule(n)
        batch = jb.get(timeout=GET_S)
        if n < 2:
            continue  # selected (ahead, prefetch 1) before the priorities were set
        ratio = leaf.min() / leaf[batch["index"]]
        varies = ratio < 1
        beta = torch.log(batch["weight"].double()[varies]) / torch.log(ratio[varies])
        assert torch.allclose(beta, torch.full_like(beta, schedule(n)), atol=1e-4), (n, beta)
    assert schedule(7) == 1.0  # past the schedule's end beta stays at the final value


def test_beta_schedule_needs_a_prioritized_off_policy_buffer():
    from janus.buffer.replay.prioritized import LinearSchedule

    with pytest.raises(ConfigError, match="sampler='prioritized'"):
        JanusBuffer(off_policy(0, 0), beta_schedule=LinearSchedule(0.4, 1.0, 10))


def test_update_priority_of_a_uniform_janus_buffer_is_an_error():
    """A uniform JanusBuffer has no priorities: update_priority returned the pairs "applied" and
    changed nothing; it raises, naming sampler='prioritized'."""
    jb = JanusBuffer(off_policy(0, 0, g_collect=1, g_select=1), seed=0)
    try:
        jb.put(piece(range(32), 4, 8))
        jb.flush()
        batch = jb.get(timeout=10)
        with pytest.raises(BufferInputError, match="sampler='prioritized'"):
            jb.update_priority(batch["index"], torch.ones(len(batch["index"])))
    finally:
        jb.close()


@pytest.mark.parametrize("oc,os_", OVERLAPS, ids=OVERLAP_IDS)
def test_prioritized_batches_of_one_selection_each_span_the_whole_replay(oc, os_, cleanup):
    """A selection of g_select batches is one stratified prioritized draw of g_select * batch_size;
    its draws come out in priority-mass order (slot order), and splitting them in turn gave batch 1
    only the first quarter of the replay (the oldest items with g_select=4), batch 4 the last. Each
    batch is now stratified over all of it, as batch_size draws of its own are: one draw in each
    of its batch_size strata, and the batches of a selection take different parts of each stratum."""
    size, batch, count = 960, 8, 4
    jb = JanusBuffer(off_policy(oc, os_, g_select=count, batch_size=batch, buffer_capacity=size), sampler="prioritized",
                     seed=0)
    cleanup(jb)
    jb.put(piece(range(size), size // 8, 8))
    jb.flush()  # every priority is the initial one: a stratum is size / batch consecutive keys
    stratum = size // batch
    for _ in range(2):  # two selections
        batches = [jb.get(timeout=GET_S)["index"] for _ in range(count)]
        for b in batches:
            assert sorted((b // stratum).tolist()) == list(range(batch)), "one draw in each stratum"
        for m in range(batch):  # the selection's count draws in stratum m: one in each of its count parts
            parts = {int(b[(b // stratum) == m][0]) % stratum // (stratum // count) for b in batches}
            assert parts == set(range(count))
    close_quickly(jb)


def test_reordering_a_bundle_keeps_each_field_on_its_device():
    """On the cuda placement a bundle's fields and weights are on the GPU and its keys on the host;
    the reorder of the strata indexes each with an index on its own device ('meta' stands in for
    the GPU here; index_select with an index on another device fails on a GPU)."""
    from janus.buffer.staging.selection import _reordered

    bundle = {"x": torch.zeros(4, 3, device="meta"), "weight": torch.zeros(4, device="meta"), "index": torch.arange(4)}
    out = _reordered(bundle, torch.tensor([2, 0, 3, 1]))
    assert out["index"].tolist() == [2, 0, 3, 1] and out["x"].device.type == "meta" and out["x"].shape == (4, 3)


def test_put_validates_each_piece_and_refuses_only_the_bad_one() -> None:
    """Issue 13 item 9: put({}) / put(None) are clear errors; a piece whose fields differ from the
    first is refused by its own put, and the pipeline keeps serving every other producer."""
    from janus.errors import BufferInputError, BufferTypeError

    cfg = JanusConfig(overlap_collect=1, overlap_select=1, g_collect=1, g_select=1, batch_size=4, buffer_capacity=64)
    good = {"obs": torch.zeros(2, 2, 3), "reward": torch.zeros(2, 2)}
    with JanusBuffer(cfg, seed=0) as jb:
        with pytest.raises(BufferInputError, match="no fields"):
            jb.put({})
        with pytest.raises(BufferTypeError, match="mapping"):
            jb.put(None)  # type: ignore[arg-type]
        with pytest.raises(BufferInputError, match="must be strings"):
            jb.put({1: torch.zeros(2, 2)})  # type: ignore[dict-item]
        jb.put(good)
        with pytest.raises(BufferInputError, match="'obs'.*refused"):
            jb.put({"obs": torch.zeros(2, 2, 5), "reward": torch.zeros(2, 2)})
        with pytest.raises(BufferInputError, match="leading dims"):
            jb.put({"obs": torch.zeros(2, 2, 3), "reward": torch.zeros(3, 2)})
        for _ in range(3):
            jb.put(good)
        batch = jb.get(timeout=10)
        assert batch["obs"].shape == (4, 3)
        assert jb.stats.pieces_put == 4


def test_extend_refuses_field_names_that_are_not_strings() -> None:
    from janus.errors import BufferInputError

    eb = ExperienceBuffer(10, "cpu_pageable")
    with pytest.raises(BufferInputError, match="must be strings.*1 \\(int\\)"):
        eb.extend({1: torch.zeros(2), "1": torch.ones(2)})
    assert len(eb) == 0


def test_flush_waits_for_pieces_the_background_collector_already_took() -> None:
    """A checkpoint flushes, then saves: pieces the collector took but had not yet written must be
    in the buffer when flush returns (found by the kill/resume loop: inserted != written)."""
    cfg = JanusConfig(overlap_collect=1, overlap_select=0, g_collect=1, g_select=1, batch_size=4, buffer_capacity=10_000)
    with JanusBuffer(cfg, seed=0) as jb:
        real_take = jb.actor_buffer.take
        taken = threading.Event()

        def slow_take(*args, **kwargs):  # the collector holds its pieces a while before it writes them
            out = real_take(*args, **kwargs)
            if threading.current_thread().name == "janus-collect" and out:
                taken.set()
                time.sleep(0.3)
            return out

        jb.actor_buffer.take = slow_take  # type: ignore[method-assign]
        jb.put({"obs": torch.zeros(2, 2, 3), "reward": torch.zeros(2, 2)})
        deadline = time.monotonic() + 5
        while len(jb.experience) < 4:
            assert time.monotonic() < deadline
            time.sleep(0.01)
        for i in range(1, 4):
            taken.clear()
            jb.put({"obs": torch.full((2, 2, 3), float(i)), "reward": torch.zeros(2, 2)})
            assert taken.wait(5)  # the collector has the piece in hand now
            jb.flush()
            assert len(jb.experience) == 4 * (i + 1), "flush returned before a taken piece was written"


@pytest.mark.parametrize("oc,os_", OVERLAPS, ids=OVERLAP_IDS)
def test_an_empty_piece_is_refused_by_its_put_and_the_pipeline_goes_on(oc, os_, cleanup):
    """A piece of 0 transitions (T = 0 or envs = 0) used to be staged, then fail the collection
    (extend of 0 items) and with it the whole pipeline, for every producer and the learner."""
    from janus.errors import BufferInputError

    jb = JanusBuffer(off_policy(oc, os_, g_collect=1), seed=0)
    cleanup(jb)
    jb.put(piece(range(T * E), T, E), timeout=GET_S)
    for empty in ({"id": torch.zeros(0, E, dtype=torch.long), "obs": torch.zeros(0, E, 2)},
                  {"id": torch.zeros(T, 0, dtype=torch.long), "obs": torch.zeros(T, 0, 2)}):
        with pytest.raises(BufferInputError, match="0 transitions"):
            jb.put(empty, timeout=GET_S)
    jb.put(piece(range(T * E, 2 * T * E), T, E), timeout=GET_S)
    jb.flush()
    assert jb.failure is None and len(jb.experience) == 2 * T * E
    check_batch(jb.get(timeout=GET_S))
    close_quickly(jb)


@pytest.mark.parametrize("oc,os_", OVERLAPS, ids=OVERLAP_IDS)
@pytest.mark.parametrize("g", [1, 3])
def test_off_policy_collections_larger_than_the_capacity_keep_the_newest(oc, os_, g, cleanup):
    """g_collect pieces (or one piece) of more transitions than the replay holds used to fail the
    collection's single extend (at most capacity items) and so the pipeline; now they are written
    in order, as a ring does, and the newest ``capacity`` transitions are what is stored."""
    capacity = 10
    jb = JanusBuffer(off_policy(oc, os_, g_collect=g, buffer_capacity=capacity, batch_size=4), seed=0)
    cleanup(jb)
    n = 3 * T * E  # 24 transitions: more than the capacity in one piece, and in 3 pieces
    for i in range(3):
        jb.put(piece(range(i * n, (i + 1) * n), T * 3, E), timeout=GET_S)
    jb.flush()
    assert jb.failure is None
    assert jb.experience.total_written == 3 * n and len(jb.experience) == capacity
    ids = sorted(jb.experience.gather(list(range(capacity)))["id"].tolist())
    # the last capacity transitions of a piece (the last piece put, unless a flush overtook the
    # background collector, which then wrote the piece it held after the flushed ones)
    assert ids == list(range(ids[-1] + 1 - capacity, ids[-1] + 1)) and (ids[-1] + 1) % n == 0
    if not oc:
        assert ids[-1] == 3 * n - 1
    for _ in range(3):  # (a prefetching selector may have sampled before the last pieces were written)
        batch = jb.get(timeout=GET_S)
        check_batch(batch)
        assert (batch["id"] < 3 * n).all()
    close_quickly(jb)


@pytest.mark.parametrize("oc,os_", OVERLAPS, ids=OVERLAP_IDS)
def test_on_policy_piece_larger_than_the_rollout_is_refused_by_its_put(oc, os_, cleanup):
    """A piece that cannot fit in one rollout used to be staged, then fail the collection
    (rollout overshoot) and the pipeline; now its own put refuses it, naming the sizes."""
    from janus.errors import BufferInputError

    rollout = 16
    jb = JanusBuffer(on_policy(oc, os_, 1, 1, num_minibatches=2), rollout_size=rollout, seed=0)
    cleanup(jb)
    with pytest.raises(BufferInputError, match="20 transitions.*rollout_size=16"):
        jb.put(piece(range(20), 10, 2), timeout=GET_S)
    jb.put(piece(range(rollout), rollout // 2, 2), timeout=GET_S)
    ids = torch.cat([jb.get(timeout=GET_S)["id"] for _ in range(2)])
    assert sorted(ids.tolist()) == list(range(rollout)) and jb.failure is None
    close_quickly(jb)


@pytest.mark.parametrize("oc", [0, 1])
def test_a_first_piece_the_buffer_cannot_store_is_refused_by_its_put(oc, cleanup):
    """Only pieces differing from the first were refused by put; a first piece that the buffer
    cannot store (strings, objects; frame_stack without obs/next_obs stacks of one shape) was
    staged and then failed the collection, and the pipeline for every producer and the learner."""
    from janus.errors import BufferInputError, BufferTypeError

    jb = JanusBuffer(off_policy(oc, 0), seed=0)
    cleanup(jb)
    with pytest.raises(BufferTypeError, match="field 'x' dtype"):
        jb.put({"x": np.array([["a", "b"]] * T)})
    with pytest.raises(BufferTypeError, match="field 'x' dtype"):
        jb.put({"x": np.array([[None, 1]] * T, dtype=object)})
    jb.put(piece(range(T * E), T, E))
    jb.flush()
    check_batch(jb.get(timeout=GET_S))
    assert jb.failure is None
    close_quickly(jb)

    frames = JanusBuffer(off_policy(oc, 0, batch_size=2), seed=0, frame_stack=True)
    cleanup(frames)
    stack = torch.zeros(T, E, 4, 3, 3, dtype=torch.uint8)
    with pytest.raises(BufferInputError, match="'obs' and 'next_obs'"):
        frames.put({"x": torch.zeros(T, E)})
    with pytest.raises(BufferInputError, match="'next_obs'.*'obs'"):
        frames.put({"obs": stack, "next_obs": stack[..., :2]})
    with pytest.raises(BufferInputError, match="'next_obs'.*'obs'"):
        frames.put({"obs": stack, "next_obs": stack.float()})
    with pytest.raises(BufferInputError, match="stack"):
        frames.put({"obs": torch.zeros(T, E, dtype=torch.uint8), "next_obs": torch.zeros(T, E, dtype=torch.uint8)})
    for stream in (torch.zeros(T, E), torch.zeros(T, E, 2, dtype=torch.long)):  # one integer per row
        with pytest.raises(BufferInputError, match="'stream'"):
            frames.put({"obs": stack, "next_obs": stack, "stream": stream})
    frames.put({"obs": stack, "next_obs": stack + 1, "reward": torch.zeros(T, E)})
    frames.flush()
    assert frames.get(timeout=GET_S)["next_obs"].shape == (2, 4, 3, 3) and frames.failure is None
    close_quickly(frames)


@pytest.mark.parametrize("bad", [-1, float("nan"), "1", True])
def test_bad_timeouts_are_refused_naming_them(bad, cleanup):
    """get(timeout='1') raised "unsupported operand type(s) for +: 'float' and 'str'"; put took any
    timeout while it did not block; a negative or NaN timeout meant 'do not wait' without a word."""
    jb = JanusBuffer(off_policy(0, 0, batch_size=2), seed=0)
    cleanup(jb)
    for call in (lambda: jb.put(piece(range(T * E), T, E), timeout=bad), lambda: jb.get(timeout=bad),
                 lambda: jb.close(timeout=bad)):
        with pytest.raises(ConfigError, match="invalid timeout: got"):
            call()
    assert jb.stats.pieces_put == 0
    jb.put(piece(range(T * E), T, E), timeout=0)
    check_batch(jb.get(timeout=0.5))
    close_quickly(jb)


@pytest.mark.parametrize("oc,os_", OVERLAPS, ids=OVERLAP_IDS)
def test_an_infinite_timeout_waits_as_none_does(oc, os_, cleanup):
    """timeout=float('inf') failed a waiting get with "OverflowError: timestamp out of range for
    platform time_t" (a condition cannot wait inf seconds); it now means no limit, as None."""
    jb = JanusBuffer(off_policy(oc, os_, batch_size=2, actor_buffer_size=1), seed=0)
    cleanup(jb)
    late = threading.Timer(0.3, lambda: jb.put(piece(range(T * E), T, E), timeout=float("inf")))
    late.start()
    check_batch(jb.get(timeout=float("inf")))
    late.join(JOIN_S)
    jb.close(timeout=float("inf"))
    assert_closed_cleanly(jb)


@pytest.mark.parametrize("config", [None, {"batch_size": 4}, "cfg"])
def test_a_config_that_is_not_a_janus_config_is_named(config):
    """JanusBuffer({'batch_size': 4}) failed with "AttributeError: 'dict' object has no attribute
    'placement'"; now the error says what it takes."""
    from janus.errors import BufferTypeError

    with pytest.raises(BufferTypeError, match=r"JanusBuffer\(config\) takes a JanusConfig"):
        JanusBuffer(config)  # type: ignore[arg-type]


def test_first_pieces_of_two_actors_at_once_cannot_both_set_the_fields(monkeypatch, cleanup):
    """Two actors' first pieces, checked at the same time, both passed (no fields were known yet)
    and both were staged; if they differed, the collection failed and with it the pipeline. Now
    the one that comes second is checked against the first and refused by its own put."""
    from janus.buffer import pipeline as janus_module
    from janus.errors import BufferInputError

    both_checked = threading.Barrier(2, timeout=JOIN_S)
    real = janus_module.check_piece

    def racing_check(piece_, dims, schema):
        out = real(piece_, dims, schema)
        if schema is None:
            both_checked.wait()  # each put has passed its check before either records its fields
        return out

    monkeypatch.setattr(janus_module, "check_piece", racing_check)
    jb = JanusBuffer(off_policy(0, 0, g_collect=2, batch_size=2), seed=0)
    cleanup(jb)
    good = piece(range(T * E), T, E)
    other = {"id": good["id"], "obs": torch.zeros(T, E, 5)}  # obs of another item shape
    workers = [start(lambda p=p: jb.put(p, timeout=GET_S), f"actor-{i}") for i, p in enumerate((good, other))]
    for w in workers:
        w.finish(check=False)
    errors = [w.error for w in workers if w.error is not None]
    assert len(errors) == 1 and isinstance(errors[0], BufferInputError) and "'obs'" in str(errors[0])
    assert jb.failure is None and jb.stats.pieces_put == 1
