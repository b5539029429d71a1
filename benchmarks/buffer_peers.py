"""janus's ExperienceBuffer against peer replay buffers, side by side in one run (not a test).

    python benchmarks/buffer_peers.py                    # full run, a few minutes
    python benchmarks/buffer_peers.py --quick            # small sizes, few repetitions, < 1 min
    python benchmarks/buffer_peers.py --json out.json    # also save every number
    python benchmarks/buffer_peers.py --profile          # also: where janus's small calls spend time
    (--libs janus,cpprb  --obs vec64  --chunk 1024 narrow or change a run)

Peers (optional, ``pip install -c constraints.txt -e ".[bench]"``; one that is missing or fails to
load is reported as unavailable with the reason): cpprb (ReplayBuffer, PrioritizedReplayBuffer),
TorchRL (ReplayBuffer + LazyTensorStorage + RandomSampler / PrioritizedSampler), Stable-Baselines3
(ReplayBuffer, uniform only) and a naive torch baseline (preallocated tensors; ``torch.randint`` +
per-field indexing; prioritized: ``torch.multinomial`` over the priority vector).

Every buffer stores the same transition: ``obs`` and ``next_obs`` (64 float32, or 4x84x84 uint8),
``action`` int64, ``reward`` float32, ``done`` float32, at capacities 100k and 1M (--quick: 10k),
with batches of 256 and 4096. A cell whose buffer would not fit in 55% of the available memory is
skipped with the reason (4x84x84 at 1M: 56 GB). Buffers are filled to capacity before anything is
timed. Measured, in transitions per second:

* ``extend``: steady-state writes (the ring is full, so they overwrite) of ``--chunk`` transitions
  per call, the same chunk for every library (SB3: one ``add`` of ``n_envs = chunk`` envs).
* ``sample``: uniform sampling of a batch.
* ``sample+update``: prioritized sampling of a batch, then setting the sampled items' priorities
  to fresh random values (priorities are randomised once after the fill, so they are not uniform).

Method: one torch thread; inputs are prepared (and converted to each library's native format)
before timing. Every library gets a warm-up, then a fixed number of repetitions (calibrated once
per library and cell to last about 0.1 s; 0.02 s with --quick) timed with ``time.perf_counter``;
the rate is the median of 7 trials (3). Libraries that fit in memory together are timed
round-robin, trial by trial, so that the machine's noise hits them alike. Minor page faults per
call are recorded too (``getrusage``): fresh output tensors of large batches are page-faulted in
by the kernel, which can cost more than the copy itself.

The machine's copy bandwidth is measured in the same run, at the start and at the end (a 512 MiB
preallocated ``torch`` ``copy_`` and ``numpy.copyto``; the highest figure is the reference): for
each uniform sample cell the bytes gathered per second are reported as a fraction of it, next to
janus's gather into outputs reused across calls (a diagnostic: the copy without fresh memory).
"""

from __future__ import annotations

import argparse
import datetime
import gc
import importlib.metadata
import json
import logging
import os
import platform
import resource
import statistics
import sys
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

try:
    import janus  # noqa: F401
except ImportError:  # running from a checkout without an installed package
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from janus import ExperienceBuffer

OBS_KINDS = {"vec4": ((4,), torch.float32), "vec64": ((64,), torch.float32), "img84": ((4, 84, 84), torch.uint8)}
TORCH_TO_NUMPY = {torch.float32: np.float32, torch.uint8: np.uint8, torch.int64: np.int64}
ALPHA, BETA, EPS = 0.6, 0.4, 1e-6
N_ACTIONS = 4
POOL = 4  # distinct pre-generated chunks / priority vectors, cycled through
DIAGNOSTIC = "gather-reused"  # janus's gather into reused outputs: shown in the bandwidth table only


class Unavailable(Exception):
    """A peer library (or one of its parts) cannot be used here; the message says why."""


# ---- data --------------------------------------------------------------------------------------
def field_specs(obs_kind: str) -> dict[str, tuple[tuple[int, ...], torch.dtype]]:
    shape, dtype = OBS_KINDS[obs_kind]
    return {
        "obs": (shape, dtype),
        "action": ((), torch.int64),
        "reward": ((), torch.float32),
        "next_obs": (shape, dtype),
        "done": ((), torch.float32),
    }


def transition_bytes(obs_kind: str) -> int:
    return sum(int(np.prod(s, dtype=np.int64)) * torch.empty((), dtype=d).element_size() for s, d in field_specs(obs_kind).values())


