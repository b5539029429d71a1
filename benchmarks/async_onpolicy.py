"""Asynchronous on-policy (issue 38): janus appo and impala against janus's own lockstep PPO,
Stable-Baselines3's PPO and Sample Factory's APPO, on one env-step budget: speed and return.

Per seed the systems run back to back in the order given (interleaved: seed 0 of each, then seed 1
...), so slow drifts of a shared machine fall on all of them alike. Reported per run: env steps/s
(env steps taken / training wall time, start-up excluded for janus and SB3 as in rl_peers.py;
Sample Factory's own figure, from its runner), the mean return of the last 20 training episodes,
and for janus and SB3 the mean of 10 greedy evaluation episodes. Summary: medians over seeds and
the per-seed ratio of each system's speed to janus PPO's. One torch thread per process.

    PYTHONPATH=src .venv/bin/python benchmarks/async_onpolicy.py --seeds 0 1 2 3 4
    PYTHONPATH=src .venv/bin/python benchmarks/async_onpolicy.py --systems appo ppo --steps 50000 --seeds 0
    PYTHONPATH=src .venv/bin/python benchmarks/async_onpolicy.py --env ALE/Pong-v5 --steps 50000 --systems appo impala ppo sb3-ppo
    PYTHONPATH=src .venv/bin/python benchmarks/async_onpolicy.py --systems sf-appo --seeds 0   # needs .venv-sf: sf_appo.py setup
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import rl_peers

SYSTEMS = ("appo", "impala", "ppo", "sb3-ppo", "sf-appo")


def run_sf(env: str, steps: int, seed: int) -> dict[str, Any]:
    """Sample Factory's APPO in its own virtualenv (``benchmarks/sf_appo.py setup`` makes it; CartPole-v1)."""
    if env != "CartPole-v1":
        raise SystemExit("sf-appo: benchmarks/sf_appo.py runs CartPole-v1 only")
    here = Path(__file__).resolve().parent
    out = subprocess.run([sys.executable, str(here / "sf_appo.py"), "run", "--steps", str(steps), "--seed", str(seed)],
                         check=True, capture_output=True, text=True, timeout=3600)
    result = json.loads(out.stdout[out.stdout.index("{"):])
    return {"env_steps": result["env_steps"], "wall_s": result["wall_s"], "steps_per_s": result["env_steps_per_s"],
            "final_return": result["final_return"], "eval_return": float("nan")}


def run_janus_atari(algo: str, env: str, steps: int, seed: int) -> dict[str, Any]:
    """A janus run on an ``ALE/`` game at the algorithm's preset (no greedy evaluation: a short
    budget's Pong policy loses every point, and an episode takes minutes)."""
    from janus.runtime.run import run_runtime

    out = run_runtime(rl_peers.janus_config(algo, env, steps, seed)).to_dict()
    env_steps = out["counts"]["transitions_produced"]
    return {"env_steps": env_steps, "wall_s": out["wall_s"], "steps_per_s": env_steps / out["wall_s"],
            "final_return": out.get("final_mean_return", float("nan")), "eval_return": float("nan"),
            "learner_utilization": out["runtime"]["learner_utilization"]}


