"""ExperienceBuffer (uniform sampler): keys, ring wrap-around, sampling, validation, priorities,
checkpoints and placements.

The main behaviours run for every placement this machine supports: ``cpu_pageable`` always,
``cuda`` and ``cpu_pinned`` only where CUDA is available.
"""

from __future__ import annotations

import os
import pickle
from pathlib import Path

import numpy as np
import pytest
import torch

from janus.buffer.replay.experience import ExperienceBuffer
from janus.errors import (
    BufferEmptyError,
    BufferInputError,
    BufferTypeError,
    CheckpointError,
    JanusError,
    PlacementUnavailableError,
)

pytestmark = [
    pytest.mark.timeout(30),
    pytest.mark.filterwarnings("ignore:Detected pickle protocol:UserWarning"),
]

HAS_CUDA = torch.cuda.is_available()
needs_cuda = pytest.mark.skipif(not HAS_CUDA, reason="CUDA not available on this machine")
without_cuda = pytest.mark.skipif(HAS_CUDA, reason="checks the error raised where CUDA is absent")

PLACEMENTS = [
    "cpu_pageable",
    pytest.param("cuda", marks=[needs_cuda, pytest.mark.cuda]),
    pytest.param("cpu_pinned", marks=[needs_cuda, pytest.mark.cuda]),
]


@pytest.fixture(params=PLACEMENTS)
def placement(request) -> str:
    return request.param


def batch(keys, obs_dim: int = 3) -> dict[str, torch.Tensor]:
    """A batch whose rows are identified by ``keys``: obs = key * 10 + [0, 1, 2], key stored too."""
    keys = torch.as_tensor(keys, dtype=torch.long)
    obs = keys.to(torch.float32)[:, None] * 10 + torch.arange(obs_dim, dtype=torch.float32)
    return {"obs": obs, "key": keys.clone(), "done": (keys % 2 == 0)}


def contents(buf: ExperienceBuffer) -> dict[str, torch.Tensor]:
    """Every stored row, sorted by key (read with a non-shuffled epoch: no RNG is consumed)."""
    parts = list(buf.epoch(max(1, len(buf)), shuffle=False))
    out = {k: torch.cat([p[k].cpu() for p in parts]) for k in parts[0]}
    order = torch.argsort(out["index"])
    return {k: v[order] for k, v in out.items()}


def snapshot(buf: ExperienceBuffer):
    data = contents(buf) if len(buf) else {}
    return (
        len(buf),
        buf.total_written,
        buf.fields,
        {k: v.clone() for k, v in data.items()},
        buf.sampler.state_dict()["rng_state"].clone(),
    )


def assert_same_snapshot(a, b) -> None:
    assert a[0] == b[0] and a[1] == b[1] and a[2] == b[2]
    assert a[3].keys() == b[3].keys()
    for k in a[3]:
        assert torch.equal(a[3][k], b[3][k]), k
    assert torch.equal(a[4], b[4])


def check_rows_match_keys(out: dict[str, torch.Tensor]) -> None:
    idx = out["index"].cpu()
    assert torch.equal(out["key"].cpu(), idx)
    expected = batch(idx)
    assert torch.equal(out["obs"].cpu(), expected["obs"])
    assert torch.equal(out["done"].cpu(), expected["done"])


# ---------------------------------------------------------------------------------------------
# writing, keys, wrap-around
# ---------------------------------------------------------------------------------------------


def test_extend_returns_consecutive_keys_len_and_capacity(placement):
    buf = ExperienceBuffer(10, placement=placement, seed=0)
    assert len(buf) == 0 and buf.capacity == 10 and buf.total_written == 0
    assert buf.fields == {}
    k1 = buf.extend(batch(range(4)))
    assert k1.tolist() == [0, 1, 2, 3]
    assert len(buf) == 4
    k2 = buf.extend(batch(range(4, 7)))
    assert k2.tolist() == [4, 5, 6]
    assert len(buf) == 7
    k3 = buf.extend(batch(range(7, 15)))  # wraps
    assert k3.tolist() == list(range(7, 15))
    assert len(buf) == 10 and buf.capacity == 10 and buf.total_written == 15
    assert buf.fields["obs"] == ((3,), torch.float32)
    assert buf.fields["key"] == ((), torch.long)
    assert buf.fields["done"] == ((), torch.bool)


