"""SB3 with the RL Zoo's hyperparameters until a greedy evaluation reaches a threshold (one run, one process).

Started by benchmarks/time_to_solve.py in a fresh process (never imported by it):

    .venv/bin/python benchmarks/tts_sb3.py --algo ppo --env CartPole-v1 --threshold 475 \
        --eval_interval_steps 5000 --eval_episodes 10 --cap_steps 200000 --seed 0

Training runs for the Zoo's ``n_timesteps`` (so its ``lin_`` schedules are the Zoo's) and stops
at ``--cap_steps`` if that comes first. The model, its environments and their wrappers (VecNormalize, frame stacking, Atari wrappers,
schedules) are the RL Zoo's: rl_zoo3's ``ExperimentManager`` builds them from ``hyperparams/ALGO.yml``
at ``--zoo_entry`` (default: the env id). The evaluator is SB3's ``EvalCallback`` (greedy, ``--eval_episodes``
episodes every ``--eval_interval_steps`` env steps, VecNormalize statistics synced) with its eval
env reseeded before each evaluation, so every evaluation plays the same env seeds, as janus's does.
Each evaluation prints ``TTS_EVAL {json}``; the first one at or over the threshold prints
``TTS_SOLVED {json}`` and stops training. The parent takes the time when it reads that line.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

EVAL_MARK = "TTS_EVAL "
SOLVED_MARK = "TTS_SOLVED "
EVAL_SEED = 10_000  # the eval env's seed before each evaluation (the training env gets --seed)


def zoo_hyperparams(algo: str, entry: str) -> dict[str, Any]:
    """rl_zoo3's ``hyperparams/ALGO.yml`` at ``entry`` (yaml anchors resolved)."""
    import rl_zoo3
    import yaml

    path = Path(rl_zoo3.__file__).parent / "hyperparams" / f"{algo}.yml"
    table = yaml.safe_load(path.read_text())
    if entry not in table:
        raise SystemExit(f"rl_zoo3 {rl_zoo3.__version__}: no {entry!r} in {path.name}")
    return dict(table[entry])


def make_eval_callback(eval_env: Any, threshold: float, interval_calls: int, episodes: int, cap_steps: int) -> Any:
    """SB3's EvalCallback that reseeds its env before each evaluation and stops at ``threshold``
    (or at ``cap_steps`` env steps)."""
    from stable_baselines3.common.callbacks import EvalCallback

    class SeededThresholdEval(EvalCallback):  # type: ignore[misc]
        def _on_step(self) -> bool:
            due = self.eval_freq > 0 and self.n_calls % self.eval_freq == 0
            if due:
                self.eval_env.seed(EVAL_SEED)  # the next reset of every eval env: the same seeds each time
            keep_going = super()._on_step()
            if self.num_timesteps >= cap_steps:  # the suite's cap (the Zoo's n_timesteps keeps the schedules)
                return False
            if due:
                record = {"env_steps": int(self.num_timesteps), "mean_return": float(self.last_mean_reward)}
                print(EVAL_MARK + json.dumps(record), flush=True)
                if self.last_mean_reward >= threshold:
                    print(SOLVED_MARK + json.dumps(record), flush=True)
                    return False
            return bool(keep_going)

    return SeededThresholdEval(eval_env, n_eval_episodes=episodes, eval_freq=interval_calls, deterministic=True,
                               verbose=0, warn=False)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--algo", required=True, help="the Zoo's algorithm (its yml file): ppo, dqn, sac, ...")
    ap.add_argument("--env", required=True)
    ap.add_argument("--zoo_entry", default="", help="the yml key [default: --env]")
    ap.add_argument("--threshold", type=float, required=True)
    ap.add_argument("--eval_interval_steps", type=int, required=True)
    ap.add_argument("--eval_episodes", type=int, default=10)
    ap.add_argument("--cap_steps", type=int, required=True)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()

    import torch
    from rl_zoo3.exp_manager import ExperimentManager

    torch.set_num_threads(1)  # as the Zoo's train.py does on CPU
    hyperparams = zoo_hyperparams(args.algo, args.zoo_entry or args.env)
    with tempfile.TemporaryDirectory() as tmp:
        config = Path(tmp) / f"{args.algo}.yml"  # the entry under the env id the Zoo looks up
        config.write_text(json.dumps({args.env: hyperparams}))  # JSON is YAML
        manager = ExperimentManager(argparse.Namespace(), args.algo, args.env, str(Path(tmp) / "logs"),
                                    eval_freq=-1, seed=args.seed, verbose=0,
                                    config=str(config), device="cpu")
        setup = manager.setup_experiment()
        assert setup is not None
        model, _ = setup
        eval_env = manager.create_envs(1, eval_env=True)
        interval_calls = max(args.eval_interval_steps // model.n_envs, 1)  # one call = n_envs env steps
        callback = make_eval_callback(eval_env, args.threshold, interval_calls, args.eval_episodes, args.cap_steps)
        print("TTS_READY " + json.dumps({"n_envs": int(model.n_envs)}), flush=True)  # imports, envs, model built
        # the Zoo's n_timesteps: its schedules (lin_...) decay over that; the callback stops at the cap
        started = time.perf_counter()
        model.learn(manager.n_timesteps, callback=[*manager.callbacks, callback])
        learn_s = time.perf_counter() - started  # evaluations included
        print("TTS_END " + json.dumps({"env_steps": int(model.num_timesteps), "n_envs": int(model.n_envs),
                                       "learn_s": learn_s,
                                       "hyperparams": {k: str(v) for k, v in hyperparams.items()}}), flush=True)
    sys.stdout.flush()


if __name__ == "__main__":
    main()
