"""Sampling sequences per call: janus's ExperienceBuffer (sequences as rows) against TorchRL's
``SliceSampler`` / ``PrioritizedSliceSampler`` over a ``LazyTensorStorage`` (not a test).

    python benchmarks/sequence_sampler.py --quick              # smoke sizes, ~1 min
    python benchmarks/sequence_sampler.py --json out.json      # the grid: B 32-256, L 8-80, vec4 and img84
    (--obs vec4 --lengths 8,80 --batches 32,256 --samplers uniform --libs janus,torchrl narrow a run)

Set-up. TorchRL's prioritized slice sampler needs its C++ extension (segment trees), which loads only
against the torch it was built for: torchrl 0.14.1 (the newest) loads against torch 2.14.1, not the
2.13.0 janus pins (``undefined symbol``), and no torchrl release loads against 2.13.0. So TorchRL runs
in a venv of its own, with janus installed into it (janus's kernels are numba; its torch is only the
tensors it hands out)::

    python3 -m venv .venv-torchrl                      # gitignored
    .venv-torchrl/bin/pip install torch==2.14.1 torchrl==0.14.1 tensordict==0.14.3
    .venv-torchrl/bin/pip install -e .
    .venv-torchrl/bin/python benchmarks/sequence_sampler.py

In janus's own venv (``make bench`` installs TorchRL there) the uniform cells run and the
prioritized TorchRL cells are reported unavailable, with the reason.

What is stored. Both hold the same ``--steps`` env steps of the same episodes (lengths drawn in
[100, 500], seeded): ``obs`` (4 float32, or one 84x84 uint8 frame), ``action`` int64, ``reward``
float32 and ``done`` bool per step.

* janus: sequences as rows, as R2D2 stores them: each episode cut into sequences of ``L`` steps
  that overlap by ``--overlap`` (default 0.5: R2D2's 80 with 40), the last one padded (``done``
  marks the padding), in an ``ExperienceBuffer`` whose fields are ``[L, ...]``. Overlap means the
  same step is stored in up to two rows: more memory, and a sample is one contiguous row per sequence.
* TorchRL: the flat steps with their episode id in a ``LazyTensorStorage``; the sampler cuts B
  slices of ``L`` steps (``traj_key="episode"``, ``strict_length``: none crosses an episode end)
  at sampling time and returns ``B*L`` steps. ``torchrl`` is its default (``cache_values=False``:
  the episode boundaries are found at each call, which is what it does whenever data arrived since
  the last sample); ``torchrl-cached`` (``cache_values=True``) is its best case, a buffer written no
  more (uniform only; its cache is cleared by every extend).

Measured per call, in microseconds and sequences per second: ``sample`` (uniform) draws B
sequences; ``sample+update`` (prioritized: alpha 0.6, beta 0.4, priorities randomised once after the
fill) draws B sequences and sets their priorities (TorchRL: each step of a slice gets its
sequence's priority). One torch thread. Each call's libraries are timed round-robin, trial by trial
(median of ``--trials``), with repetitions calibrated to ``--target_s`` per trial: on a shared
machine the ratio column is the figure to read, not the times. Memory: the bytes each library's
storage holds (and its priority trees), computed from its tensors.
"""

from __future__ import annotations

import argparse
import datetime
import importlib.metadata
import json
import logging
import platform
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

from buffer_peers import _torchrl_prioritized_unavailable as torchrl_prioritized_unavailable
from janus import ExperienceBuffer

OBS_KINDS: dict[str, tuple[tuple[int, ...], np.dtype]] = {"vec4": ((4,), np.dtype(np.float32)),
                                                          "img84": ((84, 84), np.dtype(np.uint8))}
ALPHA, BETA, EPS = 0.6, 0.4, 1e-6
EPISODE_LENGTHS = (100, 500)
LIBS = ("janus", "torchrl", "torchrl-cached")


class Unavailable(Exception):
    """A library (or its prioritized sampler) cannot run here; the message says why."""


