"""Per-call replay grid: janus vs cpprb, TorchRL, SB3 and naive torch, one run (not a test).

    python benchmarks/buffer_peers.py --grid                 # the whole grid (about 10 min)
    python benchmarks/buffer_peers.py --grid --quick         # capacity 100k, fewer repetitions
    python benchmarks/buffer_peers.py --grid --cells obs=vec4,batch=1+32,op=per --libs janus,cpprb
    python benchmarks/buffer_peers.py --grid --rss           # peak RSS, janus vs cpprb, one process each
    python benchmarks/buffer_peers.py --grid --jit           # first-call JIT cost, cold and cached

Grid: observation {vec4: 4 float32, vec64: 64 float32, img84: 4x84x84 uint8} x batch
{1, 32, 256, 4096} x capacity {100k, 1M} (img84 at 1M needs 56 GB per buffer: skipped), for
``extend`` (``batch`` transitions per call into a full ring), uniform ``sample`` and prioritized
``sample+update`` (sample, then new priorities for the sampled keys). janus is timed with torch
inputs (``janus``), numpy inputs (``janus-np``: numpy chunks and priorities; torch results) and
numpy in and out (``janus-numpy``: ``output="numpy"``, numpy arrays in and out as with cpprb; a
buffer of its own). Every buffer
is filled to capacity before timing; one torch thread. Each cell's libraries are timed
round-robin, trial by trial (5 trials; 3 with --quick), so the machine's noise hits them alike;
a call's time is the median trial's. ``janus / cpprb`` is cpprb's time per call over janus's
(> 1: janus is faster). ``cpprb-torch`` is cpprb as a torch learner calls it (torch tensors in,
``.numpy()`` per field; ``torch.from_numpy`` per result field; priorities from a torch tensor):
``janus / cpprb-torch`` compares the two at the same API, torch in and torch out.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import buffer_peers as bp

OBS = ("vec4", "vec64", "img84")
BATCHES = (1, 32, 256, 4096)
CAPACITIES = (100_000, 1_000_000)
LIBS = ("janus", "janus-np", "janus-numpy", "cpprb", "cpprb-torch", "torchrl", "sb3", "naive")
JANUS = ("janus", "janus-np", "janus-numpy")
TORCH_RESULTS = ("janus", "janus-np")  # compared with cpprb-torch too: cpprb plus a torch user's conversions
FILL_CHUNK = 256
OP_NAMES = {"extend": "extend", "sample": "sample", "per": "sample+update"}


def targets(obs: str, batch: int, op: str) -> tuple[float, str]:
    """(required janus / cpprb ratio, why) for a cell."""
    if obs == "img84" or batch == 4096:
        return 0.95, "bandwidth"
    return (2.0, "per-call") if op == "per" else (1.5, "per-call")


def parse_cells(text: str) -> dict[str, set[str]]:
    """``obs=vec4+vec64,batch=1+32,cap=100000,op=extend`` -> {key: values}."""
    out: dict[str, set[str]] = {}
    for part in filter(None, text.split(",")):
        key, _, values = part.partition("=")
        out[key.strip()] = set(values.split("+"))
    return out


def wanted(cells: dict[str, set[str]], **kw: Any) -> bool:
    return all(key not in cells or str(value) in cells[key] for key, value in kw.items())


def make_adapter(lib: str, prioritized: bool, capacity: int, obs: str) -> bp.Adapter:
    if lib == "janus-numpy":
        return bp.JanusNumpyAdapter(capacity, obs, FILL_CHUNK, prioritized=prioritized)
    return bp.build("janus" if lib == "janus-np" else lib, prioritized, capacity, obs, FILL_CHUNK)


def chunk_for(lib: str, adapter: bp.Adapter, obs: str, n: int, gen: torch.Generator) -> list[Any]:
    adapter.chunk = n  # the naive and TorchRL adapters read their chunk size from here
    chunks = bp.make_chunks(obs, n, gen)
    if lib == "janus-np":
        return bp._numpy_chunks(chunks)
    return adapter.prepare_chunks(chunks)


def prio_for(lib: str, adapter: bp.Adapter, n: int, gen: torch.Generator) -> list[Any]:
    prios = [torch.rand(n, generator=gen) + 0.01 for _ in range(bp.POOL)]
    return [p.numpy() for p in prios] if lib == "janus-np" else adapter.prepare_priorities(prios)


def steps(lib: str, adapter: bp.Adapter, op: str, obs: str, n: int, gen: torch.Generator) -> Any:
    """The timed call of one cell (or a string: why the library has no such cell)."""
    if op == "extend":
        if lib == "sb3" and n != FILL_CHUNK:
            return f"SB3 adds one step of n_envs={FILL_CHUNK} envs per call (fixed at construction)"
        data = chunk_for(lib, adapter, obs, n, gen)
        return lambda i: adapter.extend(data[i % len(data)])
    if op == "sample":
        return lambda i: adapter.sample(n)
    assert op == "per"
    prios = prio_for(lib, adapter, n, gen)
    return lambda i: adapter.sample_update(n, prios[i % len(prios)])


def run_group(obs: str, cap: int, prioritized: bool, libs: list[str], args: argparse.Namespace) -> list[dict[str, Any]]:
    gen = torch.Generator().manual_seed(0)
    adapters: dict[str, Any] = {}
    for lib in libs:
        if lib == "janus-np" and "janus" in adapters and not isinstance(adapters["janus"], str):
            adapters[lib] = adapters["janus"]  # same buffer, numpy inputs
            continue
        try:
            a = make_adapter(lib, prioritized, cap, obs)
            bp.fill(a, a.prepare_chunks(bp.make_chunks(obs, FILL_CHUNK, gen)))
            if prioritized:
                a.randomize_priorities(gen)
            adapters[lib] = a
        except bp.Unavailable as exc:
            adapters[lib] = str(exc)
    rows = []
    ops = ("per",) if prioritized else ("extend", "sample")
    for op in ops:
        for n in BATCHES:
            if not wanted(args.cells, obs=obs, cap=cap, op=op, batch=n):
                continue
            timed: dict[str, Any] = {}
            for lib, a in adapters.items():
                if isinstance(a, str):
                    timed[lib] = a
                    continue
                if lib == "janus-np" and op == "sample":
                    continue  # no input to convert
                step = steps(lib, a, op, obs, n, gen)
                if not isinstance(step, str):
                    for i in range(3):  # first calls (janus: JIT compile) must not calibrate the repetitions
                        step(i)
                timed[lib] = step if isinstance(step, str) else bp.Timed(step, 1, args.trial_s, 10**6)
            for _ in range(args.trials):
                for t in timed.values():
                    if not isinstance(t, str):
                        t.trial()
            us = {lib: (t if isinstance(t, str) else 1e6 / statistics.median(t.rates)) for lib, t in timed.items()}
            rows.append({"obs": obs, "capacity": cap, "op": op, "batch": n, "us": us})
            print(format_row(rows[-1]), flush=True)
    adapters.clear()
    gc.collect()
    return rows


def format_row(r: dict[str, Any]) -> str:
    us = r["us"]
    cells = [r["obs"], f"{r['capacity'] // 1000}k", OP_NAMES[r["op"]], str(r["batch"])]
    for lib in LIBS:
        v = us.get(lib)
        cells.append("n/a" if isinstance(v, str) else "-" if v is None else f"{v:.1f}")
    need, why = targets(r["obs"], r["batch"], r["op"])
    ratios: dict[str, float] = {}
    for lib in JANUS:
        j, c = us.get(lib), us.get("cpprb")
        if isinstance(j, float) and isinstance(c, float):
            ratios[lib] = c / j
    if ratios:
        cells.append(" / ".join(f"{ratios[lib]:.2f}x" if lib in ratios else "-" for lib in JANUS))
        missed = [lib for lib, x in ratios.items() if x < need]
        cells.append(f">= {need}x ({why}): " + (f"MISSED by {', '.join(missed)}" if missed else "met"))
    else:
        cells += ["-", "-"]
    c = us.get("cpprb-torch")
    cells.append(" / ".join(f"{c / us[lib]:.2f}x" if isinstance(c, float) and isinstance(us.get(lib), float) else "-"
                            for lib in TORCH_RESULTS))
    return "| " + " | ".join(cells) + " |"


HEADER = ("| obs | cap | op | batch | " + " | ".join(f"{lib} us" for lib in LIBS)
          + " | janus / cpprb (" + " / ".join(JANUS) + ") | target | janus / cpprb-torch ("
          + " / ".join(TORCH_RESULTS) + ") |\n|" + "---|" * (7 + len(LIBS)))


def grid(args: argparse.Namespace) -> None:
    torch.set_num_threads(1)
    load = os.getloadavg()
    print(f"# load average before: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}; nproc {os.cpu_count()}")
    print(HEADER)
    libs = [lib for lib in args.libs.split(",") if lib]
    caps = (100_000,) if args.quick else CAPACITIES
    rows: list[dict[str, Any]] = []
    for obs in OBS:
        for cap in caps:
            if (obs == "img84" and cap > 100_000) or not wanted(args.cells, obs=obs, cap=cap):
                continue
            per = bp.transition_bytes(obs) * cap
            # janus-np shares janus's buffer: it needs no memory of its own
            groups = bp.groups_by_memory([lib for lib in libs if lib != "janus-np"], per, int(bp.available_memory() * 0.55))
            for prioritized in (False, True):
                if "op" in args.cells and not args.cells["op"] & ({"per"} if prioritized else {"extend", "sample"}):
                    continue
                for group in groups:
                    if "janus" in group and "janus-np" in libs:
                        group = [*group[: group.index("janus") + 1], "janus-np", *group[group.index("janus") + 1 :]]
                    rows += run_group(obs, cap, prioritized, group, args)
    load = os.getloadavg()
    print(f"# load average after: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))


# ---- peak RSS ----------------------------------------------------------------------------------
def rss_child(lib: str, obs: str, cap: int, prioritized: bool) -> None:
    torch.set_num_threads(1)
    a = make_adapter(lib, prioritized, cap, obs)
    gen = torch.Generator().manual_seed(0)
    bp.fill(a, a.prepare_chunks(bp.make_chunks(obs, FILL_CHUNK, gen)))
    if prioritized:
        a.randomize_priorities(gen)
        prios = a.prepare_priorities([torch.rand(256, generator=gen)])
        for _ in range(100):
            a.sample_update(256, prios[0])
    else:
        for _ in range(100):
            a.sample(256)
    print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024)


def rss(args: argparse.Namespace) -> None:
    print("| obs | capacity | sampler | janus peak RSS | cpprb peak RSS | janus / cpprb | target <= 1.10 |\n|---|---|---|---|---|---|---|")
    for obs, cap in (("vec4", 1_000_000), ("vec64", 1_000_000), ("img84", 100_000)):
        for prioritized in (False, True):
            peak = {}
            for lib in ("janus", "cpprb"):
                out = subprocess.run([sys.executable, __file__, "--rss-child", lib, obs, str(cap), str(int(prioritized))],
                                     capture_output=True, text=True, check=True)
                peak[lib] = int(out.stdout.split()[-1])
            ratio = peak["janus"] / peak["cpprb"]
            print(f"| {obs} | {cap:,} | {'prioritized' if prioritized else 'uniform'} | {peak['janus'] / 2**20:.0f} MiB | "
                  f"{peak['cpprb'] / 2**20:.0f} MiB | {ratio:.3f} | {'met' if ratio <= 1.10 else 'MISSED'} |", flush=True)


# ---- first-call JIT cost -------------------------------------------------------------------------
def jit_child() -> None:
    """First extend / sample / update_priority of a fresh process, uniform then prioritized."""
    spec = bp.field_specs("vec4")
    times = {}  # the first extend also imports numba
    for sampler in ("uniform", "prioritized"):
        buf = bp.ExperienceBuffer(1000, sampler=sampler, seed=0, fields=spec)
        one = {k: torch.zeros((1, *shape), dtype=dt) for k, (shape, dt) in spec.items()}
        calls = [("extend", lambda: buf.extend(one)), ("sample", lambda: buf.sample(4))]
        if sampler == "prioritized":  # a uniform buffer has no priorities (update_priority raises)
            calls.append(("update_priority", lambda: buf.update_priority(torch.tensor([0]), torch.tensor([1.0]))))
        for name, call in calls:
            t = time.perf_counter()
            call()
            times[f"{sampler} {name}"] = time.perf_counter() - t
    print(json.dumps(times))


def jit_cost() -> None:
    """Cold (empty cache) and cached first calls, each in a fresh process."""
    import tempfile

    with tempfile.TemporaryDirectory() as cache:
        runs = []
        for label, env in (("cold (empty NUMBA_CACHE_DIR)", {"NUMBA_CACHE_DIR": cache}),
                           ("cached (same NUMBA_CACHE_DIR)", {"NUMBA_CACHE_DIR": cache}),
                           ("PYTHONDONTWRITEBYTECODE=1, no NUMBA_CACHE_DIR", {"PYTHONDONTWRITEBYTECODE": "1"})):
            e = {k: v for k, v in os.environ.items() if k not in ("NUMBA_CACHE_DIR", "PYTHONDONTWRITEBYTECODE")}
            out = subprocess.run([sys.executable, __file__, "--jit-child"], env={**e, **env}, capture_output=True,
                                 text=True, check=True)
            runs.append((label, json.loads(out.stdout.strip().splitlines()[-1])))
    keys = list(runs[0][1])
    print("| first call (fresh process) | " + " | ".join(label for label, _ in runs) + " |")
    print("|---|" + "---:|" * len(runs))
    for k in keys:
        print(f"| {k} | " + " | ".join(f"{r[k] * 1000:.0f} ms" for _, r in runs) + " |")
    print("| total | " + " | ".join(f"{sum(r.values()):.2f} s" for _, r in runs) + " |")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--grid", action="store_true", help="(accepted for buffer_peers.py --grid)")
    parser.add_argument("--quick", action="store_true", help="capacity 100k only, 3 short trials")
    parser.add_argument("--cells", type=parse_cells, default={},
                        help="select cells, e.g. obs=vec4+vec64,batch=1+32,cap=100000,op=extend+sample+per"
                             " (per: prioritized sample+update)")
    parser.add_argument("--libs", default=",".join(LIBS), help="comma-separated subset of " + ",".join(LIBS))
    parser.add_argument("--json", type=Path, help="write every measurement to this file")
    parser.add_argument("--rss", action="store_true", help="peak RSS of janus vs cpprb (one process each)")
    parser.add_argument("--rss-child", nargs=4, help=argparse.SUPPRESS)
    parser.add_argument("--jit", action="store_true", help="first-call JIT cost, cold and cached (fresh processes)")
    parser.add_argument("--jit-child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    args.trials, args.trial_s = (3, 0.01) if args.quick else (5, 0.03)
    if args.jit_child:
        jit_child()
    elif args.jit:
        jit_cost()
    elif args.rss_child:
        lib, obs, cap, prio = args.rss_child
        rss_child(lib, obs, int(cap), bool(int(prio)))
    elif args.rss:
        rss(args)
    else:
        grid(args)


if __name__ == "__main__":
    main()
