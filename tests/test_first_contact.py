"""What a new user meets first with ``janus.train``: the process backend starts from any
``__main__`` (a script without the guard, stdin, a notebook), a run that fails before its first env
step leaves nothing that blocks the rerun, and errors name the keywords the caller used."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import janus
from janus.errors import JanusError

PROBE = """
import janus.spawn
{body}
"""


def _python(code: str, cwd: Path, *, stdin: bool = False, name: str = "script.py") -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST")}
    if stdin:
        return subprocess.run([sys.executable, "-"], input=code, cwd=cwd, env=env, capture_output=True, text=True,
                              timeout=240)
    (cwd / name).write_text(code, encoding="utf-8")
    return subprocess.run([sys.executable, name], cwd=cwd, env=env, capture_output=True, text=True, timeout=240,
                          stdin=subprocess.DEVNULL)


@pytest.mark.parametrize(("body", "expected"), [
    ("print('IMPORTABLE', janus.spawn.caller_main_is_importable())", False),  # module level, no guard
    ("if __name__ == '__main__':\n    print('IMPORTABLE', janus.spawn.caller_main_is_importable())", True),
    ("def main():\n    print('IMPORTABLE', janus.spawn.caller_main_is_importable())\n\nif __name__ == '__main__':\n    main()",
     True),  # the call inside a function the guard calls
    ("def main():\n    print('IMPORTABLE', janus.spawn.caller_main_is_importable())\n\nmain()", False),
    ("import threading\nt = threading.Thread(target=lambda: print('IMPORTABLE', janus.spawn.caller_main_is_importable()))\n"
     "t.start(); t.join()", False),  # another thread: the main thread's place in the script decides
    ("if '__main__' == __name__:\n    print('IMPORTABLE', janus.spawn.caller_main_is_importable())", True),
])
def test_whether_the_callers_main_may_be_imported_again(body: str, expected: bool, tmp_path: Path) -> None:
    proc = _python(PROBE.format(body=body), tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert f"IMPORTABLE {expected}" in proc.stdout


def test_stdin_and_python_c_mains(tmp_path: Path) -> None:
    proc = _python(PROBE.format(body="print('IMPORTABLE', janus.spawn.caller_main_is_importable())"), tmp_path, stdin=True)
    assert "IMPORTABLE False" in proc.stdout, proc.stderr  # <stdin>: nothing a child could import
    code = "import janus.spawn; print('IMPORTABLE', janus.spawn.caller_main_is_importable())"
    proc = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert "IMPORTABLE True" in proc.stdout, proc.stderr  # no file: a child imports nothing (as in a notebook)


def test_processes_started_without_the_callers_main_do_not_run_the_script(tmp_path: Path) -> None:
    """The mechanism alone, cheaply: a spawned child of an unguarded script does not run it again."""
    code = textwrap.dedent("""
        import multiprocessing as mp, os
        from janus.spawn import without_caller_main
        print("SCRIPT RAN IN", os.getpid(), flush=True)
        def child():
            pass
        ctx = mp.get_context("spawn")
        with without_caller_main():
            p = ctx.Process(target=os.getpid)
            p.start()
        p.join(60)
        print("EXIT", p.exitcode)
        """)
    proc = _python(code, tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.count("SCRIPT RAN IN") == 1, proc.stdout
    assert "EXIT 0" in proc.stdout


@pytest.mark.slow  # tests/test_readme.py runs the README's unguarded DQN script (process backend) in CI
def test_an_unguarded_script_trains_on_the_process_backend(tmp_path: Path) -> None:
    code = textwrap.dedent("""
        import janus
        run = janus.train("dqn", env="CartPole-v1", total_env_steps=600, out="runs/p", seed=0, backend="process",
                          num_workers=2, learning_starts=100)
        print("STATUS", run.status, run.result.counts["run_env_steps"])
        """)
    proc = _python(code, tmp_path)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-3000:]
    assert "Traceback" not in out and "is in use by another janus run" not in out
    assert "STATUS finished" in proc.stdout
    assert "start without importing this program's __main__" in proc.stdout  # said once, in one line
    assert proc.stdout.count("start without importing") == 1


# ---- a run that fails before its first env step ---------------------------------------------------
ENV_MODULE = """
import gymnasium as gym

