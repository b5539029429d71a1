"""Inputs at the edges of what the buffers take: stored exactly, or refused with a message that
names the problem, never stored as some other value."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from tests.buffer.test_frame_replay import batches

from janus import ExperienceBuffer
from janus.buffer.frames.replay import FrameStackReplay
from janus.errors import BufferInputError, BufferTypeError


def _read_only(a: np.ndarray) -> np.ndarray:
    view = a.view()
    view.flags.writeable = False
    return view


@pytest.mark.parametrize("declared", [True, False])
def test_read_only_arrays_beside_writeable_ones_are_stored(declared):
    """The kernel takes every field's bytes as one tuple; a read-only array among writeable ones
    made it a tuple of two types, which the compiled kernel could not index."""
    fields = {"obs": ((2,), "float32"), "r": ((), "float32")}
    buf = ExperienceBuffer(4, fields=fields if declared else None, output="numpy")
    obs = np.frombuffer(np.array([1, 2, 3, 4], np.float32).tobytes(), np.float32).reshape(2, 2)  # read-only
    buf.extend({"obs": obs, "r": np.array([5, 6], np.float32)})
    buf.extend({"obs": np.array([[7, 8]], np.float32), "r": _read_only(np.array([9], np.float32))})
    out = buf.gather([0, 1, 2])
    assert out["obs"].tolist() == [[1, 2], [3, 4], [7, 8]] and out["r"].tolist() == [5, 6, 9]


def test_frame_replay_takes_a_read_only_field():
    replay = FrameStackReplay(64, seed=0, frame_capacity=400)
    batch = next(batches(0))
    batch["reward"] = _read_only(batch["reward"])
    keys = replay.extend(batch)
    assert torch.equal(replay.gather(keys.remainder(64))["reward"], torch.as_tensor(np.array(batch["reward"])).float())


@pytest.mark.parametrize("dtype, value, stored", [
    ("uint8", 3, [3]), ("uint8", torch.tensor(3), [3]), ("int8", [[100, -100]], [100, -100]),
    ("int64", np.array([5], np.uint64), [5]), ("int32", True, [1]), ("float32", 1e38, [1e38]),
    ("float32", float("inf"), [float("inf")]), ("float16", 60000, [60000]),
])
def test_narrowing_casts_that_keep_the_values_are_accepted(dtype, value, stored):
    buf = ExperienceBuffer(4, fields={"x": ((len(stored),) if len(stored) > 1 else (), dtype)})
    buf.extend({"x": value})
    assert buf.gather([0])["x"].reshape(-1).tolist() == pytest.approx(stored, rel=1e-3)


@pytest.mark.parametrize("dtype, value, match", [
    ("uint8", 300, r"values: got '300\.\.300'; accepted: integers in \[0, 255\]"),
    ("uint8", torch.tensor([-1]), r"integers in \[0, 255\]"),
    ("int8", [300, -200], r"'-200\.\.300'"),
    ("int64", np.array([2**64 - 1], np.uint64), r"integers in \[-9223372036854775808"),
    ("float32", 1e39, r"within float32's range"),
    ("float32", torch.tensor([1e39], dtype=torch.float64), r"within float32's range"),
    ("float16", 70000, r"within float16's range"),
    ("bfloat16", 1e39, r"within bfloat16's range"),
])
def test_casts_that_would_change_a_value_are_refused(dtype, value, match):
    buf = ExperienceBuffer(4, fields={"x": ((), dtype)})
    with pytest.raises(BufferInputError, match=match):
        buf.extend({"x": value})
    assert len(buf) == 0


def test_fixed_fields_explain_that_they_need_the_batch_dimension():
    buf = ExperienceBuffer(4)
    buf.extend({"x": np.ones((2, 3), np.float32)})
    with pytest.raises(BufferInputError, match=r"accepted: \(n, \*\(3,\)\) for n items \(fields fixed by the first extend"):
        buf.extend({"x": np.ones(3, np.float32)})


def test_big_endian_arrays_are_stored_as_their_values():
    buf = ExperienceBuffer(4)
    buf.extend({"x": np.array([[1.5, 2.5]], ">f4")})
    buf.extend({"x": np.array([[3.5, 4.5]], ">f4")})
    assert buf.gather([0, 1])["x"].tolist() == [[1.5, 2.5], [3.5, 4.5]]


def test_gather_takes_integer_slots_only():
    buf = ExperienceBuffer(8, fields={"x": ((), "int64")})
    buf.extend({"x": np.arange(3)})
    assert buf.gather(np.array([[2], [0]], np.uint8))["x"].tolist() == [2, 0]
    assert buf.gather([])["x"].numel() == 0
    for slots, err, match in (([1.7], BufferTypeError, "float64"), ([True, False], BufferTypeError, "not a mask"),
                              (None, BufferTypeError, "integers"), (torch.ones(1, requires_grad=True), BufferTypeError, "float32"),
                              (np.array([2**64 - 1], np.uint64), BufferInputError, r"\[18446744073709551615"),
                              ([3], BufferInputError, r"slots in \[0, 3\)"), ([-1], BufferInputError, r"slots in \[0, 3\)")):
        with pytest.raises(err, match=match):
            buf.gather(slots)


def test_numpy_number_settings_are_taken_and_checkpointed(tmp_path):
    buf = ExperienceBuffer(8, sampler="prioritized", seed=np.int64(3), alpha=np.float32(0.5), beta=np.float32(0.25),
                           eps=np.float64(0.01), fields={"x": ((), "float32")})
    buf.extend({"x": [1.0, 2.0]})
    assert buf.sample(2, beta=np.float32(1.0))["weight"].shape == (2,)
    buf.save(tmp_path / "b.pt")  # numpy scalars in the state would not load (weights-only unpickling)
    loaded = ExperienceBuffer.load(tmp_path / "b.pt")
    assert (loaded.sampler.alpha, loaded.sampler.beta, loaded.seed) == (0.5, 0.25, 3)


@pytest.mark.parametrize("cls", [ExperienceBuffer, FrameStackReplay])
@pytest.mark.parametrize("setting", [{"alpha": 0.6}, {"beta": 0.4}, {"eps": 1e-3}, {"alpha": 0.7, "beta": 0.5}])
def test_prioritized_settings_on_a_uniform_buffer_are_refused(cls, setting):
    """alpha/beta/eps without sampler='prioritized' meant prioritized replay: an error naming them,
    not a buffer that silently samples uniformly."""
    with pytest.raises(BufferInputError, match=f"invalid {', '.join(setting)} for sampler='uniform'.*sampler='prioritized'"):
        cls(16, **setting)
    prioritized = cls(16, sampler="prioritized", **setting)  # the same settings, with the sampler they set
    assert all(prioritized._sampler_kwargs[k] == v for k, v in setting.items())
    assert cls(16, sampler="prioritized")._sampler_kwargs == {"alpha": 0.6, "beta": 0.4, "eps": 1e-6}  # the defaults


def test_an_eps_whose_leaf_underflows_is_refused():
    """A zero priority's leaf is eps ** alpha: at 0 an item could never be drawn, and a buffer of
    them would give NaN weights."""
    with pytest.raises(BufferInputError, match=r"eps \*\* alpha"):
        ExperienceBuffer(10, sampler="prioritized", alpha=2.0, eps=1e-200)
    ExperienceBuffer(10, sampler="prioritized", alpha=2.0, eps=1e-100)  # 1e-200 is a normal float64


def test_checkpoints_keep_declared_fields_and_the_settings_in_use(tmp_path):
    declared = ExperienceBuffer(5, sampler="prioritized", alpha=0.5, fields={"obs": ((3,), "float32"), "a": ((), "int64")})
    declared.extend({"obs": [1, 2, 3], "a": 1})
    declared.save(tmp_path / "d.pt")
    loaded = ExperienceBuffer.load(tmp_path / "d.pt")
    loaded.extend({"obs": [4.0, 5.0, 6.0], "a": 2})  # one item, a list: declared fields still cast
    plain = ExperienceBuffer(5, sampler="prioritized")  # alpha 0.6, fields from the checkpoint
    plain.load_state_dict(declared.state_dict())
    plain.extend({"obs": np.ones((1, 3)), "a": np.array([1])})  # float64 into float32: cast
    assert plain.state_dict()["sampler_kwargs"]["alpha"] == 0.5 == plain.sampler.alpha
    fixed = ExperienceBuffer(5)
    fixed.extend({"x": np.ones((1, 2), np.float32)})
    again = ExperienceBuffer(5, fields={"x": ((2,), "float32")})
    again.load_state_dict(fixed.state_dict())  # the checkpoint's fields were fixed, not declared
    with pytest.raises(BufferInputError, match="fields fixed by the first extend"):
        again.extend({"x": np.ones(2, np.float32)})


@pytest.mark.parametrize("declared", [torch.zeros(0), "yes", 1, None])
def test_a_checkpoint_whose_declared_flag_is_not_a_bool_is_refused(declared):
    """Found by the fuzzed-checkpoint test: an empty tensor there raised a raw RuntimeError after
    the new storage had replaced this buffer's."""
    from janus.errors import CheckpointError

    src = ExperienceBuffer(4, fields={"obs": ((2,), "float32")})
    src.extend({"obs": [[1, 2], [3, 4]]})
    state = {**src.state_dict(), "declared": declared}
    dst = ExperienceBuffer(4, fields={"obs": ((2,), "float32")})
    dst.extend({"obs": [[5, 6]]})
    with pytest.raises(CheckpointError, match="'declared' is"):
        dst.load_state_dict(state)
    assert len(dst) == 1 and dst.gather([0])["obs"].tolist() == [[5, 6]]  # left as it was