@pytest.mark.parametrize("chunks", [[3, 3, 3, 3, 3], [7, 7, 7], [10, 10, 1], [1] * 23, [9, 2, 9, 5]])
def test_wraparound_keeps_newest_capacity_items(placement, chunks):
    cap = 10
    buf = ExperienceBuffer(cap, placement=placement, seed=0)
    start = 0
    for n in chunks:
        keys = buf.extend(batch(range(start, start + n)))
        assert keys.tolist() == list(range(start, start + n))
        start += n
    total = start
    assert len(buf) == min(cap, total)
    data = contents(buf)
    newest = list(range(max(0, total - cap), total))
    assert data["index"].tolist() == newest
    check_rows_match_keys(data)


def test_sample_only_returns_written_items(placement):
    buf = ExperienceBuffer(1000, placement=placement, seed=3)
    buf.extend(batch(range(5)))
    for _ in range(20):
        out = buf.sample(256)
        assert out["obs"].shape == (256, 3)
        assert not torch.isnan(out["obs"]).any()  # unwritten storage is NaN-poisoned
        assert (out["key"] >= 0).all()  # ... and -1 for signed ints
        assert set(out["index"].cpu().tolist()) <= set(range(5))
        check_rows_match_keys(out)
    # Every written item can come up.
    seen = torch.cat([buf.sample(64)["index"].cpu() for _ in range(20)])
    assert set(seen.tolist()) == set(range(5))


def test_sample_rows_match_keys_after_wraparound(placement):
    cap = 16
    buf = ExperienceBuffer(cap, placement=placement, seed=1)
    written = 0
    for n in (5, 11, 7, 13, 3):
        buf.extend(batch(range(written, written + n)))
        written += n
        out = buf.sample(64)
        idx = out["index"].cpu()
        assert out["index"].dtype == torch.long
        assert ((idx >= max(0, written - cap)) & (idx < written)).all()
        check_rows_match_keys(out)


def test_samples_share_no_memory_with_storage(placement):
    buf = ExperienceBuffer(8, placement=placement, seed=0)
    buf.extend(batch(range(8)))
    before = contents(buf)
    out = buf.sample(32)
    for k in ("obs", "key", "done"):
        out[k].zero_()
    out["index"].fill_(-7)
    after = contents(buf)
    for k in before:
        assert torch.equal(before[k], after[k]), k
    again = buf.sample(32)
    check_rows_match_keys(again)
    # The same holds for epoch() minibatches.
    for mb in buf.epoch(3, shuffle=False):
        mb["obs"].fill_(float("nan"))
    for k, v in contents(buf).items():
        assert torch.equal(before[k], v), k


def test_same_seed_same_sample_sequence(placement):
    def run(seed):
        buf = ExperienceBuffer(500, placement=placement, seed=seed)
        buf.extend(batch(range(300)))
        seq = [buf.sample(32)["index"].cpu() for _ in range(5)]
        buf.extend(batch(range(300, 600)))
        seq += [buf.sample(32)["index"].cpu() for _ in range(5)]
        return torch.cat(seq)

    a, b, c = run(11), run(11), run(12)
    assert torch.equal(a, b)
    assert not torch.equal(a, c)


@pytest.mark.parametrize("n,batch_size", [(10, 3), (10, 10), (10, 64), (37, 5)])
def test_epoch_covers_every_item_exactly_once(placement, n, batch_size):
    buf = ExperienceBuffer(max(n, 10), placement=placement, seed=0)
    buf.extend(batch(range(n)))
    mbs = list(buf.epoch(batch_size))
    assert [len(m["index"]) for m in mbs[:-1]] == [batch_size] * (len(mbs) - 1)
    idx = torch.cat([m["index"].cpu() for m in mbs])
    assert sorted(idx.tolist()) == list(range(n))
    for m in mbs:
        check_rows_match_keys(m)


