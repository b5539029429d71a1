"""R2D2 against feed-forward DQN on tasks that need memory: a return curve and a table.

Each algorithm trains from its own preset (``janus train --algo r2d2|dqn --env ENV``, the budget
``--steps``) on each task, seed by seed, in the same minute (pairs run in turn: wall-time numbers are
paired ratios on a shared machine, never absolute claims). Per run:

* the return curve: training episodes' returns (epsilon-greedy, as the actors act) against env
  steps, as a mean per tenth of the budget;
* ``eval_return``: ``--eval-episodes`` greedy episodes after training, in a fresh environment (r2d2
  carrying its recurrent state, zeroed at each episode's start);
* env steps/s and wall seconds (the runtime's, start-up excluded).

Tasks: ``cartpole`` (``janus/CartPoleNoVel-v1``: CartPole seeing position and angle only) and
``popgym`` (``popgym:popgym-RepeatPreviousEasy-v0``, needs ``pip install popgym==1.0.7``: say the card
seen 4 steps ago, return in [-1, 1]; a policy without memory averages about -0.5). Writes
``OUT.json`` (rows and curves) and ``OUT.png`` (the curves), and prints the table.

    .venv/bin/python benchmarks/r2d2_memory.py                                   # both tasks, seed 0, presets' budgets
    .venv/bin/python benchmarks/r2d2_memory.py --tasks cartpole --steps 20000 --seeds 0 1 --out runs/r2d2_small
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np
import torch

from janus.algorithms.base import algorithm, is_recurrent
from janus.config import from_dict, resolve
from janus.envs.vector import make_vector_env
from janus.runtime.run import run_runtime
from janus.runtime.wiring import make_backend

TASKS = {"cartpole": "janus/CartPoleNoVel-v1", "popgym": "popgym:popgym-RepeatPreviousEasy-v0"}
ALGOS = ("r2d2", "dqn")
CURVE_POINTS = 10


def config(algo: str, env: str, steps: int | None, seed: int, backend: str | None) -> Any:
    """The run ``janus train --algo ALGO --env ENV [--total_env_steps STEPS] --seed SEED`` does."""
    workload: dict[str, Any] = {"env": env}
    if steps:
        workload["total_env_steps"] = steps
    data: dict[str, Any] = {"workload": workload, "seed": seed}
    if backend:
        data["runtime"] = {"backend": backend}
    return resolve(from_dict(data, base=from_dict(algorithm(algo).preset)))


@torch.no_grad()
def greedy_returns(algo: str, cfg: Any, learner: Any, episodes: int, seed: int) -> list[float]:
    """Returns of ``episodes`` greedy episodes in a fresh copy of the run's environment."""
    policy = algorithm(algo).policy(cfg, learner)
    envs = make_vector_env(cfg.workload.env, 1, env_kwargs=cfg.workload.env_kwargs)
    start = int(getattr(envs.single_action_space, "start", 0))
    obs, _ = envs.reset(seed=[10_000 + 100 * seed])  # type: ignore[arg-type]  # one seed per sub-env
    state = np.zeros((1, policy.state_size), np.float32) if is_recurrent(policy) else None
    returns, total = [], 0.0
    while len(returns) < episodes:
        x = np.asarray(obs, dtype=np.float32)
        if state is not None:
            action, state = policy.act_with_state(x, state, True)  # type: ignore[attr-defined]
        else:
            action = policy.act(x, True)
        obs, reward, term, trunc, _ = envs.step(np.asarray(action) + start)
        total += float(reward[0])
        if term[0] or trunc[0]:
            returns.append(total)
            total = 0.0
            if state is not None:
                state[:] = 0.0
    envs.close()
    return returns


def curve_of(run: dict[str, Any], budget: int) -> list[float | None]:
    """Mean training-episode return per tenth of the budget (None where no episode ended)."""
    c = run.get("learning_curve") or {}
    steps, rets = np.asarray(c.get("env_steps", [])), np.asarray(c.get("return", []))
    edges = np.linspace(0, budget, CURVE_POINTS + 1)
    out: list[float | None] = []
    for lo, hi in zip(edges[:-1], edges[1:], strict=True):
        inside = (steps > lo) & (steps <= hi)
        out.append(float(rets[inside].mean()) if inside.any() else None)
    return out


