"""Runtime scaling: actor steps/s and learner samples/s for 1, 2, 4 workers on each backend.

    python benchmarks/runtime_scaling.py                 # full run (a few minutes)
    python benchmarks/runtime_scaling.py --quick         # smoke run (about a minute)
    python benchmarks/runtime_scaling.py --json out.json

Every run is the same synthetic off-policy workload (simulated environments that sleep
``env_step_ms`` per step, a real torch learner) through ``janus.runtime.run.run_runtime``; only the
backend and the number of workers change. The ideal actor rate for W workers is W times the rate
measured with one worker on the same backend; the ratio is measured / ideal. A CPU-bound table
replaces the sleep by a busy Python loop of the same length (``env_compute_ms``): there the workers
compete for the machine's cores (and, on the local backend, for one GIL), so it shows the ceiling. A second table varies
the rollout length on the ray backend (2 workers): a worker sends one InsertTransitionMsg per
rollout, so this is the number of transitions per message. Rates exclude process start-up (the
run's wall time starts once every component is up). Sampling is unlimited (no rate limiter ratio),
so the learner trains as fast as it can and the run ends at its goal while the workers still roll out.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from datetime import datetime
from pathlib import Path
from typing import Any

try:
    import janus  # noqa: F401
except ImportError:  # running from a checkout without an installed package
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from janus.config import JanusConfig, RunConfig, RuntimeConfig, SyntheticConfig, WorkloadConfig, resolve
from janus.runtime.run import run_runtime

WORKERS = (1, 2, 4)
ROLLOUT_LENGTHS = (8, 32, 128)
ENVS = 8
BATCH = 64
HEADROOM = 4  # rollouts a worker may do, in multiples of what the learner's goal needs from one worker
SPI = 0.0  # no sample/insert ratio: the (two-sided) limiter would pace the workers by the learner


def config(backend: str, workers: int, rollout_length: int, quick: bool, cpu_bound: bool = False) -> RunConfig:
    """The benchmark workload: per worker a fixed number of env steps, no sample/insert ratio.

    The learner trains as fast as it can towards a fixed goal (updates) while the workers roll out,
    so the run's wall time is set by the learner and the workers' rate is measured over it; a run
    whose workers finished all their rollouts before the goal is flagged ``*`` in the table.
    """
    steps_per_worker = 1600 if quick else 8000  # env steps (of ENVS transitions each) per worker
    iterations = max(1, steps_per_worker // rollout_length)
    goal = iterations * max(1, 4 * ENVS * rollout_length // BATCH)  # the learner's updates
    # Every worker may roll out HEADROOM times what the goal takes with one worker, so that with 4
    # workers they are still rolling out when the learner reaches the goal: their rate is then
    # measured over the whole run, not a lower bound (the first run ended with 4 workers idle).
    iterations *= HEADROOM
    return resolve(RunConfig(
        janus=JanusConfig(overlap_collect=1, overlap_select=1, batch_size=BATCH, buffer_capacity=100_000),
        workload=WorkloadConfig(num_actors=workers, envs_per_actor=ENVS, rollout_length=rollout_length, hidden_size=128,
                                iterations=iterations, updates_per_iteration=max(1, goal // iterations)),
        synthetic=SyntheticConfig(obs_shape=(256,), env_step_ms=0.0 if cpu_bound else 1.0,
                                  env_compute_ms=1.0 if cpu_bound else 0.0),
        runtime=RuntimeConfig(backend=backend, samples_per_insert=SPI),
        name=f"{backend}-w{workers}-T{rollout_length}{'-cpu' if cpu_bound else ''}",
    ))


def measure(cfg: RunConfig) -> dict[str, Any]:
    run = run_runtime(cfg, timeout_s=600)
    msgs = run["runtime"]["messages"].get("InsertTransitionMsg", {"messages": 0, "bytes": 0})
    return {
        "name": cfg.name, "backend": cfg.runtime.backend, "workers": cfg.workload.num_actors,
        "rollout_length": cfg.workload.rollout_length, "transitions_per_insert": ENVS * cfg.workload.rollout_length,
        "env_steps_per_s": run["env_steps_per_s"], "samples_per_s": run["samples_per_s"], "wall_s": run["wall_s"],
        "updates": run["counts"]["updates"], "transitions": run["counts"]["transitions_produced"],
        "insert_msgs": msgs["messages"], "insert_bytes": msgs["bytes"],
        "rollout_ms": 1000 * run["stage_s"]["rollout"] * ENVS * cfg.workload.rollout_length * cfg.workload.num_actors
        / max(run["counts"]["transitions_produced"], 1),  # mean time inside one rollout (sleeps included)
        "workers_ran_out": run["counts"]["transitions_produced"] >= cfg.rollout_transitions * cfg.workload.iterations,
    }


def scaling_table(rows: list[dict[str, Any]]) -> str:
    base = {r["backend"]: r["env_steps_per_s"] for r in rows if r["workers"] == 1}
    lines = [f"{'backend':8} {'workers':>7} {'actor steps/s':>14} {'ideal':>9} {'ratio':>6} {'samples/s':>10} "
             f"{'rollout ms':>10} {'wall s':>7}"]
    for r in rows:
        ideal = base.get(r["backend"], 0.0) * r["workers"]
        r["ideal_steps_per_s"], r["ratio"] = ideal, (r["env_steps_per_s"] / ideal if ideal else 0.0)
        flag = "*" if r["workers_ran_out"] else " "
        lines.append(f"{r['backend']:8} {r['workers']:>7} {r['env_steps_per_s']:>13,.0f}{flag} {ideal:>9,.0f} "
                     f"{r['ratio']:>6.2f} {r['samples_per_s']:>10,.0f} {r['rollout_ms']:>10.1f} {r['wall_s']:>7.2f}")
    return "\n".join(lines + ["(* the workers ran out of rollouts before the goal: steps/s is a lower bound;",
                              " rollout ms: mean time inside one rollout of 32 steps, of which 32 ms are env sleeps or busy loops)"])


def size_table(rows: list[dict[str, Any]]) -> str:
    lines = [f"{'rollout_length':>14} {'transitions/msg':>15} {'KB/msg':>7} {'actor steps/s':>14} {'samples/s':>10} {'insert msgs/s':>13}"]
    for r in rows:
        kb = r["insert_bytes"] / max(r["insert_msgs"], 1) / 1024
        lines.append(f"{r['rollout_length']:>14} {r['transitions_per_insert']:>15} {kb:>7.0f} {r['env_steps_per_s']:>14,.0f} "
                     f"{r['samples_per_s']:>10,.0f} {r['insert_msgs'] / r['wall_s']:>13,.0f}")
    return "\n".join(lines) + "\n(insert messages count both hops: worker -> proxy and proxy -> trajectory manager)"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="smaller runs (smoke test)")
    parser.add_argument("--json", type=Path, default=None, help="write the results here")
    parser.add_argument("--backends", default="local,process,ray", help="comma-separated: local,process,ray")
    parser.add_argument("--cpu-bound-backends", default="local,process",
                        help="backends of the CPU-bound table (comma-separated; empty: no such table)")
    args = parser.parse_args()
    backends = args.backends.split(",")
    meta = {"date": datetime.now().astimezone().isoformat(timespec="seconds"), "cpus": os.cpu_count(),
            "platform": platform.platform(), "python": platform.python_version(),
            "load_avg_at_start": os.getloadavg(), "quick": args.quick}
    if "ray" in backends:
        import ray

        from janus.runtime.backends.ray_cluster import start_local_ray

        start_local_ray()  # once, shared by every ray run (start-up is not part of the rates)
        meta["ray"] = ray.__version__
    import torch

    meta["torch"] = torch.__version__
    try:
        scaling = []
        for backend in backends:
            run_runtime(config(backend, 1, 32, quick=True))  # warm-up (first imports, lazy init), discarded
            for w in WORKERS:
                t0 = time.perf_counter()
                scaling.append(measure(config(backend, w, 32, args.quick)))
                print(f"  {backend} x{w}: {scaling[-1]['env_steps_per_s']:,.0f} steps/s "
                      f"({time.perf_counter() - t0:.0f}s with start-up)", flush=True)
        cpu_bound = []
        for backend in [b for b in args.cpu_bound_backends.split(",") if b]:
            for w in WORKERS:
                cpu_bound.append(measure(config(backend, w, 32, args.quick, cpu_bound=True)))
                print(f"  {backend} x{w} (CPU-bound): {cpu_bound[-1]['env_steps_per_s']:,.0f} steps/s", flush=True)
        sizes = []
        if "ray" in backends:
            for length in ROLLOUT_LENGTHS:
                sizes.append(measure(config("ray", 2, length, args.quick)))
                print(f"  ray T={length}: {sizes[-1]['env_steps_per_s']:,.0f} steps/s", flush=True)
    finally:
        if "ray" in backends:
            ray.shutdown()
    print("\nscaling (rollout_length 32, obs 256 float32, env_step_ms 1.0, 8 envs per worker)")
    print(scaling_table(scaling))
    if cpu_bound:
        print(f"\nCPU-bound environments (1 ms busy loop per step instead of a 1 ms sleep; {os.cpu_count()} cores)")
        print(scaling_table(cpu_bound))
    if sizes:
        print("\ninsert message size (ray, 2 workers)")
        print(size_table(sizes))
    meta["load_avg_at_end"] = os.getloadavg()
    print(f"\nmachine: {meta['cpus']} CPUs, 1-min load average {meta['load_avg_at_start'][0]:.1f} at start, "
          f"{meta['load_avg_at_end'][0]:.1f} at the end")
    if args.json:
        args.json.write_text(json.dumps({"meta": meta, "scaling": scaling, "cpu_bound": cpu_bound, "message_size": sizes}, indent=2) + "\n")
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