# ---- the data: one set of episodes, stored flat (TorchRL) and as overlapping sequences (janus) ----
def make_steps(obs: str, steps: int, seed: int) -> dict[str, np.ndarray]:
    """``steps`` env steps of episodes with lengths in :data:`EPISODE_LENGTHS`: the flat fields and ``episode``."""
    rng = np.random.default_rng(seed)
    lengths = []
    while sum(lengths) < steps:
        lengths.append(int(rng.integers(*EPISODE_LENGTHS, endpoint=True)))
    lengths[-1] -= sum(lengths) - steps
    if lengths[-1] < EPISODE_LENGTHS[0]:  # the last episode cut short: merged into the one before
        last = lengths.pop()
        lengths[-1] += last
    episode = np.repeat(np.arange(len(lengths)), lengths)
    shape, dtype = OBS_KINDS[obs]
    data = (rng.integers(0, 256, (steps, *shape), dtype=np.uint8) if dtype == np.uint8
            else rng.standard_normal((steps, *shape), dtype=np.float32))
    done = np.zeros(steps, bool)
    done[np.cumsum(lengths) - 1] = True
    return {"obs": data, "action": rng.integers(0, 4, steps), "reward": rng.standard_normal(steps, dtype=np.float32),
            "done": done, "episode": episode}


def sequence_starts(episode: np.ndarray, length: int, overlap: int) -> tuple[np.ndarray, np.ndarray]:
    """Where each sequence of ``length`` steps starts (every ``length - overlap`` steps of an
    episode, the last covering its end) and how many of its steps are the episode's."""
    ends = np.flatnonzero(np.r_[episode[1:] != episode[:-1], True]) + 1
    begins = np.r_[0, ends[:-1]]
    starts, valid = [], []
    for b, e in zip(begins.tolist(), ends.tolist(), strict=True):
        s = np.arange(b, max(b + 1, e - overlap), length - overlap)
        starts.append(s)
        valid.append(np.minimum(e - s, length))
    return np.concatenate(starts), np.concatenate(valid)


class JanusSequences:
    """janus: an ExperienceBuffer of overlapping sequences, fields ``[L, ...]``."""

    library = "janus"

    def __init__(self, steps: dict[str, np.ndarray], length: int, overlap: int, prioritized: bool, seed: int) -> None:
        starts, valid = sequence_starts(steps["episode"], length, overlap)
        at = np.minimum(starts[:, None] + np.arange(length), len(steps["episode"]) - 1)  # [rows, L]
        pad = np.arange(length)[None, :] >= valid[:, None]
        shape, dtype = OBS_KINDS["img84" if steps["obs"].ndim == 3 else "vec4"]
        fields = {"obs": ((length, *shape), dtype), "action": ((length,), np.int64),
                  "reward": ((length,), np.float32), "done": ((length,), bool)}
        self.buf = ExperienceBuffer(len(starts), sampler="prioritized" if prioritized else "uniform", seed=seed,
                                    fields=fields, **({"alpha": ALPHA, "beta": BETA, "eps": EPS} if prioritized else {}))
        for lo in range(0, len(starts), 4096):  # the rows in chunks: no copy of the whole store at once
            rows = at[lo : lo + 4096]
            chunk = {k: steps[k][rows] for k in ("obs", "action", "reward")}
            chunk["done"] = steps["done"][rows] | pad[lo : lo + 4096]
            self.buf.extend(chunk)
        self.rows = len(starts)
        if prioritized:
            self.buf.update_priority(np.arange(self.rows), np.random.default_rng(seed).random(self.rows))

    def sample(self, batch: int) -> Any:
        return self.buf.sample(batch)

    def sample_update(self, batch: int, prio: torch.Tensor) -> None:
        self.buf.update_priority(self.buf.sample(batch)["index"], prio)

    def bytes_held(self) -> dict[str, int]:
        st = self.buf._storage
        trees = self.buf.sampler.trees.nbytes if self.buf.sampler.prioritized else 0
        return {"data": int(st.packed.nbytes), "trees": int(trees)}


