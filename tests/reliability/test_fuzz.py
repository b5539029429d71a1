"""Property-based fuzz tests (hypothesis) of every public entry point (issue 6).

The invariant everywhere: for any generated input a call either succeeds (and does what valid
input should) or raises a :class:`~janus.errors.JanusError` that also subclasses a built-in
exception, with a message naming the argument. Never a raw torch/numpy/Key/Index error, never a
hang. After a rejected call the buffer is exactly as before: size, keys, every stored tensor, the
sampler state (priorities, RNG) and the epoch RNG (compared through ``state_dict()``).

Sizes stay small: capacities up to 8, and "huge" numbers are 2**40 (valid, but torch fails to
allocate them at once: AllocationError) or beyond the accepted range -- never in between, where an
allocation could succeed and take minutes.
"""

from __future__ import annotations

import contextlib
import io
import math
import sys
from collections.abc import Callable
from dataclasses import fields
from pathlib import Path
from typing import Any
from unittest import mock

import gymnasium as gym
import numpy as np
import pytest
import torch
import yaml
from hypothesis import HealthCheck, event, given, settings, strategies as st

from janus import config as C
from janus.buffer.replay.experience import ExperienceBuffer
from janus.buffer.storage import state_file
from janus.cli import main
from janus.envs.vector import EXAMPLE_ENVS, make_vector_env
from janus.errors import AllocationError, BufferEmptyError, ConfigError, JanusError, PlacementUnavailableError

torch.set_num_threads(1)
pytestmark = [pytest.mark.timeout(180), pytest.mark.filterwarnings("ignore")]
HAS_CUDA = torch.cuda.is_available()
DEFAULT_YAML = str(Path(__file__).resolve().parents[2] / "configs" / "default.yaml")


def _refuses_huge_allocations() -> bool:
    """Linux without unconditional overcommit (vm.overcommit_memory != 1) refuses to allocate 8 TB."""
    try:
        return sys.platform.startswith("linux") and Path("/proc/sys/vm/overcommit_memory").read_text().strip() != "1"
    except OSError:
        return False


#: 2**40 items: valid, but beyond memory (AllocationError) -- only where the OS refuses at once,
#: not where the attempt could succeed lazily and then fill RAM.
TOO_BIG = st.just(2**40) if _refuses_huge_allocations() else st.nothing()


def fuzz(n: int) -> settings:
    return settings(max_examples=n, deadline=None, suppress_health_check=[HealthCheck.too_slow])


# ---- shared helpers and strategies --------------------------------------------------------------
HUGE = st.sampled_from([2**40 + 1, 2**63, 2**64, 10**30, -(2**63) - 1])
JUNK = st.one_of(
    st.integers(-5, 100), HUGE, st.floats(), st.booleans(), st.none(), st.text(max_size=6),
    st.sampled_from(["1/4", "nan", "1e999999999", "", [], [1, "a"], {"a": 1}, (2,)]),
)


def mostly(valid: st.SearchStrategy, junk: st.SearchStrategy, odds: int = 6) -> st.SearchStrategy:
    """``valid`` about ``odds`` times as often as ``junk``."""
    return st.sampled_from([True] * odds + [False]).flatmap(lambda ok: valid if ok else junk)


def assert_same(a: Any, b: Any, where: str = "state") -> None:
    """Recursive exact equality (NaN equals NaN) of two ``state_dict()`` values."""
    if isinstance(a, torch.Tensor):
        torch.testing.assert_close(a, b, rtol=0, atol=0, equal_nan=True, msg=lambda m: f"{where}: {m}")
    elif isinstance(a, dict):
        assert a.keys() == b.keys(), where
        for k in a:
            assert_same(a[k], b[k], f"{where}[{k!r}]")
    else:
        assert a == b or (a != a and b != b), where


def check_error(exc: BaseException, *names: str) -> None:
    """A janus error that subclasses a built-in, whose message names one of ``names``."""
    assert isinstance(exc, JanusError), f"raw {type(exc).__name__}: {exc}"
    assert any(c.__module__ == "builtins" and c not in (Exception, BaseException, object) for c in type(exc).__mro__)
    assert str(exc) and any(n in str(exc) for n in names), f"{names} not named in: {exc}"


