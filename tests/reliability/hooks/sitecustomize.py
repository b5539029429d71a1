"""Test hooks for `janus train` subprocesses (and, through the environment, their Ray workers).

On the PYTHONPATH of a subprocess this module patches janus when its modules are first imported,
so the same hooks act on the local backend (one process) and on Ray (the Trainer's actor):

* ``JANUS_TEST_FAIL_AFTER=N``: the learner raises after N updates in this process (a failure
  injected after a resume).
* ``JANUS_TEST_SHM_FREE=BYTES``: ``/dev/shm`` reports this much free space (a small container's).
* ``JANUS_TEST_CAPTURE=DIR``: each component saves, right after it restored its checkpoint, what
  it restored (``DIR/<component>.pt``), so a test can compare a resume field by field with the
  last committed checkpoint.
"""

from __future__ import annotations

import copy
import importlib.abc
import importlib.util
import os
import sys
from typing import Any


def _capture(name: str, state: dict[str, Any]) -> None:
    import torch

    folder = os.environ["JANUS_TEST_CAPTURE"]
    tmp = os.path.join(folder, f".{name}.{os.getpid()}.tmp")
    torch.save(state, tmp)
    os.replace(tmp, os.path.join(folder, f"{name}.pt"))


def _patch_learner(module: Any) -> None:
    limit = int(os.environ["JANUS_TEST_FAIL_AFTER"])
    update = module.GymLearnerSide.update
    done = [0]

    def failing_update(self: Any, batch: Any) -> Any:
        done[0] += 1
        if done[0] > limit:
            raise RuntimeError(f"injected learner failure after {limit} updates")
        return update(self, batch)

    module.GymLearnerSide.update = failing_update


def _patch_trajectory_manager(module: Any) -> None:
    tm_start = module.TrajectoryManager.on_StartMsg

    def tm(self: Any, msg: Any) -> None:
        # Capture what is restored as it is loaded: once loaded, the buffer's selection thread may
        # sample at once (advancing the sampler's RNG), so a snapshot taken after start would race.
        fresh, restored = not self.started, []
        if fresh and self.checkpoint is not None:
            restore = self.checkpoint.restore

            def capturing() -> Any:
                state = restore()
                restored.append(state)
                return state

            self.checkpoint.restore = capturing
        tm_start(self, msg)
        if fresh:
            state = restored[0] if restored and restored[0] is not None else None
            buffer = state["buffer"] if state is not None else self.buffer.experience.state_dict()
            _capture("replay", {"buffer": buffer, "inserted": self.inserted})

    module.TrajectoryManager.on_StartMsg = tm


def _patch_trainer(module: Any) -> None:
    trainer_start = module.Trainer.on_StartMsg

    def trainer(self: Any, msg: Any) -> None:
        fresh = self.learner is None
        trainer_start(self, msg)
        if fresh:
            _capture("trainer", {"learner": copy.deepcopy(self.learner.state_dict()), "trained": self.trained,
                                 "version": self.version})

    module.Trainer.on_StartMsg = trainer


def _patch_orchestrator(module: Any) -> None:
    init = module.Orchestrator.__init__

    def orchestrator(self: Any, *args: Any, **kwargs: Any) -> None:
        init(self, *args, **kwargs)
        _capture("orchestrator", {"trained": self.trained, "env_steps": self.env_steps, "curve": [list(c) for c in self.curve]})

    module.Orchestrator.__init__ = orchestrator


def _patch_shm(module: Any) -> None:
    free = int(os.environ["JANUS_TEST_SHM_FREE"])
    module.free_bytes = lambda shm_dir=module.SHM_DIR: free


PATCHES = {}
if os.environ.get("JANUS_TEST_SHM_FREE"):
    PATCHES["janus.runtime.shm"] = _patch_shm
if os.environ.get("JANUS_TEST_FAIL_AFTER"):
    PATCHES["janus.algorithms.gym_algorithm"] = _patch_learner
if os.environ.get("JANUS_TEST_CAPTURE"):
    PATCHES["janus.runtime.trajectory_manager"] = _patch_trajectory_manager
    PATCHES["janus.runtime.trainer"] = _patch_trainer
    PATCHES["janus.runtime.orchestrator"] = _patch_orchestrator


class _Finder(importlib.abc.MetaPathFinder):
    """Patch a module right after it is executed (no janus import happens before it is asked for)."""

    def find_spec(self, name: str, path: Any, target: Any = None) -> Any:
        if name not in PATCHES:
            return None
        sys.meta_path.remove(self)
        try:
            spec = importlib.util.find_spec(name)
        finally:
            sys.meta_path.insert(0, self)
        if spec is None or spec.loader is None:
            return spec
        exec_module, patch = spec.loader.exec_module, PATCHES[name]

        def exec_and_patch(module: Any) -> None:
            exec_module(module)
            patch(module)

        spec.loader.exec_module = exec_and_patch  # type: ignore[method-assign]
        return spec


if PATCHES:
    sys.meta_path.insert(0, _Finder())