def test_epoch_after_wraparound_covers_live_items(placement):
    buf = ExperienceBuffer(12, placement=placement, seed=5)
    buf.extend(batch(range(9)))
    buf.extend(batch(range(9, 20)))
    idx = torch.cat([m["index"].cpu() for m in buf.epoch(5)])
    assert sorted(idx.tolist()) == list(range(8, 20))


@pytest.mark.parametrize("placement", PLACEMENTS)
@pytest.mark.parametrize("output", ["torch", "numpy"])
def test_unshuffled_epoch_is_oldest_first(placement, output):
    """epoch(shuffle=False) went in slot order: after wrap-around the newest items came before the
    oldest (keys 12..19, then 8..11 here), which breaks anything computed along time (returns, GAE).
    It now goes from the oldest item to the newest."""
    if output == "numpy" and placement == "cuda":
        pytest.skip("numpy results need a host placement")
    buf = ExperienceBuffer(12, placement=placement, seed=5, output=output)
    buf.extend(batch(range(5)))
    assert [int(k) for m in buf.epoch(2, shuffle=False) for k in m["index"]] == list(range(5))
    buf.extend(batch(range(5, 9)))
    buf.extend(batch(range(9, 20)))
    minibatches = list(buf.epoch(5, shuffle=False))
    assert [int(k) for m in minibatches for k in m["index"]] == list(range(8, 20))
    assert [int(k) for m in minibatches for k in m["key"]] == list(range(8, 20))


def test_epoch_shuffles_differently_each_time_but_deterministically():
    def orders(seed):
        buf = ExperienceBuffer(200, seed=seed)
        buf.extend(batch(range(200)))
        return [torch.cat([m["index"] for m in buf.epoch(50)]) for _ in range(2)]

    a, b = orders(4), orders(4)
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
    assert not torch.equal(a[0], a[1])
    assert not torch.equal(a[0], torch.arange(200))


def test_numpy_input_accepted(placement):
    buf = ExperienceBuffer(20, placement=placement, seed=0)
    keys = np.arange(6, dtype=np.int64)
    obs = (keys[:, None] * 10 + np.arange(3)).astype(np.float32)
    buf.extend({"obs": obs, "key": keys, "done": keys % 2 == 0})
    # mixing numpy and torch after the first extend is fine when dtypes match
    more = batch(range(6, 9))
    buf.extend({"obs": more["obs"].numpy(), "key": more["key"], "done": more["done"].numpy()})
    out = buf.sample(50)
    assert isinstance(out["obs"], torch.Tensor) and out["obs"].dtype == torch.float32
    assert out["key"].dtype == torch.int64 and out["done"].dtype == torch.bool
    check_rows_match_keys(out)
    assert contents(buf)["index"].tolist() == list(range(9))


def test_non_contiguous_and_grad_inputs(placement):
    buf = ExperienceBuffer(20, placement=placement, seed=0)
    b = batch(range(8))
    obs_t = b["obs"].t().contiguous().t()  # non-contiguous view with the same values
    assert not obs_t.is_contiguous()
    buf.extend({"obs": obs_t.requires_grad_(True), "key": b["key"], "done": b["done"]})
    check_rows_match_keys(contents(buf))


# ---------------------------------------------------------------------------------------------
# validation: errors leave the buffer unchanged
# ---------------------------------------------------------------------------------------------


