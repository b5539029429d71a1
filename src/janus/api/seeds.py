"""``janus.train(..., seeds=[0, 1, 2])``: a run per seed and their aggregate, as ``janus train --seeds``.

    runs = janus.train("dqn", env="CartPole-v1", seeds=[0, 1, 2], out="runs/dqn", total_env_steps=50_000)
    runs.final_return["iqm"]   # {"estimate": ..., "ci95": [low, high]} over the seeds' final returns
    runs[1].policy             # seed 1's trained policy (a TrainedRun, as janus.train returns for one seed)
    runs.out                   # OUT: seed-<s>/ per seed, aggregate.json, aggregate.png

The folders and the aggregate are the command's (:mod:`janus.harness.seeds.runs`,
:mod:`janus.harness.seeds.aggregate`); :func:`train_seeds` says where the seeds run.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from janus.api.run import TrainedRun, configured_from, prepared, reworded, run_one
from janus.callbacks import Callback, CallbackHooks
from janus.config.request import RunRequest
from janus.errors import JanusError
from janus.result import RunResult

if TYPE_CHECKING:
    from janus.config import RunConfig
    from janus.policy import Policy

IN_PROCESS_SCHEDULE = ("one after another in this process (callbacks and env objects are Python objects of this "
                       "process, which the command's per-seed processes cannot reach)")


@dataclass
class SeedRuns:
    """What ``janus.train(seeds=[...])`` returns: each seed's :class:`~janus.api.train.TrainedRun` and the aggregate."""

    out: Path
    """OUT: a run folder per seed (seed-<s>/), aggregate.json and (with curves) aggregate.png."""
    runs: dict[int, TrainedRun]
    """Each seed's run, in the order the seeds were given."""
    aggregate: dict[str, Any]
    """aggregate.json as written: ``per_seed``, ``final_return``, ``curves``, ``bootstrap`` ..."""

    @property
    def seeds(self) -> list[int]:
        return list(self.runs)

    def __getitem__(self, seed: int) -> TrainedRun:
        return self.runs[seed]

    @property
    def policies(self) -> dict[int, Policy]:
        """Each seed's trained policy (loaded from its folder on first use)."""
        return {seed: run.policy for seed, run in self.runs.items()}

    @property
    def final_return(self) -> dict[str, dict[str, Any]] | None:
        """``mean``, ``median`` and ``iqm`` of the seeds' final returns, each ``{"estimate", "ci95": [low, high]}``
        (percentile bootstrap); None when no seed finished an episode."""
        return self.aggregate.get("final_return")


def train_seeds(request: RunRequest, callbacks: Sequence[Callback] | Callback | None) -> SeedRuns:
    """``janus.train(..., seeds=[...])``: each seed's run into OUT/seed-<s>, then OUT/aggregate.json and .png.

    Where the seeds run:

    - an env id and no callbacks: as ``janus train --seeds`` runs them, each seed a ``janus train``
      process, in parallel where the CPUs allow (:func:`janus.harness.seeds.runs.schedule`);
    - an env factory or instance, or any callbacks: one after another in this process. These are
      Python objects of this process, which another process cannot call; running the seeds here
      keeps them working rather than refusing them (a user passing a factory expects it to be used).

    Callbacks see every seed's run in turn, the same objects each time: :meth:`~janus.callbacks.Callback.on_start`
    opens each run (``run.seed`` says which), :meth:`~janus.callbacks.Callback.on_end` closes it; a callback
    that stops a run stops that seed's run only (status stopped) and the next seed starts.
    ``request.seeds``: two or more distinct integers >= 0, without ``seed=`` or ``resume=`` (as ``--seeds``).
    A Ctrl-C stops the run going, writes it and the aggregate of what ran (seeds not started: ``not
    run``), then reaches the caller; a seed whose run wrote no results is a :class:`~janus.errors.JanusError`.
    """
    from janus.envs.in_process import is_in_process
    from janus.harness.seeds.runs import check_seeds

    env = request.settings.get("env")
    hooks, request = prepared(request, callbacks)
    try:
        order = check_seeds(request)
    except JanusError as exc:
        raise reworded(exc, request) from None
    cfg = configured_from(request)  # every bad value refused before anything is written
    if hooks.callbacks or (env is not None and is_in_process(env)):
        out, ran = _in_process(request, order, hooks.callbacks, cfg)
        return _collected(out, order, ran)
    return _collected(_in_processes(request), order, {})