def make_chunks(obs_kind: str, chunk: int, gen: torch.Generator) -> list[dict[str, torch.Tensor]]:
    out = []
    for _ in range(POOL):
        batch = {}
        for name, (shape, dtype) in field_specs(obs_kind).items():
            if name == "action":
                batch[name] = torch.randint(0, N_ACTIONS, (chunk,), generator=gen)
            elif name == "done":
                batch[name] = (torch.rand(chunk, generator=gen) < 0.01).float()
            elif dtype == torch.uint8:
                batch[name] = torch.randint(0, 256, (chunk, *shape), generator=gen, dtype=torch.uint8)
            else:
                batch[name] = torch.randn((chunk, *shape), generator=gen, dtype=dtype)
        out.append(batch)
    return out


# ---- adapters: one per library and sampler -----------------------------------------------------
class Adapter:
    """A buffer under test. Subclasses convert inputs in ``prepare_*`` (untimed) and keep the timed
    calls (``extend``, ``sample``, ``sample_update``) to what a user of the library would write."""

    library = "?"
    prioritized = False

    def __init__(self, capacity: int, obs_kind: str, chunk: int) -> None:
        self.capacity, self.obs_kind, self.chunk = capacity, obs_kind, chunk
        self.specs = field_specs(obs_kind)

    def prepare_chunks(self, chunks: list[dict[str, torch.Tensor]]) -> list[Any]:
        return chunks

    def prepare_priorities(self, prios: list[torch.Tensor]) -> list[Any]:
        return prios

    def extend(self, data: Any) -> None:
        raise NotImplementedError

    def sample(self, batch: int) -> Any:
        raise NotImplementedError

    def sample_update(self, batch: int, prio: Any) -> None:
        raise NotImplementedError

    @property
    def full_size(self) -> int:
        """Items held once full."""
        return self.capacity

    def randomize_priorities(self, gen: torch.Generator) -> None:
        """Give every stored item a random priority (prioritized adapters only)."""

    def __len__(self) -> int:
        raise NotImplementedError


class JanusAdapter(Adapter):
    library = "janus"

    output = "torch"

    def __init__(self, capacity: int, obs_kind: str, chunk: int, prioritized: bool = False) -> None:
        super().__init__(capacity, obs_kind, chunk)
        self.prioritized = prioritized
        kind = "prioritized" if prioritized else "uniform"
        settings = {"alpha": ALPHA, "beta": BETA, "eps": EPS} if prioritized else {}
        self.buf = ExperienceBuffer(capacity, "cpu_pageable", kind, seed=0, fields=self.specs, output=self.output,
                                    **settings)
        self._reused: dict[int, dict[str, torch.Tensor]] = {}

    def extend(self, data: dict[str, torch.Tensor]) -> None:
        self.buf.extend(data)

    def sample(self, batch: int) -> Any:
        return self.buf.sample(batch)

    def sample_update(self, batch: int, prio: torch.Tensor) -> None:
        out = self.buf.sample(batch)
        self.buf.update_priority(out["index"], prio)

    def gather_reused(self, batch: int) -> None:
        """Diagnostic, not the API (``sample`` must return fresh tensors): the same random gather
        into output tensors reused across calls, so without fresh memory's page faults."""
        out = self._reused.get(batch)
        if out is None:
            out = self._reused[batch] = {k: torch.empty((batch, *s), dtype=d) for k, (s, d) in self.specs.items()}
        self.buf._storage.gather(torch.randint(0, len(self.buf), (batch,)), out=out)

    def randomize_priorities(self, gen: torch.Generator) -> None:
        written = self.buf.total_written
        keys = torch.arange(written - len(self.buf), written)
        self.buf.update_priority(keys, torch.rand(keys.shape[0], generator=gen))

    def __len__(self) -> int:
        return len(self.buf)


class JanusNumpyAdapter(JanusAdapter):
    """janus with numpy in and numpy out (``output="numpy"``), as cpprb takes and returns them."""

    library = "janus-numpy"
    output = "numpy"

    def prepare_chunks(self, chunks: list[dict[str, torch.Tensor]]) -> list[Any]:
        return _numpy_chunks(chunks)

    def prepare_priorities(self, prios: list[torch.Tensor]) -> list[Any]:
        return [p.numpy() for p in prios]


def _cpprb_env(obs_kind: str) -> dict[str, dict[str, Any]]:
    shape, dtype = OBS_KINDS[obs_kind]
    obs = {"shape": shape, "dtype": TORCH_TO_NUMPY[dtype]}
    return {
        "obs": obs,
        "act": {"dtype": np.int64},
        "rew": {"dtype": np.float32},
        "next_obs": dict(obs),
        "done": {"dtype": np.float32},
    }


def _numpy_chunks(chunks: list[dict[str, torch.Tensor]], rename: dict[str, str] | None = None) -> list[dict[str, np.ndarray]]:
    rename = rename or {}
    return [{rename.get(k, k): v.numpy() for k, v in c.items()} for c in chunks]