def _bad_extends():
    good = batch(range(3))
    return {
        "missing field": ({"obs": good["obs"], "key": good["key"]}, BufferInputError),
        "extra field": ({**good, "reward": torch.zeros(3)}, BufferInputError),
        "wrong item shape": ({**good, "obs": torch.zeros(3, 4)}, BufferInputError),
        "wrong item rank": ({**good, "obs": torch.zeros(3, 3, 1)}, BufferInputError),
        "wrong dtype": ({**good, "obs": good["obs"].double()}, BufferInputError),
        "wrong numpy dtype": ({**good, "key": good["key"].numpy().astype(np.int32)}, BufferInputError),
        "mismatched batch sizes": ({**good, "key": torch.arange(4)}, BufferInputError),
        "empty batch": ({k: v[:0] for k, v in good.items()}, BufferInputError),
        "batch larger than capacity": (batch(range(11)), BufferInputError),
        "scalar field": ({**good, "key": torch.tensor(3)}, BufferInputError),
        "non-mapping": ([good["obs"], good["key"]], BufferTypeError),
        "empty mapping": ({}, BufferTypeError),
        "python list field": ({**good, "key": [0, 1, 2]}, BufferTypeError),
        "object array": ({**good, "key": np.array([0, 1, None], dtype=object)}, BufferTypeError),
    }


@pytest.mark.parametrize("case", list(_bad_extends()))
def test_invalid_extend_raises_and_leaves_state_unchanged(placement, case):
    data, err = _bad_extends()[case]
    buf = ExperienceBuffer(10, placement=placement, seed=0)
    buf.extend(batch(range(7)))
    before = snapshot(buf)
    with pytest.raises(err) as info:
        buf.extend(data)
    assert isinstance(info.value, JanusError)
    builtin = ValueError if err is BufferInputError else TypeError
    assert isinstance(info.value, builtin)
    assert_same_snapshot(before, snapshot(buf))
    # The buffer is still usable and the next key continues where it was.
    assert buf.extend(batch(range(7, 9))).tolist() == [7, 8]
    check_rows_match_keys(contents(buf))


def test_invalid_first_extend_allocates_nothing():
    buf = ExperienceBuffer(4, seed=0)
    with pytest.raises(BufferInputError):
        buf.extend(batch(range(5)))  # larger than capacity
    with pytest.raises(BufferInputError):
        buf.extend({"obs": torch.zeros(2, 3), "key": torch.zeros(3)})
    assert len(buf) == 0 and buf.total_written == 0 and buf.fields == {}
    # A different layout is still accepted as the first real extend.
    assert buf.extend({"x": torch.ones(2, 5)}).tolist() == [0, 1]
    assert buf.fields == {"x": ((5,), torch.float32)}


def test_error_messages_name_the_problem():
    buf = ExperienceBuffer(10, seed=0)
    buf.extend(batch(range(3)))
    with pytest.raises(BufferInputError, match="missing.*'done'"):
        buf.extend({"obs": torch.zeros(2, 3), "key": torch.zeros(2, dtype=torch.long)})
    with pytest.raises(BufferInputError, match="'obs'.*dtype"):
        buf.extend({**batch(range(2)), "obs": torch.zeros(2, 3, dtype=torch.float64)})
    with pytest.raises(BufferInputError, match="capacity"):
        buf.extend(batch(range(11)))


@pytest.mark.parametrize("bad", [0, -1, 2.5, True, "4", None])
def test_sample_bad_batch_size(bad):
    buf = ExperienceBuffer(10, seed=0)
    buf.extend(batch(range(3)))
    before = snapshot(buf)
    with pytest.raises(BufferInputError) as info:
        buf.sample(bad)
    assert isinstance(info.value, ValueError)
    assert_same_snapshot(before, snapshot(buf))


def test_sample_and_epoch_before_data_raise_buffer_empty():
    buf = ExperienceBuffer(10, seed=0)
    with pytest.raises(BufferEmptyError) as info:
        buf.sample(1)
    assert isinstance(info.value, RuntimeError) and isinstance(info.value, JanusError)
    with pytest.raises(BufferEmptyError):
        next(buf.epoch(2))
    assert len(buf) == 0


@pytest.mark.parametrize("declared", [False, True])
@pytest.mark.parametrize("slots", [[], [0]])
def test_gather_before_data_raises_buffer_empty(declared, slots):
    """gather() on an empty buffer said what sample() and epoch() say; before, an undeclared one
    crashed inside the compiled kernel (a Numba TypingError: no storage yet)."""
    buf = ExperienceBuffer(10, seed=0, fields={"x": ((), "float32")} if declared else None)
    with pytest.raises(BufferEmptyError, match="empty"):
        buf.gather(slots)