class TorchRLSlices:
    """TorchRL: flat steps in a LazyTensorStorage, cut into slices by (Prioritized)SliceSampler."""

    def __init__(self, steps: dict[str, np.ndarray], length: int, prioritized: bool, cached: bool, seed: int) -> None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            from tensordict import TensorDict
            from torchrl.data import LazyTensorStorage, ReplayBuffer
            from torchrl.data.replay_buffers.samplers import PrioritizedSliceSampler, SliceSampler
        logging.getLogger("torchrl").setLevel(logging.WARNING)
        self.library = "torchrl-cached" if cached else "torchrl"
        self.length = length
        n = len(steps["episode"])
        if prioritized:
            reason = torchrl_prioritized_unavailable()
            if reason:
                raise Unavailable(reason)
            sampler: Any = PrioritizedSliceSampler(max_capacity=n, alpha=ALPHA, beta=BETA, eps=EPS, slice_len=length,
                                                   traj_key="episode", cache_values=cached)
        else:
            sampler = SliceSampler(slice_len=length, traj_key="episode", cache_values=cached)
        torch.manual_seed(seed)
        self.rb = ReplayBuffer(storage=LazyTensorStorage(n), sampler=sampler)
        self.rb.extend(TensorDict({k: torch.from_numpy(v) for k, v in steps.items()}, batch_size=[n]))
        if prioritized:
            self.rb.update_priority(torch.arange(n), torch.from_numpy(np.random.default_rng(seed).random(n, dtype=np.float32)))

    def sample(self, batch: int) -> Any:
        return self.rb.sample(batch * self.length)

    def sample_update(self, batch: int, prio: torch.Tensor) -> None:
        _, info = self.rb.sample(batch * self.length, return_info=True)
        self.rb.update_priority(info["index"], prio.repeat_interleave(self.length))

    def bytes_held(self) -> dict[str, int]:
        data = sum(int(t.nbytes) for t in self.rb.storage._storage.values(True, True))
        n = len(self.rb)
        trees = 2 * 2 * (1 << (n - 1).bit_length()) * 4 if isinstance(self.rb.sampler, _prioritized_slice()) else 0
        return {"data": data, "trees": trees}  # trees: two float32 segment trees over every step (C++)


def _prioritized_slice() -> type:
    from torchrl.data.replay_buffers.samplers import PrioritizedSliceSampler

    return PrioritizedSliceSampler


# ---- timing ---------------------------------------------------------------------------------------
def calibrate(call: Callable[[], object], target_s: float) -> int:
    """Repetitions of ``call`` that take about ``target_s`` (after a warm-up call)."""
    call()
    start, reps = time.perf_counter(), 0
    while time.perf_counter() - start < target_s / 4 and reps < 10_000:
        call()
        reps += 1
    per = (time.perf_counter() - start) / max(reps, 1)
    return max(1, min(10_000, round(target_s / per)))


def time_round_robin(calls: dict[str, Callable[[], object]], trials: int, target_s: float) -> dict[str, float]:
    """Median microseconds per call of each of ``calls``, their trials interleaved."""
    reps = {k: calibrate(c, target_s) for k, c in calls.items()}
    times: dict[str, list[float]] = {k: [] for k in calls}
    for _ in range(trials):
        for k, c in calls.items():
            start = time.perf_counter()
            for _ in range(reps[k]):
                c()
            times[k].append((time.perf_counter() - start) / reps[k] * 1e6)
    return {k: statistics.median(v) for k, v in times.items()}


def run_grid(args: argparse.Namespace) -> dict[str, Any]:
    cells, memory, unavailable = [], [], {}
    for obs in args.obs:
        steps = make_steps(obs, args.steps, args.seed)
        for length in args.lengths:
            overlap = round(length * args.overlap)
            for sampler in args.samplers:
                prioritized = sampler == "prioritized"
                libs: dict[str, Any] = {}
                for name in args.libs:
                    if name == "torchrl-cached" and prioritized:
                        continue  # its cache holds the boundaries only: the uniform best case is the one shown
                    try:
                        libs[name] = (JanusSequences(steps, length, overlap, prioritized, args.seed) if name == "janus"
                                      else TorchRLSlices(steps, length, prioritized, name == "torchrl-cached", args.seed))
                    except Unavailable as exc:
                        unavailable[f"{name} {sampler}"] = str(exc)
                    except ImportError as exc:
                        unavailable[f"{name} {sampler}"] = f"{exc} (set-up: --help)"
                for name, lib in libs.items():
                    memory.append({"obs": obs, "L": length, "sampler": sampler, "library": name,
                                   "overlap": overlap if name == "janus" else None, **lib.bytes_held()})
                for batch in args.batches:
                    prio = torch.rand(batch)  # float32: what both take
                    calls: dict[str, Callable[[], object]] = {
                        name: (lambda lib=lib, b=batch: lib.sample_update(b, prio)) if prioritized
                        else (lambda lib=lib, b=batch: lib.sample(b)) for name, lib in libs.items()}
                    us = time_round_robin(calls, args.trials, args.target_s)
                    cell = {"obs": obs, "L": length, "B": batch, "sampler": sampler,
                            "op": "sample+update" if prioritized else "sample", "us": us,
                            "sequences_per_s": {k: batch / v * 1e6 for k, v in us.items()}}
                    cells.append(cell)
                    print(row_of(cell), flush=True)
                del libs
    return {"cells": cells, "memory": memory, "unavailable": unavailable}