class CpprbAdapter(Adapter):
    library = "cpprb"

    def __init__(self, capacity: int, obs_kind: str, chunk: int, prioritized: bool = False) -> None:
        super().__init__(capacity, obs_kind, chunk)
        import cpprb

        self.prioritized = prioritized
        env = _cpprb_env(obs_kind)
        if prioritized:
            self.rb = cpprb.PrioritizedReplayBuffer(capacity, env, alpha=ALPHA, eps=EPS)
        else:
            self.rb = cpprb.ReplayBuffer(capacity, env)

    def prepare_chunks(self, chunks: list[dict[str, torch.Tensor]]) -> list[Any]:
        return _numpy_chunks(chunks, {"action": "act", "reward": "rew"})

    def prepare_priorities(self, prios: list[torch.Tensor]) -> list[Any]:
        return [p.numpy() for p in prios]

    def extend(self, data: dict[str, np.ndarray]) -> None:
        self.rb.add(**data)

    def sample(self, batch: int) -> Any:
        return self.rb.sample(batch)

    def sample_update(self, batch: int, prio: np.ndarray) -> None:
        out = self.rb.sample(batch, beta=BETA)
        self.rb.update_priorities(out["indexes"], prio)

    def randomize_priorities(self, gen: torch.Generator) -> None:
        n = self.rb.get_stored_size()
        self.rb.update_priorities(np.arange(n), torch.rand(n, generator=gen).numpy())

    def __len__(self) -> int:
        return int(self.rb.get_stored_size())


class CpprbTorchAdapter(CpprbAdapter):
    """cpprb as a torch learner uses it: torch tensors in (``.numpy()`` per field), torch tensors out
    (``torch.from_numpy`` per field the learner reads; the keys stay numpy for ``update_priorities``).
    The conversions are the least such a user writes; janus's torch API does them itself."""

    library = "cpprb-torch"

    def prepare_chunks(self, chunks: list[dict[str, torch.Tensor]]) -> list[Any]:
        rename = {"action": "act", "reward": "rew"}
        return [{rename.get(k, k): v for k, v in c.items()} for c in chunks]

    def prepare_priorities(self, prios: list[torch.Tensor]) -> list[Any]:
        return prios

    def extend(self, data: dict[str, torch.Tensor]) -> None:
        self.rb.add(**{k: v.numpy() for k, v in data.items()})

    @staticmethod
    def _tensors(out: dict[str, np.ndarray]) -> dict[str, Any]:
        return {k: v if k == "indexes" else torch.from_numpy(v) for k, v in out.items()}

    def sample(self, batch: int) -> Any:
        return self._tensors(self.rb.sample(batch))

    def sample_update(self, batch: int, prio: torch.Tensor) -> None:
        out = self._tensors(self.rb.sample(batch, beta=BETA))
        self.rb.update_priorities(out["indexes"], prio.numpy())

    def randomize_priorities(self, gen: torch.Generator) -> None:
        n = self.rb.get_stored_size()
        self.rb.update_priorities(np.arange(n), torch.rand(n, generator=gen).numpy())


def _torchrl_prioritized_unavailable() -> str | None:
    """Why TorchRL's prioritized sampler cannot run here (its C++ extension), or None."""
    try:
        import torchrl._torchrl  # noqa: F401
    except ImportError as exc:
        msg = str(exc)
        if "undefined symbol" in msg:
            msg = "undefined symbol " + msg.split("undefined symbol:")[-1].strip()[:60] + "..."
        return f"torchrl's C++ extension (segment trees) does not load against torch {torch.__version__}: {msg}"
    return None


class TorchRLAdapter(Adapter):
    library = "torchrl"

    def __init__(self, capacity: int, obs_kind: str, chunk: int, prioritized: bool = False) -> None:
        super().__init__(capacity, obs_kind, chunk)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            from torchrl.data import LazyTensorStorage, ReplayBuffer
            from torchrl.data.replay_buffers.samplers import PrioritizedSampler, RandomSampler
        logging.getLogger("torchrl").setLevel(logging.WARNING)  # after import: torchrl sets it
        self.prioritized = prioritized
        if prioritized:
            reason = _torchrl_prioritized_unavailable()
            if reason:
                raise Unavailable(reason)
            sampler = PrioritizedSampler(capacity, alpha=ALPHA, beta=BETA, eps=EPS)
        else:
            sampler = RandomSampler()
        self.rb = ReplayBuffer(storage=LazyTensorStorage(capacity), sampler=sampler)

    def prepare_chunks(self, chunks: list[dict[str, torch.Tensor]]) -> list[Any]:
        from tensordict import TensorDict

        return [TensorDict(dict(c), batch_size=[self.chunk]) for c in chunks]

    def extend(self, data: Any) -> None:
        self.rb.extend(data)

    def sample(self, batch: int) -> Any:
        return self.rb.sample(batch)

    def sample_update(self, batch: int, prio: torch.Tensor) -> None:
        _, info = self.rb.sample(batch, return_info=True)
        self.rb.update_priority(info["index"], prio)

    def randomize_priorities(self, gen: torch.Generator) -> None:
        n = len(self.rb)
        self.rb.update_priority(torch.arange(n), torch.rand(n, generator=gen))

    def __len__(self) -> int:
        return len(self.rb)