def test_frame_replay_gather_before_data_raises_buffer_empty():
    from janus import FrameStackReplay

    with pytest.raises(BufferEmptyError, match="empty"):
        FrameStackReplay(10).gather([])  # was a bare AssertionError


@pytest.mark.parametrize("bad", [0, -3, 1.5, True, "10"])
def test_bad_capacity(bad):
    with pytest.raises(BufferInputError):
        ExperienceBuffer(bad)


def test_bad_sampler_and_placement_names():
    with pytest.raises(ValueError, match="sampler"):
        ExperienceBuffer(10, sampler="lifo")
    with pytest.raises(ValueError, match="placement"):
        ExperienceBuffer(10, placement="gpu")


# ---------------------------------------------------------------------------------------------
# priorities (validated, stale keys dropped, count returned; a uniform buffer refuses them)
# ---------------------------------------------------------------------------------------------


def test_update_priority_drops_stale_keys_and_returns_applied_count():
    buf = ExperienceBuffer(8, sampler="prioritized", seed=0)
    buf.extend(batch(range(8)))
    sampled = buf.sample(16)["index"]
    assert buf.update_priority(sampled, torch.ones(16)) == 16
    buf.extend(batch(range(8, 12)))  # overwrites keys 0..3
    assert buf.update_priority([0, 1, 4, 5, 8, 11], [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]) == 4
    assert buf.update_priority(torch.tensor([0, 1, 2, 3]), torch.ones(4)) == 0
    assert buf.update_priority([], []) == 0
    assert buf.update_priority(np.array([4, 11]), np.array([0.0, 7.0])) == 2


@pytest.mark.parametrize(
    "index,priority,match",
    [
        ([8], [1.0], "index"),  # not written yet
        ([-1], [1.0], "index"),
        ([0, 1], [1.0], "lengths differ"),
        ([0], [float("nan")], "priority"),
        ([0], [float("inf")], "priority"),
        ([0], [-0.5], "priority"),
        ([0.5], [1.0], "index"),  # float keys
    ],
)
def test_update_priority_rejects_bad_input(index, priority, match):
    buf = ExperienceBuffer(8, sampler="prioritized", seed=0)
    buf.extend(batch(range(8)))
    before = snapshot(buf)
    with pytest.raises(BufferInputError, match=match):
        buf.update_priority(index, priority)
    assert_same_snapshot(before, snapshot(buf))


def test_update_priority_on_empty_buffer_rejects_any_key():
    buf = ExperienceBuffer(8, sampler="prioritized", seed=0)
    with pytest.raises(BufferInputError):
        buf.update_priority([0], [1.0])


# ---------------------------------------------------------------------------------------------
# checkpoints
# ---------------------------------------------------------------------------------------------


def test_save_load_round_trip(tmp_path, placement):
    buf = ExperienceBuffer(16, placement=placement, seed=9)
    buf.extend(batch(range(10)))
    buf.extend(batch(range(10, 21)))  # wrapped: keys 5..20 live
    buf.sample(8)  # advance the RNG so the saved state is not the initial one
    path = tmp_path / "ckpt" / "buf.pt"
    buf.save(path)
    assert path.is_file()
    assert [p.name for p in path.parent.iterdir()] == ["buf.pt"]  # no temporary left behind

    loaded = ExperienceBuffer.load(path)
    assert len(loaded) == len(buf) == 16
    assert loaded.total_written == buf.total_written == 21
    assert loaded.capacity == 16 and loaded.placement == placement
    assert loaded.fields == buf.fields
    a, b = contents(buf), contents(loaded)
    for k in a:
        assert torch.equal(a[k], b[k]), k
    for _ in range(5):
        sa, sb = buf.sample(32), loaded.sample(32)
        for k in sa:
            assert torch.equal(sa[k].cpu(), sb[k].cpu()), k
    ea = torch.cat([m["index"].cpu() for m in buf.epoch(5)])
    eb = torch.cat([m["index"].cpu() for m in loaded.epoch(5)])
    assert torch.equal(ea, eb)
    # Both continue writing with the same keys.
    assert buf.extend(batch([21])).tolist() == loaded.extend(batch([21])).tolist() == [21]


