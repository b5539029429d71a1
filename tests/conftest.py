"""Fixtures shared by tests in more than one folder."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

# A pytest started in the background by a non-interactive shell (`make test &`) inherits SIGINT
# ignored, and so would every `janus` it starts: the tests that Ctrl-C a run would wait out their
# timeouts. A handler here (reset to the default in children at exec) gives children Python's own.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)
FINISHED_DQN_STEPS = 1500  # a DQN run of a few seconds


@pytest.fixture(scope="session")
def finished_dqn_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A finished CartPole DQN run of ``FINISHED_DQN_STEPS`` env steps, seed 1 (final checkpoint,
    config.yaml, results), made once per session by ``janus train`` of this checkout in a subprocess.

    Shared by tests/harness/test_run_folder.py, tests/reliability/test_checkpoint_integrity.py,
    tests/reliability/test_stop_keeps_results.py and tests/harness/test_video.py (each used to train
    its own): tests copy it before they change or resume anything.
    """
    run = tmp_path_factory.mktemp("finished-dqn") / "R"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO / "src")}
    env.pop("JANUS_TEST_FAIL_AFTER", None)
    env.pop("JANUS_TEST_CAPTURE", None)
    # --backend local (recorded in its config.yaml, so every resume of it too): these tests are about
    # the run folder and its checkpoints; resumes on process are tested in test_resume.py and
    # test_kill_resume_loop.py, and each process run costs the workers' start-up (~3 s here)
    proc = subprocess.run([sys.executable, "-m", "janus.cli", "train", "--algo", "dqn", "--backend", "local",
                           "--total_env_steps", str(FINISHED_DQN_STEPS), "--seed", "1", "--out", str(run)],
                          capture_output=True, text=True, timeout=240, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return run


# Tests that start, join or look for a Ray (its session fixture, --backend ray, address "auto").
RAY_TEST_FILES = {"test_ray_backend.py", "test_ray_address.py"}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Under pytest-xdist (``-n 2 --dist loadgroup``, as ``make test`` runs), every test that may
    start or look for a Ray runs on one worker, in order: two local Rays on one machine would find
    each other (address ``auto``) and race for the same ports. Without xdist: nothing changes."""
    if not config.pluginmanager.hasplugin("xdist"):
        return
    for item in items:
        uses_ray = (item.path.name in RAY_TEST_FILES or "ray_session" in getattr(item, "fixturenames", ())
                    or "ray" in item.name.lower().replace("array", ""))
        if uses_ray:
            item.add_marker(pytest.mark.xdist_group("ray"))