def attempt(buf: ExperienceBuffer, call: Callable[[], Any], *names: str) -> tuple[bool, Any]:
    """Run ``call``: ``(True, result)``, or ``(False, error)`` after checking the error and that
    ``buf`` is exactly as before."""
    before = buf.state_dict()
    try:
        result = call()
    except JanusError as exc:
        event(f"rejected: {type(exc).__name__}")
        check_error(exc, *names)
        assert_same(before, buf.state_dict())
        return False, exc
    event("accepted")
    return True, result


SPECS = {"obs": ((3,), torch.float32), "act": ((), torch.int64), "done": ((), torch.bool)}


def rows(keys: range | list[int]) -> dict[str, torch.Tensor]:
    k = torch.as_tensor(list(keys), dtype=torch.long)
    return {"obs": k[:, None].float() * 10 + torch.arange(3.0), "act": k, "done": k % 2 == 0}


@st.composite
def filled_buffers(draw: st.DrawFn) -> ExperienceBuffer:
    """A small uniform or prioritized buffer holding data (maybe wrapped, maybe re-prioritized)."""
    cap = draw(st.integers(1, 8))
    buf = ExperienceBuffer(cap, sampler=draw(st.sampled_from(["uniform", "prioritized"])), seed=draw(st.integers(0, 9)))
    for _ in range(draw(st.integers(1, 3))):
        n = draw(st.integers(1, cap))
        buf.extend(rows(range(buf.total_written, buf.total_written + n)))
    if buf._sampler_name == "prioritized" and draw(st.booleans()):
        buf.update_priority(buf.sample(4)["index"], draw(st.lists(st.floats(0, 9), min_size=4, max_size=4)))
    return buf


def twin(buf: ExperienceBuffer, state: dict[str, Any]) -> ExperienceBuffer:
    """A fresh buffer restored from ``state`` (what ``buf`` was before a rejected call)."""
    out = ExperienceBuffer(buf.capacity, sampler=state["sampler"], **state["sampler_kwargs"])
    out.load_state_dict(state)
    return out


# ---- 1. the constructor -------------------------------------------------------------------------
def _count_ok(v: Any) -> bool:
    return type(v) in (int, np.int64) and 1 <= v <= 2**40


def _number_ok(v: Any, strict: bool) -> bool:
    return type(v) in (int, float) and v <= sys.float_info.max and (v > 0 if strict else v >= 0)


