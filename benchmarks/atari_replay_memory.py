"""Replay memory and sample time for Atari-shaped transitions: janus's frame replay vs whole stacks.

    PYTHONPATH=src python benchmarks/atari_replay_memory.py         # capacity 100k, ~2 min, ~7 GB peak
    python benchmarks/atari_replay_memory.py --capacity 20000       # quicker
    python benchmarks/atari_replay_memory.py --json out.json        # also save every number

Every buffer gets the same transitions: ``--envs`` environments whose observations are stacks of
the last 4 uint8 84x84 frames (new random frames each step, reset padding as Gymnasium's
``FrameStackObservation``, episodes ending with probability 1/2000 per step), one-step transitions
(``next_obs`` is the next stack, or the final one at an episode end), ``--fill`` times the capacity
(default 1.25: every ring has wrapped, so the numbers are the steady state's):

* ``janus FrameStackReplay``: every frame once (rows carry ``stream`` = env index);
* ``janus ExperienceBuffer``: ``obs`` and ``next_obs`` whole (the naive stacked store);
* SB3 ``ReplayBuffer`` with ``optimize_memory_usage=False`` and ``True`` (``next_obs`` read from the
  next slot: half the memory, but the final observation of an episode is lost - SB3 refuses it
  together with ``handle_timeout_termination``). SB3 adds one step of ``--envs`` envs per call.

Memory per transition, two ways: bytes of the arrays each buffer allocated (exact), and the growth
of the process's resident memory while the buffer was built and filled (what the OS charged;
the input batches are freed after each write). Sample time per call at batch 32 and 256, paired:
the frame replay stays allocated, each other buffer is built next to it, and the two are timed
round-robin, trial by trial (``--trials``, median of per-trial ratios), so that noise from other
processes hits both alike. One torch thread. Timings on a shared machine are noisy; memory is exact.
"""

from __future__ import annotations

import argparse
import gc
import json
import platform
import statistics
import sys
import time
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch

try:
    import janus  # noqa: F401
except ImportError:  # running from a checkout without an installed package
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from janus import ExperienceBuffer, FrameStackReplay

K, H, W = 4, 84, 84
FRAME_BYTES = H * W
POOL = 8192  # distinct random frames, drawn from at random (a stack repeats with probability ~0)


def rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096


