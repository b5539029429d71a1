"""benchmarks/sequence_sampler.py's data: janus's overlapping sequences are the same env steps that
TorchRL holds flat, cut within episodes, padded and marked at their ends, and a sample is whole rows."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

import sequence_sampler
from sequence_sampler import JanusSequences, make_steps, sequence_starts


def test_the_steps_are_whole_episodes_of_the_drawn_lengths() -> None:
    steps = make_steps("vec4", 5_000, seed=1)
    assert all(v.shape[0] == 5_000 for v in steps.values())
    ends = np.flatnonzero(steps["done"])
    assert ends[-1] == 4_999 and np.array_equal(np.unique(steps["episode"]), np.arange(len(ends)))
    lengths = np.diff(np.r_[-1, ends])
    assert lengths.min() >= 100 and lengths.sum() == 5_000


@pytest.mark.parametrize("length, overlap", [(8, 4), (20, 0), (80, 40)])
def test_sequences_cover_every_episode_with_the_overlap_and_never_cross_its_end(length: int, overlap: int) -> None:
    episode = np.repeat([0, 1, 2], [100, 157, 80])
    starts, valid = sequence_starts(episode, length, overlap)
    covered = np.zeros(len(episode), int)
    for s, v in zip(starts, valid, strict=True):
        assert 1 <= v <= length and len(set(episode[s : s + v])) == 1  # within one episode
        covered[s : s + v] += 1
    assert covered.min() >= 1  # every step is in a sequence
    assert covered.max() <= (2 if overlap else 1)
    for e in range(3):  # consecutive sequences of an episode start length - overlap apart
        assert set(np.diff(starts[episode[starts] == e]).tolist()) <= {length - overlap}


@pytest.mark.parametrize("prioritized", [False, True])
def test_janus_rows_are_the_flat_steps_padded_at_episode_ends(prioritized: bool) -> None:
    steps = make_steps("vec4", 2_000, seed=2)
    janus = JanusSequences(steps, length=20, overlap=10, prioritized=prioritized, seed=0)
    starts, valid = sequence_starts(steps["episode"], 20, 10)
    assert len(janus.buf) == janus.rows == len(starts)
    batch = janus.sample(64)
    for i, key in enumerate(batch["index"].tolist()):
        s, v = int(starts[key]), int(valid[key])
        np.testing.assert_array_equal(batch["obs"][i, :v].numpy(), steps["obs"][s : s + v])
        np.testing.assert_array_equal(batch["action"][i, :v].numpy(), steps["action"][s : s + v])
        assert batch["done"][i, v:].all()  # the padding is marked done
        assert batch["done"][i, : v - 1].numpy().tolist() == steps["done"][s : s + v - 1].tolist()
    held = janus.bytes_held()
    row = 20 * (16 + 8 + 4 + 1)  # obs, action, reward, done of 20 steps; packed rows are aligned
    assert len(starts) * row <= held["data"] <= len(starts) * (row + 64) and (held["trees"] > 0) == prioritized


def test_the_command_line_runs_janus_alone_without_torchrl(capsys: pytest.CaptureFixture[str]) -> None:
    sequence_sampler.main(["--quick", "--obs", "vec4", "--lengths", "8", "--batches", "4", "--libs", "janus",
                           "--steps", "1000", "--trials", "1", "--target_s", "0.001"])
    out = capsys.readouterr().out
    assert "| vec4 | 8 | 4 | sample |" in out and "| vec4 | 8 | 4 | sample+update |" in out
    assert "janus (overlap 4)" in out
