"""One function wires every component of a run, on any backend, and runs it: :func:`run_runtime`.

The run's :class:`~janus.runtime.plan.RunPlan` is worked out once; every factory here takes it.
Data takes one path on every backend: Worker -> WorkerProxy -> TrajectoryManager (the replay host,
whose JanusBuffer holds the run's rate limiter) -> Trainer (through its replay client) -> learner;
one ``orchestrator`` starts, watches, checkpoints and stops the run. What runs in the workers and
the Trainer, the buffer, the budget and the rates come from the run's registered algorithm
(:mod:`janus.algorithms.base`); this module names none. Returns a :class:`RunResult`.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import Any

from janus import stopping
from janus.algorithms.base import algorithm
from janus.buffer.pipeline import JanusBuffer
from janus.buffer.replay.experience import warm_up
from janus.config import RunConfig
from janus.errors import RunFailed
from janus.result import RunResult, reported_config
from janus.runtime import checkpoints
from janus.runtime.backends.base import Backend
from janus.runtime.checkpoints import Checkpointer, CheckpointSchedule
from janus.runtime.messages import StartMsg
from janus.runtime.orchestrator import Orchestrator, run_state
from janus.runtime.plan import RunPlan, evaluation_on, plan_of, serial
from janus.runtime.replay_client import ReplayClient
from janus.runtime.trainer import Trainer
from janus.runtime.trajectory_manager import TrajectoryManager
from janus.runtime.worker import Worker
from janus.runtime.worker_proxy import WorkerProxy

Progress = Callable[[int, int, str], None]
"""``(done, total, note)`` each poll: an RL run's env steps (note: its recent mean return), the synthetic
workload's learner updates (:attr:`RunPlan.env_step_total` says which)."""
Observer = Callable[[dict[str, Any], Callable[[], RunResult]], None]
"""Called on every poll of a run with the Orchestrator's status and a function that builds the
run's :class:`RunResult` so far (costly: call it only when writing, e.g. every 30 s)."""
__all__ = ["RunFailed", "RunPlan", "build", "make_backend", "run_runtime"]


class SharedBuffer:
    """Builds the run's JanusBuffer once, for the TrajectoryManager (which writes it) and a Trainer
    of the same process (which reads it: the buffer is its replay client)."""

    def __init__(self, plan: RunPlan) -> None:
        self.plan = plan
        self.buffer: JanusBuffer | None = None

    def __call__(self) -> JanusBuffer:
        if self.buffer is None:
            self.buffer = make_buffer(self.plan)
        return self.buffer

    def close(self) -> None:
        """Close the buffer if it was built (the TrajectoryManager closes it too; closing twice is fine)."""
        if self.buffer is not None:
            self.buffer.close()


# ---- factories (top-level functions + partial: picklable for Ray and worker processes) -----------
def make_buffer(plan: RunPlan) -> JanusBuffer:
    spec, cfg = plan.spec, plan.cfg
    # The buffer's rate limiter is the run's one pacing: off-policy the algorithm's sample/insert
    # ratio (its deadlock check passed when the plan was made) from its first batch at the
    # algorithm's threshold (DQN's learning_starts, which may be below batch_size: sampling is with
    # replacement); on-policy a queue of one rollout, each served num_epochs times.
    p = plan.pacing
    rates: dict[str, Any] = {} if spec.on_policy else {
        "min_size": p.min_size_to_sample, "samples_per_insert": p.samples_per_insert,
        "error_buffer": p.error_buffer if p.samples_per_insert else None}
    if spec.on_policy:
        rates.update(queue_depth=spec.queue_depth, max_staleness=spec.max_staleness)
    return JanusBuffer(
        replace(cfg.janus, learner_device=plan.replay_device),
        rollout_size=cfg.rollout_transitions // spec.row_steps if spec.on_policy else None, num_epochs=cfg.workload.num_epochs,
        seed=cfg.seed, sampler=spec.sampler, frame_stack=spec.frame_stack,
        beta_schedule=plan.beta_schedule(), **rates, **spec.sampler_kwargs,
    )


def _built(thing: Any) -> Any:
    """A factory of an object built ahead (so its cost falls before the run's clock)."""
    return thing


