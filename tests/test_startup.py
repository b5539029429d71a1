"""What keeps a command's start-up and tail short (issue 48), guarded by mechanism, never by time:
janus's optimiser never imports torch._dynamo, a training run imports neither it nor Ray, the
``janus`` command ends without the interpreter's teardown yet runs every exit function and flushes
its output, and the phase marks of :mod:`janus.timeline` come in a run's order."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

from janus import timeline

EVENTS = ["command", "configured", "run_folder", "backend_started", "first_env_step", "loop_end", "shut_down",
          "results_written"]


def _python(code: str, env: dict[str, str] | None = None, timeout: float = 240) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, **(env or {})}, check=False)


def test_lean_adam_steps_and_checkpoints_without_importing_torch_dynamo() -> None:
    done = _python("""
        import sys, torch
        from janus.algorithms.optim import LeanAdam, adam
        net = torch.nn.Linear(4, 2)
        opt = adam(net.parameters(), lr=1e-3)
        assert isinstance(opt, LeanAdam)
        for _ in range(3):
            opt.zero_grad(set_to_none=True)
            net(torch.ones(8, 4)).sum().backward()
            opt.step()
        state = opt.state_dict()
        opt.load_state_dict(state)
        opt.add_param_group({"params": [torch.nn.Parameter(torch.zeros(3))]})
        assert state["state"][0]["step"].item() == 3.0
        print(sorted(m for m in sys.modules if m.startswith("torch._dynamo")))
    """)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_a_training_run_imports_neither_torch_dynamo_nor_ray(tmp_path: Path) -> None:
    done = _python(f"""
        import sys, janus
        janus.train("ppo", "CartPole-v1", total_env_steps=512, seed=0, out={str(tmp_path / 'run')!r})
        print(sorted(m for m in ("torch._dynamo", "sympy", "ray") if m in sys.modules))
    """)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "[]"
    assert json.loads((tmp_path / "run" / "results.json").read_text())["runs"][0]["status"] == "finished"


def test_exit_now_runs_the_exit_functions_flushes_and_keeps_the_code(tmp_path: Path) -> None:
    marker = tmp_path / "atexit-ran"
    done = _python(f"""
        import atexit, sys
        from janus.harness.launch import exit_now
        atexit.register(lambda: open({str(marker)!r}, "w").write("yes"))
        sys.stdout.write("unflushed output")
        exit_now(3)
    """)
    assert done.returncode == 3
    assert done.stdout == "unflushed output"
    assert marker.read_text() == "yes"


def test_exit_now_waits_for_a_running_thread_as_the_interpreter_does(tmp_path: Path) -> None:
    marker = tmp_path / "thread-finished"
    done = _python(f"""
        import threading, time
        from janus.harness.launch import exit_now
        def late():
            time.sleep(0.3)
            open({str(marker)!r}, "w").write("done")
        threading.Thread(target=late).start()
        exit_now(0)
    """)
    assert done.returncode == 0, done.stderr
    assert marker.read_text() == "done"


def test_marks_are_written_only_where_the_variable_names_a_file(tmp_path: Path, monkeypatch) -> None:
    path = tmp_path / "timeline.jsonl"
    monkeypatch.delenv(timeline.TIMELINE_ENV, raising=False)
    timeline.mark("command")
    assert not path.exists()
    monkeypatch.setenv(timeline.TIMELINE_ENV, str(path))
    timeline.mark("command")
    timeline.mark("configured")
    marks = timeline.read(str(path))
    assert [m["event"] for m in marks] == ["command", "configured"]
    assert marks[0]["pid"] == os.getpid() and marks[0]["t"] <= marks[1]["t"]


def test_the_janus_command_marks_every_phase_in_order_and_exits_cleanly(tmp_path: Path) -> None:
    marks_file, out = tmp_path / "timeline.jsonl", tmp_path / "run"
    done = subprocess.run([sys.executable, "-m", "janus", "train", "--algo", "ppo", "--env", "CartPole-v1",
                           "--total_env_steps", "512", "--seed", "0", "--out", str(out)],
                          capture_output=True, text=True, timeout=240, check=False,
                          env={**os.environ, timeline.TIMELINE_ENV: str(marks_file)})
    assert done.returncode == 0, done.stderr
    assert "wrote " in done.stdout  # the last line, flushed before the fast exit
    assert json.loads((out / "results.json").read_text())["runs"][0]["status"] == "finished"
    first: dict[str, float] = {}
    for mark in timeline.read(str(marks_file)):
        first.setdefault(str(mark["event"]), float(mark["t"]))
    assert list(first) == EVENTS
    assert [first[e] for e in EVENTS] == sorted(first[e] for e in EVENTS)


def test_the_kernel_cache_hits_for_an_installed_copy_of_janus(tmp_path: Path) -> None:
    """A non-editable install is a copy of the package elsewhere (site-packages), run with
    ``PYTHONDONTWRITEBYTECODE=1`` and no ``NUMBA_CACHE_DIR``: its second process loads the kernel
    the first compiled (one small kernel, as tests/buffer/test_jit_cache.py does for the checkout)."""
    import shutil

    import janus

    site = tmp_path / "site-packages"
    shutil.copytree(Path(janus.__file__).parent, site / "janus")
    (tmp_path / "home").mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("NUMBA_CACHE_DIR", "XDG_CACHE_HOME")}
    env.update(PYTHONPATH=str(site), PYTHONDONTWRITEBYTECODE="1", HOME=str(tmp_path / "home"))
    code = ("import numpy as np, janus.buffer.kernels.replay as k; k._next_u64(np.zeros(1, np.uint64)); "
            "s = k._next_u64.stats; print(k.__file__, sum(s.cache_misses.values()), sum(s.cache_hits.values()))")
    runs = [subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=240,
                           check=True).stdout.split() for _ in range(2)]
    assert runs[0][0].startswith(str(site))  # the installed copy ran, not the checkout
    assert runs[0][1:] == ["1", "0"]  # compiled once
    assert runs[1][1:] == ["0", "1"]  # then loaded from the cache


def test_the_chart_modules_are_imported_in_the_background_once_the_run_reaches_its_goal() -> None:
    done = _python("""
        import sys
        from janus.harness.outputs import CHART_MODULES, ChartImportAtGoal
        from janus.runtime.status import RunStatus
        observe = ChartImportAtGoal()
        observe(RunStatus(finished=False))
        assert observe.thread is None and not any(m in sys.modules for m in CHART_MODULES)
        observe(RunStatus(finished=True))
        first = observe.thread
        observe(RunStatus(finished=True))
        assert observe.thread is first  # once
        first.join(120)
        print(all(m in sys.modules for m in CHART_MODULES))
    """)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "True"