class SB3Adapter(Adapter):
    """SB3's ReplayBuffer adds one step of ``n_envs`` environments per call: ``n_envs = chunk``,
    so it holds ``capacity // chunk`` steps. Timeout handling (a Python loop over ``infos``) is
    switched off, which only helps SB3."""

    library = "sb3"

    def __init__(self, capacity: int, obs_kind: str, chunk: int, prioritized: bool = False) -> None:
        super().__init__(capacity, obs_kind, chunk)
        if prioritized:
            raise Unavailable("Stable-Baselines3 has no prioritized replay buffer")
        from gymnasium import spaces
        from stable_baselines3.common.buffers import ReplayBuffer

        shape, dtype = OBS_KINDS[obs_kind]
        if dtype == torch.uint8:
            obs_space = spaces.Box(0, 255, shape, np.uint8)
        else:
            obs_space = spaces.Box(-np.inf, np.inf, shape, np.float32)
        np.random.seed(0)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            self.rb = ReplayBuffer(
                capacity, obs_space, spaces.Discrete(N_ACTIONS), device="cpu", n_envs=chunk,
                handle_timeout_termination=False,
            )
        self.infos = [{} for _ in range(chunk)]

    def prepare_chunks(self, chunks: list[dict[str, torch.Tensor]]) -> list[Any]:
        return _numpy_chunks(chunks)

    def extend(self, d: dict[str, np.ndarray]) -> None:
        self.rb.add(d["obs"], d["next_obs"], d["action"], d["reward"], d["done"], self.infos)

    def sample(self, batch: int) -> Any:
        return self.rb.sample(batch)

    @property
    def full_size(self) -> int:
        return self.rb.buffer_size * self.rb.n_envs

    def __len__(self) -> int:
        return self.rb.size() * self.rb.n_envs


class NaiveAdapter(Adapter):
    """The obvious torch code: preallocated tensors, ``torch.randint`` + per-field ``t[idx]``;
    prioritized: a priority vector, ``torch.multinomial`` over it, weights from its min and sum."""

    library = "naive"

    def __init__(self, capacity: int, obs_kind: str, chunk: int, prioritized: bool = False) -> None:
        super().__init__(capacity, obs_kind, chunk)
        self.prioritized = prioritized
        self.data = {k: torch.empty((capacity, *s), dtype=d) for k, (s, d) in self.specs.items()}
        self.pos = self.size = 0
        if prioritized:
            self.prio = torch.zeros(capacity, dtype=torch.float64)
            self.max_prio = 1.0

    def extend(self, batch: dict[str, torch.Tensor]) -> None:
        n, cap, pos = self.chunk, self.capacity, self.pos
        first = min(n, cap - pos)
        for k, v in batch.items():
            self.data[k][pos : pos + first] = v[:first]
            if first < n:
                self.data[k][: n - first] = v[first:]
        if self.prioritized:
            self.prio[pos : pos + first] = self.max_prio**ALPHA
            if first < n:
                self.prio[: n - first] = self.max_prio**ALPHA
        self.pos, self.size = (pos + n) % cap, min(self.size + n, cap)

    def sample(self, batch: int) -> dict[str, torch.Tensor]:
        idx = torch.randint(0, self.size, (batch,))
        return {k: v[idx] for k, v in self.data.items()}

    def sample_update(self, batch: int, prio: torch.Tensor) -> None:
        p = self.prio[: self.size]
        idx = torch.multinomial(p, batch, replacement=True)
        out = {k: v[idx] for k, v in self.data.items()}
        out["weight"] = (p.min() / p[idx]).pow_(BETA).float()
        new = prio.double().abs() + EPS
        self.max_prio = max(self.max_prio, float(new.max()))
        self.prio[idx] = new.pow_(ALPHA)

    def randomize_priorities(self, gen: torch.Generator) -> None:
        new = torch.rand(self.size, generator=gen, dtype=torch.float64) + EPS
        self.max_prio = max(self.max_prio, float(new.max()))
        self.prio[: self.size] = new.pow_(ALPHA)

    def __len__(self) -> int:
        return self.size


