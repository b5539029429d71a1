"""DQN on an Atari game, janus vs Stable-Baselines3 with the same CNN: env steps/s and memory (on demand).

Both libraries train one after the other in this process on the same game with the same
preprocessing (janus's, :func:`janus.envs.atari.make_atari_env` with ``training=True``, so
SB3 steps exactly the environments janus does), the same Nature-DQN network (SB3's ``CnnPolicy``:
NatureCNN, 512 features, a linear head; janus picks the same torso for ``(4, 84, 84)`` uint8
frames), the same env-step budget and the hyperparameters matched (batch, learning rate, replay
capacity, learning starts, updates per env step, target interval, n-step, exploration). Not
matched: janus's DQN is double DQN (one more forward pass of the target network per update).
Reported per run: env steps/s (env steps / training wall time, start-up excluded), process CPU time,
the peak RSS growth while training (ru_maxrss of this process; janus's frame replay stores each
frame once, SB3's ``ReplayBuffer`` whole stacks for obs and next_obs) and the replay's bytes per
transition. The janus/SB3 speed ratio is the median over seeds of back-to-back pairs. One torch
thread (the target machine is a shared 2-core box).

    PYTHONPATH=src .venv/bin/python benchmarks/atari_dqn.py                         # Pong, 10k steps, seed 0
    PYTHONPATH=src .venv/bin/python benchmarks/atari_dqn.py --steps 20000 --seeds 0 1 --json runs/atari_dqn.json
"""

from __future__ import annotations

import argparse
import json
import platform
import resource
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from janus.algorithms.base import algorithm
from janus.config import from_dict, resolve
from janus.runtime.run import run_runtime
from janus.runtime.wiring import make_backend
from rl_peers import children_cpu_s

SETTINGS = {  # both libraries; DQN-Zoo-like values scaled down to a short run
    "batch_size": 32, "buffer_capacity": 50_000, "lr": 1e-4, "learning_starts": 2_000, "train_frequency": 4.0,
    "target_update_interval": 250, "exploration_steps": 5_000, "n_step": 3, "num_envs": 4, "rollout_steps": 8,
}


def janus_config(env: str, steps: int, seed: int, backend: str | None) -> Any:
    s = SETTINGS
    data: dict[str, Any] = {
        "seed": seed, "batch_size": s["batch_size"], "buffer_capacity": s["buffer_capacity"],
        "workload": {"env": env, "total_env_steps": steps, "envs_per_actor": s["num_envs"], "rollout_length": s["rollout_steps"]},
        "algorithm": {k: s[k] for k in ("lr", "learning_starts", "train_frequency", "target_update_interval",
                                        "exploration_steps", "n_step")},
    }
    if backend:
        data["runtime"] = {"backend": backend}
    return resolve(from_dict(data, base=from_dict(algorithm("dqn").preset)))


def maxrss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def run_janus(env: str, steps: int, seed: int, backend: str | None) -> dict[str, Any]:
    cfg = janus_config(env, steps, seed, backend)
    rss0 = maxrss_mb()
    be = make_backend(cfg)
    cpu = time.process_time() + children_cpu_s()
    out = run_runtime(cfg, backend=be).to_dict()
    cpu = time.process_time() + children_cpu_s() - cpu
    replay = be.component("trajectory_manager").buffer.experience  # type: ignore[attr-defined]
    nbytes = sum(replay.memory_bytes().values()) if hasattr(replay, "memory_bytes") else float("nan")
    env_steps = out["counts"]["transitions_produced"]
    return {"env_steps": env_steps, "wall_s": out["wall_s"], "cpu_s": cpu, "steps_per_s": env_steps / out["wall_s"],
            "updates": out["counts"]["updates"], "rss_growth_mb": maxrss_mb() - rss0,
            "replay": type(replay).__name__, "replay_bytes_per_transition": nbytes / replay.capacity,  # allocated for the whole capacity
            "backend": out["runtime"]["backend"]}