@fuzz(300)
@given(
    capacity=mostly(st.integers(1, 8) | st.just(np.int64(4)) | TOO_BIG, st.integers(-3, 0) | JUNK),
    placement=mostly(st.just("cpu_pageable"), st.one_of(st.sampled_from(["cpu_pinned", "cuda", "auto", "CPU", ""]), JUNK)),
    sampler=mostly(st.sampled_from(["uniform", "prioritized"]), st.just("lifo") | JUNK),
    seed=mostly(st.none() | st.integers(-(2**63), 2**63 - 2), st.integers(-(2**64), 2**64) | JUNK),
    prio=st.fixed_dictionaries({k: st.none() | mostly(st.floats(0.01, 2), st.floats(-1, 2) | JUNK)
                                for k in ("alpha", "beta", "eps")}),
)
def test_constructor_accepts_valid_and_names_invalid_arguments(capacity, placement, sampler, seed, prio):
    """ExperienceBuffer(...) succeeds iff every argument is valid; else the error names a bad one.
    cuda / cpu_pinned without CUDA raise PlacementUnavailableError; 2**40 prioritized items raise
    AllocationError (a MemoryError). alpha, beta and eps (None: left out) belong to the prioritized
    sampler: a uniform buffer given any of them refuses it."""
    prio = {k: v for k, v in prio.items() if v is not None}
    bad = [name for name, ok in [
        ("capacity", _count_ok(capacity)),
        ("seed", seed is None or (type(seed) is int and -(2**63) <= seed < 2**63 - 1)),
        ("sampler", sampler in ("uniform", "prioritized") and isinstance(sampler, str)),
        ("placement", placement in ("cpu_pageable", "auto") + (("cuda", "cpu_pinned") if HAS_CUDA else ())),
    ] if not ok]
    if sampler == "prioritized" and isinstance(sampler, str):
        bad += [k for k in prio if not _number_ok(prio[k], strict=k == "eps")]
        bad += ["alpha"] if _number_ok(prio.get("alpha", 0.6), strict=False) and prio.get("alpha", 0.6) > 10 else []  # MAX_ALPHA
    elif sampler == "uniform" and isinstance(sampler, str):
        bad += list(prio)  # prioritized settings without the prioritized sampler
    try:
        buf = ExperienceBuffer(capacity, placement, sampler, seed, **prio)
    except AllocationError as exc:
        assert not bad and sampler == "prioritized" and capacity == 2**40, exc
        return
    except JanusError as exc:
        assert bad, f"valid arguments rejected: {exc}"
        check_error(exc, *bad)
        if bad == ["placement"] and placement in ("cuda", "cpu_pinned"):
            assert isinstance(exc, PlacementUnavailableError)
        return
    assert not bad, f"accepted invalid {bad}"
    try:
        keys = buf.extend(rows([0]))
    except AllocationError:  # uniform storage is allocated at the first extend
        assert capacity == 2**40 and len(buf) == 0 and buf.fields == {}
        return
    assert keys.tolist() == [0] and buf.sample(2)["index"].tolist() == [0, 0]


# ---- 2. extend ----------------------------------------------------------------------------------
DTYPES = [torch.float32, torch.float64, torch.float16, torch.int64, torch.int32, torch.uint8, torch.bool, torch.complex64]
GOOD = ["none", "numpy", "grad", "nan"]  # NaN data are legal values
FAULTS = ["drop", "shape", "dtype", "rows", "scalar", "list", "meta", "npstr"]


@st.composite
def extend_inputs(draw: st.DrawFn, capacity: int) -> tuple[Any, bool]:
    """``(data, valid)`` for ``extend`` into a buffer whose fields are SPECS."""
    kind = draw(st.sampled_from(["mapping"] * 8 + ["none", "list", "tensor", "empty"]))
    if kind != "mapping":
        return {"none": None, "list": [torch.zeros(1, 3)], "tensor": torch.zeros(1, 3), "empty": {}}[kind], False
    n = draw(st.one_of(st.integers(0, capacity + 2), st.just(capacity)))
    valid, data = 1 <= n <= capacity, {}
    faulty = draw(st.permutations(list(SPECS)))[: draw(st.sampled_from([0, 0, 0, 1, 1, 2, 3]))]
    for name, (shape, dtype) in SPECS.items():
        fault, count = draw(st.sampled_from(FAULTS if name in faulty else GOOD)), n
        if fault == "drop":
            valid = False
            continue
        if fault == "shape":
            shape = draw(st.sampled_from([(), (3,), (2,), (3, 1), (0,)]).filter(lambda s, old=shape: s != old))
        if fault == "dtype":
            dtype = draw(st.sampled_from(DTYPES).filter(lambda d, old=dtype: d != old))
        if fault == "rows":  # a different row count per field: never consistent
            count = n + 1 + list(SPECS).index(name)
        t = torch.arange(count * math.prod(shape)).reshape(count, *shape).to(dtype)
        if fault == "nan" and t.is_floating_point():
            t[..., :1] = math.nan
        if fault == "grad" and t.is_floating_point():
            t.requires_grad_()
        valid &= fault in GOOD
        if fault == "scalar":
            t = torch.tensor(0, dtype=dtype)
        convert = {"numpy": np.asarray, "list": torch.Tensor.tolist, "meta": lambda x: x.to("meta"),
                   "npstr": lambda x: np.asarray(x).astype(str)}  # numpy strings: no torch dtype
        data[name] = convert.get(fault, lambda x: x)(t)
    if draw(st.integers(0, 9)) == 0:
        data[draw(st.sampled_from(["extra", "index", "weight"]))] = torch.zeros(n)
        valid = False
    return data, valid