@pytest.mark.parametrize("shape", [(3, 1), (1, 3), (1, 3, 1)])
def test_update_priority_takes_a_column_or_a_row_of_priorities(shape):
    """A network's TD errors often come as (n, 1); a row of n is the same n values. (2, 3) is refused."""
    from janus.errors import BufferInputError

    buf = ExperienceBuffer(8, sampler="prioritized", fields={"obs": ((2,), "float32")}, output="numpy")
    buf.extend({"obs": np.zeros((4, 2), np.float32)})
    assert buf.update_priority(np.array([0, 1, 2]).reshape(shape), np.array([1.0, 2.0, 3.0]).reshape(shape)) == 3
    assert float(np.asarray(buf.sampler.max_priority).reshape(-1)[0]) == pytest.approx(3.0, abs=1e-5)
    with pytest.raises(BufferInputError, match=r"priority shape.*\(2, 3\)"):
        buf.update_priority(np.arange(6), np.ones((2, 3)))


def _torch_path(buf: ExperienceBuffer) -> ExperienceBuffer:
    """``buf`` switched to the batched-torch code of the ``cuda`` placement (kept on the CPU here,
    so that machines without a GPU run that code too)."""
    from janus.buffer.replay.samplers import UniformSampler

    buf._native = False
    buf._sampler = UniformSampler(buf.capacity, buf.device, 0)
    return buf


