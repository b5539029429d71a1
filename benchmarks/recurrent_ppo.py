"""Recurrent PPO on CartPole without velocities: janus vs sb3-contrib's RecurrentPPO, and recurrent APPO.

Per seed, in turn (paired: the same minute of a shared machine for every side):

* ``janus``: ``janus train --env janus/CartPoleNoVel-v1`` alone (ppo, its memory preset: the RL Zoo's
  ``ppo_lstm`` CartPoleNoVel-v1 values), ``--steps`` env steps, no periodic evaluation; then 10 greedy
  episodes (``janus.evaluate``).
* ``sb3``: sb3-contrib's ``RecurrentPPO`` built by rl_zoo3's ``ExperimentManager`` from ``ppo_lstm.yml``'s
  ``CartPoleNoVel-v1`` (its VecNormalize, schedules and network), ``--steps`` env steps; then 10 greedy
  episodes carrying the LSTM state (``predict(obs, state, episode_start)``), the VecNormalize statistics
  frozen. Run in a child process of this script (``--sb3_child``).
* ``janus-ff``: the same janus run without the recurrent core (``--recurrent ""``): it should fail, the
  task needs memory.
* ``ppo-target`` and ``appo-target``: recurrent PPO and recurrent APPO (each its memory preset) with an
  evaluation every ``--eval_interval_steps`` and ``--target_return 475``: env steps and seconds to solve,
  and env-steps/s (the run's running time).

env-steps/s is env steps over the training time (janus: the run's running time, start-up excluded;
sb3: ``learn``'s time, model and env construction excluded). Prints a table (medians over seeds) and
writes JSON (``--json``). Targets (issue 49): janus >= 1.5x RecurrentPPO's env-steps/s, return >= 475 at
100k steps (median of 5 seeds); APPO >= 2x recurrent PPO's env-steps/s at return >= 475.

    .venv/bin/pip install sb3-contrib==2.9.2 rl_zoo3==2.9.2    # the sb3 side's peers (SB3 2.9.2 with them)
    .venv/bin/python benchmarks/recurrent_ppo.py --seeds 0 1 2 3 4 --json runs/recurrent_ppo.json
    .venv/bin/python benchmarks/recurrent_ppo.py --seeds 0 --steps 20000    # a smoke run
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ENV = "janus/CartPoleNoVel-v1"
ZOO_ENV = "CartPoleNoVel-v1"
EVAL_EPISODES = 10
SIDES = ("janus", "sb3", "janus-ff", "ppo-target", "appo-target")


def janus_run(out: Path, seed: int, steps: int, *extra: str) -> dict[str, Any]:
    """One ``janus train`` in a child process; its results.json's run and 10 greedy episodes."""
    cmd = [sys.executable, "-m", "janus.cli", "train", "--env", ENV, "--seed", str(seed),
           "--total_env_steps", str(steps), "--out", str(out), "--force", *extra]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=3600)
    if proc.returncode:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{proc.stderr[-3000:]}")
    run = json.loads((out / "results.json").read_text())["runs"][0]
    import janus

    result = janus.evaluate(out, episodes=EVAL_EPISODES, seed=10_000)
    return {"env_steps": run["counts"]["env_steps"], "env_steps_per_s": run["env_steps_per_s"],
            "final_return": run["final_mean_return"], "eval_return": result.mean,
            "solved_at_env_steps": run.get("solved_at_env_steps"), "solved_at_s": run.get("solved_at_s")}


def sb3_run(seed: int, steps: int) -> dict[str, Any]:
    """This script with ``--sb3_child`` in a child process: its one JSON line."""
    cmd = [sys.executable, __file__, "--sb3_child", "--seeds", str(seed), "--steps", str(steps)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=3600)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("SB3 ")]
    if proc.returncode or not lines:
        raise SystemExit(f"the sb3 child failed:\n{proc.stderr[-3000:]}")
    return dict(json.loads(lines[-1][4:]))