@fuzz(300)
@given(st.data())
def test_extend_accepts_valid_batches_and_rejects_bad_ones_unchanged(data):
    """extend(...) of a well-formed batch (torch or numpy, NaNs allowed) writes it at the next keys;
    missing/extra fields, wrong shapes/dtypes/devices, 0-d or list values, ragged or empty batches,
    batches over capacity and non-mappings raise and change nothing."""
    buf = data.draw(filled_buffers())
    batch, valid = data.draw(extend_inputs(buf.capacity))
    written = buf.total_written
    ok, keys = attempt(buf, lambda: buf.extend(batch), "extend()", "batch size", *map(repr, SPECS), "extra")
    assert ok == valid, f"valid={valid} but extend {'succeeded' if ok else f'raised {keys}'}"
    if ok:
        n = len(keys)
        assert keys.tolist() == list(range(written, written + n)) and buf.total_written == written + n
        stored = buf.state_dict()["data"]
        for name, value in batch.items():
            value = torch.as_tensor(value).detach()
            assert_same(stored[name][keys % buf.capacity], value, name)


# ---- 3. sample and epoch ------------------------------------------------------------------------
BATCH_SIZES = st.one_of(st.integers(-2, 12), JUNK, st.just(np.int64(3)), st.just(torch.tensor(3)), TOO_BIG)
BETAS = st.one_of(st.none(), st.floats(0, 2), JUNK)


@fuzz(300)
@given(buf=filled_buffers() | st.builds(ExperienceBuffer, st.integers(1, 4), sampler=st.sampled_from(["uniform", "prioritized"])),
       batch_size=BATCH_SIZES, kwargs=st.one_of(st.just({}), st.fixed_dictionaries({"beta": BETAS}), st.just({"gamma": 1})))
def test_sample_and_epoch_batch_sizes(buf, batch_size, kwargs):
    """sample(batch_size, **kw) returns batch_size items of live keys iff batch_size is an int in
    [1, 2**40] (beyond memory: AllocationError) and the buffer holds data (else BufferEmptyError);
    a rejected call draws nothing from the RNG, so the next sample equals an untouched twin's.
    epoch(batch_size) validates eagerly and then covers every stored item exactly once."""
    size_ok = _count_ok(batch_size)
    beta = kwargs.get("beta")
    kw_ok = not kwargs or (buf.state_dict()["sampler"] == "prioritized" and "beta" in kwargs
                           and (beta is None or _number_ok(beta, strict=False)))
    before = buf.state_dict()
    ok, out = attempt(buf, lambda: buf.sample(batch_size, **kwargs), "batch_size", "beta", "gamma", "empty", "allocate")
    assert ok == (size_ok and kw_ok and len(buf) > 0 and batch_size != 2**40), out
    if not size_ok:
        assert not attempt(buf, lambda: buf.epoch(batch_size), "batch_size")[0]
    if not ok:
        if size_ok and kw_ok:
            assert isinstance(out, AllocationError if len(buf) else BufferEmptyError), out
        if len(buf):
            assert_same(buf.sample(3), twin(buf, before).sample(3))
        return
    oldest = buf.total_written - len(buf)
    assert len(out["index"]) == batch_size and all(oldest <= k < buf.total_written for k in out["index"].tolist())
    ok, mbs = attempt(buf, lambda: list(buf.epoch(batch_size)), "batch_size")
    assert ok and sorted(torch.cat([m["index"] for m in mbs]).tolist()) == list(range(oldest, buf.total_written))