LIBRARIES: dict[str, type[Adapter]] = {
    "janus": JanusAdapter,
    "cpprb": CpprbAdapter,
    "cpprb-torch": CpprbTorchAdapter,
    "torchrl": TorchRLAdapter,
    "sb3": SB3Adapter,
    "naive": NaiveAdapter,
}


def library_version(name: str) -> str:
    dist = {"cpprb": "cpprb", "cpprb-torch": "cpprb", "torchrl": "torchrl", "sb3": "stable-baselines3"}.get(name)
    if dist is None:
        return "janus (this checkout)" if name == "janus" else f"torch {torch.__version__}"
    try:
        return f"{dist} {importlib.metadata.version(dist)}"
    except importlib.metadata.PackageNotFoundError:
        return f"{dist} (not installed)"


def build(lib: str, prioritized: bool, capacity: int, obs_kind: str, chunk: int) -> Adapter:
    """Construct an adapter; any failure (not installed, fails to load, unsupported) -> Unavailable."""
    try:
        return LIBRARIES[lib](capacity, obs_kind, chunk, prioritized=prioritized)
    except Unavailable:
        raise
    except Exception as exc:  # noqa: BLE001 - a peer failing to import or construct is a result
        text = str(exc).splitlines()[0] if str(exc) else ""
        raise Unavailable(f"{type(exc).__name__}: {text[:200]}") from None


# ---- timing ------------------------------------------------------------------------------------
def minor_faults() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


class Timed:
    """One timed operation of one adapter: calibrated once, then timed trial after trial."""

    def __init__(self, step: Callable[[int], object], items: int, trial_s: float, max_reps: int) -> None:
        self.step, self.items = step, items
        t0, calls = time.perf_counter(), 0
        while calls < 3 or (time.perf_counter() - t0 < min(trial_s, 0.05) and calls < max_reps):
            step(calls)  # warm-up, also measures the call time
            calls += 1
        per_call = (time.perf_counter() - t0) / calls
        self.reps = int(min(max_reps, max(3, trial_s / per_call)))
        self.rates: list[float] = []
        self.faults: list[float] = []

    def trial(self) -> None:
        step, reps = self.step, self.reps
        f0, t0 = minor_faults(), time.perf_counter()
        for i in range(reps):
            step(i)
        elapsed = time.perf_counter() - t0
        self.rates.append(self.items * reps / elapsed)
        self.faults.append((minor_faults() - f0) / reps)

    def result(self) -> dict[str, Any]:
        return {
            "rate": statistics.median(self.rates),
            "rates": self.rates,
            "reps": self.reps,
            "faults_per_call": statistics.median(self.faults),
        }


def fill(adapter: Adapter, chunks: list[Any]) -> float:
    t0, i = time.perf_counter(), 0
    while len(adapter) < adapter.full_size:
        adapter.extend(chunks[i % len(chunks)])
        i += 1
    return time.perf_counter() - t0


def memcpy_bandwidth(nbytes: int, trials: int) -> dict[str, float]:
    """GB/s of a large copy between preallocated, already-touched buffers (bytes copied / s)."""
    src = torch.ones(nbytes, dtype=torch.uint8)
    dst = torch.zeros(nbytes, dtype=torch.uint8)
    src_np, dst_np = src.numpy(), dst.numpy()
    out = {}
    for name, copy in (("torch_copy_", lambda: dst.copy_(src)), ("numpy_copyto", lambda: np.copyto(dst_np, src_np))):
        copy()
        times = []
        for _ in range(trials):
            t0 = time.perf_counter()
            copy()
            times.append(time.perf_counter() - t0)
        out[name] = nbytes / statistics.median(times) / 1e9
    return out


def available_memory() -> int:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))


