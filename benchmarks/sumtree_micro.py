"""Micro-benchmark of the batched sum-tree and the prioritized sampler (run on demand, not a test).

    python benchmarks/sumtree_micro.py               # default geometry, capacities 100k and 1M
    python benchmarks/sumtree_micro.py --compare     # also alternative fan-outs, side by side

Prints microseconds per call (median and min over many calls; the inputs of every call are fresh
random numbers, so the branch predictor cannot learn them). Single-threaded: torch.set_num_threads(1).

* tree:    ``SumTree.find`` of B fractions, ``SumTree.update`` of B random slots (with dedup).
* sampler: ``PrioritizedSampler.sample(B)``, ``update_priority`` of B random slots, and one RL step
  ``sample`` + ``update_priority`` of the sampled slots (sum tree *and* min tree).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch

try:
    import janus  # noqa: F401
except ImportError:  # running from a checkout without an installed package
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from janus.buffer.replay import prioritized
from janus.buffer.replay.prioritized import PrioritizedSampler
from janus.buffer.replay.sumtree import MinTree, SumTree, default_fanouts

CAPACITIES = (100_000, 1_000_000)
BATCHES = (256, 4096)
ALTERNATIVES = ([16], [32], [64], [128], [32, 32], [16, 16])


def timeit(step: Callable[[int], object], calls: int, warmup: int = 20) -> tuple[float, float]:
    """(median, min) microseconds of ``step(i)`` over ``calls`` calls."""
    for i in range(warmup):
        step(i)
    times = []
    for i in range(calls):
        t0 = time.perf_counter()
        step(i)
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e6, min(times) * 1e6


def inputs(capacity: int, batch: int, n: int, gen: torch.Generator) -> tuple[list, list, list]:
    """n fresh batches of fractions, slots and priorities."""
    fr = [torch.rand(batch, generator=gen, dtype=torch.float64).clamp_(min=1e-12) for _ in range(n)]
    slots = [torch.randint(0, capacity, (batch,), generator=gen) for _ in range(n)]
    prio = [torch.rand(batch, generator=gen, dtype=torch.float64) * 10 for _ in range(n)]
    return fr, slots, prio


def bench_tree(capacity: int, fanouts: list[int] | None, calls: dict[int, int]) -> dict[str, tuple]:
    gen = torch.Generator().manual_seed(0)
    tree = SumTree(capacity, "cpu", fanouts=fanouts)
    tree.update(torch.arange(capacity), torch.rand(capacity, generator=gen, dtype=torch.float64))
    out = {}
    for b in BATCHES:
        n = calls[b] + 20
        fr, slots, prio = inputs(capacity, b, n, gen)
        out[f"find({b})"] = timeit(lambda i: tree.find(fr[i], fraction=True), calls[b])
        out[f"update({b})"] = timeit(lambda i: tree.update(slots[i], prio[i]), calls[b])
    return out


def bench_sampler(capacity: int, fanouts: list[int] | None, calls: dict[int, int]) -> dict[str, tuple]:
    gen = torch.Generator().manual_seed(0)
    if fanouts is not None:  # swap the trees' geometry for --compare
        prioritized.SumTree = lambda c, d: SumTree(c, d, fanouts=fanouts)  # type: ignore[assignment]
        prioritized.MinTree = lambda c, d: MinTree(c, d, fanouts=fanouts)  # type: ignore[assignment]
    try:
        s = PrioritizedSampler(capacity, "cpu", seed=0)
    finally:
        prioritized.SumTree, prioritized.MinTree = SumTree, MinTree
    s.on_write(torch.arange(capacity))
    s.update_priority(torch.arange(capacity), torch.rand(capacity, generator=gen, dtype=torch.float64))
    out = {}
    for b in BATCHES:
        n = calls[b] + 20
        _, slots, prio = inputs(capacity, b, n, gen)
        out[f"sample({b})"] = timeit(lambda i: s.sample(b, capacity), calls[b])
        out[f"update({b})"] = timeit(lambda i: s.update_priority(slots[i], prio[i]), calls[b])

        def step(i: int) -> None:
            sampled, _ = s.sample(b, capacity)
            s.update_priority(sampled, prio[i])

        out[f"sample+update({b})"] = timeit(step, calls[b])
    return out


def show(title: str, results: dict[str, tuple]) -> None:
    cells = "  ".join(f"{k} {med:.1f} ({lo:.1f})" for k, (med, lo) in results.items())
    print(f"  {title:8s} {cells}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--compare", action="store_true", help="also time alternative fan-outs")
    parser.add_argument("--calls", type=int, default=2000, help="timed calls at batch 256")
    args = parser.parse_args()
    torch.set_num_threads(1)
    calls = {256: args.calls, 4096: max(args.calls // 10, 20)}
    print(f"torch {torch.__version__}, 1 thread; microseconds per call: median (min)")
    for capacity in CAPACITIES:
        geometries: list[list[int] | None] = [None]
        if args.compare:
            geometries += [list(f) for f in ALTERNATIVES if list(f) != default_fanouts(capacity)]
        for fanouts in geometries:
            name = f"capacity {capacity:,} fanouts={default_fanouts(capacity) if fanouts is None else fanouts}"
            print(name + (" (default)" if fanouts is None else ""))
            show("tree", bench_tree(capacity, fanouts, calls))
            show("sampler", bench_sampler(capacity, fanouts, calls))


if __name__ == "__main__":
    main()