# ---- 4. update_priority -------------------------------------------------------------------------
@st.composite
def priority_updates(draw: st.DrawFn, written: int) -> tuple[Any, Any, bool]:
    """``(index, priority, valid)``: keys in and around [0, written), priorities incl. NaN/inf/<0."""
    n = draw(st.integers(0, 6))
    keys = draw(st.lists(st.integers(0, written - 1), min_size=n, max_size=n))
    prio = draw(st.lists(st.floats(0, 100), min_size=n, max_size=n))
    faults = ["key", "prio", "length", "float_keys", "bool_keys", "complex", "str", "none_arg", "2d"]
    fault = draw(st.sampled_from(["none"] * 6 + faults))
    if fault == "key" and n:
        keys[draw(st.integers(0, n - 1))] = draw(st.sampled_from([-1, -(2**40), written, written + 5, 2**62]))
    elif fault == "prio" and n:
        prio[draw(st.integers(0, n - 1))] = draw(st.sampled_from([math.nan, math.inf, -math.inf, -1e-9, -3.0]))
    elif fault == "length":
        prio = prio + [1.0] if draw(st.booleans()) or not n else prio[:-1]
    elif fault in ("float_keys", "bool_keys", "complex", "str", "2d") and n:
        keys = {"float_keys": np.array(keys, dtype=float), "bool_keys": np.array(keys) > 0,
                "2d": np.stack([keys, keys], 1)}.get(fault, keys)
        prio = {"complex": np.array(prio, dtype=complex), "str": [f"{p}x" for p in prio]}.get(fault, prio)
    elif fault == "none_arg":
        keys = None
    else:
        fault = "none"
    valid = fault == "none"
    box = draw(st.sampled_from([list, np.array, torch.tensor, lambda x: np.array(x)[:, None] if len(x) else np.array(x)]))
    if valid:  # same values in any container: list, numpy, torch, an (n, 1) column
        keys, prio = box(keys), np.asarray(prio, dtype=draw(st.sampled_from([np.float64, np.float32])))
    return keys, prio, valid


@fuzz(300)
@given(st.data())
def test_update_priority(data):
    """update_priority(index, priority) applies valid updates to live keys (stale ones -- overwritten
    since sampled -- are dropped and not counted; the last duplicate wins); NaN/inf/negative
    priorities, never-written or negative keys, length mismatches, non-integer keys, complex or
    string priorities and 2-D arrays are rejected with the buffer unchanged. A uniform buffer
    refuses every update, naming sampler='prioritized' (it has no priorities to set)."""
    buf = data.draw(filled_buffers())
    index, priority, valid = data.draw(priority_updates(buf.total_written))
    ok, applied = attempt(buf, lambda: buf.update_priority(index, priority), "index", "priority")
    if buf._sampler_name != "prioritized":
        assert not ok and "sampler='prioritized'" in str(applied), applied
        return
    assert ok == valid, applied
    if ok:
        keys = np.asarray(index).reshape(-1).tolist()
        oldest = buf.total_written - buf.capacity
        live = {k % buf.capacity: float(p) for k, p in zip(keys, np.asarray(priority)) if k >= oldest}
        assert applied == sum(k >= oldest for k in keys)
        s = buf.sampler
        if hasattr(s, "priorities") and live:
            got = s.priorities(torch.tensor(list(live)))
            want = (torch.tensor(list(live.values()), dtype=torch.float64) + s.eps) ** s.alpha
            torch.testing.assert_close(got, want)


# ---- 5. checkpoints -----------------------------------------------------------------------------
@st.composite
def corrupt_states(draw: st.DrawFn, state: dict[str, Any]) -> dict[str, Any]:
    """A real state_dict with one key (top level or one level down) dropped or replaced by junk."""
    state = {k: dict(v) if isinstance(v, dict) else v for k, v in state.items()}
    where = state
    key = draw(st.sampled_from(sorted(state)))
    if isinstance(state[key], dict) and state[key] and draw(st.booleans()):
        where, key = state[key], draw(st.sampled_from(sorted(state[key])))
    if draw(st.booleans()):
        del where[key]
    else:
        tensors = st.builds(torch.zeros, st.integers(0, 9)) | st.builds(torch.ones, st.integers(1, 5), st.integers(1, 3))
        where[key] = draw(JUNK | st.sampled_from(["cuda", "prioritized", "float64"]) | tensors)
    return state