def transitions(capacity: int, envs: int, T: int, seed: int) -> Iterator[dict[str, np.ndarray]]:
    """Pieces ``[T, envs]`` of one-step transitions, ``capacity`` transitions in all (rounded up)."""
    rng = np.random.default_rng(seed)
    pool = rng.integers(0, 256, (POOL, H, W), dtype=np.uint8)
    idx = np.repeat(rng.integers(0, POOL, (envs, 1)), K, axis=1)  # frame indices of each env's stack (reset)
    for _ in range(-(-capacity // (T * envs))):
        obs_i, next_i, done = np.empty((T, envs, K), np.int64), np.empty((T, envs, K), np.int64), np.zeros((T, envs), bool)
        for t in range(T):
            obs_i[t] = idx
            idx = np.concatenate([idx[:, 1:], rng.integers(0, POOL, (envs, 1))], axis=1)
            next_i[t] = idx
            done[t] = rng.random(envs) < 1 / 2000
            reset = rng.integers(0, POOL, envs)
            idx[done[t]] = reset[done[t], None]
        yield {"obs": pool[obs_i], "next_obs": pool[next_i], "action": rng.integers(0, 6, (T, envs)),
               "reward": rng.standard_normal((T, envs)).astype(np.float32), "done": done.astype(np.float32),
               "stream": np.broadcast_to(np.arange(envs), (T, envs)).astype(np.int64)}


def flat(piece: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    return {k: v.reshape(-1, *v.shape[2:]) for k, v in piece.items()}


class Janus:
    def __init__(self, name: str, capacity: int, envs: int, frames: bool) -> None:
        self.name = name
        self.buf: Any = FrameStackReplay(capacity, seed=0) if frames else ExperienceBuffer(capacity, seed=0)

    def add(self, piece: dict[str, np.ndarray]) -> None:
        rows = flat(piece)
        if isinstance(self.buf, ExperienceBuffer):
            rows.pop("stream")
        self.buf.extend(rows)

    def sample(self, batch: int) -> Any:
        return self.buf.sample(batch)

    def nbytes(self) -> int:
        if isinstance(self.buf, FrameStackReplay):
            return sum(self.buf.memory_bytes().values())
        return int(self.buf._storage.packed.nbytes)  # the one packed row per item that holds every field

    def __len__(self) -> int:
        return len(self.buf)


class SB3:
    def __init__(self, name: str, capacity: int, envs: int, optimize: bool) -> None:
        from gymnasium import spaces
        from stable_baselines3.common.buffers import ReplayBuffer

        self.name = name
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            self.rb = ReplayBuffer(capacity, spaces.Box(0, 255, (K, H, W), np.uint8), spaces.Discrete(6), device="cpu",
                                   n_envs=envs, optimize_memory_usage=optimize, handle_timeout_termination=False)
        self.infos = [{} for _ in range(envs)]

    def add(self, piece: dict[str, np.ndarray]) -> None:
        for t in range(piece["obs"].shape[0]):
            self.rb.add(piece["obs"][t], piece["next_obs"][t], piece["action"][t], piece["reward"][t], piece["done"][t], self.infos)

    def sample(self, batch: int) -> Any:
        return self.rb.sample(batch)

    def nbytes(self) -> int:
        arrays = [self.rb.observations, self.rb.actions, self.rb.rewards, self.rb.dones, self.rb.timeouts]
        if not self.rb.optimize_memory_usage:
            arrays.append(self.rb.next_observations)
        return sum(a.nbytes for a in arrays)

    def __len__(self) -> int:
        return self.rb.size() * self.rb.n_envs


def build(make: Callable[[], Any], count: int, envs: int, seed: int) -> tuple[Any, dict[str, float]]:
    """Build one buffer, write ``count`` transitions; its memory per transition, two ways."""
    gc.collect()
    before = rss_bytes()
    t0 = time.perf_counter()
    buf = make()
    for piece in transitions(count, envs, 32, seed):
        buf.add(piece)
        del piece
    fill_s = time.perf_counter() - t0
    gc.collect()
    stored = len(buf)
    return buf, {"stored": stored, "nbytes_per_transition": buf.nbytes() / stored,
                 "rss_growth_per_transition": (rss_bytes() - before) / stored, "fill_s": fill_s}


def time_pair(a: Any, b: Any, batch: int, trials: int) -> dict[str, float]:
    """Per-call seconds of ``a.sample`` and ``b.sample``, timed in turn; the median ratio b/a."""
    for buf in (a, b):
        for _ in range(3):
            buf.sample(batch)
    reps = max(3, int(0.05 / max(1e-6, min(_once(a, batch), _once(b, batch)))))
    ta, tb = [], []
    for _ in range(trials):
        for buf, out in ((a, ta), (b, tb)):
            t0 = time.perf_counter()
            for _ in range(reps):
                buf.sample(batch)
            out.append((time.perf_counter() - t0) / reps)
    return {"a_us": 1e6 * statistics.median(ta), "b_us": 1e6 * statistics.median(tb),
            "ratio_b_over_a": statistics.median(y / x for x, y in zip(ta, tb))}


def _once(buf: Any, batch: int) -> float:
    t0 = time.perf_counter()
    buf.sample(batch)
    return time.perf_counter() - t0


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--capacity", type=int, default=100_000)
    p.add_argument("--envs", type=int, default=8)
    p.add_argument("--fill", type=float, default=1.25, help="transitions written, in capacities")
    p.add_argument("--trials", type=int, default=7)
    p.add_argument("--json", type=Path)
    args = p.parse_args()
    torch.set_num_threads(1)
    warm = FrameStackReplay(64, seed=0, frame_capacity=256)  # compile the kernels outside every measurement
    for piece in transitions(64, 2, 32, 1):
        warm.extend(flat(piece))
    warm.sample(8)
    del warm
    cap, envs, count = args.capacity, args.envs, int(args.fill * args.capacity)
    results: dict[str, Any] = {"capacity": cap, "envs": envs, "written": count, "python": platform.python_version(),
                               "torch": torch.__version__, "memory": {}, "sample": {}}
    frames, results["memory"]["janus FrameStackReplay"] = build(lambda: Janus("janus FrameStackReplay", cap, envs, True), count, envs, 0)
    results["memory"]["janus FrameStackReplay"]["frames_per_transition"] = frames.buf.frames_written / frames.buf.total_written
    peers = [("janus ExperienceBuffer (whole stacks)", lambda: Janus("janus ExperienceBuffer", cap, envs, False)),
             ("SB3 ReplayBuffer", lambda: SB3("SB3", cap, envs, False)),
             ("SB3 ReplayBuffer optimize_memory_usage=True", lambda: SB3("SB3 opt", cap, envs, True))]
    for name, make in peers:
        peer, results["memory"][name] = build(make, count, envs, 0)
        for batch in (32, 256):
            results["sample"][f"{name} | {batch}"] = time_pair(frames, peer, batch, args.trials)
        del peer
        gc.collect()
    print_tables(results)
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))


def print_tables(r: dict[str, Any]) -> None:
    print(f"\ncapacity {r['capacity']:,} transitions of (4, 84, 84) uint8 obs + next_obs, {r['envs']} envs, "
          f"{r['written']:,} written\n")
    print("| buffer | sampleable | bytes per transition (allocated arrays) | RSS growth per transition | x frame (7,056 B) | write s |")
    print("|---|---:|---:|---:|---:|---:|")
    for name, m in r["memory"].items():
        print(f"| {name} | {m['stored']:,} | {m['nbytes_per_transition']:,.0f} | {m['rss_growth_per_transition']:,.0f} | "
              f"{m['nbytes_per_transition'] / FRAME_BYTES:.2f} | {m['fill_s']:.1f} |")
    fpt = r["memory"]["janus FrameStackReplay"]["frames_per_transition"]
    print(f"\nframes stored per transition by the frame replay: {fpt:.4f}\n")
    print("| peer | batch | frame replay us/call | peer us/call | peer / frame replay (paired median) |")
    print("|---|---:|---:|---:|---:|")
    for key, s in r["sample"].items():
        name, batch = key.split(" | ")
        print(f"| {name} | {batch} | {s['a_us']:,.0f} | {s['b_us']:,.0f} | {s['ratio_b_over_a']:.2f} |")


if __name__ == "__main__":
    main()
