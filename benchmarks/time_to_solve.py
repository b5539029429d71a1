"""Time to solve (issue 48): seconds from the command to an agent at a return threshold, per system.

Systems, each in a fresh subprocess per run, at its best documented setting per task (benchmarks/tts_tasks.py):
- ``janus``: ``janus train --algo A --env E --target_return R --eval_interval_steps K --eval_episodes 10
  --total_env_steps CAP --seed S``; its Evaluator (greedy, 10 episodes, the same env seeds every time).
  Algorithm per task: CartPole-v1 and Acrobot-v1 ppo (a 1-seed pick, 100k steps, eval every 5k, busy
  machine: CartPole ppo 500 at 10k env steps, appo at most 289 and dqn at most 292 in 100k; Acrobot
  ppo -81 at 15k, appo -88 at 16k), Pendulum-v1 sac, Hopper-v5 ppo (its mujoco preset; SAC on this
  CPU does tens of env steps/s), LunarLander-v3 ppo, Pong ppo; ``--janus_algo`` overrides
  (``--janus_algo CartPole-v1=appo``).
- ``sb3``: SB3 with the RL Zoo's hyperparameters (rl_zoo3 2.9.2's yml; the entry per task in
  tts_tasks.py) built by rl_zoo3's ExperimentManager, evaluated by SB3's EvalCallback with the same
  episodes and interval (benchmarks/tts_sb3.py).
- ``cleanrl``: CleanRL's scripts at their defaults (``--env-id``, ``--seed``, ``--no-cuda`` only), run
  unmodified from a checkout (``--cleanrl_dir``) in ``.venv-cleanrl`` (``setup-cleanrl``). CleanRL has
  no evaluator: solved is the mean of the training return over the last 10 episodes (its stdout
  ``episodic_return`` lines, stamped by the parent on read) reaching the threshold. Their scripts
  leave torch's threads at its default (one per core); ``--cleanrl_threads 1`` (the default) sets
  ``OMP_NUM_THREADS=1`` for them, as SB3's Zoo (``torch.set_num_threads(1)`` on CPU) runs: measured on
  this 2-core machine while busy, ppo.py on CartPole did 1,244 env steps/s with 1 thread, 158 with the
  default (``--cleanrl_threads 0`` gives the default back).
- ``sf``: Sample Factory's APPO (benchmarks/sf_appo.py's setting, ``.venv-sf``) on classic control; no
  evaluator either: its training return, the mean of the last 10 episodes, looked at every 0.25 s.

The clock: the parent takes the time just before ``Popen`` and stamps the child's "solved" line when
it reads it (tts_runners.py); janus's own ``solved_at_s`` is kept beside it. A run that has not
solved by ``--cap_s`` seconds or the task's env-step cap is unsolved (the solved fraction). Seeds
interleave: seed 0 of every task and system, then seed 1, ...

    .venv/bin/python benchmarks/time_to_solve.py setup            # rl_zoo3 2.9.2, Box2D, MuJoCo into .venv
    python3 benchmarks/sf_appo.py setup                           # .venv-sf (Sample Factory)
    .venv/bin/python benchmarks/time_to_solve.py setup-cleanrl    # .venv-cleanrl (CleanRL's pins, CPU torch)
    .venv/bin/python benchmarks/time_to_solve.py --quick          # 1 seed, CartPole, every system, < 5 min
    .venv/bin/python benchmarks/time_to_solve.py --tasks CartPole-v1 Acrobot-v1 --seeds 5 --cap_s 300 \
        --out runs/tts.json --plot docs/time_to_solve.png
    .venv/bin/python benchmarks/time_to_solve.py --table runs/tts.json runs/tts_lunar.json [--plot docs/x.png]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the tts_* helpers beside this file

from tts_report import load_runs, plot, table
from tts_runners import CLEANRL_PYTHON, run_cleanrl, run_janus, run_sb3, run_sf, unavailable
from tts_tasks import QUICK_CAP_STEPS, SYSTEMS, TASKS, Task

ZOO_PIN = "rl_zoo3==2.9.2"  # SB3 2.9.2 with it; the Zoo's hyperparams/*.yml are the SB3 settings
# LunarLander (the Box2D wheel; gymnasium's box2d package imports pygame too), Hopper-v5 (MuJoCo),
# Pong under SB3 (its AtariWrapper resizes with cv2)
BENCH_EXTRAS = [ZOO_PIN, "box2d==2.3.10", "pygame==2.6.1", "mujoco>=3", "opencv-python-headless"]
TORCH_CPU = "torch==2.13.0+cpu"  # constraints.txt's version, CPU build (as sf_appo.py)
# CleanRL's pins (its requirements/requirements*.txt) where a cp311 wheel exists; torch: the CPU build above
# (theirs, 2.4.1, is the CUDA one). No wandb/moviepy/huggingface: used only with --track/--capture-video.
# pygame: theirs is 2.1.0 (no cp311 wheel), 2.1.3 is the first with one.
CLEANRL_PINS = ["gymnasium==0.29.1", "numpy==1.24.4", "tyro==0.5.10", "tensorboard==2.11.2", "box2d==2.3.10",
                "pygame==2.1.3", "mujoco==2.3.3", "imageio==2.28.1"]
DEFAULT_CLEANRL_DIR = Path("/work/cleanrl")
QUICK_CAP_S = 60.0


def setup() -> None:
    """Install the benchmark's own dependencies (wheels only) into this interpreter's environment."""
    subprocess.run([sys.executable, "-m", "pip", "install", "--only-binary=:all:", *BENCH_EXTRAS], check=True)


def setup_cleanrl(python: str = "python3") -> None:
    """Create ``.venv-cleanrl`` with CleanRL's pins over a CPU-only torch (wheels only)."""
    if not CLEANRL_PYTHON.exists():
        subprocess.run([python, "-m", "venv", str(CLEANRL_PYTHON.parent.parent)], check=True)
    pip = [str(CLEANRL_PYTHON), "-m", "pip", "install", "-q"]
    with tempfile.TemporaryDirectory() as tmp:
        constraints = Path(tmp) / "constraints.txt"
        constraints.write_text("\n".join([TORCH_CPU, *CLEANRL_PINS[:2]]) + "\n")
        index = os.environ.get("TORCH_INDEX_URL", "").strip()
        torch_from = ["--index-url", index] if index else []
        subprocess.run(pip + ["-c", str(constraints), *torch_from, "torch"], check=True)
        subprocess.run(pip + ["--only-binary=:all:", "-c", str(constraints), *CLEANRL_PINS], check=True)
    check = "import torch, gymnasium, numpy, tyro; print(torch.__version__, gymnasium.__version__, numpy.__version__)"
    out = subprocess.run([str(CLEANRL_PYTHON), "-c", check], check=True, capture_output=True, text=True).stdout
    print(f"{CLEANRL_PYTHON.parent.parent}: torch/gymnasium/numpy {out.strip()}")


