"""One function runs a run on any backend: :func:`run_runtime` (start, poll, stop, final commit).

The run's :class:`~janus.runtime.plan.RunPlan` is worked out once; its components are built and
placed by :mod:`janus.runtime.wiring`. Data takes one path on every backend: Worker -> WorkerProxy
-> TrajectoryManager (the replay host, whose JanusBuffer holds the run's rate limiter) -> Trainer
(through its replay client) -> learner; one ``orchestrator`` starts, watches, checkpoints and stops
the run. The run's :class:`RunResult` comes from :mod:`janus.runtime.summary`.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from functools import partial
from typing import Any

from janus import stopping, timeline
from janus.config import RunConfig
from janus.errors import RunFailed
from janus.result import RunResult
from janus.runtime import checkpoints
from janus.runtime.backends.base import Backend
from janus.runtime.messages import StartMsg
from janus.runtime.plan import RunPlan, plan_of
from janus.runtime.status import RunCounters, RunStatus, run_state
from janus.runtime.summary import rl_note, summarize
from janus.runtime.wiring import SharedBuffer, build, make_backend, replay_host

Progress = Callable[[int, int, str], None]
"""``(done, total, note)`` each poll: an RL run's env steps (note: its recent mean return), the synthetic
workload's learner updates (:attr:`RunPlan.env_step_total` says which)."""
Observer = Callable[[RunStatus, Callable[[], RunResult]], None]
"""Called on every poll of a run with the Orchestrator's status and a function that builds the
run's :class:`RunResult` so far (costly: call it only when writing, e.g. every 30 s)."""
__all__ = ["RunFailed", "RunPlan", "build", "make_backend", "run_runtime"]


def run_runtime(cfg: RunConfig, progress: Progress | None = None, backend: Backend | None = None, timeout_s: float = 3600.0,
                observer: Observer | None = None) -> RunResult:
    """Run ``cfg`` on its backend (``auto`` resolved here); stop cleanly on success, failure or Ctrl-C.

    ``observer`` (see :data:`Observer`) sees the run as it goes: live logs, periodic results."""
    plan = plan_of(cfg)
    plan.check_progress_possible()
    if plan.checkpointed:  # resuming: finish a commit a crash cut short, verify every file; then a new run id
        checkpoints.start_run(str(plan.cfg.runtime.checkpoint_dir), plan.cfg.runtime.resume)
    backend = backend or make_backend(plan.cfg)
    shared = SharedBuffer(plan) if backend.remote_replay(*replay_host(plan)) is None else None
    with stopping.saving():  # a stop signal cuts only the start-up and the loop below, never the saving
        return _run_built(plan, backend, shared, progress, timeout_s, observer)


