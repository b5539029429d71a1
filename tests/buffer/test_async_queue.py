"""The replay's queue mode for asynchronous on-policy algorithms (IMPALA/APPO): several items deep,
items served ``num_epochs`` times or dropped whole as too stale, and every row accounted for.

Each row carries a unique ``id``, so the tests check exactly which rows were served, how often,
and which were dropped.
"""

from __future__ import annotations

import collections

import numpy as np
import pytest
import torch

from janus import JanusBuffer, JanusConfig
from janus.errors import ConfigError, StagingTimeout

pytestmark = pytest.mark.timeout(60)

ROWS = 2  # rows per put piece (one per env: whole trajectories)
ITEM = 4  # rows per item (two pieces)
EPOCHS = 2
MINIBATCHES = 2


def buffer(depth: int, max_staleness: int | None, overlap: int = 0) -> JanusBuffer:
    cfg = JanusConfig(is_on_policy=True, num_minibatches=MINIBATCHES, g_select=0.5, overlap_collect=overlap,
                      overlap_select=overlap, placement="cpu_pageable", learner_device="cpu")
    return JanusBuffer(cfg, rollout_size=ITEM, num_epochs=EPOCHS, queue_depth=depth, max_staleness=max_staleness, seed=0)


def piece(first_id: int) -> dict[str, np.ndarray]:
    """``ROWS`` rows shaped ``[1, ROWS]``, each a 3-step trajectory tagged by its id."""
    ids = np.arange(first_id, first_id + ROWS, dtype=np.int64)[None]
    return {"id": ids, "obs": np.repeat(ids[..., None].astype(np.float32), 3, axis=-1)}


def served(buf: JanusBuffer, batches: int, timeout: float = 30.0) -> collections.Counter:
    out: collections.Counter = collections.Counter()
    for _ in range(batches):
        batch = buf.get(timeout=timeout)
        assert batch["obs"].shape == (ITEM // MINIBATCHES, 3)  # whole rows: trajectories are never split
        assert torch.equal(batch["obs"][:, 0].long(), batch["id"])
        out.update(batch["id"].tolist())
    return out


def test_items_served_their_epochs_or_dropped_whole() -> None:
    buf = buffer(depth=3, max_staleness=1)
    try:
        buf.set_learner_version(0)
        for first, version in ((0, 0), (2, 0), (4, 0), (6, 0), (8, 1), (10, 1)):  # items 0 and 1 at v0, item 2 at v1
            buf.put(piece(first), timeout=30.0, version=version)
        buf.flush()
        first_item = served(buf, EPOCHS * MINIBATCHES)
        assert first_item == {i: EPOCHS for i in range(4)}  # item 0: each row once per epoch
        buf.set_learner_version(2)  # item 1 (v0) now lags 2 > 1: dropped whole; item 2 (v1) lags 1: kept
        third_item = served(buf, EPOCHS * MINIBATCHES)
        assert third_item == {i: EPOCHS for i in range(8, 12)}
        assert buf.stats.items_dropped_stale == 1  # rows 4..7 were never served, and counted
    finally:
        buf.close()


def test_conservation_with_background_threads() -> None:
    """Collection and selection in threads, the learner's version racing the prefetch: every item is
    served ``EPOCHS`` times or counted as dropped and never served (an item whose serving began is
    served to the end: a batch granted from it may still be reading its slots)."""
    buf = buffer(depth=3, max_staleness=1, overlap=1)
    counts: collections.Counter = collections.Counter()
    try:
        buf.set_learner_version(0)
        for item in range(8):  # items 2k and 2k+1 acted with version k
            for first in range(item * ITEM, (item + 1) * ITEM, ROWS):
                buf.put(piece(first), timeout=30.0, version=item // 2)
            if item % 2:  # then the learner takes a batch and moves on: pair k lags 1, older pairs 2+ (stale)
                counts += served(buf, 1)
                buf.set_learner_version(item // 2 + 1)
        buf.finish_inserts()
        while True:
            try:
                counts += served(buf, 1, timeout=0.5)
            except StagingTimeout:  # drained: nothing more will be granted
                break
    finally:
        buf.close()
    items = {row // ITEM for row in range(8 * ITEM)}
    served_whole = {i for i in items if all(counts[r] == EPOCHS for r in range(i * ITEM, (i + 1) * ITEM))}
    never_served = {i for i in items if not any(counts[r] for r in range(i * ITEM, (i + 1) * ITEM))}
    assert served_whole | never_served == items, counts  # nothing half-served, nothing served thrice
    assert len(never_served) == buf.stats.items_dropped_stale, (sorted(never_served), counts)
    assert served_whole, "the freshest items were trained"


def test_a_deeper_queue_admits_items_ahead_of_the_learner() -> None:
    """Depth 2: a second whole item is written while the first is unserved; a third must wait."""
    buf = buffer(depth=2, max_staleness=None)
    try:
        for first in range(0, 8, ROWS):  # two items
            buf.put(piece(first), timeout=30.0, version=0)
        buf.flush()
        assert buf.rate_limiter.inserted == 8
        buf.put(piece(8), timeout=5.0, version=0)  # staged: the queue holds two unserved items
        buf.flush()
        assert buf.rate_limiter.inserted == 8
        assert served(buf, EPOCHS * MINIBATCHES) == {i: EPOCHS for i in range(4)}
        buf.flush()  # item 0 released: its room goes to the staged piece
        assert buf.rate_limiter.inserted == 10
    finally:
        buf.close()


def test_queue_depth_is_checked() -> None:
    with pytest.raises(ConfigError, match="queue_depth"):
        buffer(depth=0, max_staleness=None)
    with pytest.raises(ConfigError, match="queue_depth.*off-policy"):
        JanusBuffer(JanusConfig(batch_size=4, buffer_capacity=16, placement="cpu_pageable", learner_device="cpu"),
                    queue_depth=2)
