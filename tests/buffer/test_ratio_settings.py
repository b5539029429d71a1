"""The sample/insert ratio's settings: units and deadlock rejection (the RatioLimiter that enforces
them is tested in test_rate_limiter.py)."""

from __future__ import annotations

import math

import pytest

from janus.buffer.rate_limiter import SampleToInsertRatio
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