def _run_built(plan: RunPlan, backend: Backend, shared: SharedBuffer | None,
               progress: Progress | None, timeout_s: float, observer: Observer | None) -> RunResult:
    """:func:`run_runtime` from the build on: start-up and the poll loop may be interrupted by a
    stop signal (:func:`janus.stopping.interruptible`); the shutdown, the final commit and the
    summary that follow may not (a signal then is recorded, and the run saved as it ended)."""
    try:
        with stopping.interruptible():
            build(plan, backend, shared)  # local: builds every component now
            backend.start()  # process: builds this process's; ray: returns once every actor is up (wall_s excludes it)
    except BaseException:  # a component that cannot be built, Ctrl-C: close what was built
        backend.shutdown(timeout=5.0)
        if shared is not None:
            shared.close()
        raise
    timeline.mark("backend_started")
    start = time.perf_counter()
    backend.deliver("orchestrator", StartMsg())
    last = [RunStatus()]  # the last poll's status
    interrupted: KeyboardInterrupt | None = None  # Ctrl-C, or SIGTERM/SIGHUP through the CLI
    error: Exception | None = None  # the run failed: a stall, a worker that keeps failing, an observer's error
    committed = False
    try:
        with stopping.interruptible():
            _poll_until_finished(plan, backend, start, progress, timeout_s, observer, last)
        wall = time.perf_counter() - start
        timeline.mark("loop_end")
    except KeyboardInterrupt as exc:
        interrupted, wall = exc, time.perf_counter() - start
    except Exception as exc:  # noqa: BLE001 - raised below, with the run so far where it committed
        error, wall = exc, time.perf_counter() - start
    finally:
        alive = backend.shutdown()
        report_abandoned(backend, last[0])
        counters = RunCounters.of(backend.counters())
        failed = backend.fatal  # also an error while draining, after the goal was reached
        if failed is None and not backend.gcs_lost:  # Ray's coordinator lost: counts unknown
            committed = commit_final_checkpoint(plan, backend)
        timeline.mark("shut_down")
    status = last[0]
    if error is not None:
        if committed:  # a final checkpoint is committed: the run so far rides on the error, to be written with it
            error.partial_result = failed_result(plan, backend, status, counters, wall)  # type: ignore[attr-defined]
        raise error
    if interrupted is not None:
        try:
            status = backend.orchestrator_status()  # after the drain: the last counts
        except Exception:  # noqa: BLE001 - keep the last status seen in the loop
            pass
        # the signal came as the run reached its goal (the Orchestrator says finished only then): the
        # CLI saves it as finished and exits as stopped once everything is written
        if status.finished and stopping.defer(interrupted):
            interrupted = None
    if failed is not None:
        name, text = failed
        raise RunFailed(f"component {name!r} failed while the run was stopping; the final checkpoint was not "
                        f"committed (--resume continues from the last periodic one):\n{text}")
    if alive:
        problem = (f"the run stopped, but did not shut down cleanly (components left running, or whose close() "
                   f"raised): {alive}")
        if interrupted is None:
            raise RunFailed(problem)
        print(f"janus: {problem}", file=sys.stderr)  # Ctrl-C: still hand back the run so far, below
    if interrupted is not None:  # the run so far rides on the interrupt, for the caller to write out
        interrupted.partial_result = summarize(plan, backend, status, counters, wall,  # type: ignore[attr-defined]  # rides on the interrupt
                                               outcome=stopping.outcome_of(interrupted))
        raise interrupted
    return summarize(plan, backend, status, counters, wall)


def _poll_until_finished(plan: RunPlan, backend: Backend, start: float, progress: Progress | None, timeout_s: float,
                         observer: Observer | None, last: list[RunStatus]) -> None:
    """Poll the Orchestrator until the run finishes (``last[0]``: the last poll's status);
    :class:`RunFailed` when a component fails, the Orchestrator gives up or ``timeout_s`` passes."""
    total, env_total = plan.total_updates, plan.env_step_total
    errors_shown = 0
    while True:
        status = last[0] = backend.orchestrator_status()
        errors_shown = report_worker_errors(status.worker_errors, errors_shown)
        if progress is not None and env_total:  # an RL run: in env steps (its rate and ETA: the progress line's)
            progress(min(int(status.env_steps), env_total), env_total, rl_note(status.curve))
        elif progress is not None:
            progress(min(status.trained, total), total, "")
        if observer is not None:
            with stopping.saving():  # its periodic results files are written whole; a stop is raised after
                observer(status, partial(result_so_far, plan, backend, status, start))
            stopping.raise_if_stopped()
        if backend.fatal is not None:
            name, text = backend.fatal
            raise RunFailed(f"component {name!r} failed; the run was stopped:\n{text}")
        if status.failure:
            raise RunFailed(f"the run was stopped: {status.failure}")
        if status.finished:
            return
        if time.perf_counter() - start > timeout_s:
            raise RunFailed(f"the run did not finish within {timeout_s:.0f}s")
        time.sleep(0.05)


