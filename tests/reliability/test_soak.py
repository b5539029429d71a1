"""Soak: 4 producer and 2 consumer threads at full speed through a JanusBuffer with both overlaps on.

Off-policy every sampled item was written; on-policy every transition is consumed exactly once per
epoch; every thread joins. Runs ``--soak-seconds`` per test (8 s by default, so CI stays under a
minute; ``pytest tests/reliability --soak-seconds 3600`` soaks for an hour).
"""

from __future__ import annotations

import threading
from collections import Counter

import torch

from janus import JanusBuffer, JanusConfig

PRODUCERS, CONSUMERS, T, ENVS = 4, 2, 8, 4


def _piece(producer: int, serial: int) -> dict[str, torch.Tensor]:
    base = (producer * 10**9 + serial * T * ENVS)
    ids = torch.arange(base, base + T * ENVS, dtype=torch.float64).reshape(T, ENVS)
    return {"id": ids, "payload": ids.unsqueeze(-1).expand(T, ENVS, 8).clone()}


def _run(threads: list[threading.Thread], errors: list[BaseException]) -> None:
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not any(t.is_alive() for t in threads), "every soak thread joins"
    assert not errors, repr(errors[0])


def test_off_policy_soak_samples_only_written_items(soak_seconds: float) -> None:
    cfg = JanusConfig(overlap_collect=1, overlap_select=1, g_collect=2, g_select=2, batch_size=64, buffer_capacity=8192)
    jb = JanusBuffer(cfg, seed=0)
    written: set[float] = set()
    lock = threading.Lock()
    stop = threading.Event()
    errors: list[BaseException] = []
    consumed = [0] * CONSUMERS

    def produce(p: int) -> None:
        try:
            serial = 0
            while not stop.is_set():
                piece = _piece(p, serial)
                with lock:  # recorded before it can possibly be sampled
                    written.update(piece["id"].flatten().tolist())
                jb.put(piece, timeout=30)
                serial += 1
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    def consume(c: int) -> None:
        try:
            while not stop.is_set():
                batch = jb.get(timeout=30)
                ids = batch["id"].tolist()
                assert torch.equal(batch["payload"], batch["id"].unsqueeze(-1).expand(-1, 8)), "torn row"
                with lock:
                    missing = [i for i in ids if i not in written]
                assert not missing, f"sampled items never written: {missing[:5]}"
                consumed[c] += len(ids)
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    threads = [threading.Thread(target=produce, args=(p,)) for p in range(PRODUCERS)]
    threads += [threading.Thread(target=consume, args=(c,)) for c in range(CONSUMERS)]
    timer = threading.Timer(soak_seconds, stop.set)
    timer.start()
    try:
        _run(threads, errors)
    finally:
        timer.cancel()
        jb.close()
    assert all(n > 0 for n in consumed)
    assert not any(t.is_alive() for t in jb.threads)
    assert jb.stats.transitions_collected == jb.stats.transitions_put, "nothing staged was lost on close"


def test_on_policy_soak_consumes_each_transition_once_per_epoch(soak_seconds: float) -> None:
    epochs, minibatches = 2, 4
    rollout = PRODUCERS * T * ENVS
    cfg = JanusConfig(is_on_policy=True, overlap_collect=1, overlap_select=1, g_collect=0.5, g_select=0.25,
                      num_minibatches=minibatches)
    jb = JanusBuffer(cfg, rollout_size=rollout, num_epochs=epochs, seed=0)
    per_rollout = epochs * minibatches
    claimed = [0]  # minibatches claimed by consumers
    seen: dict[int, Counter] = {}
    cond = threading.Condition()
    stop = threading.Event()
    errors: list[BaseException] = []
    happens: dict[int, bool] = {}  # rollout -> whether it is produced: decided once, by whoever asks first

    def decide(r: int) -> bool:  # call under cond
        if r not in happens:
            happens[r] = not stop.is_set()
        return happens[r]

    def produce(p: int) -> None:
        try:
            r = 0
            while True:
                with cond:  # on-policy: rollout r starts once rollout r-1 has been claimed
                    while claimed[0] < r * per_rollout and not stop.is_set():
                        cond.wait(0.1)
                    if not decide(r):
                        return
                for half in range(2):
                    piece = _piece(p, r * 2 + half)
                    jb.put({k: v[: T // 2] for k, v in piece.items()}, timeout=30)
                r += 1
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    def consume() -> None:
        try:
            while True:
                with cond:
                    if not decide(claimed[0] // per_rollout):
                        return
                    claimed[0] += 1
                    cond.notify_all()
                batch = jb.get(timeout=30)
                with cond:
                    for i in batch["id"].tolist():  # the id says which rollout it belongs to
                        seen.setdefault(int(i % 10**9) // (T * ENVS) // 2, Counter())[i] += 1
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    threads = [threading.Thread(target=produce, args=(p,)) for p in range(PRODUCERS)]
    threads += [threading.Thread(target=consume) for _ in range(CONSUMERS)]
    timer = threading.Timer(soak_seconds, stop.set)
    timer.start()
    try:
        _run(threads, errors)
    finally:
        timer.cancel()
        jb.close()
    complete = [r for r, c in seen.items() if sum(c.values()) == rollout * epochs]
    assert len(complete) >= 2, "the soak got through several rollouts"
    for r in complete:
        counts = seen[r]
        assert len(counts) == rollout and set(counts.values()) == {epochs}, f"rollout {r}: not exactly once per epoch"
    assert not any(t.is_alive() for t in jb.threads)
