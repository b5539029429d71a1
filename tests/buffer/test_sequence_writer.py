"""SequenceWriter: fixed-length overlapping sequences, padding at a worker's start, states and episode ends,
checked by hand on small step streams (a step's value is its global step number, so each sequence says
which steps it holds)."""

from __future__ import annotations

import numpy as np
import pytest

from janus.buffer.sequence_writer import SequenceWriter
from janus.errors import BufferInputError, ConfigError


def piece(start: int, period: int, envs: int, done_at: tuple[tuple[int, int], ...] = ()) -> tuple[dict, np.ndarray, np.ndarray]:
    """Steps ``start .. start+period-1`` of ``envs`` envs: obs = 100*env + step, the state each step acted
    from = [step, -step] (float), done where ``(step, env)`` is in ``done_at``."""
    t = np.arange(start, start + period)[:, None]
    e = np.arange(envs)[None, :]
    obs = (100 * e + t).astype(np.float32)
    state = np.stack([np.broadcast_to(t, obs.shape), -np.broadcast_to(t, obs.shape)], -1).astype(np.float32)
    done = np.zeros((period, envs), dtype=bool)
    for step, env in done_at:
        if start <= step < start + period:
            done[step - start, env] = True
    return {"obs": obs, "action": np.broadcast_to(t, obs.shape).astype(np.int64)}, state, done


def test_first_piece_is_padded_before_the_workers_first_step() -> None:
    writer = SequenceWriter(num_envs=2, seq_len=5, period=3, state_size=2)
    out = writer.write(*piece(0, 3, 2))
    assert out["obs"].shape == (2, 5) and out["action"].dtype == np.int64
    np.testing.assert_array_equal(out["obs"][0], [0, 0, 0, 1, 2])
    np.testing.assert_array_equal(out["obs"][1], [0, 0, 100, 101, 102])
    np.testing.assert_array_equal(out["mask"], [[0, 0, 1, 1, 1]] * 2)
    np.testing.assert_array_equal(out["first"], [[0, 0, 1, 0, 0]] * 2)  # the worker's first step begins an episode
    np.testing.assert_array_equal(out["state"], np.zeros((2, 2)))  # the padding's state: zeros
    assert out["state"].dtype == np.float32 and out["mask"].dtype == bool and out["first"].dtype == bool


def test_consecutive_sequences_overlap_by_seq_len_minus_period() -> None:
    writer = SequenceWriter(num_envs=1, seq_len=5, period=3, state_size=2)
    assert writer.overlap == 2
    writer.write(*piece(0, 3, 1))
    second = writer.write(*piece(3, 3, 1))
    third = writer.write(*piece(6, 3, 1))
    np.testing.assert_array_equal(second["obs"][0], [1, 2, 3, 4, 5])
    np.testing.assert_array_equal(third["obs"][0], [4, 5, 6, 7, 8])
    np.testing.assert_array_equal(second["mask"], [[1, 1, 1, 1, 1]])
    np.testing.assert_array_equal(second["first"], [[0, 0, 0, 0, 0]])
    np.testing.assert_array_equal(second["state"][0], [1, -1])  # the state its first step (step 1) acted from
    np.testing.assert_array_equal(third["state"][0], [4, -4])


def test_every_piece_emits_one_sequence_per_env_whatever_the_episode_ends() -> None:
    writer = SequenceWriter(num_envs=3, seq_len=4, period=4, state_size=0)  # no overlap, no state field
    for start in range(0, 16, 4):
        out = writer.write(*piece(start, 4, 3, done_at=((1, 0), (5, 1), (6, 1), (15, 2))))
        assert out["obs"].shape == (3, 4) and "state" not in out
        np.testing.assert_array_equal(out["obs"][:, 0], [start, 100 + start, 200 + start])
    assert writer.overlap == 0


def test_episode_ends_set_first_on_the_next_step_across_pieces() -> None:
    writer = SequenceWriter(num_envs=2, seq_len=4, period=2, state_size=2)
    # env 0 ends an episode at step 1 (the last of the first piece): step 2 begins one; env 1 ends at step 2
    writer.write(*piece(0, 2, 2, done_at=((1, 0), (2, 1))))
    out = writer.write(*piece(2, 2, 2, done_at=((1, 0), (2, 1))))
    np.testing.assert_array_equal(out["obs"][0], [0, 1, 2, 3])
    np.testing.assert_array_equal(out["first"][0], [1, 0, 1, 0])
    np.testing.assert_array_equal(out["first"][1], [1, 0, 0, 1])
    np.testing.assert_array_equal(out["mask"], [[1, 1, 1, 1]] * 2)
    later = writer.write(*piece(4, 2, 2))
    np.testing.assert_array_equal(later["first"][0], [1, 0, 0, 0])  # step 2 still begins env 0's episode
    np.testing.assert_array_equal(later["first"][1], [0, 1, 0, 0])


def test_state_is_the_one_its_first_step_acted_from_also_in_padding() -> None:
    writer = SequenceWriter(num_envs=1, seq_len=6, period=2, state_size=2)
    first = writer.write(*piece(0, 2, 1))
    second = writer.write(*piece(2, 2, 1))
    third = writer.write(*piece(4, 2, 1))
    fourth = writer.write(*piece(6, 2, 1))
    np.testing.assert_array_equal(first["mask"][0], [0, 0, 0, 0, 1, 1])
    np.testing.assert_array_equal(second["mask"][0], [0, 0, 1, 1, 1, 1])
    np.testing.assert_array_equal(third["mask"][0], [1] * 6)
    np.testing.assert_array_equal([s["state"][0, 0] for s in (first, second, third, fourth)], [0, 0, 0, 2])


def test_a_new_writer_pads_again_as_a_restarted_worker_does() -> None:
    SequenceWriter(num_envs=1, seq_len=3, period=1, state_size=0).write(*piece(0, 1, 1))
    restarted = SequenceWriter(num_envs=1, seq_len=3, period=1, state_size=0)
    out = restarted.write(*piece(7, 1, 1))
    np.testing.assert_array_equal(out["obs"][0], [0, 0, 7])
    np.testing.assert_array_equal(out["mask"][0], [0, 0, 1])


def test_refuses_a_period_longer_than_the_sequence_and_bad_sizes() -> None:
    with pytest.raises(ConfigError, match="skip 2 steps"):
        SequenceWriter(num_envs=1, seq_len=4, period=6, state_size=0)
    with pytest.raises(ConfigError, match="seq_len"):
        SequenceWriter(num_envs=1, seq_len=0, period=1, state_size=0)
    with pytest.raises(ConfigError, match="num_envs"):
        SequenceWriter(num_envs=0, seq_len=2, period=1, state_size=0)


def test_refuses_misshapen_steps() -> None:
    writer = SequenceWriter(num_envs=2, seq_len=4, period=2, state_size=2)
    steps, state, done = piece(0, 2, 2)
    with pytest.raises(BufferInputError, match="field 'obs'"):
        writer.write({"obs": steps["obs"][:1]}, state, done)
    with pytest.raises(BufferInputError, match="state has shape"):
        writer.write(steps, state[..., :1], done)
    with pytest.raises(BufferInputError, match="done has shape"):
        writer.write(steps, state, done[:1])
    with pytest.raises(BufferInputError, match="the writer adds"):
        writer.write({**steps, "mask": done}, state, done)
