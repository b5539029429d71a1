"""The sample/insert ratio's settings: units and deadlock rejection (the RatioLimiter that enforces
them is tested in test_rate_limiter.py)."""

from __future__ import annotations

import math

import pytest

from janus.buffer.pacing.ratio_limiter import SampleToInsertRatio
from janus.errors import ConfigError


def ratio(**kw) -> SampleToInsertRatio:
    """DQN-like units: pieces of 4 envs x 8 steps = 32 transitions, batches of 128, 64 sampled per insert."""
    args = {"samples_per_insert": 64.0, "min_size_to_sample": 1000, "error_buffer": 4224.0,
            "insert_piece": 32, "sample_batch": 128}
    return SampleToInsertRatio(**{**args, **kw})


@pytest.mark.parametrize("error_buffer,why", [(2047.0, "insert_piece"), (100.0, "sample_batch")])
def test_deadlocking_error_buffer_is_rejected(error_buffer: float, why: str) -> None:
    with pytest.raises(ConfigError, match=f"error_buffer.*at least.*{why}.*deadlock"):
        ratio(error_buffer=error_buffer)
    with pytest.raises(ConfigError, match="error_buffer.*at least 128"):  # a batch bigger than a piece's worth
        ratio(samples_per_insert=1.0, error_buffer=64.0)


@pytest.mark.parametrize("field,value", [("samples_per_insert", -1.0), ("min_size_to_sample", 0), ("insert_piece", 0),
                                         ("sample_batch", 0), ("error_buffer", math.inf)])
def test_bad_settings_name_the_field(field: str, value: float) -> None:
    with pytest.raises(ConfigError, match=field):
        ratio(**{field: value})


@pytest.mark.parametrize("overlap", [0, 1])
def test_a_collection_unit_the_ratio_could_never_admit_whole_is_written_a_piece_at_a_time(overlap: int) -> None:
    """g_collect pieces worth more than error_buffer: never a deadlock, never an error (a kill-resume
    run with g_collect 4 failed so); only a single piece that large is refused."""
    import numpy as np

    from janus.buffer.pipeline import JanusBuffer
    from janus.config import JanusConfig
    from janus.errors import StagingTimeout

    # 8-transition pieces, 4 per collection = 32 transitions, worth 64 sampled; error_buffer 24 admits one piece
    buffer = JanusBuffer(JanusConfig(batch_size=8, buffer_capacity=1000, g_collect=4, actor_buffer_size=8,
                                     overlap_collect=overlap, overlap_select=0),
                         min_size=8, samples_per_insert=2.0, error_buffer=24.0)
    piece = {"obs": np.zeros((8, 1, 4), np.float32)}
    def learn() -> None:
        for _ in range(100):  # the learner takes what the ratio allows
            try:
                buffer.get(timeout=0.05)
            except StagingTimeout:
                return

    try:
        for _ in range(8):
            buffer.put(piece, timeout=5.0)
            learn()
        assert buffer.stats.transitions_collected >= 24, "units of 4 pieces went in one piece at a time"
        for _ in range(10):  # below the granularity: flush writes what the ratio admits, as it admits it
            buffer.flush()
            learn()
        assert buffer.stats.transitions_collected == 64 and buffer.failure is None
    finally:
        buffer.close()
    with pytest.raises(ConfigError, match="could hold it back for ever"):
        JanusBuffer(JanusConfig(batch_size=8, buffer_capacity=1000), min_size=8, samples_per_insert=2.0,
                    error_buffer=24.0).put({"obs": np.zeros((16, 1, 4), np.float32)})
