"""Start-up, training and tail of ``janus train`` from the user's chair (issue 48; run on demand, not a test).

    python benchmarks/startup.py                                  # ppo, dqn, appo on CartPole-v1, sac on Pendulum-v1
    python benchmarks/startup.py --algos ppo,appo --repeats 5 --total_env_steps 20000
    python benchmarks/startup.py --vs /work/main                  # this checkout against another, paired

Each run is the whole command, ``python -m janus.cli train --algo A --env E --total_env_steps N --seed 0``,
timed from just before its process starts to just after it is reaped. The command's own phases come
from the marks janus writes where ``JANUS_TIMELINE`` names a file (:mod:`janus.timeline`):

* **start-up**: command start -> a worker's first rollout begins (``first_env_step``), split into the
  interpreter and imports (-> ``command``), configuration (-> ``configured``), the run folder
  (-> ``run_folder``), building the components and starting the backend (-> ``backend_started``:
  torch models, replay, kernels' cache load, worker processes) and the first env step;
* **training**: ``first_env_step`` -> ``loop_end`` (the run's goal reached);
* **tail**: ``loop_end`` -> the process reaped: shut-down and final checkpoint (-> ``shut_down``),
  results, charts, best policy (-> ``results_written``) and the interpreter's exit.

"Warm" as issue 48 means it: every (algorithm, checkout) pair runs ``--warmup`` times unmeasured first
(the kernel cache filled, the OS file cache warm). Runs are interleaved: each repeat runs every
algorithm, and with ``--vs`` each algorithm in this checkout then in the other, so every ratio pairs two
runs taken moments apart. A checkout without the marks (janus before issue 48) reports its wall time only.
The table prints the median and range of each phase; ``--out`` writes every run as JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parents[1]
DEFAULT_ALGOS = {"ppo": "CartPole-v1", "dqn": "CartPole-v1", "sac": "Pendulum-v1", "appo": "CartPole-v1"}
# (phase, from mark, to mark); None: the process's start or its end as the benchmark sees them
PHASES = [
    ("imports", None, "command"), ("config", "command", "configured"), ("run folder", "configured", "run_folder"),
    ("build+backend", "run_folder", "backend_started"), ("first step", "backend_started", "first_env_step"),
    ("START-UP", None, "first_env_step"), ("TRAINING", "first_env_step", "loop_end"),
    ("shutdown", "loop_end", "shut_down"), ("results", "shut_down", "results_written"),
    ("exit", "results_written", None), ("TAIL", "loop_end", None), ("WALL", None, None),
]


def run_once(tree: Path, algo: str, env: str, steps: int, python: str) -> dict[str, float]:
    """One whole ``janus train`` in checkout ``tree``; its phases in seconds (``WALL`` always)."""
    with tempfile.TemporaryDirectory(prefix="janus-startup-") as tmp:
        marks_file = os.path.join(tmp, "timeline.jsonl")
        env_vars = {**os.environ, "JANUS_TIMELINE": marks_file, "PYTHONPATH": str(tree / "src")}
        cmd = [python, "-m", "janus.cli", "train", "--algo", algo, "--env", env, "--total_env_steps", str(steps),
               "--seed", "0", "--out", os.path.join(tmp, "run")]
        start = time.time()
        done = subprocess.run(cmd, env=env_vars, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                              check=False)
        end = time.time()
        if done.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd)} (in {tree}) exited {done.returncode}:\n{done.stderr[-2000:]}")
        marks: dict[str, float] = {}
        if os.path.exists(marks_file):
            with open(marks_file, encoding="utf-8") as f:
                for line in f:
                    mark = json.loads(line)
                    marks.setdefault(mark["event"], float(mark["t"]))  # the first of each (a worker per process)
    out = {"WALL": end - start}
    for name, a, b in PHASES:
        t_a = start if a is None else marks.get(a)
        t_b = end if b is None else marks.get(b)
        if t_a is not None and t_b is not None and (a is not None or b is not None):
            out[name] = t_b - t_a
    return out


def spread(values: list[float]) -> str:
    """``median (min-max)``."""
    if not values:
        return "-"
    if len(values) == 1:
        return f"{values[0]:.2f}"
    return f"{statistics.median(values):.2f} ({min(values):.2f}-{max(values):.2f})"


def table(runs: list[dict], trees: list[str]) -> str:
    """One row per algorithm and checkout, one column per phase (median and range); with two
    checkouts, the paired ratio of start-up (or wall, without marks) after/before."""
    names = [p for p, _, _ in PHASES]
    lines = ["| algo | checkout | " + " | ".join(names) + " |", "|---|---|" + "---:|" * len(names)]
    for algo in dict.fromkeys(r["algo"] for r in runs):
        for tree in trees:
            mine = [r["phases"] for r in runs if r["algo"] == algo and r["tree"] == tree]
            cells = [spread([p[n] for p in mine if n in p]) for n in names]
            lines.append(f"| {algo} | {tree} | " + " | ".join(cells) + " |")
        if len(trees) == 2:
            for what in ("START-UP", "WALL"):
                a = [r["phases"].get(what) for r in runs if r["algo"] == algo and r["tree"] == trees[0]]
                b = [r["phases"].get(what) for r in runs if r["algo"] == algo and r["tree"] == trees[1]]
                ratios = [x / y for x, y in zip(a, b, strict=False) if x is not None and y]
                if ratios:
                    lines.append(f"| {algo} | {what.lower()} {trees[0]} / {trees[1]}, paired | {spread(ratios)} |"
                                 + " |" * (len(names) - 1))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--algos", default=",".join(DEFAULT_ALGOS), help="comma-separated, of: " + ", ".join(DEFAULT_ALGOS))
    ap.add_argument("--total_env_steps", type=int, default=200_000)
    ap.add_argument("--repeats", type=int, default=3, help="measured runs per algorithm and checkout (interleaved)")
    ap.add_argument("--warmup", type=int, default=1, help="unmeasured runs per algorithm and checkout first")
    ap.add_argument("--vs", type=Path, default=None, help="another checkout (its src/ is run) to pair against")
    ap.add_argument("--python", default=sys.executable, help="the interpreter of both checkouts' runs")
    ap.add_argument("--out", type=Path, default=None, help="write every run's phases here (JSON)")
    args = ap.parse_args(argv)
    algos = [a.strip() for a in args.algos.split(",") if a.strip()]
    unknown = [a for a in algos if a not in DEFAULT_ALGOS]
    if unknown or args.repeats < 1 or args.warmup < 0:
        ap.error(f"--algos from {', '.join(DEFAULT_ALGOS)} (got {unknown}); --repeats >= 1; --warmup >= 0")
    trees = {"this": HERE} if args.vs is None else {"this": HERE, "vs": args.vs.resolve()}
    if args.vs is not None and not (args.vs / "src" / "janus").is_dir():
        ap.error(f"--vs {args.vs}: no src/janus there")
    print(f"# {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, load {os.getloadavg()[0]:.1f}, "
          f"{os.cpu_count()} cores; " + ", ".join(f"{k} = {v}" for k, v in trees.items()), flush=True)
    for algo in algos:
        for tree in trees.values():
            for _ in range(args.warmup):
                run_once(tree, algo, DEFAULT_ALGOS[algo], args.total_env_steps, args.python)
    runs = []
    for i in range(args.repeats):
        for algo in algos:
            for label, tree in trees.items():
                phases = run_once(tree, algo, DEFAULT_ALGOS[algo], args.total_env_steps, args.python)
                runs.append({"algo": algo, "tree": label, "repeat": i, "phases": phases})
                shown = ", ".join(f"{k} {v:.2f}" for k, v in phases.items() if k.isupper())
                print(f"  [{i + 1}/{args.repeats}] {algo} {label}: {shown}", flush=True)
    print(f"# after: load {os.getloadavg()[0]:.1f}; seconds, median (min-max) of {args.repeats}")
    print(table(runs, list(trees)))
    if args.out is not None:
        args.out.write_text(json.dumps({"trees": {k: str(v) for k, v in trees.items()}, "runs": runs}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
