"""FrameStackReplay against an ExperienceBuffer of whole stacks fed the same transitions.

The transitions come from a synthetic producer built like the real one: environments whose
observations are stacks of the last ``k`` frames (padded at reset as Gymnasium 1.4's
``FrameStackObservation`` does), SAME_STEP autoreset with the final observation as ``next_obs``,
random terminations and truncations, n-step windows as ``DQNActor`` emits them (``next_obs`` is the
observation ``n`` steps later, or the final one), pieces ``[T, envs]`` of several workers
interleaved and flattened as the WorkerProxy and CollectionOp do. Frames repeat at random (a static
screen) so that equal frames inside and across stacks are exercised too.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
import torch

from janus.buffer.frames.replay import FrameStackReplay
from janus.buffer.pipeline import JanusBuffer
from janus.buffer.replay.experience import ExperienceBuffer
from janus.config import JanusConfig
from janus.errors import BufferInputError, CheckpointError, ConfigError

FRAME = (6, 7)  # 42 bytes: not a multiple of 8, on purpose


class StackedEnv:
    """One environment seen through a frame stack of ``k`` (reset padding: the first frame repeated)."""

    def __init__(self, rng: np.random.Generator, k: int, frame: tuple[int, ...], padding: str, p_end: float,
                 max_len: int, static: float) -> None:
        self.rng, self.k, self.frame, self.padding = rng, k, frame, padding
        self.p_end, self.max_len, self.static = p_end, max_len, static
        self.reset()

    def _new_frame(self) -> np.ndarray:
        if self.rng.random() < self.static and hasattr(self, "queue"):
            return self.queue[-1].copy()
        return self.rng.integers(0, 256, self.frame, dtype=np.uint8)

    def reset(self) -> None:
        first = self.rng.integers(0, 4, self.frame, dtype=np.uint8)  # resets look alike across envs
        pad = first if self.padding == "reset" else np.zeros(self.frame, np.uint8)
        self.queue, self.t = [pad] * (self.k - 1) + [first], 0

    def step(self) -> tuple[np.ndarray, np.ndarray, bool, bool]:
        """``(obs, next_obs, terminated, truncated)`` of one step; resets after an episode end."""
        obs = np.stack(self.queue)
        self.queue = self.queue[1:] + [self._new_frame()]
        self.t += 1
        term = bool(self.rng.random() < self.p_end)
        trunc = not term and self.t >= self.max_len
        nxt = np.stack(self.queue)
        if term or trunc:
            self.reset()
        return obs, nxt, term, trunc


def nstep_rows(env: StackedEnv, steps: int, n: int, gamma: float = 0.9) -> dict[str, np.ndarray]:
    """n-step transitions of one env, one per step (windows cut by episode ends, as DQNActor)."""
    raw = [env.step() for _ in range(steps + n - 1)]
    rows: dict[str, list[Any]] = {k: [] for k in ("obs", "next_obs", "discount", "terminated", "truncated")}
    for t in range(steps):
        for j in range(n):
            _, nxt, term, trunc = raw[t + j]
            if term or trunc or j == n - 1:
                break
        rows["obs"].append(raw[t][0])
        rows["next_obs"].append(nxt)
        rows["discount"].append(0.0 if term else gamma ** (j + 1))
        rows["terminated"].append(term)
        rows["truncated"].append(trunc)
    return {k: np.stack(v) if k.endswith("obs") else np.array(v) for k, v in rows.items()}


def batches(seed: int, *, workers: int = 2, envs: int = 3, k: int = 4, n: int = 3, pieces: int = 40, T: int = 8,
            per_extend: int = 2, padding: str = "reset", frame: tuple[int, ...] = FRAME, p_end: float = 0.04,
            max_len: int = 40, static: float = 0.2, streams: bool = True, shuffle: bool = True,
            flat: bool = True) -> Iterator[dict[str, np.ndarray]]:
    """Extend batches: ``per_extend`` pieces ``[T, envs]`` each, from ``workers`` workers in a random
    order (``shuffle``) or in turn; ``flat=False``: the pieces themselves, ``[T, envs, ...]``."""
    rng = np.random.default_rng(seed)
    env_rows = [nstep_rows(StackedEnv(rng, k, frame, padding, p_end, max_len, static), pieces * T, n)
                for _ in range(workers * envs)]
    done = [0] * workers  # pieces sent per worker
    order = [w for _ in range(pieces) for w in range(workers)]
    if shuffle:
        rng.shuffle(order)
    out: list[dict[str, np.ndarray]] = []
    for w in order:
        t0 = done[w] * T
        done[w] += 1
        piece = {key: np.stack([env_rows[w * envs + e][key][t0 : t0 + T] for e in range(envs)], axis=1)
                 for key in env_rows[0]}
        piece["action"] = rng.integers(0, 6, (T, envs))
        piece["reward"] = rng.standard_normal((T, envs)).astype(np.float32)
        if streams:
            piece["stream"] = np.broadcast_to(w * envs + np.arange(envs), (T, envs)).astype(np.int64)
        if not flat:
            yield piece
            continue
        out.append({key: v.reshape(T * envs, *v.shape[2:]) for key, v in piece.items()})
        if len(out) == per_extend:
            yield {key: np.concatenate([p[key] for p in out]) for key in out[0]}
            out = []


def assert_batches_equal(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> None:
    assert list(a) == list(b)
    for key in b:
        assert a[key].dtype == b[key].dtype and a[key].shape == b[key].shape, key
        assert torch.equal(a[key], b[key]), key


def live_slots(written: int, capacity: int, live_from: int = 0) -> torch.Tensor:
    """Slots of the keys ``[max(live_from, written - capacity), written)``."""
    keys = torch.arange(max(live_from, written - capacity), written)
    return keys % capacity


@pytest.mark.parametrize("sampler", ["uniform", "prioritized"])
@pytest.mark.parametrize("n,padding", [(3, "reset"), (1, "reset"), (6, "zero")])
def test_samples_equal_a_store_of_whole_stacks(sampler: str, n: int, padding: str) -> None:
    capacity = 400
    replay = FrameStackReplay(capacity, sampler=sampler, seed=3, frame_capacity=800)
    naive = ExperienceBuffer(capacity, sampler=sampler, seed=3)
    rng = np.random.default_rng(1)
    for i, batch in enumerate(batches(7, n=n, padding=padding, pieces=100)):
        keys = replay.extend(batch)
        assert torch.equal(keys, naive.extend({k: torch.from_numpy(v) for k, v in batch.items()}))
        assert len(replay) == len(naive)  # nothing evicted early: the frame ring is large enough
        if i % 3 == 0:
            got, want = replay.sample(64), naive.sample(64)
            assert_batches_equal(got, want)
            if sampler == "prioritized":
                prio = rng.exponential(size=64)
                assert replay.update_priority(got["index"], prio) == naive.update_priority(want["index"], prio)
    # every stored transition, after the frame ring wrapped around 5+ times, across episode ends
    assert replay.frames_written > 5 * replay.frame_capacity
    slots = live_slots(naive.total_written, capacity)
    assert_batches_equal(replay.gather(slots), naive.gather(slots))
    # about one frame per transition (episodes average ~20 steps here; n >= k adds a few per episode)
    assert replay.frames_written / replay.total_written < (1.3 if n >= 4 else 1.1)


@pytest.mark.parametrize("sampler", ["uniform", "prioritized"])
def test_a_small_frame_ring_evicts_transitions_with_their_frames(sampler: str) -> None:
    capacity = 400
    replay = FrameStackReplay(capacity, sampler=sampler, seed=5, frame_capacity=240)
    naive = ExperienceBuffer(capacity, sampler=sampler, seed=5)
    for batch in batches(11, pieces=30):
        replay.extend(batch)
        naive.extend(batch)
        live_from = replay.total_written - len(replay)
        assert 0 < len(replay) < 0.8 * capacity  # transitions went with their frames
        got = replay.sample(128)
        assert bool((got["index"] >= live_from).all())  # never a transition that lost a frame
        want = naive.gather(got["index"] % capacity)
        assert_batches_equal({k: v for k, v in got.items() if k != "weight"}, want)
        if sampler == "prioritized":
            assert bool((got["weight"] > 0).all() and (got["weight"] <= 1).all())
    slots = live_slots(naive.total_written, capacity, live_from)
    assert_batches_equal(replay.gather(slots), naive.gather(slots))
    evicted = torch.arange(live_from - 5, live_from)
    if sampler == "prioritized":  # a uniform replay has no priorities to set (it raises)
        assert replay.update_priority(evicted, torch.ones(5)) == 0  # dropped, not misapplied
    with pytest.raises(BufferInputError, match="evicted"):
        replay.gather(evicted % capacity)


@pytest.mark.parametrize("streams", ["missing", "scrambled"])
def test_producers_that_do_not_fit_the_pattern_are_still_exact(streams: str) -> None:
    capacity = 300
    replay = FrameStackReplay(capacity, seed=2, frame_capacity=2000)
    naive = ExperienceBuffer(capacity, seed=2)
    rng = np.random.default_rng(0)
    for batch in batches(13, pieces=20, streams=streams != "missing"):
        if streams == "scrambled":  # ids that say nothing about which env a row came from
            batch["stream"] = rng.integers(0, 4, len(batch["obs"]))
        replay.extend(batch)
        naive.extend(batch)
        assert_batches_equal(replay.sample(32), naive.sample(32))
    slots = live_slots(naive.total_written, capacity)
    assert_batches_equal(replay.gather(slots), naive.gather(slots))


def test_checkpoint_round_trip(tmp_path: Any) -> None:
    capacity = 300
    replay = FrameStackReplay(capacity, sampler="prioritized", seed=4, frame_capacity=800)
    naive = ExperienceBuffer(capacity, sampler="prioritized", seed=4)
    stream = batches(17, pieces=40)
    for _, batch in zip(range(15), stream):
        replay.extend(batch)
        naive.extend(batch)
        assert len(replay) == len(naive)  # (priorities of evicted transitions would be dropped)
        got = replay.sample(16)
        replay.update_priority(got["index"], torch.rand(16, generator=torch.Generator().manual_seed(1)))
        naive.update_priority(naive.sample(16)["index"], torch.rand(16, generator=torch.Generator().manual_seed(1)))
    replay.save(tmp_path / "replay.pt")
    restored = FrameStackReplay.load(tmp_path / "replay.pt")
    copy = FrameStackReplay(capacity, sampler="prioritized", seed=99, frame_capacity=800)
    copy.load_state_dict(replay.state_dict())
    for batch in stream:  # all three continue identically: same frames, links, streams, trees, RNG
        for r in (replay, restored, copy):
            r.extend(batch)
        naive.extend(batch)
        want = naive.sample(32)
        for r in (replay, restored, copy):
            assert_batches_equal(r.sample(32), want)
    assert restored.frames_written == replay.frames_written and restored.fields == replay.fields
    bad = replay.state_dict()
    bad["frames"] = bad["frames"][:-1]
    before = copy.sample(8)
    with pytest.raises(CheckpointError, match="frames"):
        copy.load_state_dict(bad)
    with pytest.raises(CheckpointError, match="frame_capacity"):
        FrameStackReplay(capacity, sampler="prioritized", frame_capacity=801).load_state_dict(replay.state_dict())
    assert copy.total_written == replay.total_written and copy.sample(8)["index"].shape == before["index"].shape


def test_atari_sized_transitions_take_about_one_frame() -> None:
    capacity = 1500
    replay = FrameStackReplay(capacity, seed=0, frame_capacity=capacity + capacity // 16)
    naive = ExperienceBuffer(capacity, seed=0)
    frame_bytes = 84 * 84
    for batch in batches(19, workers=2, envs=4, n=3, pieces=25, frame=(84, 84), p_end=1 / 400, max_len=10_000,
                         static=0.0, shuffle=False):
        replay.extend(batch)
        naive.extend(batch)
    assert len(replay) == capacity and replay.frames_written / replay.total_written < 1.03
    assert_batches_equal(replay.sample(256), naive.sample(256))
    per_transition = sum(replay.memory_bytes().values()) / capacity
    whole = sum(t.numel() * t.element_size() for t in naive._storage.fields.values()) / capacity
    assert frame_bytes < per_transition < 1.07 * frame_bytes + 128, replay.memory_bytes()
    assert whole > 2 * 4 * frame_bytes  # obs and next_obs stored whole: 8 frames


def test_clear_errors() -> None:
    with pytest.raises(BufferInputError, match="host memory"):
        FrameStackReplay(10, placement="cuda")
    replay = FrameStackReplay(10, frame_capacity=64)
    one = next(batches(0, pieces=1, per_extend=1))
    with pytest.raises(BufferInputError, match="needs fields 'obs' and 'next_obs'"):
        replay.extend({k: v for k, v in one.items() if k != "next_obs"})
    five = {k: v[:5] for k, v in one.items()}
    replay.extend(five)
    with pytest.raises(BufferInputError, match="item shape"):
        replay.extend({**five, "obs": five["obs"][:, :3]})
    with pytest.raises(BufferInputError, match="dtype"):
        replay.extend({**five, "next_obs": five["next_obs"].astype(np.float32)})
    with pytest.raises(BufferInputError, match="stream"):
        replay.extend({**five, "stream": five["stream"].astype(np.float64)})
    with pytest.raises(BufferInputError, match="at most the capacity"):
        replay.extend(one)
    assert replay.total_written == 5  # nothing written by a refused call
    with pytest.raises(BufferInputError, match="frame_capacity"):
        FrameStackReplay(10, frame_capacity=8).extend(five)
    fresh = FrameStackReplay(10, frame_capacity=64)
    with pytest.raises(BufferInputError, match="next_obs"):
        fresh.extend({**five, "next_obs": five["next_obs"][:, :3]})
    assert fresh.fields == {} and fresh.total_written == 0  # the first call fixes nothing when refused


def test_janus_buffer_serves_the_same_batches_with_frame_stack() -> None:
    cfg = JanusConfig(placement="auto", learner_device="cpu", batch_size=32, buffer_capacity=300, g_select=2)
    plain = JanusBuffer(cfg, seed=1, sampler="prioritized")
    framed = JanusBuffer(cfg, seed=1, sampler="prioritized", frame_stack=True)
    try:
        assert isinstance(framed.experience, FrameStackReplay) and framed.experience.placement == "cpu_pageable"
        for i, piece in enumerate(batches(23, pieces=15, flat=False)):
            plain.put(piece)
            framed.put(piece)
            if i:
                got, want = framed.get(timeout=10), plain.get(timeout=10)
                assert_batches_equal(got, want)
                prio = torch.rand(32, generator=torch.Generator().manual_seed(i))
                assert framed.update_priority(got["index"], prio) == plain.update_priority(want["index"], prio)
        assert framed.experience.frames_written < 1.2 * framed.experience.total_written
    finally:
        plain.close()
        framed.close()
    with pytest.raises(ConfigError, match="off-policy"):
        JanusBuffer(JanusConfig(is_on_policy=True, learner_device="cpu"), rollout_size=64, frame_stack=True)


def test_background_collection_and_selection_serve_exact_stacks() -> None:
    """Both overlaps on: a collector thread writes while a selector thread samples."""
    cfg = JanusConfig(placement="auto", learner_device="cpu", batch_size=16, buffer_capacity=1000,
                      overlap_collect=1, overlap_select=1)
    framed = JanusBuffer(cfg, seed=2, frame_stack=True)
    naive = ExperienceBuffer(1000, seed=0)
    try:
        for piece in batches(29, pieces=10, flat=False):
            framed.put(piece)
            naive.extend({k: v.reshape(-1, *v.shape[2:]) for k, v in piece.items()})
        for _ in range(30):
            got = framed.get(timeout=10)
            want = naive.gather(got["index"] % 1000)
            assert_batches_equal(got, want)
    finally:
        framed.close()
    assert not [t for t in framed.threads if t.is_alive()]


@pytest.mark.parametrize("sampler", ["uniform", "prioritized"])
def test_large_held_samples_keep_their_values_while_later_samples_reuse_memory(sampler: str) -> None:
    # 64x64 frames, k=4: a sample of 160 stacks is 10 MiB, memory that ResultMemory hands out again
    replay = FrameStackReplay(600, sampler=sampler, seed=1, frame_capacity=1500)
    for batch in batches(3, pieces=30, frame=(64, 64)):
        replay.extend(batch)
    held = replay.sample(160)
    snapshot = {k: v.clone() for k, v in held.items()}
    addresses = set()
    for _ in range(10):
        out = replay.sample(160)
        addresses.add(out["obs"].data_ptr())
        want = replay.gather(out["index"] % replay.capacity)
        assert_batches_equal({k: v for k, v in out.items() if k != "weight"}, want)
        del out, want
    assert held["obs"].data_ptr() not in addresses and len(addresses) <= 2
    assert_batches_equal(held, snapshot)


@pytest.mark.parametrize("helper", ["_next_u64", "_unit", "_fix_up", "_leaf_of"])
def test_the_helpers_copied_from_the_replay_kernels_are_the_same_code(helper: str) -> None:
    """The frame kernels carry copies of the replay kernels' random-number and tree helpers
    (Numba's cache is keyed by source file, see the module doc of ``_frame_kernels``); a fix made
    to one copy only would draw other items. Compared as syntax trees, without docstrings and
    comments. (``_memcpy`` is not a copy: the frame kernels' copies arrays only.)"""
    import ast
    from pathlib import Path

    import janus.buffer.kernels.frames as frame_kernels
    import janus.buffer.kernels.replay as kernels

    def code(module: Any) -> str:
        tree = ast.parse(Path(module.__file__).read_text())
        node = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == helper)
        body = node.body[1:] if (node.body and isinstance(node.body[0], ast.Expr)
                                 and isinstance(node.body[0].value, ast.Constant)) else node.body
        return ast.dump(ast.Module(body=[*node.decorator_list, node.args, *body], type_ignores=[]))

    assert code(kernels) == code(frame_kernels)