@fuzz(200)
@given(data=st.data())
def test_load_of_corrupt_checkpoints(data, tmp_path_factory):
    """ExperienceBuffer.load of random bytes, a real checkpoint truncated or with a flipped byte,
    a foreign torch.save, a janus file whose state is corrupted, a missing path, a folder or a
    non-path (or a bad placement) raises a janus error; a loadable file gives a working buffer. load_state_dict of a
    corrupted state into a live buffer raises CheckpointError and leaves the buffer unchanged."""
    folder = tmp_path_factory.mktemp("ckpt")
    buf = data.draw(filled_buffers())
    real = folder / "real.pt"
    buf.save(real)
    blob = real.read_bytes()
    kind = data.draw(st.sampled_from(["bytes", "truncate", "flip", "foreign", "missing", "folder", "type"] + ["state"] * 3))
    path: Any = folder / "x.pt"
    if kind == "bytes":
        path.write_bytes(data.draw(st.binary(max_size=600)))
    elif kind == "truncate":
        path.write_bytes(blob[: data.draw(st.integers(0, len(blob) - 1))])
    elif kind == "flip":
        i = data.draw(st.integers(0, len(blob) - 1))
        path.write_bytes(blob[:i] + bytes([blob[i] ^ data.draw(st.integers(1, 255))]) + blob[i + 1:])
    elif kind == "foreign":
        torch.save(data.draw(st.dictionaries(st.text(max_size=5), JUNK | st.just(state_file.FORMAT), max_size=4)), path)
    elif kind == "state":
        state = data.draw(corrupt_states(buf.state_dict()))
        torch.save({"format": state_file.FORMAT, "version": state_file.VERSION, "state": state}, path)
        attempt(buf, lambda: buf.load_state_dict(state), "checkpoint", "capacity", "sampler", "allocate")
    else:
        junk = data.draw(st.sampled_from([None, 3, b"x.pt", ["a"]]))
        path = {"missing": folder / "nope.pt", "folder": folder, "type": junk}[kind]
    placement = data.draw(mostly(st.none(), st.sampled_from(["cpu_pageable", "cuda", "gpu", 3]), odds=3))
    try:
        loaded = ExperienceBuffer.load(path, placement)
    except JanusError as exc:
        event(f"{kind}: {type(exc).__name__}")
        check_error(exc, str(path), "checkpoint", "placement", "allocate")
        return
    event(f"{kind}: loaded")
    assert kind in ("flip", "state"), f"{kind} loaded"
    if len(loaded):
        assert len(loaded.sample(2)["index"]) == 2


# ---- 6. configs and the CLI ---------------------------------------------------------------------
SECTIONS = {"": [f.name for f in fields(C.JanusConfig)] + ["seed", "name", "algorithm", "workload", "runtime"],
            "workload": [f.name for f in fields(C.WorkloadConfig)], "runtime": [f.name for f in fields(C.RuntimeConfig)]}
FIELDS = sorted({n for names in SECTIONS.values() for n in names} | {"unknown key", "--env"})
VALUES = st.one_of(JUNK, st.floats(-1, 300), st.integers(-1, 300),
                   st.sampled_from(["cuda", "cpu_pinned", "auto", "cpu", "uint8", "dqn", "ppo", "ray", "1/2", "3/4", True]))


@fuzz(400)
@given(section=st.sampled_from(sorted(SECTIONS)), data=st.data(), value=VALUES, as_yaml=st.booleans())
def test_config_fields(section, data, value, as_yaml, tmp_path_factory):
    """validate(from_dict(...)) -- or the same through a YAML file -- with any value for any field
    (or an unknown key) returns a config or raises ConfigError naming that field."""
    key = data.draw(st.one_of(st.sampled_from(SECTIONS[section]), st.text(max_size=4), st.integers(0, 3)))
    raw = {section: {key: value}} if section else {key: value}
    try:
        if as_yaml:
            path = tmp_path_factory.getbasetemp() / "fuzz.yaml"
            path.write_text(yaml.safe_dump(raw))
            raw = C.read_yaml(path)
        C.validate(C.from_dict(raw))
    except ConfigError as exc:
        check_error(exc, repr(key), str(key) or repr(key))