_TRANSITION = {"obs": ((2,), "float32"), "action": ((), "int64"), "reward": ((), "float32"), "done": ((), "bool")}


def _declared_inputs_on(buf: ExperienceBuffer) -> None:
    buf.extend({"obs": [1, 2], "action": 3, "reward": 0.5, "done": False})  # one item, Python numbers
    buf.extend({"obs": np.array([[3.0, 4.0]]), "action": np.array([4], np.int32),  # float64, int32
                "reward": torch.tensor([1.5], dtype=torch.float64), "done": [True]})
    out = buf.gather(torch.arange(2, device=buf.device))
    assert out["obs"].cpu().tolist() == [[1, 2], [3, 4]] and out["action"].cpu().tolist() == [3, 4]
    assert out["reward"].cpu().tolist() == [0.5, 1.5] and out["done"].cpu().tolist() == [False, True]
    assert {k: v.dtype for k, v in out.items()} == {"obs": torch.float32, "action": torch.int64,
                                                     "reward": torch.float32, "done": torch.bool, "index": torch.int64}
    with pytest.raises(BufferInputError, match="field 'action' dtype"):  # float -> int: refused, naming the field
        buf.extend({"obs": [1, 2], "action": 1.5, "reward": 0.5, "done": False})
    assert len(buf) == 2


def test_declared_fields_cast_on_the_torch_path():
    """The README's example (placement='auto', declared fields, one transition of Python numbers)
    failed on a machine with a GPU: the cuda placement's extend ignored the declaration and asked
    for tensors with a batch dimension of the exact dtypes."""
    _declared_inputs_on(_torch_path(ExperienceBuffer(4, fields=_TRANSITION)))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA not available on this machine")