def make_actor(plan: RunPlan, index: int, instance: int = 0) -> Any:
    """Worker ``index``'s actor, instance ``instance`` (0 the first, +1 per restart). A resumed
    session acts in streams of its own (session ``1 + env steps resumed from``), not those of the
    session it resumes, whose experience up to the checkpoint is in the replay."""
    per_worker = plan.restored_env_steps // plan.cfg.workload.num_actors  # epsilon continues
    return plan.algo.actor(plan.cfg, index, initial_env_steps=per_worker, instance=instance, session=plan.session)


def make_learner(plan: RunPlan) -> Any:
    return plan.algo.learner(plan.cfg)


def new_worker(plan: RunPlan, index: int, proxy: str) -> Worker:
    p = plan.pacing
    return Worker(f"worker-{index}", proxy, partial(make_actor, plan, index), lockstep=p.lockstep,
                  max_rollouts=plan.pieces_per_worker, pieces_per_rollout=p.pieces_per_rollout, orchestrator="orchestrator",
                  actor_takes_instance=True)


def new_proxy(plan: RunPlan, name: str, workers_on_node: int) -> WorkerProxy:
    w = plan.cfg.workload
    # An asynchronous queue takes pieces in any order, so each goes on alone: a merged insert could
    # cross an item's end (lockstep, a round's pieces fill the one item being written; off-policy: no items).
    merge = 1 if plan.spec.on_policy and not plan.pacing.lockstep else workers_on_node
    rows = w.envs_per_actor * w.rollout_length // plan.spec.row_steps  # a piece's rows (a count the proxy compares)
    return WorkerProxy(name, "trajectory_manager", "trainer", batch_transitions=rows * merge,
                       max_delay_s=0.0 if plan.serial else 0.005)  # serial: flush every round, not by the clock


def checkpointer(plan: RunPlan, name: str) -> Checkpointer | None:
    if name not in plan.checkpointed:
        return None
    return Checkpointer(str(plan.cfg.runtime.checkpoint_dir), name, plan.cfg.runtime.resume)


def new_trajectory_manager(plan: RunPlan, shared: SharedBuffer | None = None) -> TrajectoryManager:
    """The buffer is allocated here, when the backend builds its components, so that its
    allocation (hundreds of MB for image-like observations) and the loading of its compiled
    kernels (~0.4 s) are not counted in the run's wall time. ``shared``: the buffer a Trainer of
    this process reads too."""
    buffer = shared() if shared is not None else make_buffer(plan)
    if plan.cfg.janus.placement != "cuda":  # host placements: their compiled kernels load here, not in timed calls
        warm_up()
    return TrajectoryManager("trajectory_manager", "orchestrator", buffer, checkpointer(plan, "trajectory_manager"),
                             put_wait_s=0.0 if plan.serial else 0.02, resumed=plan.resumed,
                             sample_batch=plan.cfg.minibatch_size // plan.spec.row_steps,
                             batches_per_item=plan.cfg.updates_per_iteration if plan.spec.on_policy else 0)


def new_trainer(plan: RunPlan, replay: Callable[[], ReplayClient]) -> Trainer:
    """The learner is built here, before the run's clock starts (a first torch optimiser can take
    seconds to import its machinery), and handed to the Trainer when it starts; ``replay`` builds
    its replay client when it starts (the serial scheduler's Trainer never waits)."""
    return Trainer("trainer", "orchestrator", partial(_built, make_learner(plan)), replay, plan.pacing.publish_every,
                   checkpointer(plan, "trainer"), report_every=plan.cfg.runtime.max_in_flight // 2,
                   batch_wait_s=0.0 if plan.serial else 0.02, max_updates=plan.total_updates,
                   max_policy_lag=plan.spec.max_staleness)


def new_orchestrator(plan: RunPlan, roles: dict[str, str], restart: Callable[[str], str | None] | None) -> Orchestrator:
    r = plan.cfg.runtime
    names = plan.checkpointed
    schedule = CheckpointSchedule(str(r.checkpoint_dir), names, r.checkpoint_interval_s) if names else None
    return Orchestrator("orchestrator", roles, plan.rates, plan.total_updates, restart, r.ping_interval_s, r.pong_timeout_s,
                        initial=dict(plan.resumed), checkpoints=schedule, total_pieces=plan.pieces_in_all,
                        stall_timeout_s=r.stall_timeout_s, all_pieces=plan.takes_every_piece,
                        eval_interval_steps=r.eval_interval_steps if plan.evaluates else 0)


