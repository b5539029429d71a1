"""Sample Factory's APPO on CartPole-v1 as a peer of janus: env steps/s and final return (run on demand).

Sample Factory 2.x pins ``gymnasium<1.0`` and ``numpy<2``, which janus's own environment cannot
hold, so it runs in a virtualenv of its own, ``.venv-sf/`` (gitignored), made by ``setup``:

    python3 benchmarks/sf_appo.py setup                     # once: .venv-sf with sample-factory + CPU torch
    python3 benchmarks/sf_appo.py run --steps 200000 --seed 0 [--json runs/sf.json]

``train --threshold R`` (benchmarks/time_to_solve.py starts it) also watches the training return:
every 0.25 s the mean of the last ``--window`` episodes' returns SF recorded; the first time it is
at or over R it prints ``SF_SOLVED {json}`` and stops training. ``--env`` picks a Gymnasium id
(classic control: the same flags).

``run`` needs no janus and no venv of its own: it starts ``.venv-sf/bin/python`` on this file's
``train`` command (SF's trainer in a fresh process, its own experiment folder in a temporary
directory) and prints one JSON object: env_steps, wall_s, env_steps_per_s, final_return (the mean
of the last episodes' returns SF recorded in its TensorBoard summaries, ``--window`` of them),
episodes, and the settings used.

Torch: the CPU build is installed first, pinned by a constraints file (``torch==2.13.0+cpu``, the
version constraints.txt pins), so resolving sample-factory can never pull torch's CUDA build and its
3 GB of nvidia-* packages. Where pip's configuration offers no CPU build (a find-links folder or an
index), set ``TORCH_INDEX_URL`` to an index that has it, as for ``make setup``; pip then fails
rather than falls back to CUDA.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
VENV = ROOT / ".venv-sf"
SF_VERSION = "2.1.1"  # the last release (2023): gymnasium<1.0, numpy<2, torch>=1.9,<3
TORCH_PIN = "torch==2.13.0+cpu"  # constraints.txt's version, CPU build only
ENV_ID = "CartPole-v1"
MARK = "SF_APPO_RESULT "  # the line of ``train``'s stdout that carries its JSON
SOLVED_MARK = "SF_SOLVED "  # train --threshold: the line printed when the training return reaches it
WATCH_S = 0.25  # train --threshold: seconds between looks at the training return


def venv_python() -> Path:
    return VENV / "bin" / "python"


def setup(python: str = sys.executable) -> None:
    """Create ``.venv-sf`` and install sample-factory with its own pins over a CPU-only torch."""
    if not venv_python().exists():
        subprocess.run([python, "-m", "venv", str(VENV)], check=True)
    pip = [str(venv_python()), "-m", "pip", "install", "-q"]
    with tempfile.TemporaryDirectory() as tmp:
        constraints = Path(tmp) / "constraints.txt"
        constraints.write_text(TORCH_PIN + "\n")  # every install below: this torch or none
        index = os.environ.get("TORCH_INDEX_URL", "").strip()
        torch_from = ["--index-url", index] if index else []
        subprocess.run(pip + ["-c", str(constraints), *torch_from, "torch"], check=True)
        subprocess.run(pip + ["-c", str(constraints), f"sample-factory=={SF_VERSION}"], check=True)
    check = "import sample_factory, torch, gymnasium, numpy; print(torch.__version__, gymnasium.__version__, numpy.__version__)"
    out = subprocess.run([str(venv_python()), "-c", check], check=True, capture_output=True, text=True).stdout
    print(f"{VENV}: sample-factory {SF_VERSION}, torch/gymnasium/numpy {out.strip()}")


# SF's documented CartPole-v1 command (sf_examples/train_gym_env.py), for this 2-core machine:
# 2 rollout workers and 1 policy worker instead of one per core, on the CPU, no checkpoints mid-run.
SF_FLAGS = ["--algo=APPO", "--use_rnn=False", "--recurrence=1", "--with_vtrace=False", "--batch_size=512",
            "--reward_scale=0.1", "--num_envs_per_worker=20", "--num_workers=2", "--policy_workers_per_policy=1",
            "--device=cpu", "--with_wandb=False", "--save_every_sec=100000", "--experiment_summaries_interval=10"]


def make_cartpole(full_env_name, cfg=None, env_config=None, render_mode=None):
    """SF's env factory signature (``register_env``): a plain Gymnasium env."""
    import gymnasium as gym

    return gym.make(full_env_name, render_mode=render_mode)