@fuzz(60)
@given(text=st.one_of(st.text(max_size=40).map(str.encode), st.binary(max_size=80),
                 st.sampled_from([b"[" * 5000, b"a: !!python/object:os.system x", b"{a: 1", b"- 1\n- 2", b"workload: 3"])))
def test_read_yaml_of_any_text(text, tmp_path_factory):
    """read_yaml + from_dict + validate of arbitrary text or bytes: a config or a ConfigError."""
    path = tmp_path_factory.getbasetemp() / "any.yaml"
    path.write_bytes(text)
    try:
        C.validate(C.from_dict(C.read_yaml(path)))
    except ConfigError as exc:
        check_error(exc, "config", *FIELDS)


FLAGS = ([f"--{f.name}" for f in fields(C.JanusConfig)] + [f"--{f.name}" for f in fields(C.WorkloadConfig)]
         + [f"--{f.name}" for f in fields(C.RuntimeConfig) if f.name not in ("resume", "checkpoint_dir")]
         + ["--num_workers", "--seed", "--n_step"])
FLAG_VALUES = st.one_of(st.sampled_from(["-1", "0", "1", "2", "1/4", "1/0", "nan", "inf", "1e999", "1e999999999", "abc", "",
                                         "cuda", "cpu", "auto", "true", "CartPole-v1", "Pendulum-v1", "NoSuchEnv-v0",
                                         "dqn", "ppo", "ray"]), st.text(max_size=6))


@fuzz(150)
@given(command=st.sampled_from([["train"], ["compare"], ["eval", "--sweep", "overlap"], ["rollout"]]),
       flags=st.lists(st.tuples(st.sampled_from(FLAGS), FLAG_VALUES), min_size=1, max_size=3))
def test_cli_flags(command, flags, tmp_path_factory):
    """janus CMD --flag VALUE ...: exit code 2 with a message on stderr (argparse or a janus error),
    or the validated config reaches the (stubbed) run; never a traceback."""
    out = tmp_path_factory.getbasetemp() / "cli-out"
    if command == ["rollout"]:
        argv = ["rollout", "--checkpoint", str(out / "none"), "--episodes", flags[0][1]]
    else:  # --n_step is a train flag
        pairs = [x for f, v in flags if command == ["train"] or f != "--n_step" for x in (f, v)]
        argv = [*command, "--quick", "--config", DEFAULT_YAML, "--out", str(out), *pairs]
    err = io.StringIO()
    with mock.patch("janus.harness.commands.run_command", return_value=0) as run, contextlib.redirect_stderr(err):
        try:
            code = main(argv)
        except SystemExit as exc:  # argparse: a flag value of the wrong type
            code = exc.code
    assert code in (0, 2), code
    assert (code == 0) == run.called
    if code == 2:
        assert err.getvalue().strip(), "exit code 2 without a message"


# ---- 7. environment ids -------------------------------------------------------------------------
@fuzz(100)
@given(env_id=st.one_of(st.sampled_from(sorted(gym.registry)), st.sampled_from(EXAMPLE_ENVS),
                        st.text(max_size=20), JUNK),
       algo=st.sampled_from(["dqn", "ppo"]))
def test_environment_ids(env_id, algo):
    """make_vector_env(id) -- and validate() of a dqn/ppo run -- with any id (registered ones whose
    dependencies are missing included) builds the env or raises ConfigError naming --env and the id."""
    try:
        make_vector_env(env_id, 1).close()
    except ConfigError as exc:
        check_error(exc, "--env")
        assert repr(env_id)[1:-1] in str(exc) or not isinstance(env_id, str), exc
    raw = {"is_on_policy": algo == "ppo", "workload": {"algo": algo, "env": env_id}}
    try:
        C.validate(C.from_dict(raw))
    except ConfigError as exc:
        check_error(exc, "--env", "env", "rollout_length", "is_on_policy")
