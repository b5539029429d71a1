"""janus (runtime, default backend, its presets) vs Stable-Baselines3 DQN, PPO and SAC: speed and return.

Both libraries train, one after the other in this process, on the same environment with the same
env-step budget, the same networks and the hyperparameters matched wherever both have them (see
``sb3_model`` and the "RL vs Stable-Baselines3" section of docs/benchmarks.md for what cannot be).
Reported per run: env steps/s (env steps taken / training wall time), the mean return of the last
20 training episodes, the mean return of 10 greedy evaluation episodes after training, wall time
and process CPU time (all threads). The janus/SB3 speed ratio is the median over seeds of the
ratios of back-to-back runs. One torch thread (the target machine is a shared 2-core box).

    PYTHONPATH=src .venv/bin/python benchmarks/rl_peers.py                 # dqn 50k + ppo 100k, seed 0
    PYTHONPATH=src .venv/bin/python benchmarks/rl_peers.py --quick         # smoke test, < 1 min
    PYTHONPATH=src .venv/bin/python benchmarks/rl_peers.py --algos ppo --seeds 0 1 2 --json runs/rl_peers.json
    PYTHONPATH=src .venv/bin/python benchmarks/rl_peers.py --algos sac --seeds 0 1 2   # Pendulum-v1, 20k steps
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import tempfile
import time
from collections.abc import Callable
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from torch import nn

from janus.algorithms.base import algorithm
from janus.config import from_dict, resolve
from janus.runtime.run import run_runtime
from janus.runtime.wiring import make_backend

STEPS = {"dqn": 50_000, "ppo": 100_000, "sac": 20_000}
QUICK_STEPS = {"dqn": 4_000, "ppo": 8_192, "sac": 2_000}
ENVS = {"dqn": "CartPole-v1", "ppo": "CartPole-v1", "sac": "Pendulum-v1"}  # without --env
WINDOW, EVAL_EPISODES = 20, 10  # training episodes averaged; greedy episodes after training


BACKEND: str | None = None  # --backend; None: janus train's default
JANUS_SET: dict[str, Any] = {}  # --janus_set: config keys (dotted) set on janus's side only


def parse_setting(text: str) -> tuple[list[str], Any]:
    """``KEY=VALUE`` of ``--janus_set``: a dotted key path (``algorithm.clip_vloss``, ``g_select``)
    and a YAML scalar (``1``, ``0.25``, ``false``)."""
    import yaml

    key, sep, value = text.partition("=")
    if not sep or not key.strip() or any(not part for part in key.strip().split(".")):
        raise argparse.ArgumentTypeError(f"--janus_set takes KEY=VALUE (e.g. g_select=1), got {text!r}")
    return key.strip().split("."), yaml.safe_load(value)


def layered(data: dict[str, Any], settings: dict[str, Any]) -> dict[str, Any]:
    """``data`` with each ``settings`` entry (a dotted key) set in its nested mappings."""
    out = json.loads(json.dumps(data))
    for dotted, value in settings.items():
        *parents, leaf = dotted.split(".")
        node = out
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = value
    return out


def janus_config(algo: str, env: str, steps: int, seed: int, settings: dict[str, Any] | None = None) -> Any:
    """The run ``janus train --algo ALGO --env ENV --total_env_steps STEPS --seed SEED`` would do,
    with ``settings`` (dotted config keys: ``--janus_set``) set over it."""
    data: dict[str, Any] = {"workload": {"total_env_steps": steps, "env": env}, "seed": seed}
    if algo == "dqn":  # the same algorithm on both sides: SB3's DQN has no double-DQN target
        data["algorithm"] = {"double_q": False}
    if algo == "ppo":  # SB3 clips the value prediction only, without CleanRL's max: both unclipped
        data["algorithm"] = {"clip_vloss": False}
    if BACKEND:
        data["runtime"] = {"backend": BACKEND}
    return resolve(from_dict(layered(data, settings or {}), base=from_dict(algorithm(algo).preset)))


def children_cpu_s() -> float:
    """CPU time of reaped child processes (the process backend's workers, once it joined them)."""
    import resource

    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def evaluate(env_id: str, act: Callable[[np.ndarray], int], seed: int, episodes: int = EVAL_EPISODES) -> float:
    """Mean return of ``episodes`` greedy episodes in a fresh env (same seeds for both libraries)."""
    env, returns = gym.make(env_id), []
    for i in range(episodes):
        obs, _ = env.reset(seed=10_000 + 100 * seed + i)
        done, total = False, 0.0
        while not done:
            obs, reward, term, trunc, _ = env.step(act(obs))
            total += float(reward)
            done = term or trunc
        returns.append(total)
    env.close()
    return float(np.mean(returns))


def run_janus(algo: str, env: str, steps: int, seed: int) -> dict[str, Any]:
    cfg = janus_config(algo, env, steps, seed, JANUS_SET)
    backend = make_backend(cfg)  # local or process: the Trainer is in this process either way
    cpu = time.process_time() + children_cpu_s()
    out = run_runtime(cfg, backend=backend).to_dict()  # wall_s: StartMsg to finished, start-up excluded
    cpu = time.process_time() + children_cpu_s() - cpu  # every thread, and worker processes
    learner = backend.component("trainer").learner.learner  # type: ignore[attr-defined]

    @torch.no_grad()
    def act(obs: np.ndarray) -> Any:
        if algo == "sac":  # the squashed mean action, scaled to the env's bounds
            return learner.act(obs[None])[0]
        net = learner.q if algo == "dqn" else learner.agent.actor  # greedy: argmax Q / argmax logits
        return int(net(torch.as_tensor(obs, dtype=torch.float32)[None]).argmax(1).item())

    env_steps = out["counts"]["transitions_produced"]
    return {"env_steps": env_steps, "wall_s": out["wall_s"], "cpu_s": cpu, "steps_per_s": env_steps / out["wall_s"],
            "final_return": out.get("final_mean_return", float("nan")), "episodes": out.get("episodes", 0),
            "eval_return": evaluate(env, act, seed), "updates": out["counts"]["updates"],
            "backend": out["runtime"]["backend"], "learner_utilization": out["runtime"].get("learner_utilization")}


def sb3_model(algo: str, env: str, steps: int, seed: int) -> Any:
    """The SB3 model with janus's settings (the registered algorithm's config of the same run) carried over."""
    from stable_baselines3 import DQN, PPO, SAC
    from stable_baselines3.common.env_util import make_vec_env

    cfg = janus_config(algo, env, steps, seed)
    a = algorithm(algo).config(cfg)
    # the data-path knobs are the run config's (not copied into the algorithm's config)
    num_envs, rollout_steps, batch_size = cfg.workload.envs_per_actor, cfg.workload.rollout_length, cfg.janus.batch_size
    buffer_size = cfg.janus.buffer_capacity
    venv = make_vec_env(env, n_envs=num_envs, seed=seed)  # DummyVecEnv of Monitor-wrapped envs
    if algo == "dqn":
        assert not a.double_q, "SB3's DQN takes the target network's max: compare janus with double_q false"
        # janus: one update per train_frequency env steps, paced against pieces of rollout_steps x
        # num_envs env steps; SB3: gradient_steps updates after every rollout_steps vector steps.
        gradient_steps = round(rollout_steps * num_envs / a.train_frequency)
        return DQN(
            "MlpPolicy", venv, learning_rate=a.lr, buffer_size=buffer_size, learning_starts=a.learning_starts,
            batch_size=batch_size, tau=a.tau, gamma=a.gamma, train_freq=(rollout_steps, "step"),
            gradient_steps=gradient_steps, n_steps=a.n_step,
            # janus counts the interval in updates, SB3 in env steps
            target_update_interval=round(a.target_update_interval * a.train_frequency),
            exploration_fraction=min(1.0, a.exploration_steps / steps), exploration_initial_eps=a.eps_start,
            exploration_final_eps=a.eps_end, max_grad_norm=a.max_grad_norm,
            policy_kwargs={"net_arch": list(a.hidden), "activation_fn": nn.ReLU},
            stats_window_size=WINDOW, seed=seed, device="cpu", verbose=0,
        )
    if algo == "sac":
        dim = int(np.prod(gym.make(env).action_space.shape))
        return SAC(
            "MlpPolicy", venv, learning_rate=a.lr, buffer_size=buffer_size, learning_starts=a.learning_starts,
            batch_size=batch_size, tau=a.tau, gamma=a.gamma, train_freq=(rollout_steps, "step"),
            gradient_steps=round(rollout_steps * num_envs / a.train_frequency),
            ent_coef=f"auto_{a.init_alpha}" if a.autotune_alpha else a.init_alpha,
            target_entropy=-a.target_entropy_scale * dim,
            policy_kwargs={"net_arch": list(a.hidden), "activation_fn": nn.ReLU},
            stats_window_size=WINDOW, seed=seed, device="cpu", verbose=0,
        )
    lr = (lambda progress: a.lr * progress) if a.anneal_lr else a.lr  # progress: 1 -> 0
    return PPO(
        "MlpPolicy", venv, learning_rate=lr, n_steps=rollout_steps,
        batch_size=rollout_steps * num_envs // cfg.janus.num_minibatches, n_epochs=cfg.workload.num_epochs, gamma=a.gamma,
        gae_lambda=a.gae_lambda, clip_range=a.clip_coef, clip_range_vf=a.clip_coef if a.clip_vloss else None,
        normalize_advantage=a.norm_adv, ent_coef=a.ent_coef,
        vf_coef=a.vf_coef / 2,  # janus: vf_coef * 0.5 * MSE (CleanRL); SB3: vf_coef * MSE -> same loss
        max_grad_norm=a.max_grad_norm,
        policy_kwargs={"net_arch": {"pi": list(a.hidden), "vf": list(a.hidden)}, "activation_fn": nn.Tanh,
                       "ortho_init": True},  # separate actor and critic, CleanRL init as in janus
        stats_window_size=WINDOW, seed=seed, device="cpu", verbose=0,
    )


def run_sb3(algo: str, env: str, steps: int, seed: int) -> dict[str, Any]:
    from stable_baselines3.common.logger import configure

    model = sb3_model(algo, env, steps, seed)
    with tempfile.TemporaryDirectory(prefix="sb3-log-") as log_dir:
        model.set_logger(configure(log_dir, []))  # else SB3 leaves an empty SB3-<time> folder in /tmp per run
        start, cpu = time.perf_counter(), time.process_time()
        model.learn(total_timesteps=steps)
        wall, cpu = time.perf_counter() - start, time.process_time() - cpu
    returns = [info["r"] for info in model.ep_info_buffer][-WINDOW:]

    def act(obs: np.ndarray) -> Any:
        action = model.predict(obs, deterministic=True)[0]
        return action if algo == "sac" else int(action)

    updates = model._n_updates  # gradient steps; PPO counts epochs, so times minibatches per epoch
    if algo == "ppo":
        updates *= model.n_steps * model.n_envs // model.batch_size
    return {"env_steps": model.num_timesteps, "wall_s": wall, "cpu_s": cpu, "steps_per_s": model.num_timesteps / wall,
            "final_return": float(np.mean(returns)) if returns else float("nan"), "episodes": model._episode_num,
            "eval_return": evaluate(env, act, seed), "updates": updates}


RUNNERS = {"janus": run_janus, "sb3": run_sb3}
KEYS = ("steps_per_s", "final_return", "eval_return", "wall_s", "cpu_s", "cpu_us_per_step")


def print_table(rows: list[dict[str, Any]]) -> None:
    head = (f"{'algo':4s}  {'lib':5s}  {'seed':>4s}  {'env steps':>9s}  {'wall s':>7s}  {'cpu s':>6s}  {'steps/s':>8s}  "
            f"{'final ret':>9s}  {'eval ret':>8s}  {'updates':>7s}")
    print("\n" + head + "\n" + "-" * len(head))
    for r in rows:
        starved = r["cpu_s"] < 0.8 * r["wall_s"]
        print(f"{r['algo']:4s}  {r['lib']:5s}  {r['seed']:4d}  {r['env_steps']:9,d}  {r['wall_s']:7.1f}  {r['cpu_s']:6.1f}  "
              f"{r['steps_per_s']:8,.0f}  {r['final_return']:9.1f}  {r['eval_return']:8.1f}  {r['updates']:7,d}{'  *' if starved else ''}")
    if any(r["cpu_s"] < 0.8 * r["wall_s"] for r in rows):
        print("* cpu < 80% of wall: the process waited for a core (other load on the machine)")


def summarize(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Per algorithm: mean over seeds of each library's figures, janus/SB3 ratios, per-seed speed ratios."""
    out: dict[str, Any] = {}
    for algo in dict.fromkeys(r["algo"] for r in rows):
        per = {lib: [r for r in rows if r["algo"] == algo and r["lib"] == lib] for lib in RUNNERS}
        if not all(per.values()):
            continue
        mean = {lib: {k: statistics.fmean(r[k] for r in rs) for k in KEYS} for lib, rs in per.items()}
        j, s = mean["janus"], mean["sb3"]
        # same seed, back to back; the median resists a run slowed by other load on a shared machine
        paired = [a["steps_per_s"] / b["steps_per_s"] for a, b in zip(per["janus"], per["sb3"])]
        speedup = statistics.median(paired)
        cpu = j["cpu_us_per_step"] / s["cpu_us_per_step"]  # CPU time (all threads) per env step
        out[algo] = {"janus": j, "sb3": s, "speedup": speedup, "speedup_per_seed": paired, "cpu_ratio": cpu,
                     "target_met": speedup >= 1.5 and j["final_return"] >= s["final_return"]}
    print(f"\n{'algo':4s}  {'steps/s janus/sb3 (median)':>26s}  {'per seed':>17s}  {'cpu janus/sb3':>13s}  "
          f"{'final ret janus / sb3':>21s}  {'eval ret janus / sb3':>20s}  target (>=1.5x, ret >=)")
    for algo, o in out.items():
        j, s, p = o["janus"], o["sb3"], o["speedup_per_seed"]
        print(f"{algo:4s}  {o['speedup']:25.2f}x  {min(p):7.2f}x-{max(p):.2f}x  {o['cpu_ratio']:12.2f}x  "
              f"{j['final_return']:9.1f} / {s['final_return']:9.1f}  {j['eval_return']:8.1f} / {s['eval_return']:9.1f}  "
              f"{'met' if o['target_met'] else 'NOT met'}")
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--algos", default="dqn,ppo", help="comma-separated: dqn, ppo, sac")
    parser.add_argument("--env", default=None, help=f"environment id (default per algorithm: {ENVS})")
    parser.add_argument("--steps", type=int, default=None, help=f"env-step budget (default {STEPS})")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--libs", default="janus,sb3", help="comma-separated: janus, sb3")
    parser.add_argument("--quick", action="store_true", help=f"small budgets {QUICK_STEPS} (smoke test)")
    parser.add_argument("--json", default=None, help="write rows and summary here")
    parser.add_argument("--backend", default=None, choices=("local", "process"),
                        help="janus backend (default: janus train's default)")
    parser.add_argument("--janus_set", type=parse_setting, action="append", default=[], metavar="KEY=VALUE",
                        help="a config key for janus's side only, e.g. g_select=1 or algorithm.clip_vloss=false "
                             "(repeatable; SB3's side keeps the unset run's settings)")
    args = parser.parse_args()
    global BACKEND
    BACKEND = args.backend
    JANUS_SET.update({".".join(path): value for path, value in args.janus_set})
    torch.set_num_threads(1)
    # The first torch optimizer imports torch._dynamo (~1 s, once per process). janus builds its learner
    # inside its timed window, SB3 before learn(): pay it here so neither timer includes it.
    torch.optim.Adam([torch.zeros(1, requires_grad=True)])
    import stable_baselines3

    print(f"janus vs stable-baselines3 {stable_baselines3.__version__}, torch {torch.__version__}, "
          f"gymnasium {gym.__version__}, python {platform.python_version()}")
    rows = []
    for algo in args.algos.split(","):
        steps = args.steps or (QUICK_STEPS if args.quick else STEPS)[algo]
        env = args.env or ENVS[algo]
        for seed in args.seeds:
            for lib in args.libs.split(","):  # alternate libraries so load drift hits both
                res = RUNNERS[lib](algo, env, steps, seed)
                res["cpu_us_per_step"] = 1e6 * res["cpu_s"] / res["env_steps"]
                rows.append({"algo": algo, "lib": lib, "seed": seed, "budget": steps, "env": env, **res})
                print(f"{algo} {lib:5s} seed {seed}: {res['steps_per_s']:,.0f} env steps/s, {res['wall_s']:.1f} s, "
                      f"final return {res['final_return']:.1f}, eval {res['eval_return']:.1f}", flush=True)
    print_table(rows)
    summary = summarize(rows)
    if args.json:
        with open(args.json, "w") as f:
            date = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
            json.dump({"env": args.env or ENVS, "date": date, "rows": rows, "summary": summary}, f, indent=1)


if __name__ == "__main__":
    main()