def test_save_load_empty_buffer(tmp_path):
    buf = ExperienceBuffer(5, seed=1)
    buf.save(tmp_path / "empty.pt")
    loaded = ExperienceBuffer.load(tmp_path / "empty.pt")
    assert len(loaded) == 0 and loaded.fields == {}
    with pytest.raises(BufferEmptyError):
        loaded.sample(1)
    loaded.extend(batch(range(3)))
    check_rows_match_keys(loaded.sample(4))


def test_save_overwrites_previous_checkpoint(tmp_path):
    path = tmp_path / "buf.pt"
    buf = ExperienceBuffer(5, seed=1)
    buf.extend(batch(range(2)))
    buf.save(path)
    buf.extend(batch(range(2, 4)))
    buf.save(path)
    assert ExperienceBuffer.load(path).total_written == 4


def test_load_state_dict_into_incompatible_buffer():
    buf = ExperienceBuffer(5, seed=1)
    buf.extend(batch(range(2)))
    with pytest.raises(CheckpointError, match="capacity"):
        ExperienceBuffer(6).load_state_dict(buf.state_dict())


def _real_checkpoint(tmp_path: Path) -> Path:
    buf = ExperienceBuffer(64, seed=0)
    buf.extend(batch(range(64)))
    path = tmp_path / "real.pt"
    buf.save(path)
    return path


def test_load_missing_file(tmp_path):
    with pytest.raises(CheckpointError, match="not found"):
        ExperienceBuffer.load(tmp_path / "nope.pt")
    with pytest.raises(CheckpointError):
        ExperienceBuffer.load(tmp_path)  # a directory


