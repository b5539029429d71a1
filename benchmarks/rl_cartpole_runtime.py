"""Time for PPO and DQN (the runtime presets) to reach a mean return of 450 on CartPole-v1 through
the actor-model runtime (``run_runtime``, local backend: what ``janus train --algo ppo|dqn`` runs).

Each run trains for its whole budget (PPO anneals its learning rate over it, so the budget is part
of the setting); the time to 450 is read off the learning curve afterwards: the wall time and env
steps at the first episode where the mean return of the last ``--window`` (20) episodes is >= 450.
Wall times count from the moment every component is up, like the run's ``wall_s``.

    python benchmarks/rl_cartpole_runtime.py                        # both algorithms, seed 0
    python benchmarks/rl_cartpole_runtime.py --algo dqn --seeds 0 1 2 --steps 100000
    python benchmarks/rl_cartpole_runtime.py --algo dqn --set '{"algorithm": {"lr": 1e-3}}'
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path
from typing import Any

import torch

from janus.algorithms.base import algorithm
from janus.config import from_dict, resolve
from janus.runtime.run import run_runtime


def time_to_target(curve: dict[str, list], target: float, window: int) -> tuple[float | None, int | None]:
    """(wall s, env steps) at the first episode whose trailing ``window``-episode mean is >= ``target``."""
    returns, total = curve.get("return", []), 0.0
    for i, r in enumerate(returns):
        total += r
        if i >= window:
            total -= returns[i - window]
        if i >= window - 1 and total / window >= target:
            return float(curve["wall_s"][i]), int(curve["env_steps"][i])
    return None, None


def one_run(algo: str, seed: int, steps: int | None, overrides: dict[str, Any], target: float, window: int,
            log_every_s: float) -> dict[str, Any]:
    data: dict[str, Any] = {**overrides, "seed": seed, "name": f"{algo}-seed{seed}"}
    if steps is not None:
        data["workload"] = {**overrides.get("workload", {}), "total_env_steps": steps}
    cfg = resolve(from_dict(data, base=from_dict(algorithm(algo).preset)))
    last = [time.perf_counter()]

    def progress(done: int, total: int, note: str) -> None:
        if log_every_s and time.perf_counter() - last[0] >= log_every_s:
            last[0] = time.perf_counter()
            print(f"  {algo} seed {seed}: {done:,}/{total:,} env steps  {note}", flush=True)  # RL runs report env steps

    run = run_runtime(cfg, progress)
    reached_s, reached_step = time_to_target(run.get("learning_curve", {}), target, window)
    return {
        "algo": algo, "seed": seed, "total_env_steps": cfg.workload.total_env_steps,
        "reached_s": reached_s, "reached_step": reached_step, "wall_s": run["wall_s"],
        "final_mean_return": run.get("final_mean_return"), "episodes": run.get("episodes", 0),
        "env_steps_per_s": run["env_steps_per_s"], "updates": run["counts"]["updates"],
        "config": run["config"], "learning_curve": run.get("learning_curve"),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--algo", choices=["ppo", "dqn", "both"], default="both")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--steps", type=int, default=None, help="env-step budget (default: the preset's total_env_steps)")
    parser.add_argument("--set", default="{}", metavar="JSON",
                        help='config overrides on top of the preset, e.g. \'{"algorithm": {"lr": 1e-3}}\'')
    parser.add_argument("--target", type=float, default=450.0)
    parser.add_argument("--window", type=int, default=20)
    parser.add_argument("--log-every", type=float, default=15.0, help="progress line every N seconds (0: off)")
    parser.add_argument("--json", type=Path, default=None, help="write every run (with its learning curve) here")
    args = parser.parse_args()
    overrides = json.loads(args.set)
    torch.set_num_threads(1)
    algos = ["ppo", "dqn"] if args.algo == "both" else [args.algo]
    print(f"python {platform.python_version()}, torch {torch.__version__}, {os.cpu_count()} CPUs, "
          f"load average {os.getloadavg()[0]:.1f}", flush=True)
    rows = []
    for algo in algos:
        for seed in args.seeds:
            row = one_run(algo, seed, args.steps, overrides, args.target, args.window, args.log_every)
            reached = (f"{row['reached_s']:.1f} s at {row['reached_step']:,} env steps" if row["reached_s"] is not None
                       else "not reached")
            print(f"{algo} seed {seed}: mean return >= {args.target:g} over {args.window} episodes: {reached}; "
                  f"run {row['wall_s']:.1f} s for {row['total_env_steps']:,} env steps, final mean return "
                  f"{row['final_mean_return']:.1f}, {row['env_steps_per_s']:,.0f} env steps/s, "
                  f"load average {os.getloadavg()[0]:.1f}", flush=True)
            rows.append(row)
    print(f"\nalgo  seed  budget   to {args.target:g} (s)  at env step  run (s)  final return  env steps/s")
    for r in rows:
        secs = f"{r['reached_s']:.1f}" if r["reached_s"] is not None else "-"
        step = f"{r['reached_step']:,}" if r["reached_step"] is not None else "not reached"
        print(f"{r['algo']:4s}  {r['seed']:4d}  {r['total_env_steps']:>7,}  {secs:>11}  {step:>11}  "
              f"{r['wall_s']:7.1f}  {r['final_mean_return']:12.1f}  {r['env_steps_per_s']:11,.0f}")
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"argv": sys.argv[1:], "runs": rows}, indent=1))
        print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