def new_evaluator(plan: RunPlan) -> Any:
    from janus.runtime.evaluator import Evaluator

    cfg = plan.cfg
    best = str(Path(cfg.runtime.best_dir) / "policy.pt") if cfg.runtime.best_dir else None
    return Evaluator("evaluator", "trainer", "orchestrator", partial(evaluation_policy, plan),
                     cfg.runtime.eval_episodes, best, cfg.seed)


def evaluation_policy(plan: RunPlan) -> Any:
    """A :class:`~janus.policy.Policy` of the run's algorithm; the Evaluator loads each snapshot into it."""
    from janus.policy import Policy

    return Policy(plan.cfg, plan.algo.learner(plan.cfg), Path(plan.cfg.runtime.best_dir or "."))


def build(plan: RunPlan, backend: Backend, shared: SharedBuffer | None) -> dict[str, tuple[str, str]]:
    """Register every component with ``backend``; returns the layout. ``shared``: the buffer the
    Trainer and the TrajectoryManager share where they share a process, else None (the Trainer's
    replay client is the backend's remote one)."""
    places = plan.layout
    roles = {name: role for name, (role, _) in places.items() if role != "orchestrator"}
    per_node: dict[str, int] = {}
    for role, node in places.values():
        if role == "worker":
            per_node[node] = per_node.get(node, 0) + 1
    for name, (role, node) in places.items():
        if role == "trainer":
            replay = partial(_built, shared()) if shared is not None else backend.remote_replay(*replay_host(plan))
            if replay is None:
                raise TypeError(f"{type(backend).__name__} hosts the Trainer beside the replay host: build it with a SharedBuffer")
            factory: Callable[[], Any] = partial(new_trainer, plan, replay)
        elif role == "trajectory_manager":
            factory = partial(new_trajectory_manager, plan, shared)
        elif role == "proxy":
            factory = partial(new_proxy, plan, name, per_node[node])
        elif role == "worker":
            factory = partial(new_worker, plan, int(name.split("-")[1]), f"proxy-{node.split('-')[1]}")
        elif role == "evaluator":
            factory = partial(new_evaluator, plan)
        else:
            factory = partial(new_orchestrator, plan, roles, backend.restart)
        backend.add(name, role, factory, node)
    return dict(places)


def make_backend(cfg: RunConfig) -> Backend:
    """The one place that picks a backend (``runtime.backend``)."""
    if cfg.runtime.backend == "process":
        from janus.runtime.backends.process import ProcessBackend

        return ProcessBackend(cfg)
    if cfg.runtime.backend == "ray":
        from janus.runtime.backends.ray import RayBackend

        return RayBackend(cfg.runtime.address, cfg.runtime.max_calls_in_flight)
    from janus.runtime.backends.local import LocalBackend

    return LocalBackend(serial=serial(cfg), worker_stop_s=cfg.runtime.pong_timeout_s,
                        serial_hang_s=cfg.runtime.stall_timeout_s)


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