def parse_algos(pairs: list[str]) -> dict[str, str]:
    """``TASK=ALGO`` pairs (``--janus_algo``) as a dict; an unknown task is an error."""
    algos = {}
    for pair in pairs:
        task, sep, algo = pair.partition("=")
        if not sep or task not in TASKS:
            raise SystemExit(f"--janus_algo {pair!r}: want TASK=ALGO with TASK one of {', '.join(TASKS)}")
        algos[task] = algo
    return algos


def run_one(task: Task, system: str, seed: int, cap_s: float, cap_steps: int, janus_algo: str,
            cleanrl_dir: Path, cleanrl_threads: int = 1) -> dict:
    """One run in a fresh subprocess, as its JSON record."""
    if system == "janus":
        return run_janus(task, seed, cap_s, cap_steps, janus_algo).to_json()
    if system == "sb3":
        return run_sb3(task, seed, cap_s, cap_steps).to_json()
    if system == "cleanrl":
        return run_cleanrl(task, seed, cap_s, cap_steps, cleanrl_dir, cleanrl_threads).to_json()
    return run_sf(task, seed, cap_s, cap_steps).to_json()


def run_suite(args: argparse.Namespace) -> list[dict]:
    """Seed 0 of every task and system, then seed 1, ...; the JSON is rewritten after every run."""
    algos = parse_algos(args.janus_algo)
    tasks = [TASKS[name] for name in args.tasks]
    skipped = {}
    for task in tasks:
        for system in args.systems:
            why = unavailable(task, system, args.cleanrl_dir)
            if why:
                skipped[f"{task.name} {system}"] = why
                print(f"skip {task.name} {system}: {why}", flush=True)
    meta = {"cleanrl_threads": args.cleanrl_threads, "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "host": platform.node(),
            "cpus": os.cpu_count(), "cap_s": args.cap_s, "seeds": args.seeds, "quick": args.quick,
            "skipped": skipped, "cap_steps": {t.name: args.cap_steps or t.cap_steps for t in tasks}}
    runs: list[dict] = []
    for seed in range(args.seeds):
        for task in tasks:
            for system in args.systems:
                if f"{task.name} {system}" in skipped:
                    continue
                record = run_one(task, system, seed, args.cap_s, args.cap_steps or task.cap_steps,
                                 algos.get(task.name, task.janus_algo), args.cleanrl_dir, args.cleanrl_threads)
                runs.append(record)
                shown = f"{record['time_s']:.1f} s, {record['env_steps']} env steps" if record["solved"] else "unsolved"
                print(f"{task.name} {system} seed {seed}: {shown} ({record['exit']}, wall {record['wall_s']:.1f} s)",
                      flush=True)
                if not record["solved"] and record["tail"]:
                    print("  its last lines: " + " | ".join(record["tail"][-5:]), flush=True)
                if args.out:
                    args.out.parent.mkdir(parents=True, exist_ok=True)
                    args.out.write_text(json.dumps({"meta": meta, "runs": runs}, indent=1))
    return runs


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    ap.add_argument("command", nargs="?", default="run", choices=["run", "setup", "setup-cleanrl"])
    ap.add_argument("--tasks", nargs="+", default=list(TASKS), choices=list(TASKS))
    ap.add_argument("--systems", nargs="+", default=list(SYSTEMS), choices=list(SYSTEMS))
    ap.add_argument("--seeds", type=int, default=5, help="seeds 0..N-1, interleaved [5]")
    ap.add_argument("--cap_s", type=float, default=600.0, help="seconds a run may take before it counts unsolved")
    ap.add_argument("--cap_steps", type=int, default=None, help="env steps a run may take [per task: tts_tasks.py]")
    ap.add_argument("--janus_algo", nargs="*", default=[], metavar="TASK=ALGO", help="janus's algorithm per task")
    ap.add_argument("--cleanrl_dir", type=Path, default=DEFAULT_CLEANRL_DIR, help="a CleanRL checkout")
    ap.add_argument("--cleanrl_threads", type=int, default=1,
                    help="OMP_NUM_THREADS for CleanRL's scripts (0: torch's default) [1: see the docstring]")
    ap.add_argument("--out", type=Path, default=Path("runs/tts.json"), help="the runs' JSON (rewritten per run)")
    ap.add_argument("--plot", type=Path, default=None, help="also write the plot (PNG) here")
    ap.add_argument("--table", type=Path, nargs="+", default=None,
                    help="no runs: print the table (and --plot) from these JSON files combined")
    ap.add_argument("--quick", action="store_true",
                    help=f"1 seed, CartPole-v1, {QUICK_CAP_STEPS:,} env steps, {QUICK_CAP_S:.0f} s cap, every system")
    args = ap.parse_args()
    if args.command == "setup":
        setup()
        return
    if args.command == "setup-cleanrl":
        setup_cleanrl()
        return
    if args.table:
        runs = load_runs(args.table)
    else:
        if args.quick:
            args.tasks, args.seeds, args.cap_s = ["CartPole-v1"], 1, min(args.cap_s, QUICK_CAP_S)
            args.cap_steps = args.cap_steps or QUICK_CAP_STEPS
        if args.seeds < 1 or args.cap_s <= 0:
            raise SystemExit("--seeds must be >= 1 and --cap_s > 0")
        runs = run_suite(args)
    print(table(runs))
    if args.plot:
        plot(runs, args.plot)
        print(f"plot: {args.plot}")


if __name__ == "__main__":
    main()
