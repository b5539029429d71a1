"""Where a run's CPU goes, thread by thread: CPU seconds and context switches of every thread of
the learner process (and the totals of its worker processes) over one ``janus train`` run.

A learner-bound run is as fast as its Trainer's update; every other thread of the learner process
that wakes takes the GIL and a CPU from it. This is how the issue-36 regression was found (see
"The engine after issue 36" in docs/benchmarks.md). Linux only (reads ``/proc/self/task``).

    NUMBA_CACHE_DIR=.venv/numba-cache PYTHONPATH=src .venv/bin/python benchmarks/runtime_threads.py \\
        --algo dqn --total_env_steps 30000 --seed 1
    COUNT_WAITS=1 ... benchmarks/runtime_threads.py ...   # also count condition waits per thread and caller

The arguments are ``janus train``'s. Compare two trees by running each with its own PYTHONPATH.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from pathlib import Path
from typing import Any

import psutil

WAITS: dict[tuple[str, str, str, bool], int] = {}


def thread_times() -> dict[int, tuple[str, float, int, int]]:
    """Per thread of this process: (name, CPU seconds, voluntary, involuntary context switches)."""
    names = {t.native_id: t.name for t in threading.enumerate()}
    tick = os.sysconf("SC_CLK_TCK")
    out = {}
    for tid in os.listdir("/proc/self/task"):
        try:
            stat = Path(f"/proc/self/task/{tid}/stat").read_text().rsplit(")", 1)[1].split()
            switches = {}
            for line in Path(f"/proc/self/task/{tid}/status").read_text().splitlines():
                key, _, value = line.partition(":")
                if key.endswith("ctxt_switches"):
                    switches[key] = int(value)
        except OSError:  # the thread ended
            continue
        out[int(tid)] = (names.get(int(tid), "?"), (int(stat[11]) + int(stat[12])) / tick,
                         switches.get("voluntary_ctxt_switches", 0), switches.get("nonvoluntary_ctxt_switches", 0))
    return out


def children_times() -> dict[int, tuple[float, int, int]]:
    """Per child process: (CPU seconds, voluntary, involuntary context switches)."""
    out = {}
    for child in psutil.Process().children(recursive=True):
        try:
            cpu, switches = child.cpu_times(), child.num_ctx_switches()
        except psutil.Error:
            continue
        out[child.pid] = (cpu.user + cpu.system, switches.voluntary, switches.involuntary)
    return out


def count_condition_waits() -> None:
    """Count every ``threading.Condition.wait`` by thread, calling function and its caller."""
    original = threading.Condition.wait

    def wait(self: threading.Condition, timeout: float | None = None) -> bool:
        frame = sys._getframe(1)
        caller = frame.f_back.f_code.co_name if frame.f_back else ""
        key = (threading.current_thread().name, frame.f_code.co_name, caller, timeout is not None)
        WAITS[key] = WAITS.get(key, 0) + 1
        return original(self, timeout)

    threading.Condition.wait = wait  # type: ignore[method-assign]


def main() -> None:
    from janus.cli import build_parser, config_from_args
    from janus.config import validate
    from janus.runtime.run import run_runtime
    from janus.runtime.status import RunStatus

    if os.environ.get("COUNT_WAITS"):
        count_condition_waits()
    cfg = validate(config_from_args(build_parser().parse_args(["train", *sys.argv[1:]])))
    threads: dict[int, tuple[str, float, int, int]] = {}
    children: dict[int, tuple[float, int, int]] = {}

    def observer(status: RunStatus, result: Any) -> None:  # every poll: the last sight of each thread counts
        threads.update(thread_times())
        children.update(children_times())

    start = time.perf_counter()
    result = run_runtime(cfg, observer=observer)
    print(f"wall {time.perf_counter() - start:.1f} s (the run's own: {result.wall_s:.1f} s)")
    by_name: dict[str, list[float]] = {}
    for name, cpu, voluntary, involuntary in threads.values():
        row = by_name.setdefault(name, [0.0, 0, 0, 0])
        row[0] += cpu
        row[1] += voluntary
        row[2] += involuntary
        row[3] += 1
    print(f"{'thread':32s} {'cpu s':>7s} {'voluntary':>10s} {'involuntary':>12s} threads")
    for name, (cpu, voluntary, involuntary, count) in sorted(by_name.items(), key=lambda kv: -kv[1][0]):
        print(f"{name:32s} {cpu:7.2f} {int(voluntary):10d} {int(involuntary):12d} {int(count):7d}")
    for pid, (cpu, voluntary, involuntary) in children.items():
        print(f"{'child ' + str(pid):32s} {cpu:7.2f} {voluntary:10d} {involuntary:12d}")
    for key, count in sorted(WAITS.items(), key=lambda kv: -kv[1])[:20]:
        print(f"condition waits {count:7d}  {key}")


if __name__ == "__main__":
    main()
