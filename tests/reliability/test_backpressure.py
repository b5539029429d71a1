"""Backpressure: producers 10x faster than the learner keep memory bounded, and blocking is reported."""

from __future__ import annotations

import threading
import time

import psutil
import torch

from janus import JanusBuffer, JanusConfig


def test_fast_producers_stay_bounded_and_blocked_time_is_reported() -> None:
    piece_mb = 4 * 1024 * 1024 / 1e6  # each piece: [64, 16, 1024] float32 = 4 MiB
    cfg = JanusConfig(overlap_collect=1, overlap_select=1, batch_size=128, buffer_capacity=16_384,
                      actor_buffer_size=4, prefetch=2)
    jb = JanusBuffer(cfg, seed=0)
    stop = threading.Event()
    produced = [0, 0, 0, 0]
    process = psutil.Process()

    def produce(p: int) -> None:
        # no env cost and no generation cost: a put is instant, far faster than the 4 MiB copy
        # that collects it (generating fresh data could be slower than that copy, then nothing blocks)
        piece = {"x": torch.full((64, 16, 1024), float(p))}
        while not stop.is_set():
            try:
                jb.put(piece, timeout=1)
                produced[p] += 1
            except TimeoutError:
                continue

    threads = [threading.Thread(target=produce, args=(p,)) for p in range(4)]
    for t in threads:
        t.start()
    samples = []
    try:
        for i in range(160):  # the learner: a slow update per batch
            jb.get(timeout=30)
            time.sleep(0.02)
            if i >= 60:  # after the ring and the allocator's per-thread arenas have warmed up
                samples.append(process.memory_info().rss / 1e6)
    finally:
        stop.set()
        for t in threads:
            t.join(30)
        jb.close()
    assert not any(t.is_alive() for t in threads + jb.threads)
    staged_bound = (cfg.actor_buffer_size + 4 + 2) * piece_mb  # queue + pieces in producers' hands + in collection
    assert max(samples) - min(samples) < staged_bound + 20, f"RSS grew: {min(samples):.0f} -> {max(samples):.0f} MB"
    assert sum(produced) * 64 * 16 > 3 * cfg.buffer_capacity, "producers outran the ring several times over"
    assert jb.stats.actor_blocked_s > 0, "producers were held back, and the time is reported"