def _in_processes(request: RunRequest) -> Path:
    """The seeds run as ``janus train --seeds`` runs them; OUT."""
    from janus import stopping
    from janus.harness.seeds.runs import run_seed_processes

    with stopping.handled() as signals:
        out, _ = run_seed_processes(request)
        late = signals.late() if signals is not None else None
    if late is not None:
        raise KeyboardInterrupt(late)
    return out


def _in_process(request: RunRequest, order: list[int], callbacks: list[Callback],
                cfg: RunConfig) -> tuple[Path, dict[int, TrainedRun]]:
    """The seeds run one after another in this process, then their aggregate (also when a seed's
    run fails or is interrupted: the aggregate covers those that ran, then the error is raised);
    OUT and each seed's run."""
    from janus import stopping
    from janus.config import usable_cpus
    from janus.harness import run_folder
    from janus.harness.seeds.runs import cpus_per_run

    meta = {"schedule": IN_PROCESS_SCHEDULE, "runs_at_once": 1, "cpus_per_run": cpus_per_run(cfg),
            "usable_cpus": usable_cpus(), "command": request.invocation}  # now: never re-resolved after a failure
    out, lock = run_folder.open_out_dir(request, "train")
    folders = {s: out / f"seed-{s}" for s in order}
    codes: dict[int, int | None] = dict.fromkeys(order)
    runs: dict[int, TrainedRun] = {}
    with lock:
        print(f"janus.train seeds={order}: {len(order)} runs into {out}/seed-<s>, {IN_PROCESS_SCHEDULE}", flush=True)
        try:
            for k, seed in enumerate(order):
                print(f"\nseed {seed} ({k + 1} of {len(order)}): started", flush=True)
                seed_req = replace(request, settings={**request.settings, "seed": seed}, seeds=None, out=folders[seed],
                                   force=False)
                codes[seed] = 1  # an exit code as the command's seed processes have, for aggregate.json
                runs[seed] = run_one(seed_req, configured_from(seed_req), CallbackHooks(callbacks))
                codes[seed] = 0
        except BaseException:
            with stopping.saving():
                try:
                    _write_aggregate(out, folders, codes, meta)
                except Exception as exc:  # noqa: BLE001 - the run's own error is the one raised
                    print(f"janus.train: could not write {out}/aggregate.json ({type(exc).__name__}: {exc})",
                          file=sys.stderr, flush=True)
            raise
        with stopping.saving():
            _write_aggregate(out, folders, codes, meta)
    return out, runs


def _write_aggregate(out: Path, folders: dict[int, Path], codes: dict[int, int | None], meta: dict[str, Any]) -> None:
    from janus.harness.seeds.aggregate import write_aggregate

    table, paths, _ = write_aggregate(out, folders, codes, meta)
    print("\n" + table + "\n\nwrote " + ", ".join(str(p) for p in paths), flush=True)


def _collected(out: Path, order: list[int], ran: dict[int, TrainedRun]) -> SeedRuns:
    """Each seed's run (``ran``: those run in this process; the others read back from their
    folders) and the aggregate; a seed without results is an error."""
    missing = [s for s in order if not (out / f"seed-{s}" / "results.json").is_file()]
    if missing:
        raise JanusError(f"janus.train: the run of seed {', '.join(map(str, missing))} wrote no results (it failed: "
                         f"see the output above, or {out}/logs/seed-<s>.log); {out}/aggregate.json covers the seeds "
                         "that ran")
    runs = {}
    for seed in order:
        folder = out / f"seed-{seed}"
        if seed in ran:
            runs[seed] = ran[seed]
            continue
        saved = json.loads((folder / "results.json").read_text(encoding="utf-8"))["runs"][0]
        runs[seed] = TrainedRun(folder, RunResult.from_dict(saved))
    aggregate = json.loads((out / "aggregate.json").read_text(encoding="utf-8"))
    return SeedRuns(out, runs, aggregate)

