"""A process that is killed (a Ray actor at the run's end) first runs multiprocessing's exit-time
clean-up (issue 46 item 7).

Before, every ``--backend ray --vector_env async`` run left three ``/dev/shm/sem.mp-*`` and a
``/tmp/pymp-*`` folder behind: the worker actor's async sub-envs own named semaphores and a
forkserver folder that multiprocessing removes at interpreter exit, which ``ray.kill`` skips.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from janus.config import from_dict, resolve

REPO = Path(__file__).resolve().parents[2]

KILLED_AFTER_ASYNC_ENVS = """
import json, os, signal, sys
from janus.envs.vector import make_vector_env
from janus.runtime.exit_cleanup import named_resources, run_exit_finalizers

envs = make_vector_env("CartPole-v1", 2, 0, vector_env="async")
envs.reset(seed=0)
envs.close()
paths = run_exit_finalizers() if sys.argv[1] == "clean" else named_resources()
print(json.dumps(paths), flush=True)
# as ray.kill ends an actor: its child processes killed (the resource tracker that would unlink
# leaked semaphores among them), and no interpreter exit
from multiprocessing import resource_tracker
tracker = resource_tracker._resource_tracker._pid
if tracker is not None:
    os.kill(tracker, signal.SIGKILL)
    os.waitpid(tracker, 0)
os.kill(os.getpid(), signal.SIGKILL)
"""


def killed_after_async_envs(mode: str) -> list[str]:
    """The named resources of a process that ran async sub-envs and was then SIGKILLed."""
    env = {**os.environ, "PYTHONPATH": str(REPO / "src"), "OMP_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, "-c", KILLED_AFTER_ASYNC_ENVS, mode], capture_output=True, text=True,
                          timeout=120, env=env)
    assert done.returncode == -9, done.stderr[-2000:]
    return list(json.loads(done.stdout.splitlines()[-1]))


def test_a_killed_process_that_ran_its_exit_finalizers_leaves_no_semaphore_nor_temp_folder() -> None:
    left = killed_after_async_envs("leave")  # the case before the fix: a SIGKILL skips the clean-up
    try:
        assert any("/sem.mp-" in p for p in left) and any("pymp-" in p for p in left), left
        assert all(os.path.exists(p) for p in left)
    finally:
        for p in left:  # remove what this control case left behind
            subprocess.run(["rm", "-rf", p], check=False)
    cleaned = killed_after_async_envs("clean")
    assert any("/sem.mp-" in p for p in cleaned) and any("pymp-" in p for p in cleaned), cleaned
    assert [p for p in cleaned if os.path.exists(p)] == []


@pytest.mark.slow  # ~20 s on 2 CPUs (plus the shared Ray's start); the test above covers the clean-up itself
def test_a_ray_run_with_async_envs_leaves_no_semaphore_nor_temp_folder(ray_session: Any) -> None:
    from janus.algorithms.base import algorithm
    from janus.runtime.backends.ray import RayBackend
    from janus.runtime.run import run_runtime

    cfg = resolve(from_dict({"workload": {"env": "CartPole-v1", "total_env_steps": 256, "envs_per_actor": 2,
                                          "rollout_length": 32, "num_actors": 1, "vector_env": "async"},
                             "runtime": {"backend": "ray"}}, base=from_dict(algorithm("ppo").preset)))
    backend = RayBackend(None, cfg.runtime.max_calls_in_flight)
    run = run_runtime(cfg, backend=backend, timeout_s=120)
    assert run["counts"]["transitions_produced"] == 256
    released = backend.released.get("worker-0", [])
    assert any("/sem.mp-" in p for p in released) and any("pymp-" in p for p in released), backend.released
    assert [p for paths in backend.released.values() for p in paths if os.path.exists(p)] == []
