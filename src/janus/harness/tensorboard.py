"""TensorBoard scalars of a finished run (``janus train --tensorboard DIR``).

:func:`write_scalars` writes what a run dict holds as TensorBoard scalars:

* ``episode/return`` and ``episode/return_mean20``: the learning curve, each episode's return (and
  the mean of the last 20) at the env step it finished, with its wall time in the run
  (TensorBoard's *relative* axis then shows seconds since the run started);
* ``throughput/env_steps_per_s``: env steps per second since the start, at each episode end;
* ``run/env_steps_per_s`` and ``run/samples_per_s`` (the run's overall rates), ``run/wall_s`` and
  ``stage_s/<stage>`` (total seconds per stage: rollout, collect, select, update, learner_wait,
  actor_blocked), each once, at the run's last env step.

It uses ``torch.utils.tensorboard.SummaryWriter``, which needs the ``tensorboard`` package (the
``tensorboard`` extra); :func:`check_tensorboard` says so up front with a :class:`ConfigError`.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from janus.errors import ConfigError

MISSING = "--tensorboard needs the tensorboard package: pip install janus-rl[tensorboard]"
WINDOW = 20


def check_tensorboard() -> None:
    """Raise :class:`ConfigError` unless ``SummaryWriter`` can be used (call before a run starts)."""
    _summary_writer()


def _summary_writer() -> type:
    try:
        import tensorboard  # noqa: F401  (torch's import error does not name the package to install)
        from torch.utils.tensorboard import SummaryWriter
    except ImportError:
        raise ConfigError(MISSING) from None
    return SummaryWriter


def write_scalars(logdir: str | Path, run: dict[str, Any]) -> Path:
    """Write the scalars of ``run`` (a run dict of ``run_runtime``/the harness) under ``logdir``.

    Runs without a learning curve (synthetic workloads) get the throughput and stage scalars only,
    at step 0. Returns ``logdir``. Raises :class:`ConfigError` if tensorboard is not installed.
    """
    writer_class = _summary_writer()
    logdir = Path(logdir)
    logdir.mkdir(parents=True, exist_ok=True)
    curve = run.get("learning_curve") or {}
    steps, returns, walls = curve.get("env_steps", []), curve.get("return", []), curve.get("wall_s", [])
    wall = float(run.get("wall_s", 0.0))
    span = max([wall, *map(float, walls[-1:])])  # a resumed run's curve counts earlier sessions too
    start = time.time() - span  # event wall times: the run's own clock, ending now
    last_step = int(steps[-1]) if steps else 0
    writer = writer_class(log_dir=str(logdir))
    try:
        total = 0.0
        for i, (step, ret, t) in enumerate(zip(steps, returns, walls)):
            total += ret
            if i >= WINDOW:
                total -= returns[i - WINDOW]
            when = start + float(t)
            writer.add_scalar("episode/return", float(ret), int(step), walltime=when)
            writer.add_scalar(f"episode/return_mean{WINDOW}", total / min(i + 1, WINDOW), int(step), walltime=when)
            if t > 0:
                writer.add_scalar("throughput/env_steps_per_s", step / t, int(step), walltime=when)
        end = start + span
        for key in ("actor_steps_per_s", "samples_per_s"):
            if key in run:
                tag = "run/env_steps_per_s" if key == "actor_steps_per_s" else f"run/{key}"
                writer.add_scalar(tag, float(run[key]), last_step, walltime=end)
        writer.add_scalar("run/wall_s", wall, last_step, walltime=end)
        for stage, seconds in (run.get("stage_s") or {}).items():
            writer.add_scalar(f"stage_s/{stage}", float(seconds), last_step, walltime=end)
        writer.flush()
    finally:
        writer.close()
    return logdir