def replay_host(plan: RunPlan) -> tuple[str, int, str]:
    """Who a remote replay client reaches and how: the host's name, its prefetch depth (batches
    in flight) and the learner device it delivers to."""
    return "trajectory_manager", plan.cfg.runtime.max_in_flight, plan.cfg.janus.learner_device


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
    start = time.perf_counter()
    backend.deliver("orchestrator", StartMsg())
    last: list[dict[str, Any]] = [{}]  # the last poll's status
    interrupted: KeyboardInterrupt | None = None  # Ctrl-C, or SIGTERM/SIGHUP through the CLI
    error: Exception | None = None  # the run failed: a stall, a worker that keeps failing, an observer's error
    committed = False
    try:
        with stopping.interruptible():
            _poll_until_finished(plan, backend, start, progress, timeout_s, observer, last)
        wall = time.perf_counter() - start
    except KeyboardInterrupt as exc:
        interrupted, wall = exc, time.perf_counter() - start
    except Exception as exc:  # noqa: BLE001 - raised below, with the run so far where it committed
        error, wall = exc, time.perf_counter() - start
    finally:
        alive = backend.shutdown()
        report_abandoned(backend, last[0])
        counters = backend.counters()
        failed = backend.fatal  # also an error while draining, after the goal was reached
        if failed is None and not backend.gcs_lost:  # Ray's coordinator lost: counts unknown
            committed = commit_final_checkpoint(plan, backend)
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
        if status.get("finished") and stopping.defer(interrupted):
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
                         observer: Observer | None, last: list[dict[str, Any]]) -> None:
    """Poll the Orchestrator until the run finishes (``last[0]``: the last poll's status);
    :class:`RunFailed` when a component fails, the Orchestrator gives up or ``timeout_s`` passes."""
    total, env_total = plan.total_updates, plan.env_step_total
    errors_shown = 0
    while True:
        status = last[0] = backend.orchestrator_status()
        errors_shown = report_worker_errors(status.get("worker_errors"), errors_shown)
        if progress is not None and env_total:  # an RL run: in env steps (its rate and ETA: the progress line's)
            progress(min(int(status["env_steps"]), env_total), env_total, rl_note(status["curve"]))
        elif progress is not None:
            progress(min(status["trained"], total), total, "")
        if observer is not None:
            with stopping.saving():  # its periodic results files are written whole; a stop is raised after
                observer(status, partial(result_so_far, plan, backend, status, start))
            stopping.raise_if_stopped()
        if backend.fatal is not None:
            name, text = backend.fatal
            raise RunFailed(f"component {name!r} failed; the run was stopped:\n{text}")
        if status["failure"]:
            raise RunFailed(f"the run was stopped: {status['failure']}")
        if status["finished"]:
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


def report_abandoned(backend: Backend, status: Mapping[str, Any]) -> None:
    """One line on stderr for what hung and was left behind, if anything: the threads the backend's
    shutdown abandoned (:attr:`janus.runtime.backends.local.LocalBackend.abandoned`), and the
    evaluations the Orchestrator gave up at the goal (``status``: its last summary)."""
    abandoned = getattr(backend, "abandoned", [])
    if abandoned:
        print(f"janus: abandoned {len(abandoned)} thread(s) that did not stop (hung, e.g. in env.step; left to exit "
              f"with the process): {', '.join(abandoned)}", file=sys.stderr, flush=True)
    given_up = status.get("evaluations_abandoned") or []
    if given_up:
        print(f"janus: gave up the evaluation at {', '.join(f'{s:,}' for s in given_up)} env steps: it did not finish "
              f"within the stall timeout after the run reached its goal (hung?); results.json has the earlier ones",
              file=sys.stderr, flush=True)