def report_worker_errors(faults: dict[str, Any] | None, shown: int) -> int:
    """Print on stderr the worker replacements the Orchestrator recorded since ``shown`` of them
    were: errors (the first with its traceback) and instances replaced for not answering pings
    (stopped or hung); returns how many are shown now."""
    faults = faults or {}
    total = int(faults.get("notices_total", 0))
    if total <= shown:
        return shown
    new = faults["notices"][-(total - shown):]
    errors = [e for e in new if e["kind"] == "error"]
    # The error that stopped the run is not "restarted": the run's failure reports it.
    restarted = [e for e in errors if not e["stopped_run"]]
    if restarted and faults["total"] == len(errors) and faults.get("first_traceback"):  # the run's first error
        print(f"janus: a worker raised an error; it is restarted (a worker that keeps failing within a minute "
              f"of its start stops the run). Its traceback:\n{faults['first_traceback'].rstrip()}",
              file=sys.stderr, flush=True)
    for e in new:
        if e["kind"] == "unresponsive" and not e.get("stopped_run"):  # else the run's failure says it
            print(f"janus: worker {e['worker']!r} did not answer a ping for {e['silent_s']:.1f}s (a stopped or hung "
                  f"process); replaced it {e['lived_s']:.1f}s after its start", file=sys.stderr, flush=True)
        elif not e["stopped_run"]:
            print(f"janus: worker {e['worker']!r} raised {e['error']} ({e['in_a_row']} in a row); restarted it "
                  f"{e['lived_s']:.1f}s after its start", file=sys.stderr, flush=True)
    return total


def report_abandoned(backend: Backend, status: RunStatus) -> None:
    """One line on stderr for what hung and was left behind, if anything: the threads the backend's
    shutdown abandoned (:attr:`janus.runtime.backends.local.LocalBackend.abandoned`), and the
    evaluations the Orchestrator gave up at the goal (``status``: its last status)."""
    abandoned = getattr(backend, "abandoned", [])
    if abandoned:
        print(f"janus: abandoned {len(abandoned)} thread(s) that did not stop (hung, e.g. in env.step; left to exit "
              f"with the process): {', '.join(abandoned)}", file=sys.stderr, flush=True)
    given_up = status.evaluations_abandoned
    if given_up:
        print(f"janus: gave up the evaluation at {', '.join(f'{s:,}' for s in given_up)} env steps: it did not finish "
              f"within the stall timeout after the run reached its goal (hung?); results.json has the earlier ones",
              file=sys.stderr, flush=True)


def failed_result(plan: RunPlan, backend: Backend, status: RunStatus, counters: RunCounters,
                  wall: float) -> RunResult | None:
    """The :class:`RunResult` (status ``failed``) of a run that failed after its final commit; None
    where it cannot be built (the error that failed the run is raised either way)."""
    try:
        with_drain = backend.orchestrator_status()  # after the drain: the last counts
    except Exception:  # noqa: BLE001 - keep the last status seen in the loop
        with_drain = status
    try:
        return summarize(plan, backend, with_drain, counters, wall, outcome="failed")
    except Exception:  # noqa: BLE001 - a partial summary must not hide the run's own error
        return None


def commit_final_checkpoint(plan: RunPlan, backend: Backend) -> bool:
    """Commit what every component staged on stop, if every one did (a component that crashed
    did not: the run then resumes from the last periodic commit, whole and consistent); whether
    it committed."""
    names = plan.checkpointed
    folder = str(plan.cfg.runtime.checkpoint_dir)
    if names and checkpoints.staged(folder, names, checkpoints.FINAL):
        status = backend.orchestrator_status()
        state = run_state(status)
        if "trajectory_manager" in names:  # the replay buffer's count, as periodic commits record it
            state["inserted"] = status.inserted
        checkpoints.commit(folder, names, checkpoints.FINAL, state)
        return True
    return False


def result_so_far(plan: RunPlan, backend: Backend, status: RunStatus, start: float) -> RunResult:
    """The :class:`RunResult` of a run still going (counters as last reported)."""
    return summarize(plan, backend, status, RunCounters.of(backend.counters()), time.perf_counter() - start,
                     outcome="running")