def groups_by_memory(libs: list[str], per_buffer: int, budget: int) -> list[list[str]]:
    """Consecutive groups of libraries whose buffers fit in ``budget`` together (at least one each)."""
    per_group = max(1, budget // max(per_buffer, 1))
    return [libs[i : i + per_group] for i in range(0, len(libs), per_group)]


# ---- the run -----------------------------------------------------------------------------------
def run_cell(
    obs_kind: str, capacity: int, prioritized: bool, libs: list[str], args: argparse.Namespace,
    results: list[dict[str, Any]], unavailable: dict[str, str], budget: int,
) -> None:
    """Build, fill and time every library for one (observation, capacity, sampler) cell."""
    sampler = "prioritized" if prioritized else "uniform"
    per_buffer = capacity * transition_bytes(obs_kind)
    gen = torch.Generator().manual_seed(0)
    chunks = make_chunks(obs_kind, args.chunk, gen)
    prios = {b: [torch.rand(b, generator=gen) for _ in range(POOL)] for b in args.batches}
    max_reps = args.max_reps
    for group in groups_by_memory(libs, per_buffer, budget):
        timed: list[tuple[dict[str, Any], Timed]] = []
        adapters = []
        for lib in group:
            key = f"{lib}/{sampler}"
            try:
                adapter = build(lib, prioritized, capacity, obs_kind, args.chunk)
            except Unavailable as exc:
                unavailable.setdefault(key, str(exc))
                continue
            adapters.append(adapter)
            native = adapter.prepare_chunks(chunks)
            fill_s = fill(adapter, native)
            if prioritized:
                adapter.randomize_priorities(gen)
            print(f"  {obs_kind} cap {capacity:>9,} {sampler:11s} {lib:8s} filled in {fill_s:5.1f} s", flush=True)
            base = {"obs": obs_kind, "capacity": capacity, "stored": len(adapter), "sampler": sampler, "library": lib}
            ops: list[tuple[str, int, Callable[[int], object], int]] = [
                ("extend", args.chunk, (lambda a, c: lambda i: a.extend(c[i % POOL]))(adapter, native), args.chunk)
            ]
            for b in args.batches:
                if prioritized:
                    pv = adapter.prepare_priorities(prios[b])
                    ops.append(("sample+update", b, (lambda a, b, p: lambda i: a.sample_update(b, p[i % POOL]))(adapter, b, pv), b))
                else:
                    ops.append(("sample", b, (lambda a, b: lambda i: a.sample(b))(adapter, b), b))
                    if isinstance(adapter, JanusAdapter):
                        ops.append((DIAGNOSTIC, b, (lambda a, b: lambda i: a.gather_reused(b))(adapter, b), b))
            for op, size, step, items in ops:
                cell = dict(base, op=op, size=size, bytes_per_item=transition_bytes(obs_kind))
                timed.append((cell, Timed(step, items, args.trial_s, max_reps)))
        for _ in range(args.trials):  # round-robin: every library's op once per trial
            for _, t in timed:
                t.trial()
        for cell, t in timed:
            cell.update(t.result())
            results.append(cell)
        del timed, adapters
        gc.collect()


def fmt_rate(x: float | None) -> str:
    if x is None:
        return "-"
    for unit, scale in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if x >= scale:
            return f"{x / scale:.2f}{unit}"
    return f"{x:.0f}"


def table(header: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    line = lambda r: "| " + " | ".join(c.rjust(w) if i >= 3 else c.ljust(w) for i, (c, w) in enumerate(zip(r, widths))) + " |"  # noqa: E731
    sep = "|" + "|".join(("-" * (w + 1) + ":") if i >= 3 else ("-" * (w + 2)) for i, w in enumerate(widths)) + "|"
    return "\n".join([line(header), sep, *(line(r) for r in rows)])


def report(results: list[dict[str, Any]], libs: list[str], memcpy: float) -> str:
    """The tables, as markdown: absolute rates, janus/peer ratios, bandwidth, page faults."""
    by = {(r["obs"], r["capacity"], r["sampler"], r["op"], r["size"], r["library"]): r for r in results}
    order = lambda k: (list(OBS_KINDS).index(k[0]), k[1], k[2] != "uniform", k[3] != "extend", k[4])  # noqa: E731
    cells = sorted({k[:5] for k in by if k[3] != DIAGNOSTIC}, key=order)
    peers = [lib for lib in libs if lib != "janus"]

    def label(k: tuple) -> list[str]:
        capacity = f"{k[1] // 1000}k" if k[1] < 10**6 else f"{k[1] // 10**6}M"
        return [k[0], capacity, f"{k[3]} ({k[2][:4]}) {k[4]}"]

    def gbps(r: dict[str, Any] | None) -> str:
        if r is None:
            return "-"
        rate = r["rate"] * r["bytes_per_item"] / 1e9
        return f"{rate:.2f} GB/s = {rate / memcpy:.0%}"

    absolute, ratios, faults, bandwidth = [], [], [], []
    for k in cells:
        get = lambda lib: by.get((*k, lib))  # noqa: E731
        absolute.append(label(k) + [fmt_rate(get(lib)["rate"]) if get(lib) else "-" for lib in libs])
        j = get("janus")
        ratios.append(label(k) + [f"{j['rate'] / get(p)['rate']:.2f}x" if j and get(p) else "-" for p in peers])
        faults.append(label(k) + [f"{get(lib)['faults_per_call']:.0f}" if get(lib) else "-" for lib in libs])
        if k[3] == "sample":
            bandwidth.append(label(k) + [gbps(j), gbps(get("cpprb")), gbps(by.get((*k[:3], DIAGNOSTIC, k[4], "janus")))])
    head = ["obs", "capacity", "op (sampler) batch/chunk"]
    return "\n\n".join([
        "Transitions per second (median of trials):\n" + table(head + libs, absolute),
        "Ratio janus / peer (> 1: janus is faster):\n" + table(head + peers, ratios),
        f"Bytes gathered per second by uniform sample, as a fraction of memcpy ({memcpy:.1f} GB/s); last column:\n"
        "janus's gather into outputs reused across calls (a diagnostic, not the API: no fresh memory):\n"
        + table(head + ["janus sample", "cpprb sample", "janus gather, reused out"], bandwidth),
        "Minor page faults per call (fresh output memory the kernel must map and zero):\n" + table(head + libs, faults),
    ])


def targets(results: list[dict[str, Any]], memcpy: float, large: int) -> list[str]:
    """The goals, janus against cpprb in this run: uniform extend and sample >= 1.5x, prioritized
    sample+update >= 2x, uniform sample of ``large`` batches >= 50% of memcpy bandwidth."""
    goals = {("uniform", "extend"): 1.5, ("uniform", "sample"): 1.5, ("prioritized", "sample+update"): 2.0}
    key = lambda r: (r["obs"], r["capacity"], r["sampler"], r["op"], r["size"])  # noqa: E731
    cpprb = {key(r): r for r in results if r["library"] == "cpprb"}
    lines = []
    for r in results:
        if r["library"] != "janus":
            continue
        where = f"{r['obs']} {r['capacity']:>9,} {r['sampler']:11s} {r['op']:13s} {r['size']:>5}"
        goal, peer = goals.get((r["sampler"], r["op"])), cpprb.get(key(r))
        if goal and peer:
            ratio = r["rate"] / peer["rate"]
            lines.append(f"{'met ' if ratio >= goal else 'MISS'} {where}: {ratio:.2f}x cpprb (target {goal}x)")
        if r["op"] == "sample" and r["size"] == large:
            frac = r["rate"] * r["bytes_per_item"] / 1e9 / memcpy
            lines.append(f"{'met ' if frac >= 0.5 else 'MISS'} {where}: {frac:.0%} of memcpy bandwidth (target 50%)")
    return lines


def profile_janus(args: argparse.Namespace) -> list[str]:
    """Where janus's time goes at small batches (vec64): torch ops per call, the share of the call
    spent inside them (torch.profiler, top-level ops) and the costliest ones."""
    from collections import Counter

    from torch.profiler import ProfilerActivity, profile

    capacity, calls = (10_000, 100) if args.quick else (100_000, 400)
    gen = torch.Generator().manual_seed(0)
    chunks = make_chunks("vec64", args.chunk, gen)
    prio = torch.rand(256, generator=gen)
    lines = []
    for prioritized in (False, True):
        a = JanusAdapter(capacity, "vec64", args.chunk, prioritized)
        fill(a, chunks)
        cases: list[tuple[str, Callable[[int], object]]] = [(f"extend {args.chunk}", lambda i: a.extend(chunks[i % POOL]))]
        if prioritized:
            a.randomize_priorities(gen)
            cases.append(("sample+update 256", lambda i: a.sample_update(256, prio)))
        else:
            cases.append(("sample 256", lambda i: a.sample(256)))
        for name, step in cases:
            for i in range(20):
                step(i)
            t0 = time.perf_counter()
            for i in range(calls):
                step(i)
            wall = (time.perf_counter() - t0) / calls * 1e6
            with profile(activities=[ProfilerActivity.CPU]) as prof:
                t0 = time.perf_counter()
                for i in range(calls):
                    step(i)
                wall_prof = (time.perf_counter() - t0) / calls * 1e6
            top = [e for e in prof.events() if e.cpu_parent is None]
            times: dict[str, list[float]] = {}
            for e in top:
                times.setdefault(e.name.removeprefix("aten::"), []).append(e.cpu_time_total)
            # Typical cost per call: median time of an op x its count (robust to a preempted op).
            cost = Counter({k: statistics.median(v) * len(v) / calls for k, v in times.items()})
            in_ops = sum(cost.values())
            costly = ", ".join(f"{k} {v:.1f}" for k, v in cost.most_common(5))
            lines.append(
                f"{'prioritized' if prioritized else 'uniform':11s} {name:17s} {wall:6.1f} us/call; "
                f"{len(top) / calls:.0f} torch ops/call, {in_ops:.0f} us inside them "
                f"(profiled call: {wall_prof:.0f} us); costliest (us/call): {costly}"
            )
        a = None  # frees this adapter before the next is built (the closures above see the cell)
    return lines


def main() -> None:
    if "--grid" in sys.argv[1:]:  # the per-call grid (issue 11): its own options, see buffer_grid.py
        import buffer_grid

        buffer_grid.main(sys.argv[1:])
        return
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="small sizes, few repetitions (< 1 min)")
    parser.add_argument("--json", type=Path, help="write every measurement to this file")
    parser.add_argument("--chunk", type=int, default=256, help="transitions per extend call (default 256)")
    parser.add_argument("--libs", default=",".join(LIBRARIES), help="comma-separated subset of " + ",".join(LIBRARIES))
    parser.add_argument("--obs", default="vec64,img84", help="comma-separated subset of " + ",".join(OBS_KINDS))
    parser.add_argument("--profile", action="store_true", help="also profile janus's small-batch calls (torch ops per call)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    libs = [lib for lib in args.libs.split(",") if lib]
    unknown = set(libs) - set(LIBRARIES)
    if unknown:
        parser.error(f"unknown --libs {sorted(unknown)}; accepted: {', '.join(LIBRARIES)}")
    if args.quick:
        capacities, args.batches, args.trials, args.trial_s, args.max_reps = (10_000,), (256, 4096), 3, 0.02, 200
    else:
        capacities, args.batches, args.trials, args.trial_s, args.max_reps = (100_000, 1_000_000), (256, 4096), 7, 0.1, 2000

    avail = available_memory()
    budget = int(avail * 0.55)  # buffers built at once; the rest for inputs, outputs and peers' copies
    started = datetime.datetime.now(datetime.timezone.utc)
    print(f"janus vs peers -- {started:%Y-%m-%d %H:%M} UTC, torch {torch.__version__}, {torch.get_num_threads()} thread, "
          f"{os.cpu_count()} cores, {avail / 2**30:.1f} GiB available, chunk {args.chunk}", flush=True)
    print("  " + "; ".join(library_version(lib) for lib in libs), flush=True)
    copy_bytes, copy_trials = (64 << 20, 5) if args.quick else (512 << 20, 9)
    bw = memcpy_bandwidth(copy_bytes, copy_trials)
    print("  memcpy: " + ", ".join(f"{k} {v:.1f} GB/s" for k, v in bw.items()), flush=True)

    results: list[dict[str, Any]] = []
    unavailable: dict[str, str] = {}
    skipped: list[str] = []
    for obs_kind in [o for o in args.obs.split(",") if o]:
        for capacity in capacities:
            per_buffer = capacity * transition_bytes(obs_kind)
            if per_buffer > budget:
                skipped.append(
                    f"{obs_kind} at capacity {capacity:,}: one buffer needs {per_buffer / 1e9:.1f} GB "
                    f"(obs and next_obs stored), more than the {budget / 1e9:.1f} GB budget "
                    f"(55% of {avail / 1e9:.1f} GB available)"
                )
                continue
            for prioritized in (False, True):
                run_cell(obs_kind, capacity, prioritized, libs, args, results, unavailable, budget)
    bw_end = memcpy_bandwidth(copy_bytes, copy_trials)  # the machine is shared: measure again
    print("  memcpy again: " + ", ".join(f"{k} {v:.1f} GB/s" for k, v in bw_end.items()), flush=True)
    bw = {k: max(v, bw_end[k]) for k, v in bw.items()}  # the higher: fractions err low, not high
    finished = datetime.datetime.now(datetime.timezone.utc)

    print()
    print(report(results, libs, max(bw.values())))
    print("\nUnavailable:" if unavailable else "")
    for key, why in sorted(unavailable.items()):
        print(f"  {key}: {why}")
    for s in skipped:
        print(f"Skipped: {s}")
    memcpy = max(bw.values())
    print("\nTargets (janus vs cpprb, same run):")
    for line in targets(results, memcpy, max(args.batches)):
        print("  " + line)
    profile_lines = profile_janus(args) if args.profile else []
    if profile_lines:
        print("\nProfile of janus (vec64, torch.profiler):")
        for line in profile_lines:
            print("  " + line)
    print(f"\nTotal {(datetime.datetime.now(datetime.timezone.utc) - started).total_seconds():.0f} s")
    if args.json:
        payload = {
            "started": started.isoformat(), "finished": finished.isoformat(),
            "command": " ".join([Path(sys.executable).name, *sys.argv]),
            "machine": {"platform": platform.platform(), "cpu_count": os.cpu_count(), "processor": platform.processor(),
                        "available_memory": avail, "torch": torch.__version__, "numpy": np.__version__, "threads": 1},
            "versions": {lib: library_version(lib) for lib in libs},
            "settings": {"chunk": args.chunk, "batches": list(args.batches), "capacities": list(capacities),
                         "trials": args.trials, "trial_s": args.trial_s, "quick": args.quick},
            "memcpy_gbps": bw, "results": results, "unavailable": unavailable, "skipped": skipped,
            "profile": profile_lines,
        }
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(payload, indent=1))
        print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