class BrokenReset(gym.Env):
    observation_space = gym.spaces.Box(-1.0, 1.0, (3,))
    action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        raise RuntimeError("this env cannot reset")

    def step(self, action):
        raise RuntimeError("unreachable")

gym.register("BrokenReset-v0", entry_point=BrokenReset)
"""


@pytest.mark.slow  # the crash-loop limit takes its restarts; the fast test below fails the run directly
def test_an_env_that_never_resets_leaves_nothing_that_blocks_a_rerun(tmp_path: Path,
                                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "first_contact_envs.py").write_text(ENV_MODULE, encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "runs" / "x"
    with pytest.raises(JanusError):
        janus.train("dqn", env="first_contact_envs:BrokenReset-v0", total_env_steps=500, out=str(out), backend="local",
                    seed=0)
    assert not [p.name for p in out.iterdir() if p.name != ".janus.lock"] if out.exists() else True
    run = janus.train("dqn", env="CartPole-v1", total_env_steps=300, out=str(out), backend="local", seed=0,
                      learning_starts=100)  # the same folder, no force=True
    assert run.status == "finished"


def test_a_run_that_fails_as_it_starts_leaves_nothing_that_blocks_a_rerun(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    from janus.harness import commands

    real = commands.run_configuration

    def fails(*args, **kwargs):
        raise RuntimeError("a worker could not start")

    out = tmp_path / "x"
    monkeypatch.setattr(commands, "run_configuration", fails)
    with pytest.raises(RuntimeError, match="could not start"):
        janus.train("dqn", env="CartPole-v1", total_env_steps=300, out=str(out), backend="local", seed=0,
                    learning_starts=100)
    assert [p.name for p in out.iterdir() if p.name != ".janus.lock"] == []
    monkeypatch.setattr(commands, "run_configuration", real)
    run = janus.train("dqn", env="CartPole-v1", total_env_steps=300, out=str(out), backend="local", seed=0,
                      learning_starts=100)
    assert run.status == "finished"


def test_a_run_that_took_steps_keeps_its_files(tmp_path: Path) -> None:
    from janus.harness import run_folder

    folder = tmp_path / "r"
    folder.mkdir()
    (folder / "config.yaml").write_text("name: x\n")
    (folder / "results.json").write_text('{"runs": [{"counts": {"run_env_steps": 12}}]}')
    assert not run_folder.clear_unstarted(folder, None)
    assert (folder / "config.yaml").exists()
    (folder / "results.json").write_text("not json")  # something janus cannot read: kept, never deleted
    assert not run_folder.clear_unstarted(folder, None)
    assert (folder / "results.json").exists()


# ---- errors in the caller's words ----------------------------------------------------------------
def test_run_folder_errors_name_keywords_not_flags(tmp_path: Path) -> None:
    out = tmp_path / "taken"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    with pytest.raises(JanusError) as info:
        janus.train("dqn", env="CartPole-v1", total_env_steps=500, out=str(out))
    text = str(info.value)
    assert "--" not in text, text
    assert "force=True" in text and f"resume={str(out)!r}" in text
    assert (out / "notes.txt").read_text() == "mine"


def test_config_errors_name_keywords(tmp_path: Path) -> None:
    with pytest.raises(JanusError) as info:
        janus.train("dqn", env="CartPole-v1", total_env_steps=500, out=str(tmp_path / "o"), lr=-1.0)
    assert str(info.value).startswith("invalid lr:")
    with pytest.raises(JanusError) as info:
        janus.train("dqn", env="CartPole-v1", out=str(tmp_path / "o"), resume=str(tmp_path / "o"), quick=True)
    assert "--" not in str(info.value), str(info.value)


def test_seed_runs_name_keywords_too(tmp_path: Path) -> None:
    out = tmp_path / "taken"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    with pytest.raises(JanusError) as info:
        janus.train("dqn", env="CartPole-v1", seeds=[0, 1], total_env_steps=500, out=str(out))
    assert "--" not in str(info.value) and "force=True" in str(info.value), str(info.value)