def run_sb3(env: str, steps: int, seed: int) -> dict[str, Any]:
    from stable_baselines3 import DQN
    from stable_baselines3.common.monitor import Monitor
    from stable_baselines3.common.vec_env import DummyVecEnv

    from janus.envs.atari import make_atari_env

    s = SETTINGS
    venv = DummyVecEnv([lambda: Monitor(make_atari_env(env, training=True)) for _ in range(s["num_envs"])])
    venv.seed(seed)
    rss0 = maxrss_mb()
    model = DQN(
        "CnnPolicy", venv, learning_rate=s["lr"], buffer_size=s["buffer_capacity"], learning_starts=s["learning_starts"],
        batch_size=s["batch_size"], tau=1.0, gamma=0.99, train_freq=(s["rollout_steps"], "step"),
        gradient_steps=round(s["rollout_steps"] * s["num_envs"] / s["train_frequency"]), n_steps=s["n_step"],
        target_update_interval=round(s["target_update_interval"] * s["train_frequency"]),  # SB3 counts env steps
        exploration_fraction=min(1.0, s["exploration_steps"] / steps), exploration_initial_eps=1.0,
        exploration_final_eps=0.05, max_grad_norm=10.0, seed=seed, device="cpu", verbose=0,
    )
    start, cpu = time.perf_counter(), time.process_time()
    model.learn(total_timesteps=steps)
    wall, cpu = time.perf_counter() - start, time.process_time() - cpu
    rb = model.replay_buffer
    nbytes = sum(getattr(rb, k).nbytes for k in ("observations", "next_observations", "actions", "rewards", "dones", "timeouts")
                 if getattr(rb, k, None) is not None)
    out = {"env_steps": model.num_timesteps, "wall_s": wall, "cpu_s": cpu, "steps_per_s": model.num_timesteps / wall,
           "updates": model._n_updates, "rss_growth_mb": maxrss_mb() - rss0, "replay": type(rb).__name__,
           "replay_bytes_per_transition": nbytes / (rb.buffer_size * rb.n_envs),  # buffer_size is split over envs
           "backend": "-"}
    venv.close()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env", default="ALE/Pong-v5")
    parser.add_argument("--steps", type=int, default=10_000, help="env-step budget per run [10000]")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--backend", default=None, choices=("local", "process"), help="janus backend (default: train's)")
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    torch.set_num_threads(1)
    torch.optim.Adam([torch.zeros(1, requires_grad=True)])  # torch._dynamo's one-time import, outside both timers
    import stable_baselines3

    print(f"janus vs stable-baselines3 {stable_baselines3.__version__} on {args.env}, torch {torch.__version__}, "
          f"python {platform.python_version()}, settings {SETTINGS}")
    rows = []
    for seed in args.seeds:
        for lib in ("janus", "sb3"):
            res = run_janus(args.env, args.steps, seed, args.backend) if lib == "janus" else run_sb3(args.env, args.steps, seed)
            rows.append({"lib": lib, "seed": seed, **res})
            print(f"{lib:5s} seed {seed}: {res['steps_per_s']:7.1f} env steps/s, {res['wall_s']:6.1f} s wall, "
                  f"{res['cpu_s']:6.1f} s cpu, {res['updates']:,} updates, replay {res['replay']} "
                  f"{res['replay_bytes_per_transition']:,.0f} B/transition, peak RSS +{res['rss_growth_mb']:,.0f} MB", flush=True)
    pairs = [a["steps_per_s"] / b["steps_per_s"] for a, b in zip(rows[::2], rows[1::2])]
    ratio = statistics.median(pairs)
    mem = statistics.fmean(r["replay_bytes_per_transition"] for r in rows[1::2]) / statistics.fmean(
        r["replay_bytes_per_transition"] for r in rows[::2])
    print(f"\njanus/SB3 env steps/s: {ratio:.2f}x (median of {len(pairs)} pairs: {', '.join(f'{p:.2f}' for p in pairs)}); "
          f"replay bytes per transition SB3/janus: {mem:.1f}x")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"env": args.env, "steps": args.steps, "settings": SETTINGS, "rows": rows,
                       "speed_ratio": ratio, "memory_ratio": mem, "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}, f, indent=1)


if __name__ == "__main__":
    main()