def watch_return(runner, threshold: float, window: int) -> None:
    """Every ``WATCH_S``: the mean of the last ``window`` training returns; at ``threshold``, print and stop."""
    from signal_slot.signal_slot import Timer

    def look() -> None:
        returns = list(runner.policy_avg_stats.get("reward", [[]])[0])
        if runner.stopped or len(returns) < window:
            return
        mean = sum(returns[-window:]) / window
        if mean >= threshold:
            record = {"env_steps": int(sum(runner.env_steps.values())), "mean_return": mean, "episodes": window}
            print(SOLVED_MARK + json.dumps(record), flush=True)
            runner._stop_training()

    runner.tts_look = look  # a slot is a name on an EventLoopObject (signal_slot), not a plain function
    timer = Timer(runner.event_loop, WATCH_S)
    timer.timeout.connect(runner, "tts_look")
    runner.timers.append(timer)


def train(steps: int, seed: int, window: int, env_id: str = ENV_ID, threshold: float | None = None) -> dict:
    """Train SF's APPO in this process (``.venv-sf``'s Python) and return the measurements; with a
    ``threshold``, stop when the training return's mean over ``window`` episodes reaches it."""
    from sample_factory.cfg.arguments import parse_full_cfg, parse_sf_args
    from sample_factory.envs.env_utils import register_env
    from sample_factory.train import make_runner

    register_env(env_id, make_cartpole)
    with tempfile.TemporaryDirectory() as train_dir:
        argv = [f"--env={env_id}", f"--train_for_env_steps={steps}", f"--seed={seed}", f"--train_dir={train_dir}",
                "--experiment=sf_appo", *SF_FLAGS]
        parser, _ = parse_sf_args(argv=argv)
        cfg = parse_full_cfg(parser, argv)
        t0 = time.perf_counter()
        cfg, runner = make_runner(cfg)
        status = runner.init()
        if threshold is not None:
            watch_return(runner, threshold, window)
        t1 = time.perf_counter()
        if status == 0:  # ExperimentStatus.SUCCESS
            status = runner.run()
        wall = time.perf_counter() - t1
    returns = list(runner.policy_avg_stats.get("reward", [[]])[0])  # per-episode returns, most recent last
    env_steps = int(sum(runner.env_steps.values()))
    last = returns[-window:]
    return {"library": "sample-factory", "algo": "APPO", "env": env_id, "seed": seed, "status": int(status),
            "env_steps": env_steps, "wall_s": wall, "startup_s": t1 - t0, "env_steps_per_s": env_steps / wall,
            "final_return": sum(last) / len(last) if last else None, "episodes_averaged": len(last),
            "flags": SF_FLAGS}


def run(steps: int, seed: int, window: int) -> dict:
    """Start ``.venv-sf``'s Python on ``train`` and return its JSON line."""
    if not venv_python().exists():
        raise SystemExit(f"{VENV} does not exist: run `python3 {Path(__file__).name} setup` first")
    cmd = [str(venv_python()), __file__, "train", f"--steps={steps}", f"--seed={seed}", f"--window={window}"]
    out = subprocess.run(cmd, check=True, stdout=subprocess.PIPE, text=True, cwd=tempfile.gettempdir()).stdout
    lines = [line for line in out.splitlines() if line.startswith(MARK)]
    if not lines:
        raise SystemExit(f"sample-factory printed no result line; its output ended:\n{out[-3000:]}")
    return json.loads(lines[-1][len(MARK):])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("command", choices=["setup", "run", "train"], help="train: inside .venv-sf (run starts it)")
    ap.add_argument("--steps", type=int, default=200_000, help="env steps to train for")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--window", type=int, default=20, help="last episodes averaged for final_return")
    ap.add_argument("--json", type=Path, default=None, help="run: also write the result here")
    ap.add_argument("--env", default=ENV_ID, help="train: the Gymnasium id (classic control)")
    ap.add_argument("--threshold", type=float, default=None,
                    help="train: stop when the mean training return of the last --window episodes reaches it")
    args = ap.parse_args()
    if args.command == "setup":
        setup()
    elif args.command == "train":
        result = train(args.steps, args.seed, args.window, args.env, args.threshold)
        sys.stdout.flush()
        print(MARK + json.dumps(result))  # SF logs to stdout too: `run` reads the marked line
    else:
        result = run(args.steps, args.seed, args.window)
        print(json.dumps(result, indent=2))
        if args.json:
            args.json.write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
