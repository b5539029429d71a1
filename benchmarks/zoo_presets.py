"""janus's family presets (``--preset auto``) beside Stable-Baselines3 with the RL Zoo's presets (issue 39).

Two cells, each library at its own published settings on the same env-step budget:

- ``dqn``: DQN on ``ALE/Pong-v5``. janus: ``janus.train("dqn", env=..., preset="auto")``, the atari
  preset (RL Zoo dqn.yml ``atari``, :mod:`janus.algorithms.presets`) with janus's own preprocessing.
  SB3: ``DQN("CnnPolicy")`` with dqn.yml ``atari``'s values on SB3's ``AtariWrapper`` (over the
  game at ``frameskip=1``: the wrapper skips 4) and a 4-frame ``VecFrameStack``, as the Zoo runs it.
  Both explore over the preset's first 1M env steps (the Zoo's 0.1 x 1e7, so SB3 gets
  ``exploration_fraction = 1e6 / budget``) and learn from env step 100k (``learning_starts``): a
  short run mostly explores, so env-steps/s is the figure; the return is reported as it is.
  The replay (1M at the preset) is capped at the budget on both sides: a replay as large as the run
  never evicts, so the run is the same, and SB3 does not reserve 56 GB of obs/next_obs stacks.
- ``ppo``: PPO on ``Hopper-v5`` (MuJoCo; ``setup`` installs it). janus: the mujoco preset (ppo.yml
  ``Ant-v3`` = mujoco-defaults). SB3: ``PPO("MlpPolicy")`` with ppo.yml's ``mujoco-defaults``
  (``--ppo-entry defaults``: the values janus's preset cites, SB3's PPO defaults with ``normalize``)
  or the Zoo's tuned ``Hopper-v3`` entry (``--ppo-entry tuned``), under ``VecNormalize`` as the
  Zoo's ``normalize: true``. janus gets ``--normalize_obs``/``--normalize_reward`` when
  ``janus train`` has them (the output says which).

Per run: env-steps/s (env steps / training wall time, env creation and start-up excluded), the
mean return of a deterministic evaluation after training (janus: ``janus.load_policy`` +
``janus.policy.episode_returns``; SB3: ``evaluate_policy`` on a Monitor-wrapped env: whole games,
raw rewards). Seeds interleave (janus s0, sb3 s0, janus s1, ...); the summary gives medians with
the range over seeds and the median of the per-seed janus/SB3 env-steps/s ratios. One torch thread.

    PYTHONPATH=src .venv/bin/python benchmarks/zoo_presets.py setup    # mujoco + SB3's AtariWrapper's OpenCV, wheels only
    PYTHONPATH=src .venv/bin/python benchmarks/zoo_presets.py --quick  # smoke test, both cells, ~3 min
    PYTHONPATH=src .venv/bin/python benchmarks/zoo_presets.py --cells ppo --seeds 3 --out runs/zoo_ppo.json
    PYTHONPATH=src .venv/bin/python benchmarks/zoo_presets.py --cells dqn --steps 150000 --out runs/zoo_dqn.json
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import io
import json
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
ENVS = {"dqn": "ALE/Pong-v5", "ppo": "Hopper-v5"}
STEPS = {"dqn": 150_000, "ppo": 100_000}  # dqn: 50k env steps past learning_starts (12.5k updates)
QUICK_STEPS = {"dqn": 2_000, "ppo": 4_096}
QUICK_LEARNING_STARTS = 1_000  # --quick, both sides: a few DQN updates within the tiny budget
EVAL_EPISODES = {"dqn": 3, "ppo": 10}  # a Pong game takes ~10-20 s to play
QUICK_EVAL_EPISODES = {"dqn": 1, "ppo": 2}
EXPLORATION_STEPS = 1_000_000  # dqn.yml atari: exploration_fraction 0.1 x n_timesteps 1e7
OPENCV = "opencv-python-headless"  # SB3's AtariWrapper (WarpFrame) resizes with cv2

# ppo.yml (rl-baselines3-zoo commit 00128b5d), as SB3 keywords; `normalize: true` in both.
ZOO_PPO = {
    # Ant-v3: &mujoco-defaults: SB3's PPO defaults (n_steps 2048, batch 64, 10 epochs, lr 3e-4, ...)
    "defaults": {},
    # Hopper-v3 (tuned)
    "tuned": {"n_steps": 512, "batch_size": 32, "gamma": 0.999, "learning_rate": 9.80828e-05, "ent_coef": 0.00229519,
              "clip_range": 0.2, "n_epochs": 5, "gae_lambda": 0.99, "max_grad_norm": 0.7, "vf_coef": 0.835671,
              "policy_kwargs": {"log_std_init": -2, "ortho_init": False, "activation_fn": "relu",
                                "net_arch": {"pi": [256, 256], "vf": [256, 256]}}},
}


def setup() -> None:
    """Install the ``mujoco`` extra's requirements (pyproject.toml) and OpenCV into this interpreter's
    environment, wheels only; the janus install itself is left as it is (no ``pip install -e``)."""
    extra = re.search(r"^mujoco = (\[.*?\])", (ROOT / "pyproject.toml").read_text(), re.MULTILINE)  # no tomllib on 3.10
    if extra is None:
        raise SystemExit("setup: pyproject.toml has no `mujoco = [...]` extra")
    wanted = [*ast.literal_eval(extra.group(1)), OPENCV]
    subprocess.run([sys.executable, "-m", "pip", "install", "--only-binary=:all:", *wanted], check=True)
    check = "import gymnasium as g, mujoco, cv2; e = g.make('Hopper-v5'); e.reset(seed=0); print(mujoco.__version__)"
    out = subprocess.run([sys.executable, "-c", check], check=True, capture_output=True, text=True).stdout
    print(f"setup: mujoco {out.strip()} and {OPENCV} installed; Hopper-v5 makes and resets")


def janus_train_flags() -> set[str]:
    """The flags of ``janus train`` (without the dashes), as ``janus train --help`` lists them."""
    from janus.cli import build_parser

    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return {o[2:] for a in sub.choices["train"]._actions for o in a.option_strings if o.startswith("--")}


def janus_normalize_flags() -> dict[str, bool]:
    """``normalize_obs``/``normalize_reward`` True where ``janus train`` has them (the Zoo's ``normalize: true``)."""
    flags = janus_train_flags()
    return {name: True for name in ("normalize_obs", "normalize_reward") if name in flags}


def run_janus(cell: str, env: str, steps: int, seed: int, quick: bool, episodes: int) -> dict[str, Any]:
    import janus
    from janus.policy import episode_returns

    flags: dict[str, Any] = {"total_env_steps": steps, "seed": seed, "preset": "auto"}
    if cell == "dqn":
        flags["buffer_capacity"] = min(1_000_000, steps)
        if quick:
            flags["learning_starts"] = QUICK_LEARNING_STARTS
    else:
        flags.update(janus_normalize_flags())
    with tempfile.TemporaryDirectory(prefix="zoo-janus-") as out:
        console = io.StringIO()
        try:  # janus train's progress lines, kept out of the table (the preset line is read from them)
            with contextlib.redirect_stdout(console), contextlib.redirect_stderr(console):
                run = janus.train(cell, env=env, out=out, **flags)
        except BaseException:
            print(console.getvalue(), file=sys.stderr)
            raise
        preset = next((line.partition("janus: ")[2] for line in console.getvalue().splitlines()
                       if line.startswith("janus: preset:")), "?")
        result = run.result
        start = time.perf_counter()
        returns = episode_returns(run.policy, episodes, seed=10_000 + seed)
        eval_s = time.perf_counter() - start
    env_steps = int(result.counts["transitions_produced"])
    return {"env_steps": env_steps, "wall_s": result.wall_s, "steps_per_s": env_steps / result.wall_s,
            "eval_return": statistics.fmean(returns), "eval_returns": returns, "eval_s": eval_s,
            "train_return": result.final_mean_return, "updates": int(result.counts["updates"]),
            "settings": f"{preset}; {', '.join(f'{k}={v}' for k, v in flags.items() if k not in ('seed', 'preset'))}"}


def sb3_dqn(env: str, steps: int, seed: int, quick: bool) -> tuple[Any, Any, str]:
    """SB3 DQN with dqn.yml ``atari`` (AtariWrapper, frame_stack 4, CnnPolicy), and its eval env."""
    from stable_baselines3 import DQN
    from stable_baselines3.common.env_util import make_atari_env
    from stable_baselines3.common.vec_env import VecFrameStack

    def vec(s: int) -> Any:  # Monitor inside the AtariWrapper: whole games, raw rewards in info["episode"]
        return VecFrameStack(make_atari_env(env, n_envs=1, seed=s, env_kwargs={"frameskip": 1}), n_stack=4)

    zoo: dict[str, Any] = {"buffer_size": min(1_000_000, steps), "learning_rate": 1e-4, "batch_size": 32,
                           "learning_starts": QUICK_LEARNING_STARTS if quick else 100_000,
                           "target_update_interval": 10_000, "train_freq": 4, "gradient_steps": 1,
                           "exploration_fraction": EXPLORATION_STEPS / steps, "exploration_final_eps": 0.1}
    model = DQN("CnnPolicy", vec(seed), seed=seed, device="cpu", verbose=0, **zoo)
    return model, vec(10_000 + seed), "dqn.yml atari; " + ", ".join(f"{k}={v:g}" for k, v in zoo.items())


def sb3_ppo(env: str, seed: int, entry: str) -> tuple[Any, Any, str]:
    """SB3 PPO with ppo.yml's ``entry`` under VecNormalize (``normalize: true``), and its eval env."""
    from stable_baselines3 import PPO
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.vec_env import VecNormalize
    from torch import nn

    kwargs = json.loads(json.dumps(ZOO_PPO[entry]))  # a copy
    if "policy_kwargs" in kwargs:
        kwargs["policy_kwargs"]["activation_fn"] = {"relu": nn.ReLU, "tanh": nn.Tanh}[kwargs["policy_kwargs"]["activation_fn"]]
    gamma = kwargs.get("gamma", 0.99)
    venv = VecNormalize(make_vec_env(env, n_envs=1, seed=seed), gamma=gamma)
    model = PPO("MlpPolicy", venv, seed=seed, device="cpu", verbose=0, **kwargs)
    evaluation = VecNormalize(make_vec_env(env, n_envs=1, seed=10_000 + seed), training=False, norm_reward=False)
    name = {"defaults": "ppo.yml Ant-v3 (mujoco-defaults)", "tuned": "ppo.yml Hopper-v3 (tuned)"}[entry]
    values = ", ".join(f"{k}={v}" for k, v in ZOO_PPO[entry].items()) or "SB3's PPO defaults"
    return model, evaluation, f"{name}; VecNormalize; {values}"


def run_sb3(cell: str, env: str, steps: int, seed: int, quick: bool, episodes: int, entry: str) -> dict[str, Any]:
    import numpy as np
    from stable_baselines3.common.evaluation import evaluate_policy
    from stable_baselines3.common.logger import configure

    model, evaluation, settings = sb3_dqn(env, steps, seed, quick) if cell == "dqn" else sb3_ppo(env, seed, entry)
    with tempfile.TemporaryDirectory(prefix="sb3-log-") as log_dir:
        model.set_logger(configure(log_dir, []))  # else SB3 leaves an empty SB3-<time> folder in /tmp per run
        start = time.perf_counter()
        model.learn(total_timesteps=steps)
        wall = time.perf_counter() - start
    if cell == "ppo":  # the training statistics, frozen
        evaluation.obs_rms = model.get_env().obs_rms
    start = time.perf_counter()
    returns, _ = evaluate_policy(model, evaluation, n_eval_episodes=episodes, deterministic=True,
                                 return_episode_rewards=True)  # lists: each episode's return, length
    assert isinstance(returns, list)
    eval_s = time.perf_counter() - start
    evaluation.close()
    train = [info["r"] for info in model.ep_info_buffer][-20:]
    updates = model._n_updates * (model.n_steps * model.n_envs // model.batch_size if cell == "ppo" else 1)
    model.get_env().close()
    return {"env_steps": model.num_timesteps, "wall_s": wall, "steps_per_s": model.num_timesteps / wall,
            "eval_return": float(np.mean(returns)), "eval_returns": [float(r) for r in returns], "eval_s": eval_s,
            "train_return": float(np.mean(train)) if train else None, "updates": int(updates), "settings": settings}


def spread(values: list[float]) -> str:
    """``median (min-max)``, or the value alone for one seed."""
    med = statistics.median(values)
    return f"{med:,.1f}" if len(values) == 1 else f"{med:,.1f} ({min(values):,.1f}-{max(values):,.1f})"


def summarize(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Per cell: each library's median and range over seeds, and the per-seed janus/SB3 speed ratios."""
    out: dict[str, Any] = {}
    print(f"\n{'cell':4s}  {'lib':5s}  {'env':12s}  {'budget':>8s}  {'env-steps/s: median (range)':>28s}  "
          f"{'eval return: median (range)':>30s}  {'updates':>8s}")
    for cell in dict.fromkeys(r["cell"] for r in rows):
        by = {lib: {r["seed"]: r for r in rows if r["cell"] == cell and r["lib"] == lib} for lib in ("janus", "sb3")}
        cell_out: dict[str, Any] = {}
        for lib, runs in by.items():
            if not runs:
                continue
            speeds, evals = [r["steps_per_s"] for r in runs.values()], [r["eval_return"] for r in runs.values()]
            cell_out[lib] = {"steps_per_s_median": statistics.median(speeds), "steps_per_s": speeds,
                             "eval_return_median": statistics.median(evals), "eval_return": evals,
                             "settings": next(iter(runs.values()))["settings"]}
            first = next(iter(runs.values()))
            print(f"{cell:4s}  {lib:5s}  {first['env']:12s}  {first['budget']:8,d}  {spread(speeds):>28s}  "
                  f"{spread(evals):>30s}  {statistics.median(r['updates'] for r in runs.values()):8,.0f}")
        paired = [by["janus"][s]["steps_per_s"] / by["sb3"][s]["steps_per_s"] for s in by["janus"] if s in by["sb3"]]
        if paired:
            cell_out["speed_ratio_median"], cell_out["speed_ratio_per_seed"] = statistics.median(paired), paired
            print(f"{cell:4s}  janus/SB3 env-steps/s: {statistics.median(paired):.2f}x "
                  f"(per seed: {', '.join(f'{p:.2f}' for p in paired)})")
        out[cell] = cell_out
    for cell, o in out.items():
        for lib in ("janus", "sb3"):
            if lib in o:
                print(f"{cell} {lib} settings: {o[lib]['settings']}")
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("command", nargs="?", default="run", choices=("run", "setup"),
                        help="run the cells [default], or setup: install what the MuJoCo cell needs")
    parser.add_argument("--cells", nargs="+", default=["dqn", "ppo"], choices=tuple(ENVS))
    parser.add_argument("--steps", type=int, default=None, help=f"env-step budget per run [{STEPS}; --quick {QUICK_STEPS}]")
    parser.add_argument("--seeds", type=int, default=2, help="seeds 0..N-1, interleaved janus/SB3 [2]")
    parser.add_argument("--ppo-env", default=ENVS["ppo"], help=f"the MuJoCo task of the ppo cell [{ENVS['ppo']}]")
    parser.add_argument("--ppo-entry", default="defaults", choices=tuple(ZOO_PPO),
                        help="SB3's ppo.yml entry: defaults (mujoco-defaults, as janus's preset cites) or tuned (Hopper-v3)")
    parser.add_argument("--eval-episodes", type=int, default=None, help=f"deterministic episodes after training [{EVAL_EPISODES}]")
    parser.add_argument("--quick", action="store_true", help="smoke test: tiny budgets, learning_starts 1000 (not a benchmark)")
    parser.add_argument("--out", default=None, help="write rows and summary as JSON here")
    args = parser.parse_args()
    if args.command == "setup":
        setup()
        return
    import gymnasium as gym
    import stable_baselines3
    import torch

    torch.set_num_threads(1)
    torch.optim.Adam([torch.zeros(1, requires_grad=True)])  # torch._dynamo's one-time import, outside both timers
    label = "QUICK SMOKE TEST (tiny budgets, learning_starts 1000; not a benchmark)" if args.quick else "benchmark"
    print(f"zoo_presets: {label}; janus vs stable-baselines3 {stable_baselines3.__version__}, torch {torch.__version__}, "
          f"gymnasium {gym.__version__}, python {platform.python_version()}, {platform.node()}")
    if "ppo" in args.cells:
        norm = janus_normalize_flags()
        print(f"ppo: janus normalisation flags: {', '.join(norm) or 'none (janus train has no --normalize_obs yet)'}")
    envs = {**ENVS, "ppo": args.ppo_env}
    rows: list[dict[str, Any]] = []
    for cell in args.cells:
        steps = args.steps or (QUICK_STEPS if args.quick else STEPS)[cell]
        episodes = args.eval_episodes or (QUICK_EVAL_EPISODES if args.quick else EVAL_EPISODES)[cell]
        for seed in range(args.seeds):
            for lib in ("janus", "sb3"):  # interleaved: a slow drift of the machine falls on both
                if lib == "janus":
                    res = run_janus(cell, envs[cell], steps, seed, args.quick, episodes)
                else:
                    res = run_sb3(cell, envs[cell], steps, seed, args.quick, episodes, args.ppo_entry)
                rows.append({"cell": cell, "lib": lib, "seed": seed, "env": envs[cell], "budget": steps, **res})
                print(f"{cell} {lib:5s} seed {seed}: {res['steps_per_s']:,.0f} env-steps/s, {res['wall_s']:.1f} s, "
                      f"{res['updates']:,} updates, eval {res['eval_return']:.1f} ({episodes} episodes, "
                      f"{res['eval_s']:.0f} s)", flush=True)
    summary = summarize(rows)
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        with open(args.out, "w") as f:
            json.dump({"quick": args.quick, "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                       "machine": platform.node(), "rows": rows, "summary": summary}, f, indent=1)


if __name__ == "__main__":
    main()