def test_load_truncated_file(tmp_path):
    real = _real_checkpoint(tmp_path)
    blob = real.read_bytes()
    for cut in (len(blob) // 2, 10, 0):
        bad = tmp_path / f"truncated_{cut}.pt"
        bad.write_bytes(blob[:cut])
        with pytest.raises(CheckpointError) as info:
            ExperienceBuffer.load(bad)
        assert isinstance(info.value, ValueError)
        assert str(bad) in str(info.value)


def test_load_foreign_files(tmp_path):
    plain = tmp_path / "plain.pt"
    torch.save({"weights": torch.zeros(3), "step": 4}, plain)
    text = tmp_path / "notes.txt"
    text.write_text("capacity: 10\nthis is not a checkpoint\n")
    pickled = tmp_path / "list.pkl"
    with open(pickled, "wb") as f:
        pickle.dump([1, 2, 3], f)
    wrong_version = tmp_path / "v99.pt"
    torch.save({"format": "janus.experience_buffer", "version": 99, "state": {}}, wrong_version)
    for path in (plain, text, pickled, wrong_version):
        with pytest.raises(CheckpointError):
            ExperienceBuffer.load(path)


class _Evil:
    """Unpickling this runs a shell command that creates a marker file."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch '{self.marker}'",))


def test_malicious_pickle_is_refused_and_not_executed(tmp_path):
    marker = tmp_path / "PWNED"
    evil_pickle = tmp_path / "evil.pkl"
    with open(evil_pickle, "wb") as f:
        pickle.dump(_Evil(marker), f)
    # A "checkpoint" with the right header whose state hides the payload.
    evil_ckpt = tmp_path / "evil.pt"
    torch.save({"format": "janus.experience_buffer", "version": 1, "state": {"x": _Evil(marker)}}, evil_ckpt)
    assert not marker.exists()
    for path in (evil_pickle, evil_ckpt):
        with pytest.raises(CheckpointError):
            ExperienceBuffer.load(path)
        assert not marker.exists(), "loading a checkpoint executed pickled code"
    # Sanity check that the payload is real: a plain unpickle does run it.
    with open(evil_pickle, "rb") as f:
        pickle.load(f)
    assert marker.exists()


# ---------------------------------------------------------------------------------------------
# placements
# ---------------------------------------------------------------------------------------------


@without_cuda
@pytest.mark.parametrize("placement_name", ["cpu_pinned", "cuda"])
def test_cuda_placements_unavailable_without_cuda(placement_name):
    with pytest.raises(PlacementUnavailableError) as info:
        ExperienceBuffer(10, placement=placement_name)
    msg = str(info.value)
    assert placement_name in msg and "cpu_pageable" in msg
    assert isinstance(info.value, ValueError)


@without_cuda
def test_load_cuda_checkpoint_without_cuda_can_override_placement(tmp_path):
    buf = ExperienceBuffer(8, seed=0)
    buf.extend(batch(range(8)))
    state = buf.state_dict()
    state["placement"] = "cuda"
    from janus.buffer.storage import state_file

    path = tmp_path / "gpu.pt"
    state_file.save_atomic(state, path)
    with pytest.raises(PlacementUnavailableError):
        ExperienceBuffer.load(path)
    loaded = ExperienceBuffer.load(path, placement="cpu_pageable")
    assert loaded.placement == "cpu_pageable"
    check_rows_match_keys(contents(loaded))


@needs_cuda
@pytest.mark.cuda
def test_cuda_placement_keeps_data_on_gpu():
    buf = ExperienceBuffer(16, placement="cuda", seed=0)
    assert buf.device.type == "cuda"
    buf.extend(batch(range(4)))  # host input is copied to the device
    out = buf.sample(8)
    assert out["obs"].device.type == "cuda"
    check_rows_match_keys(out)


@needs_cuda
@pytest.mark.cuda
def test_cpu_pinned_placement_is_pinned():
    buf = ExperienceBuffer(16, placement="cpu_pinned", seed=0)
    buf.extend(batch(range(4)))
    assert buf.device.type == "cpu"
    assert all(t.is_pinned() for t in buf._storage.fields.values())


@needs_cuda
@pytest.mark.cuda
@pytest.mark.parametrize("placement", ["cpu_pageable", "cpu_pinned"])
@pytest.mark.parametrize("declared", [False, True])
def test_host_placements_copy_gpu_input_to_the_host(placement, declared):
    """A GPU actor's tensors go into host storage (JanusConfig(actor_device='cuda',
    placement='cpu_pinned')). Fields fixed by the first extend refused them ('device: got cuda:0'),
    which failed the collection of every such JanusBuffer; declared fields already copied them."""
    fields = {"obs": ((2,), "float32"), "id": ((), "int64")} if declared else None
    buf = ExperienceBuffer(8, placement=placement, seed=0, fields=fields)
    for start in (0, 4):
        ids = torch.arange(start, start + 4, device="cuda")
        buf.extend({"obs": torch.stack([ids, ids], 1).float(), "id": ids})
    out = buf.gather(list(range(8)))
    assert out["id"].tolist() == list(range(8)) and out["obs"][:, 1].tolist() == [float(i) for i in range(8)]


@pytest.mark.parametrize("output", ["torch", "numpy"])
def test_update_priority_on_a_uniform_buffer_is_an_error_naming_prioritized(output):
    """A uniform buffer has no priorities: update_priority used to return the pairs "applied" and
    change nothing (a silent wrong); it raises, naming sampler='prioritized', the buffer unchanged."""
    buf = ExperienceBuffer(8, sampler="uniform", seed=0, output=output)
    buf.extend({"x": torch.arange(8.0)})
    keys = buf.sample(4)["index"]
    with pytest.raises(BufferInputError, match="sampler='prioritized'"):
        buf.update_priority(keys, [1.0, 2.0, 3.0, 4.0])


def test_update_priority_on_a_uniform_frame_replay_is_an_error():
    """The frame-deduplicating replay refuses priorities on a uniform sampler the same way."""
    from janus.buffer.frames.replay import FrameStackReplay

    replay = FrameStackReplay(16, sampler="uniform", seed=0)
    with pytest.raises(BufferInputError, match="sampler='prioritized'"):
        replay.update_priority([0], [1.0])