def one_run(task: str, algo: str, steps: int | None, seed: int, episodes: int, backend: str | None) -> dict[str, Any]:
    cfg = config(algo, TASKS[task], steps, seed, backend)
    runtime_backend = make_backend(cfg)  # local or process: the Trainer is in this process either way
    run = run_runtime(cfg, backend=runtime_backend).to_dict()
    learner = runtime_backend.component("trainer").learner  # type: ignore[attr-defined]
    env_steps = run["counts"]["env_steps"]
    return {"task": task, "env": cfg.workload.env, "algo": algo, "seed": seed, "env_steps": env_steps,
            "wall_s": run["wall_s"], "env_steps_per_s": env_steps / run["wall_s"], "updates": run["counts"]["updates"],
            "final_return": run.get("final_mean_return"), "backend": run["runtime"]["backend"],
            "eval_return": float(np.mean(greedy_returns(algo, cfg, learner, episodes, seed))),
            "curve": curve_of(run, env_steps), "curve_steps": [round(env_steps * (i + 1) / CURVE_POINTS)
                                                                for i in range(CURVE_POINTS)]}


def print_table(rows: list[dict[str, Any]]) -> None:
    print(f"\n{'task':9s} {'algo':5s} {'seed':>4s} {'env_steps':>9s} {'wall_s':>7s} {'steps/s':>8s} "
          f"{'train_ret':>9s} {'eval_ret':>8s}")
    for r in rows:
        final = "-" if r["final_return"] is None else f"{r['final_return']:.2f}"
        print(f"{r['task']:9s} {r['algo']:5s} {r['seed']:4d} {r['env_steps']:9,d} {r['wall_s']:7.1f} "
              f"{r['env_steps_per_s']:8,.0f} {final:>9s} {r['eval_return']:8.2f}")
    for task in dict.fromkeys(r["task"] for r in rows):
        pairs = [(a, b) for a in rows for b in rows if a["task"] == b["task"] == task and a["seed"] == b["seed"]
                 and a["algo"] == "r2d2" and b["algo"] == "dqn"]
        if pairs:
            gap = np.mean([a["eval_return"] - b["eval_return"] for a, b in pairs])
            speed = np.mean([a["env_steps_per_s"] / b["env_steps_per_s"] for a, b in pairs])
            print(f"{task}: r2d2 - dqn eval return {gap:+.2f} (mean of {len(pairs)} seed pairs); "
                  f"env-steps/s ratio r2d2/dqn {speed:.2f}")


def plot(rows: list[dict[str, Any]], path: Path) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib not installed: no chart", file=sys.stderr)
        return
    tasks = list(dict.fromkeys(r["task"] for r in rows))
    fig, axes = plt.subplots(1, len(tasks), figsize=(5.5 * len(tasks), 4), squeeze=False)
    for ax, task in zip(axes[0], tasks, strict=True):
        for r in (r for r in rows if r["task"] == task):
            points = [(s, v) for s, v in zip(r["curve_steps"], r["curve"], strict=True) if v is not None]
            if points:
                ax.plot(*zip(*points, strict=True), marker="o", label=f"{r['algo']} seed {r['seed']}",
                        color="C0" if r["algo"] == "r2d2" else "C1")
        ax.set_title(f"{task}: {TASKS[task]}", fontsize=9)
        ax.set_xlabel("env steps")
        ax.set_ylabel("training return (mean per tenth)")
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    print(f"wrote {path}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", nargs="+", choices=sorted(TASKS), default=sorted(TASKS))
    parser.add_argument("--algos", nargs="+", choices=ALGOS, default=list(ALGOS))
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--steps", type=int, default=None, help="env-step budget of every run (default: the presets')")
    parser.add_argument("--eval-episodes", type=int, default=10)
    parser.add_argument("--backend", choices=["local", "process"], default=None, help="default: the presets' (auto)")
    parser.add_argument("--out", default="runs/r2d2_memory", help="writes OUT.json and OUT.png")
    args = parser.parse_args()
    torch.set_num_threads(1)
    rows = []
    for task in args.tasks:
        for seed in args.seeds:
            for algo in args.algos:  # the pair in turn, the same minute
                rows.append(one_run(task, algo, args.steps, seed, args.eval_episodes, args.backend))
                r = rows[-1]
                print(f"{task} {algo} seed {seed}: eval {r['eval_return']:.2f}, {r['env_steps_per_s']:,.0f} env-steps/s",
                      flush=True)
    print_table(rows)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps({"args": vars(args), "rows": rows}, indent=1))
    print(f"wrote {out.with_suffix('.json')}")
    plot(rows, out.with_suffix(".png"))


if __name__ == "__main__":
    main()
