"""Sync vs async (vs EnvPool) vector envs: env steps per second, start-up time and memory (run on demand, not a test).

    python benchmarks/vector_envs.py                          # CartPole-v1 and ALE/Pong-v5, 2/4/8 envs
    python benchmarks/vector_envs.py --seconds 1 --rounds 3 --out vector_envs.json

What ``workload.vector_env: auto`` picks comes from these numbers (docs/benchmarks.md,
"Vectorised environments"). Envs are built by :func:`janus.envs.vector.make_vector_env` as a
worker builds them (``training=True``: Pong with the full Atari preprocessing), stepped with
random actions drawn up front (no policy: the env side alone). Each round measures sync, then
async, for ``--seconds`` each, so every ratio async/sync pairs two measurements taken moments
apart; the table shows the median over rounds. Where EnvPool is installed (the ``envpool`` extra), each
round also measures ``vector_env: envpool`` for the ids it offers (classic control; ``-`` elsewhere),
paired with sync the same way. Start-up (build + first reset) is measured for
both start methods of the subprocesses, ``forkserver`` and ``spawn``, before anything else runs.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np

try:
    import janus  # noqa: F401
except ImportError:  # running from a checkout without an installed package
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from janus.envs import vector as envs_module
from janus.envs.envpool_vector import ENVPOOL_ENVS
from janus.envs.vector import make_vector_env


def steps_per_second(envs, seconds: float, rng: np.random.Generator) -> float:
    """Env steps (vector steps x sub-envs) per second over about ``seconds``."""
    n = envs.num_envs
    actions = [np.array([envs.single_action_space.sample() for _ in range(n)]) for _ in range(64)]
    for a in actions[:8]:  # warm-up
        envs.step(a)
    steps, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        for a in actions[rng.integers(0, 8):]:  # a varying slice: no fixed action pattern
            envs.step(a)
            steps += 1
    return steps * n / (time.perf_counter() - t0)


def children_uss_mb() -> float:
    """Unique memory of this process's children, in MB (psutil; 0 without it)."""
    try:
        import psutil
    except ImportError:
        return 0.0
    return sum(c.memory_full_info().uss for c in psutil.Process().children(recursive=True)) / 1e6


def startup(env_id: str, num_envs: int, context: str) -> dict:
    """Seconds to build and reset an async vector env with subprocesses started by ``context``."""
    envs_module.ASYNC_CONTEXT = context
    t0 = time.perf_counter()
    envs = make_vector_env(env_id, num_envs, 0, training=True, vector_env="async")
    envs.reset(seed=0)
    seconds = time.perf_counter() - t0
    uss = children_uss_mb()
    envs.close()
    return {"env": env_id, "num_envs": num_envs, "context": context, "startup_s": seconds, "children_uss_mb": uss}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--envs", nargs="+", default=["CartPole-v1", "ALE/Pong-v5"])
    ap.add_argument("--num_envs", nargs="+", type=int, default=[2, 4, 8])
    ap.add_argument("--seconds", type=float, default=1.0, help="per measurement")
    ap.add_argument("--rounds", type=int, default=3, help="sync/async pairs per cell")
    ap.add_argument("--out", type=Path, default=None, help="write the results as JSON here")
    args = ap.parse_args()
    import torch

    torch.set_num_threads(1)  # as in a worker
    chosen = envs_module.ASYNC_CONTEXT
    print(f"machine: {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f} at start; async start method {chosen!r}")

    starts = []
    for context in ("forkserver", "forkserver", "spawn"):  # the first forkserver run also starts the server
        for n in (2, 8):
            starts.append(startup("ALE/Pong-v5", n, context))
            s = starts[-1]
            print(f"start-up  {s['env']:<12} {n} envs  {context:<10} {s['startup_s']:6.2f} s   children USS {s['children_uss_mb']:7.1f} MB")
    envs_module.ASYNC_CONTEXT = chosen

    have_envpool = importlib.util.find_spec("envpool") is not None
    print(f"envpool: {'installed' if have_envpool else 'not installed (pip install janus-rl[envpool])'}")
    rows = []
    print(f"\n{'env':<12} {'envs':>4} {'sync steps/s':>13} {'async steps/s':>14} {'async/sync':>10} "
          f"{'envpool steps/s':>16} {'envpool/sync':>12}   (median of {args.rounds} paired rounds)")
    for env_id in args.envs:
        kinds = ["sync", "async"] + (["envpool"] if have_envpool and env_id in ENVPOOL_ENVS else [])
        for n in args.num_envs:
            rng = np.random.default_rng(0)
            built = {kind: make_vector_env(env_id, n, 0, training=True, vector_env=kind) for kind in kinds}
            for e in built.values():
                e.reset(seed=0)
            rates: dict[str, list[float]] = {kind: [] for kind in kinds}
            for _ in range(args.rounds):
                for kind in kinds:
                    rates[kind].append(steps_per_second(built[kind], args.seconds, rng))
            for e in built.values():
                e.close()
            row: dict = {"env": env_id, "num_envs": n}
            for kind in kinds:
                row[kind] = statistics.median(rates[kind])
                if kind != "sync":  # each ratio pairs two measurements of the same round
                    ratios = [x / y for x, y in zip(rates[kind], rates["sync"])]
                    row[f"{kind}_ratio"], row[f"{kind}_ratios"] = statistics.median(ratios), ratios
            rows.append(row)
            pool = (f"{row['envpool']:>16,.0f} {row['envpool_ratio']:>12.2f}" if "envpool" in row else f"{'-':>16} {'-':>12}")
            print(f"{env_id:<12} {n:>4} {row['sync']:>13,.0f} {row['async']:>14,.0f} {row['async_ratio']:>10.2f} {pool}")
    print(f"load average {os.getloadavg()[0]:.2f} at the end")
    if args.out:
        args.out.write_text(json.dumps({"cpus": os.cpu_count(), "startup": starts, "steps": rows}, indent=2))


if __name__ == "__main__":
    main()
