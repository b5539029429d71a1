"""Wall time for PPO and DQN (documented defaults) to solve CartPole-v1 on this machine.

"Solved" here: mean return >= 450 over the last 20 episodes. Each run stops as soon as that holds,
or after ``--max-steps`` env steps. One torch thread (the target machine is a shared 2-core box).

    python benchmarks/rl_cartpole.py                      # both algorithms, seed 0
    python benchmarks/rl_cartpole.py --algo dqn --seeds 0 1 2
"""

from __future__ import annotations

import argparse
import dataclasses

import torch

from janus.workload.dqn import DQNConfig
from janus.workload.ppo import PPOConfig
from janus.workload.rl_loop import train_local

#: Step budgets; PPO anneals its learning rate over the whole budget, so it is part of its setting.
MAX_STEPS = {"ppo": 500_000, "dqn": 500_000}
CONFIGS = {"ppo": PPOConfig, "dqn": DQNConfig}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--algo", choices=["ppo", "dqn", "both"], default="both")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--target", type=float, default=450.0)
    parser.add_argument("--window", type=int, default=20)
    parser.add_argument("--max-steps", type=int, default=None, help="env-step budget (default: per algorithm)")
    parser.add_argument("--log-every", type=int, default=25_000, help="progress line every N env steps (0: off)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    algos = ["ppo", "dqn"] if args.algo == "both" else [args.algo]
    rows = []
    for algo in algos:
        cfg = CONFIGS[algo]()
        print(f"{algo}: {dataclasses.asdict(cfg)}")
        for seed in args.seeds:
            budget = args.max_steps or MAX_STEPS[algo]
            out = train_local(
                algo, "CartPole-v1", budget, seed, cfg,
                stop_at_return=args.target, window=args.window, log_every=args.log_every or None,
            )
            reached = f"{out['reached_s']:.1f} s at {out['reached_step']} env steps" if out["reached_s"] else "not reached"
            print(f"{algo} seed {seed}: time to mean return >= {args.target:g} over {args.window} episodes: {reached} "
                  f"({out['env_steps_per_s']:.0f} env steps/s, {out['updates']} updates)", flush=True)
            rows.append((algo, seed, out["reached_s"], out["reached_step"]))
    print("\nalgo  seed  seconds  env_steps")
    for algo, seed, secs, step in rows:
        print(f"{algo:4s}  {seed:4d}  {secs if secs is None else round(secs, 1)!s:>7}  {step}")


if __name__ == "__main__":
    main()
