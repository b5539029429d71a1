"""Wall time for PPO and DQN (the presets) to reach a mean return of 450 on CartPole-v1 on the
runtime's serial scheduler (local backend, both overlaps off: one thread, reproducible per seed).

The former single-process loop (``train_local``) is this configuration of the runtime now; see
``benchmarks/rl_cartpole_runtime.py`` for the threaded default and how the time is read off the
learning curve.

    python benchmarks/rl_cartpole.py                      # both algorithms, seed 0
    python benchmarks/rl_cartpole.py --algo dqn --seeds 0 1 2
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from rl_cartpole_runtime import one_run

SERIAL = {"overlap_collect": 0, "overlap_select": 0}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--algo", choices=["ppo", "dqn", "both"], default="both")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--steps", type=int, default=None, help="env-step budget (default: the preset's)")
    parser.add_argument("--target", type=float, default=450.0)
    parser.add_argument("--window", type=int, default=20)
    parser.add_argument("--log-every", type=float, default=15.0, help="progress line every N seconds (0: off)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    algos = ["ppo", "dqn"] if args.algo == "both" else [args.algo]
    print("\nalgo  seed  seconds  env_steps  env_steps/s")
    for algo in algos:
        for seed in args.seeds:
            row = one_run(algo, seed, args.steps, SERIAL, args.target, args.window, args.log_every)
            secs = row["reached_s"] if row["reached_s"] is None else round(row["reached_s"], 1)
            print(f"{algo:4s}  {seed:4d}  {secs!s:>7}  {row['reached_step']}  {row['env_steps_per_s']:,.0f}", flush=True)


if __name__ == "__main__":
    main()