def test_declared_fields_cast_on_the_cuda_placement():
    _declared_inputs_on(ExperienceBuffer(4, placement="cuda", fields=_TRANSITION))


def test_gather_on_the_torch_path_takes_lists_and_checks_slots():
    """The cuda placement's gather took tensors only (a list raised AttributeError: 'list' object
    has no attribute 'shape') and passed slots to index_select unchecked: out of range, a CUDA
    device-side assert that poisons the process's GPU context. Now it takes and checks what the
    CPU placements do."""
    buf = _torch_path(ExperienceBuffer(4, fields={"x": ((), "int64")}))
    buf.extend({"x": [10, 11, 12]})
    assert buf.gather([2, 0])["x"].cpu().tolist() == [12, 10]
    assert buf.gather(np.array([1]))["index"].tolist() == [1]
    for bad in ([3], [-1]):  # slot 3 is not written yet
        with pytest.raises(BufferInputError, match=r"slots in \[0, 3\)"):
            buf.gather(bad)
    with pytest.raises(BufferTypeError, match="integers"):
        buf.gather([0.5])


@pytest.mark.parametrize("name", ["index", "weight"])
@pytest.mark.parametrize("sampler", ["uniform", "prioritized"])
def test_field_names_that_a_batch_adds_are_refused(name, sampler):
    """sample() and gather() add "index" (keys) and, prioritized, "weight" to the fields: a field of
    that name was stored, then silently replaced by the keys or weights in every batch."""
    with pytest.raises(BufferInputError, match=f"field name '{name}' is reserved"):
        ExperienceBuffer(4, sampler=sampler, fields={name: ((), "float32")})
    buf = ExperienceBuffer(4, sampler=sampler)
    with pytest.raises(BufferInputError, match=f"field name '{name}' is reserved"):
        buf.extend({name: torch.tensor([5.0, 6.0]), "x": torch.zeros(2)})
    assert len(buf) == 0 and buf.fields == {}
    replay = FrameStackReplay(8, sampler=sampler)
    obs = np.zeros((2, 4, 2, 2), np.uint8)
    with pytest.raises(BufferInputError, match=f"field name '{name}' is reserved"):
        replay.extend({"obs": obs, "next_obs": obs, name: np.ones(2, np.float32)})


def test_frame_replay_refuses_its_internal_field_name():
    obs = np.zeros((2, 4, 2, 2), np.uint8)
    with pytest.raises(BufferInputError, match="field name '_frames' is reserved"):
        FrameStackReplay(8).extend({"obs": obs, "next_obs": obs, "_frames": np.ones((2, 2), np.int64)})


def test_janus_buffer_put_refuses_reserved_field_names():
    from janus import JanusBuffer, JanusConfig

    cfg = JanusConfig(placement="cpu_pageable", learner_device="cpu", batch_size=2, buffer_capacity=8)
    with JanusBuffer(cfg, seed=0) as jb:
        with pytest.raises(BufferInputError, match="field name 'index' is reserved"):
            jb.put({"index": torch.zeros(2, 2), "x": torch.zeros(2, 2)})
        jb.put({"x": torch.ones(2, 2)})
        assert jb.get(timeout=10)["x"].tolist() == [1.0, 1.0] and jb.failure is None


@pytest.mark.parametrize("data", [{"x": torch.zeros(3, 0)}, {"x": torch.zeros(3, 2, 0), "y": torch.ones(3)}])
def test_fields_of_empty_items_are_refused_naming_them(data):
    """A first extend with a field of empty items (a 0 in its item shape) crashed allocating the
    storage ("self.stride(0) must be divisible by 4 to view Byte as Float") or, beside another
    field, stored nothing; declared fields already refuse such shapes."""
    buf = ExperienceBuffer(4)
    with pytest.raises(BufferInputError, match="field 'x' item shape"):
        buf.extend(data)
    assert buf.fields == {} and len(buf) == 0
    from janus import JanusBuffer, JanusConfig

    with JanusBuffer(JanusConfig(placement="cpu_pageable", learner_device="cpu", batch_size=2, buffer_capacity=8)) as jb:
        with pytest.raises(BufferInputError, match="field 'x' item shape"):
            jb.put({k: v.unsqueeze(0) for k, v in data.items()})
        assert jb.failure is None