def sb3_child(seed: int, steps: int) -> None:
    """RecurrentPPO with the Zoo's ppo_lstm CartPoleNoVel-v1 values: train, then greedy episodes with state."""
    import numpy as np
    import torch
    from rl_zoo3.exp_manager import ExperimentManager

    torch.set_num_threads(1)  # as the Zoo's train.py does on CPU (janus's workers and learner: one thread each)
    with tempfile.TemporaryDirectory() as tmp:
        manager = ExperimentManager(argparse.Namespace(), "ppo_lstm", ZOO_ENV, str(Path(tmp) / "logs"),
                                    eval_freq=-1, seed=seed, verbose=0, n_timesteps=steps, device="cpu")
        setup = manager.setup_experiment()
        assert setup is not None
        model, _ = setup
        started = time.perf_counter()
        model.learn(steps)
        learn_s = time.perf_counter() - started
        venv = model.get_env()
        venv.training, venv.norm_reward = False, False  # frozen statistics, real rewards
        venv.seed(10_000)
        obs, state = venv.reset(), None
        starts = np.ones((venv.num_envs,), dtype=bool)
        returns, totals = [], np.zeros(venv.num_envs)
        while len(returns) < EVAL_EPISODES:
            action, state = model.predict(obs, state=state, episode_start=starts, deterministic=True)
            obs, _, done, _ = venv.step(action)
            totals += venv.get_original_reward()
            starts = done
            for i in np.flatnonzero(done):
                returns.append(float(totals[i]))
                totals[i] = 0.0
        last = [float(e["r"]) for e in (model.ep_info_buffer or [])][-20:]  # as janus: the last 20 training episodes
        final = statistics.fmean(last) if last else float("nan")
        print("SB3 " + json.dumps({"env_steps": int(model.num_timesteps), "env_steps_per_s": model.num_timesteps / learn_s,
                                   "final_return": final, "eval_return": statistics.fmean(returns[:EVAL_EPISODES])}),
              flush=True)


def median(rows: list[dict[str, Any]], key: str) -> float | None:
    values = [r[key] for r in rows if r.get(key) is not None]
    return statistics.median(values) if values else None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    ap.add_argument("--steps", type=int, default=100_000, help="env steps of the janus, sb3 and janus-ff runs")
    ap.add_argument("--target_cap", type=int, default=200_000, help="env steps the *-target runs may take at most")
    ap.add_argument("--eval_interval_steps", type=int, default=10_000)
    ap.add_argument("--sides", nargs="+", default=list(SIDES), choices=SIDES)
    ap.add_argument("--json", default="", help="write the rows and medians here")
    ap.add_argument("--sb3_child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.sb3_child:
        sb3_child(args.seeds[0], args.steps)
        return
    target = ["--eval_interval_steps", str(args.eval_interval_steps), "--target_return", "475"]
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        for seed in args.seeds:
            for side in args.sides:
                out = Path(tmp) / f"{side}-{seed}"
                if side == "sb3":
                    row = sb3_run(seed, args.steps)
                elif side == "janus":
                    row = janus_run(out, seed, args.steps)
                elif side == "janus-ff":
                    row = janus_run(out, seed, args.steps, "--recurrent", "")
                elif side == "ppo-target":
                    row = janus_run(out, seed, args.target_cap, *target)
                else:
                    row = janus_run(out, seed, args.target_cap, "--algo", "appo", *target)
                rows.append({"side": side, "seed": seed, **row})
                print(json.dumps(rows[-1]), flush=True)
    print(f"\n{'side':<12} {'env-steps/s':>12} {'eval return':>12} {'final return':>13} {'solved at steps':>16} "
          f"{'solved at s':>12}   (medians over seeds {args.seeds})")
    medians: dict[str, dict[str, float | None]] = {}
    for side in args.sides:
        mine = [r for r in rows if r["side"] == side]
        medians[side] = {k: median(mine, k) for k in ("env_steps_per_s", "eval_return", "final_return",
                                                      "solved_at_env_steps", "solved_at_s")}
        m = medians[side]
        print(f"{side:<12} " + " ".join(f"{'-' if m[k] is None else format(m[k], ',.0f'):>{w}}" for k, w in (
            ("env_steps_per_s", 12), ("eval_return", 12), ("final_return", 13), ("solved_at_env_steps", 16),
            ("solved_at_s", 12))))
    ratios = {}
    for a, b, name in (("janus", "sb3", "janus / sb3 env-steps/s"), ("appo-target", "ppo-target", "appo / ppo env-steps/s")):
        pairs = [(x["env_steps_per_s"], y["env_steps_per_s"]) for x in rows if x["side"] == a
                 for y in rows if y["side"] == b and y["seed"] == x["seed"]]
        if pairs:
            ratios[name] = statistics.median(x / y for x, y in pairs)
            print(f"{name} (median of paired ratios): {ratios[name]:.2f}x")
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps({"rows": rows, "medians": medians, "ratios": ratios,
                                               "steps": args.steps, "seeds": args.seeds}, indent=1))


if __name__ == "__main__":
    main()