# ---- reporting ------------------------------------------------------------------------------------
def _fmt(us: float | None) -> str:
    return "-" if us is None else f"{us:,.0f}" if us >= 100 else f"{us:.1f}"


def row_of(cell: dict[str, Any]) -> str:
    us = cell["us"]
    j, t, c = us.get("janus"), us.get("torchrl"), us.get("torchrl-cached")
    ratio = f"{t / j:.1f}x" if j and t else "-"
    cached = f"{c / j:.1f}x" if j and c else "-"
    rate = f"{cell['sequences_per_s']['janus']:,.0f}" if j else "-"
    return (f"| {cell['obs']} | {cell['L']} | {cell['B']} | {cell['op']} | {_fmt(j)} | {_fmt(t)} | {_fmt(c)} | "
            f"{rate} | {ratio} | {cached} |")


HEADER = ("| obs | L | B | op | janus us | torchrl us | torchrl-cached us | janus seq/s | torchrl / janus | "
          "cached / janus |\n|---|---|---|---|---|---|---|---|---|---|")


def memory_table(memory: list[dict[str, Any]]) -> str:
    lines = ["| obs | L | sampler | library | data MiB | trees MiB |", "|---|---|---|---|---|---|"]
    for m in memory:
        name = m["library"] + (f" (overlap {m['overlap']})" if m["overlap"] is not None else "")
        lines.append(f"| {m['obs']} | {m['L']} | {m['sampler']} | {name} | {m['data'] / 2**20:,.1f} | "
                     f"{m['trees'] / 2**20:,.2f} |")
    return "\n".join(lines)


def versions() -> dict[str, str]:
    out = {"python": platform.python_version(), "torch": torch.__version__}
    for dist in ("janus-rl", "numba", "torchrl", "tensordict"):
        try:
            out[dist] = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            out[dist] = "not installed"
    return out


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)

    def ints(s: str) -> list[int]:
        return [int(x) for x in s.split(",")]

    p.add_argument("--obs", type=lambda s: s.split(","), default=list(OBS_KINDS), help="vec4,img84")
    p.add_argument("--batches", type=ints, help="sequences per sample (default 32,64,128,256)")
    p.add_argument("--lengths", type=ints, help="steps per sequence (default 8,20,40,80)")
    p.add_argument("--samplers", type=lambda s: s.split(","), default=["uniform", "prioritized"])
    p.add_argument("--libs", type=lambda s: s.split(","), default=list(LIBS), help=",".join(LIBS))
    p.add_argument("--steps", type=int, help="env steps stored by every library (default 100000)")
    p.add_argument("--overlap", type=float, default=0.5, help="janus: fraction of a sequence shared with the next")
    p.add_argument("--trials", type=int, help="timed trials per library and call (default 5)")
    p.add_argument("--target_s", type=float, help="seconds per trial of one library (default 0.1)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--quick", action="store_true",
                   help="smoke sizes where not given: 20k steps, B 32,256, L 8,80, 3 trials of 0.03 s")
    p.add_argument("--json", type=Path, help="also write every number here")
    args = p.parse_args(argv)
    defaults = ({"steps": 20_000, "batches": [32, 256], "lengths": [8, 80], "trials": 3, "target_s": 0.03} if args.quick
                else {"steps": 100_000, "batches": [32, 64, 128, 256], "lengths": [8, 20, 40, 80], "trials": 5,
                      "target_s": 0.1})
    for name, value in defaults.items():
        if getattr(args, name) is None:
            setattr(args, name, value)
    for name in args.libs:
        if name not in LIBS:
            p.error(f"--libs: {name!r} is not one of {', '.join(LIBS)}")
    if not 0 <= args.overlap < 1:
        p.error("--overlap: a fraction in [0, 1)")
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse(argv)
    torch.set_num_threads(1)
    started = datetime.datetime.now(datetime.UTC)
    print(f"versions: {versions()}\n{args.steps:,} env steps stored; janus overlap {args.overlap}\n\n{HEADER}", flush=True)
    result = run_grid(args)
    print("\nMemory held (same env steps):\n" + memory_table(result["memory"]))
    for what, why in result["unavailable"].items():
        print(f"unavailable: {what}: {why}")
    if args.json:
        args.json.write_text(json.dumps({"started": started.isoformat(), "versions": versions(),
                                         "args": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
                                         **result}, indent=1))
        print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
