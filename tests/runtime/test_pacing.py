"""The one pacing object: a two-sided sample/insert ratio, its units and its deadlock rejection."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings, strategies as st

from janus.errors import ConfigError
from janus.runtime.pacing import SampleToInsertRatio


def ratio(**kw) -> SampleToInsertRatio:
    """DQN-like units: pieces of 4 envs x 8 steps = 32 transitions, batches of 128, 64 sampled per insert."""
    args = {"samples_per_insert": 64.0, "min_size_to_sample": 1000, "error_buffer": 4224.0,
            "insert_piece": 32, "sample_batch": 128, "max_in_flight": 4}
    return SampleToInsertRatio(**{**args, **kw})


def test_sample_side_waits_for_min_size_then_follows_the_ratio() -> None:
    lim = ratio()
    assert lim.sample_credits(inserted=999, requested=0, trained=0) == 0, "below min_size_to_sample"
    # at min size: diff = 0, so error_buffer / batch = 33 batches are allowed, capped by 4 in flight
    assert lim.sample_credits(inserted=1000, requested=0, trained=0) == 4
    assert lim.sample_credits(inserted=1000, requested=4, trained=2) == 2, "in-flight bound"
    assert lim.sample_credits(inserted=1000, requested=33, trained=33) == 0, "ratio bound: 4224 / 128 = 33"
    # one more piece (32 transitions x 64 = 2048 sampled transitions) allows 16 more batches
    assert lim.sample_credits(inserted=1032, requested=33, trained=33) == 4
    assert lim.sample_credits(inserted=1032, requested=47, trained=47) == 2  # floor((2048 + 4224 - 47*128) / 128)
    # every insert of the run is in: the ratio no longer bounds, the in-flight bound and min size still do
    assert lim.sample_credits(inserted=1000, requested=33, trained=33, inserts_done=True) == 4
    assert lim.sample_credits(inserted=1000, requested=35, trained=33, inserts_done=True) == 2
    assert lim.sample_credits(inserted=999, requested=0, trained=0, inserts_done=True) == 0
    # in all, whatever is in flight: the batches every credit above adds up to
    assert lim.batches_allowed(1000) == 33 and lim.batches_allowed(1032) == 49


def test_insert_side_counts_pieces_and_batches() -> None:
    lim = ratio()
    # nothing sampled: inserts may run error_buffer / (64 x 32) = 2 pieces past min_size
    assert lim.insert_credits(issued=1000, requested=0) == 2
    assert lim.insert_credits(issued=0, requested=0) == (4224 + 64 * 1000) // (64 * 32)
    assert lim.insert_credits(issued=1064, requested=0) == 0
    # 16 batches sampled = one piece's worth: one more piece
    assert lim.insert_credits(issued=1064, requested=16) == 1


def test_no_ratio_leaves_inserts_unlimited_and_bounds_sampling_by_in_flight() -> None:
    lim = ratio(samples_per_insert=0.0, error_buffer=0.0, min_size_to_sample=128)
    assert not lim.limits_inserts and lim.insert_credits(issued=10**9, requested=0) is None
    assert lim.sample_credits(inserted=127, requested=0, trained=0) == 0
    assert lim.sample_credits(inserted=128, requested=10**6, trained=10**6 - 1) == 3


@pytest.mark.parametrize("error_buffer,why", [(2047.0, "insert_piece"), (100.0, "sample_batch")])
def test_deadlocking_error_buffer_is_rejected(error_buffer: float, why: str) -> None:
    with pytest.raises(ConfigError, match=f"error_buffer.*at least.*{why}.*deadlock"):
        ratio(error_buffer=error_buffer)
    with pytest.raises(ConfigError, match="error_buffer.*at least 128"):  # a batch bigger than a piece's worth
        ratio(samples_per_insert=1.0, error_buffer=64.0)


@pytest.mark.parametrize("field,value", [("samples_per_insert", -1.0), ("min_size_to_sample", 0), ("insert_piece", 0),
                                         ("sample_batch", 0), ("max_in_flight", 0), ("error_buffer", math.inf)])
def test_bad_settings_name_the_field(field: str, value: float) -> None:
    with pytest.raises(ConfigError, match=field):
        ratio(**{field: value})


@settings(max_examples=200, deadline=None)
@given(
    spi=st.floats(0.01, 500.0), piece=st.integers(1, 512), batch=st.integers(1, 512), min_size=st.integers(1, 5000),
    slack=st.floats(1.0, 4.0), in_flight=st.integers(1, 8), steps=st.lists(st.booleans(), min_size=50, max_size=300),
)
def test_accepted_settings_never_deadlock_and_hold_the_bound(
    spi: float, piece: int, batch: int, min_size: int, slack: float, in_flight: int, steps: list[bool],
) -> None:
    """Simulate an insert-heavy or sample-heavy schedule: whichever side the schedule prefers,
    some side can always move, and |diff| stays within the error buffer (once sampling started)."""
    eb = slack * max(spi * piece, batch)
    lim = SampleToInsertRatio(spi, min_size, eb, piece, batch, in_flight)
    inserted = requested = 0
    for prefer_insert in steps:
        can_insert = (lim.insert_credits(inserted, requested) or 0) > 0
        can_sample = lim.sample_credits(inserted, requested, requested) > 0  # everything trained
        assert can_insert or can_sample, f"deadlock at inserted={inserted} requested={requested}"
        if can_insert and (prefer_insert or not can_sample):
            inserted += piece
        else:
            requested += 1
        diff = spi * (inserted - min_size) - requested * batch
        assert diff <= eb + 1e-6, "inserts ran past the error buffer"
        if requested:
            assert diff >= -eb - 1e-6, "samples ran past the error buffer"