def failed_result(plan: RunPlan, backend: Backend, status: dict[str, Any], counters: dict[str, dict[str, float]],
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
            state["inserted"] = status["inserted"]
        checkpoints.commit(folder, names, checkpoints.FINAL, state)
        return True
    return False


def result_so_far(plan: RunPlan, backend: Backend, status: dict[str, Any], start: float) -> RunResult:
    """The :class:`RunResult` of a run still going (counters as last reported)."""
    return summarize(plan, backend, status, backend.counters(), time.perf_counter() - start, outcome="running")


def produced(workers: Mapping[str, Mapping[str, float]], status: Mapping[str, Any], key: str) -> int:
    """What every worker instance of this session produced (``key``: ``env_steps`` or
    ``transitions``), retired instances included, on every backend.

    Two lower bounds, the larger wins: the Orchestrator's count of each instance's last report
    (live on every backend: a process-backend worker's own counters reach the learner only when it
    stops, and a killed one's never), and the current instances' counters plus the retired ones'
    as the Orchestrator last heard them (ahead when a stop drained pieces after the last status)."""
    reported = int(status.get(f"worker_{key}", 0))
    current = int(sum(c.get(key, 0) for c in workers.values())) + int(status.get(f"retired_{key}", 0))
    return max(reported, current)


def summarize(plan: RunPlan, backend: Backend, status: dict[str, Any], counters: dict[str, dict[str, float]], wall: float,
              outcome: str = "finished") -> RunResult:
    """The run's :class:`RunResult`: samples/s, stage times, counts and the runtime figures.
    The counts of the run state this session resumed from start the whole run's; ``outcome``: its
    ``status`` (finished, interrupted, stopped or running)."""
    cfg, earlier = plan.cfg, plan.resumed
    workers = {n: c for n, c in counters.items() if n.startswith("worker-")}
    tm, trainer = counters.get("trajectory_manager", {}), counters.get("trainer", {})
    proxies = {n: c for n, c in counters.items() if n.startswith("proxy-")}
    rows = plan.spec.row_steps  # the replay counts rows: a whole trajectory each for IMPALA/APPO
    transitions = produced(workers, status, "transitions") * rows
    trained = int(trainer.get("batches_trained", status.get("trained", 0)))
    update_s = trainer.get("update_s", 0.0)
    rollout_s = sum(c.get("rollout_s", 0.0) for c in workers.values()) / max(len(workers), 1)  # per worker
    limiter = plan.limiter
    inserted = int(tm.get("transitions_inserted", 0)) * rows
    curve = learning_curve(status.get("curve", []))
    metrics = metric_columns(status.get("train_metrics", []))
    env_steps = produced(workers, status, "env_steps")
    faults = status.get("worker_errors", {})
    return RunResult(
        name=cfg.name,
        config=reported_config(cfg),
        status=outcome,
        samples_per_s=trained * cfg.minibatch_size / wall,
        env_steps_per_s=transitions / wall,
        wall_s=wall,
        stage_s={
            "rollout": rollout_s,
            "collect": tm.get("buffer.collect_s", 0.0),
            "select": tm.get("buffer.select_s", 0.0),
            "update": update_s,
            "learner_wait": tm.get("buffer.learner_wait_s", 0.0),
            "actor_blocked": tm.get("buffer.actor_blocked_s", 0.0),
        },
        counts={
            "updates": trained, "transitions_produced": int(transitions),
            # this invocation's steps: the workers' now, plus those of instances a restart replaced
            "env_steps": env_steps,
            # the whole run's, over every session of a resumed run (= the above when not resumed)
            "run_env_steps": int(earlier.get("env_steps", 0)) + env_steps,
            "run_updates": int(earlier.get("trained", 0)) + trained,
            "transitions_inserted": inserted,
            "transitions_collected": int(tm.get("buffer.transitions_collected", 0)) * rows,
            "collect_calls": int(tm.get("buffer.collect_calls", 0)),
            "select_calls": int(tm.get("buffer.select_calls", 0)),
            "batches_selected": int(tm.get("buffer.batches_selected", 0)),
        },
        runtime={
            "backend": cfg.runtime.backend,
            "learner_utilization": update_s / wall if wall > 0 else 0.0,
            "learner_wait_s": trainer.get("wait_s", 0.0),
            # the workers' share of the wall spent acting (the rest: waiting for room, parameters, messages)
            "actor_utilization": rollout_s / wall if wall > 0 else 0.0,
            **policy_lag(trainer, tm),
            "pacing": {  # the replay's rate limiter: its settings and how long each side waited on it
                "samples_per_insert": limiter.samples_per_insert, "min_size_to_sample": limiter.min_size_to_sample,
                "error_buffer": limiter.error_buffer, "largest_insert": limiter.insert_piece,
                "sample_batch": limiter.sample_batch,
                "insert_wait_s": tm.get("buffer.insert_wait_s", 0.0), "sample_wait_s": tm.get("buffer.sample_wait_s", 0.0),
                "pieces_dropped_at_stop": int(tm.get("pieces_dropped_at_stop", 0)),
            },
            "messages": backend.stats.as_dict(),
            "param_versions_published": int(trainer.get("versions_published", 0)),
            "param_fetches_per_node": {n: int(c.get("param_fetches", 0)) for n, c in proxies.items()},
            "worker_restarts": status.get("restarts", {}),
            "worker_errors": faults.get("recent", []),  # the newest 20
            "worker_errors_total": int(faults.get("total", 0)),
            "workers_unresponsive": int(faults.get("unresponsive_total", 0)),  # replaced for going silent (hung)
            "workers_abandoned": list(getattr(backend, "abandoned", [])),  # hung threads left running at the end
            "evaluations_abandoned": list(status.get("evaluations_abandoned", [])),  # given up at the goal (hung)
            "stalls": status.get("stalls", 0),
            "priorities_dropped": int(tm.get("priorities_dropped", 0) + trainer.get("priorities_dropped", 0)),
            # only a backend spread over nodes (Ray) says where each component ran
            "nodes": backend.node_summary(),
        },
        evaluations=list(status.get("evaluations", [])) if plan.evaluates else None,
        train_metrics=metrics or None,
        **curve,
    )


def policy_lag(trainer: Mapping[str, float], tm: Mapping[str, float]) -> dict[str, Any]:
    """An asynchronous run's policy lag (versions between the parameters that acted a batch's rows
    and those that trained on it: mean over batches, worst row) and the items dropped as too stale;
    nothing for a run whose rows carry no version."""
    batches = int(trainer.get("policy_lag_batches", 0))
    if not batches:
        return {}
    return {"policy_lag": {"mean": trainer.get("policy_lag_sum", 0.0) / batches, "max": trainer.get("policy_lag_max", 0.0),
                           "batches": batches, "items_dropped_stale": int(tm.get("buffer.items_dropped_stale", 0)),
                           "batches_dropped_stale": int(trainer.get("batches_dropped_stale", 0))}}


RESULTS_FROM_RUN_STATE = (
    "the run's final commit (checkpoint/run_state.json): the session that trained it stopped before it wrote its "
    "results, and janus train --resume wrote them from the commit. Counts and rates are the whole run's; stage "
    "times, message counts and the other runtime figures are not recorded in a commit and are left out")


def result_from_run_state(cfg: RunConfig, state: Mapping[str, Any]) -> RunResult:
    """The finished :class:`RunResult` of a run that reached its budget, rebuilt from its commit
    record ``state`` (:func:`janus.runtime.checkpoints.read_run_state`): learning curve,
    evaluations, training scalars and counters as committed. What a commit does not record
    (stage times, messages) is left out, never made up, and ``runtime.results_from`` says so."""
    trained, steps, wall = int(state["trained"]), int(state["env_steps"]), float(state["wall_s"])
    counts = {"updates": trained, "env_steps": steps, "run_env_steps": steps, "run_updates": trained}
    if "inserted" in state:  # the replay's rows, in transitions
        counts["transitions_inserted"] = int(state["inserted"]) * algorithm(cfg.workload.algo).buffer_spec(cfg).row_steps
    return RunResult(
        name=cfg.name, config=reported_config(cfg), status="finished",
        samples_per_s=trained * cfg.minibatch_size / wall if wall > 0 else 0.0,
        env_steps_per_s=steps / wall if wall > 0 else 0.0, wall_s=wall, stage_s={}, counts=counts,
        runtime={"backend": cfg.runtime.backend, "worker_restarts": dict(state.get("restarts", {})),
                 "results_from": RESULTS_FROM_RUN_STATE},
        evaluations=[dict(e) for e in state.get("evaluations", [])] if evaluation_on(cfg, algorithm(cfg.workload.algo)) else None,
        train_metrics=metric_columns(list(state.get("train_metrics", []))) or None,
        **learning_curve([(t, s, r) for t, s, r in state.get("curve", [])]),
    )


def metric_columns(rows: list[dict[str, float]]) -> dict[str, list[float | None]]:
    """The Orchestrator's rows of training scalars as columns (``None`` where a row lacks one)."""
    names: dict[str, None] = {}
    for row in rows:
        names.update(dict.fromkeys(row))
    return {name: [row.get(name) for row in rows] for name in names}


def rl_note(curve: list[tuple[float, int, float]], window: int = 20) -> str:
    """Progress text for RL runs: the mean return of the last ``window`` episodes."""
    if not curve:
        return ""
    last = [r for _, _, r in curve[-window:]]
    return f"return {sum(last) / len(last):.1f}"


def learning_curve(curve: list[tuple[float, int, float]], window: int = 20) -> dict[str, Any]:
    """Episode returns vs env steps and wall time, and the mean of the last ``window`` returns."""
    if not curve:
        return {}
    returns = [r for _, _, r in curve]
    last = returns[-window:]
    return {
        "learning_curve": {"wall_s": [t for t, _, _ in curve], "env_steps": [s for _, s, _ in curve], "return": returns},
        "episodes": len(returns),
        "final_mean_return": sum(last) / len(last),
    }