def run_sb3_atari(env: str, steps: int, seed: int) -> dict[str, Any]:
    """SB3's PPO (CnnPolicy: the Nature CNN, as janus's torso) on janus's Atari preprocessing, with
    janus PPO's preset rollout, minibatches, epochs and rates carried over."""
    import time

    import numpy as np
    from stable_baselines3 import PPO
    from stable_baselines3.common.monitor import Monitor
    from stable_baselines3.common.vec_env import DummyVecEnv

    from janus.algorithms.base import algorithm
    from janus.envs.atari import make_atari_env

    cfg = rl_peers.janus_config("ppo", env, steps, seed)
    a, w = algorithm("ppo").config(cfg), cfg.workload
    venv = DummyVecEnv([lambda: Monitor(make_atari_env(env, training=True)) for _ in range(w.envs_per_actor)])
    model = PPO("CnnPolicy", venv, n_steps=w.rollout_length, batch_size=cfg.minibatch_size, n_epochs=w.num_epochs,
                learning_rate=a.lr, gamma=a.gamma, gae_lambda=a.gae_lambda, clip_range=a.clip_coef, ent_coef=a.ent_coef,
                vf_coef=a.vf_coef / 2, max_grad_norm=a.max_grad_norm, seed=seed, device="cpu", verbose=0)
    start = time.perf_counter()
    model.learn(total_timesteps=steps)
    wall = time.perf_counter() - start
    returns = [info["r"] for info in model.ep_info_buffer][-rl_peers.WINDOW:]
    return {"env_steps": model.num_timesteps, "wall_s": wall, "steps_per_s": model.num_timesteps / wall,
            "final_return": float(np.mean(returns)) if returns else float("nan"), "eval_return": float("nan")}


def run(system: str, env: str, steps: int, seed: int) -> dict[str, Any]:
    atari = env.startswith("ALE/")
    if system == "sb3-ppo":
        return run_sb3_atari(env, steps, seed) if atari else rl_peers.run_sb3("ppo", env, steps, seed)
    if system == "sf-appo":
        return run_sf(env, steps, seed)
    return run_janus_atari(system, env, steps, seed) if atari else rl_peers.run_janus(system, env, steps, seed)


def summarize(rows: list[dict[str, Any]], systems: list[str]) -> dict[str, Any]:
    by: dict[str, dict[int, dict[str, Any]]] = {s: {} for s in systems}
    for r in rows:
        by[r["system"]][r["seed"]] = r
    out: dict[str, Any] = {}
    print(f"\n{'system':8s} {'env-steps/s (median)':>21s} {'vs janus ppo (per seed)':>34s} "
          f"{'final return (median, per seed)':>40s} {'eval':>7s}")
    for s in systems:
        runs = by[s]
        speed = statistics.median(r["steps_per_s"] for r in runs.values())
        ratios = [runs[k]["steps_per_s"] / by["ppo"][k]["steps_per_s"] for k in runs if "ppo" in by and k in by["ppo"]]
        finals = [runs[k]["final_return"] for k in sorted(runs)]
        evals = [r["eval_return"] for r in runs.values() if r["eval_return"] == r["eval_return"]]
        out[s] = {"steps_per_s_median": speed, "ratio_to_ppo": ratios, "final_returns": finals,
                  "final_return_median": statistics.median(finals), "eval_median": statistics.median(evals) if evals else None}
        ratio = f"{statistics.median(ratios):.2f}x ({', '.join(f'{x:.2f}' for x in ratios)})" if ratios else "-"
        ev = f"{statistics.median(evals):7.1f}" if evals else "      -"
        print(f"{s:8s} {speed:21,.0f} {ratio:>34s} {statistics.median(finals):8.1f} "
              f"({', '.join(f'{x:.0f}' for x in finals):>28s}) {ev}")
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--systems", nargs="+", default=["appo", "impala", "ppo", "sb3-ppo"], choices=SYSTEMS)
    parser.add_argument("--env", default="CartPole-v1")
    parser.add_argument("--steps", type=int, default=200_000)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--json", help="write every run and the summary here")
    args = parser.parse_args()
    torch.set_num_threads(1)
    rows = []
    for seed in args.seeds:
        for system in args.systems:
            r = run(system, args.env, args.steps, seed)
            r.update(system=system, seed=seed)
            rows.append(r)
            print(f"{system:8s} seed {seed}: {r['steps_per_s']:9,.0f} env-steps/s  final return {r['final_return']:6.1f}  "
                  f"eval {r['eval_return']:6.1f}  ({r['env_steps']:,} env steps in {r['wall_s']:.1f} s)", flush=True)
    summary = summarize(rows, args.systems)
    if args.json:
        Path(args.json).write_text(json.dumps({"args": vars(args), "runs": rows, "summary": summary}, indent=1))


if __name__ == "__main__":
    main()
