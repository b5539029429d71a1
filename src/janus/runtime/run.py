"""One function wires every component of a run, on any backend, and runs it: :func:`run_runtime`.

Workers ``worker-i`` live on node ``i // workers_per_node``, each node has one ``proxy-<node>``;
one ``trajectory_manager`` hosts the JanusBuffer, one ``trainer`` learns, one ``orchestrator``
paces (one :class:`~janus.runtime.pacing.SampleToInsertRatio`) and watches. What runs in the
workers and the Trainer, the buffer, the budget and the rates come from the run's registered
algorithm (:mod:`janus.algorithms.base`); this module names none. Returns a :class:`RunResult`.
"""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import Any

from janus import stopping
from janus.algorithms.base import Algorithm, algorithm
from janus.buffer.experience import warm_up
from janus.buffer.janus import JanusBuffer
from janus.buffer.prioritized import LinearSchedule
from janus.config import RunConfig, resolve_backend
from janus.errors import ConfigError, RunFailed
from janus.result import RunResult, reported_config
from janus.runtime import checkpoints
from janus.runtime.backends.base import Backend
from janus.runtime.checkpoints import Checkpointer, CheckpointSchedule
from janus.runtime.components import Trainer, TrajectoryManager, Worker, WorkerProxy
from janus.runtime.messages import StartMsg
from janus.runtime.orchestrator import Orchestrator, run_state
from janus.runtime.pacing import SampleToInsertRatio

Progress = Callable[[int, int, str], None]
Observer = Callable[[dict[str, Any], Callable[[], RunResult]], None]
"""Called on every poll of a run with the Orchestrator's status and a function that builds the
run's :class:`RunResult` so far (costly: call it only when writing, e.g. every 30 s)."""
__all__ = ["RunFailed", "build", "learner_end_device", "make_backend", "run_runtime"]


def algo_of(cfg: RunConfig) -> Algorithm:
    """The registered algorithm of a run (its module is imported on first use)."""
    return algorithm(cfg.workload.algo)


def trainer_takes_batches(cfg: RunConfig) -> bool:
    """The Trainer shares the TrajectoryManager's process (local, process backends): it takes its
    batches from the JanusBuffer itself. On Ray they are separate actors and batches are messages."""
    return cfg.runtime.backend != "ray"


def learner_end_device(cfg: RunConfig) -> str:
    """Where the JanusBuffer delivers batches: the learner device when the Trainer shares the
    TrajectoryManager's process, else ``cpu`` (ray: batches travel as numpy)."""
    return cfg.janus.learner_device if trainer_takes_batches(cfg) else "cpu"


class SharedBuffer:
    """Builds the run's JanusBuffer once, for the TrajectoryManager (which writes it) and the
    Trainer (which reads it) of one process."""

    def __init__(self, cfg: RunConfig) -> None:
        self.cfg = cfg
        self.buffer: JanusBuffer | None = None

    def __call__(self) -> JanusBuffer:
        if self.buffer is None:
            self.buffer = make_buffer(self.cfg)
        return self.buffer

    def close(self) -> None:
        """Close the buffer if it was built (the TrajectoryManager closes it too; closing twice is fine)."""
        if self.buffer is not None:
            self.buffer.close()


# ---- factories (top-level functions + partial: picklable for Ray and worker processes) -----------
def make_buffer(cfg: RunConfig) -> JanusBuffer:
    algo = algo_of(cfg)
    spec = algo.buffer_spec(cfg)
    j = cfg.janus
    # Off-policy, the buffer serves its first batch at the limiter's threshold (e.g. DQN's
    # learning_starts, which may be below batch_size: sampling is with replacement); a buffer
    # waiting for more than the limiter lets in would deadlock the two.
    min_size = None if spec.on_policy else algo.pacing(cfg).min_size_to_sample
    return JanusBuffer(
        replace(j, learner_device=learner_end_device(cfg)),
        rollout_size=cfg.rollout_transitions if spec.on_policy else None, num_epochs=cfg.workload.num_epochs,
        seed=cfg.seed, sampler=spec.sampler, min_size=min_size, frame_stack=spec.frame_stack,
        beta_schedule=beta_schedule(cfg, spec), **spec.sampler_kwargs,
    )


def beta_schedule(cfg: RunConfig, spec: Any) -> LinearSchedule | None:
    """Prioritized replay's importance exponent over the run's updates (``spec.beta_final`` set):
    linear from ``beta`` at update 0 to ``beta_final`` at the budget's last, continued by a resumed
    run from the updates it had trained (as PPO's learning rate, it follows the budget: one raised
    on resume spreads the schedule over the new budget, so beta resumes at its value there)."""
    if spec.beta_final is None:
        return None
    total = algo_of(cfg).budget(cfg).total_updates
    return LinearSchedule(spec.sampler_kwargs["beta"], spec.beta_final, total,
                          offset=int(load_run_state(cfg).get("trained", 0)))


def _built(thing: Any) -> Any:
    """A factory of an object built ahead (so its cost falls before the run's clock)."""
    return thing


def make_actor(cfg: RunConfig, index: int, instance: int = 0) -> Any:
    """Worker ``index``'s actor, instance ``instance`` (0 the first, +1 per restart). A resumed
    session acts in streams of its own (session ``1 + env steps resumed from``), not those of the
    session it resumes, whose experience up to the checkpoint is in the replay."""
    state = load_run_state(cfg)
    restored = int(state.get("env_steps", 0))
    session = 1 + restored if state else 0
    return algo_of(cfg).actor(cfg, index, initial_env_steps=restored // cfg.workload.num_actors,  # epsilon continues
                              instance=instance, session=session)


def make_learner(cfg: RunConfig) -> Any:
    return algo_of(cfg).learner(cfg)


def make_limiter(cfg: RunConfig) -> SampleToInsertRatio:
    """The run's one pacing object, from its algorithm's pacing."""
    p = algo_of(cfg).pacing(cfg)
    return SampleToInsertRatio(
        p.samples_per_insert, p.min_size_to_sample, p.error_buffer, insert_piece=p.piece_steps * cfg.workload.envs_per_actor,
        sample_batch=cfg.minibatch_size, max_in_flight=cfg.runtime.max_in_flight,
    )


def new_worker(cfg: RunConfig, index: int, proxy: str) -> Worker:
    p = algo_of(cfg).pacing(cfg)
    return Worker(f"worker-{index}", proxy, partial(make_actor, cfg, index), lockstep=p.lockstep,
                  max_rollouts=pieces_per_worker(cfg), pieces_per_rollout=p.pieces_per_rollout, orchestrator="orchestrator",
                  paced=make_limiter(cfg).limits_inserts, actor_takes_instance=True)


def new_proxy(cfg: RunConfig, name: str, workers_on_node: int) -> WorkerProxy:
    w = cfg.workload
    return WorkerProxy(name, "trajectory_manager", "trainer", batch_transitions=w.envs_per_actor * w.rollout_length * workers_on_node,
                       max_delay_s=0.0 if serial(cfg) else 0.005)  # serial: flush every round, not by the clock


def checkpointed(cfg: RunConfig) -> tuple[str, ...]:
    """Components whose state is checkpointed (runs with a checkpoint folder, as the algorithm's
    buffer spec says: the learner when it has a policy, the replay buffer off-policy)."""
    if not cfg.runtime.checkpoint_dir:
        return ()
    spec = algo_of(cfg).buffer_spec(cfg)
    return ("trainer",) * spec.checkpoint_learner + ("trajectory_manager",) * spec.checkpoint_replay


def checkpointer(cfg: RunConfig, name: str) -> Checkpointer | None:
    if name not in checkpointed(cfg):
        return None
    return Checkpointer(str(cfg.runtime.checkpoint_dir), name, cfg.runtime.resume)


def load_run_state(cfg: RunConfig) -> dict[str, Any]:
    """Counters and learning curve of the run being resumed ({} when not resuming), as
    :func:`resumed_counts` continues them."""
    if not cfg.runtime.resume or not cfg.runtime.checkpoint_dir:
        return {}
    return resumed_counts(cfg, checkpoints.read_run_state(cfg.runtime.checkpoint_dir))


def resumed_counts(cfg: RunConfig, state: dict[str, Any]) -> dict[str, Any]:
    """The commit record ``state`` with the counts a resumed run continues from.

    On-policy (lockstep) a rollout acted but not wholly trained at the commit is lost with the
    resume and acted again (:func:`pieces_per_worker`), so the run continues from the env steps of
    the rollouts trained: the steps and episodes of the lost one are not counted twice, and the
    run ends at its env-step budget, as one that was never stopped does."""
    p = algo_of(cfg).pacing(cfg)
    if not p.lockstep or not state:
        return state
    w = cfg.workload
    steps = rounds_trained(cfg, state) * p.pieces_per_rollout * p.piece_steps * w.envs_per_actor * w.num_actors
    if int(state.get("env_steps", 0)) <= steps:
        return state
    return {**state, "env_steps": steps, "curve": [c for c in state.get("curve", []) if c[1] <= steps]}


def rounds_trained(cfg: RunConfig, state: dict[str, Any]) -> int:
    """On-policy: the rounds (every worker's rollout) wholly trained at the commit ``state``."""
    return int(state.get("trained", 0)) // cfg.updates_per_iteration


def serial(cfg: RunConfig) -> bool:
    """Local runs with both overlaps off use the deterministic serial scheduler."""
    j = cfg.janus
    return cfg.runtime.backend == "local" and not j.overlap_collect and not j.overlap_select


def new_trajectory_manager(cfg: RunConfig, shared: SharedBuffer | None = None) -> TrajectoryManager:
    """The buffer is allocated here, when the backend builds its components, so that its
    allocation (hundreds of MB for image-like observations) and the loading of its compiled
    kernels (~0.4 s) are not counted in the run's wall time.
    With ``shared`` the Trainer reads the same buffer and this TrajectoryManager serves no batches."""
    buffer = shared() if shared is not None else make_buffer(cfg)
    if cfg.janus.placement != "cuda":  # host placements: their compiled kernels load here, not in timed calls
        warm_up()
    return TrajectoryManager("trajectory_manager", "trainer", "orchestrator", buffer,
                             checkpointer(cfg, "trajectory_manager"), serves=shared is None)


def new_trainer(cfg: RunConfig, shared: SharedBuffer | None = None) -> Trainer:
    """The learner is built here, before the run's clock starts (a first torch optimiser can take
    seconds to import its machinery), and handed to the Trainer when it starts. With ``shared``
    the Trainer takes its batches from that buffer (the serial scheduler's Trainer never waits)."""
    publish = algo_of(cfg).pacing(cfg).publish_every
    buffer = partial(_built, shared()) if shared is not None else None
    return Trainer("trainer", "trajectory_manager", "orchestrator", partial(_built, make_learner(cfg)), publish,
                   cfg.janus.learner_device, checkpointer(cfg, "trainer"), report_every=cfg.runtime.max_in_flight // 2,
                   buffer=buffer, batch_wait_s=0.0 if serial(cfg) else 0.02)


def new_orchestrator(cfg: RunConfig, roles: dict[str, str], restart: Callable[[str], str | None] | None) -> Orchestrator:
    r = cfg.runtime
    budget = algo_of(cfg).budget(cfg)
    total = budget.total_updates
    names = checkpointed(cfg)
    schedule = CheckpointSchedule(str(r.checkpoint_dir), names, r.checkpoint_interval_s) if names else None
    return Orchestrator("orchestrator", roles, make_limiter(cfg), total, restart, r.ping_interval_s, r.pong_timeout_s,
                        initial=load_run_state(cfg), checkpoints=schedule, total_pieces=pieces_in_all(cfg),
                        stall_timeout_s=r.stall_timeout_s, all_pieces=budget.env_steps > 0,
                        eval_interval_steps=r.eval_interval_steps if evaluates(cfg) else 0,
                        sample_credits_to="trainer" if trainer_takes_batches(cfg) else None,
                        worker_quota=pieces_per_worker(cfg) if pieces_in_all(cfg) else 0)


def check_progress_possible(cfg: RunConfig) -> None:
    """Reject, before any work, a run whose sampling threshold its workers can never meet, or whose
    ratio can never allow the batches it must train (a run without an env-step budget; one with a
    budget takes its update count from the ratio, and gets its last batches once every piece is in)."""
    p = algo_of(cfg).pacing(cfg)
    pieces = pieces_in_all(cfg)
    produced = pieces * p.piece_steps * cfg.workload.envs_per_actor + int(load_run_state(cfg).get("inserted", 0))
    if pieces and p.min_size_to_sample > produced:
        raise ConfigError(
            f"this run can never sample: sampling starts after {p.min_size_to_sample:,} transitions "
            f"(runtime.min_inserts / learning_starts) but its workers produce {produced:,} in all; "
            f"lower the minimum or raise the budget (workload.total_env_steps, or workload.iterations where no "
            f"env-step budget is set) or workload.num_actors")
    budget = algo_of(cfg).budget(cfg)
    if pieces and p.samples_per_insert and not budget.env_steps:
        limiter = make_limiter(cfg)
        allowed = limiter.batches_allowed(produced)
        if allowed < budget.total_updates:
            raise ConfigError(
                f"this run can never train its {budget.total_updates:,} batches: at samples_per_insert "
                f"{p.samples_per_insert:g} its workers' {produced:,} transitions (minus min_size_to_sample "
                f"{p.min_size_to_sample:,}) allow {allowed:,} batches of {limiter.sample_batch}; raise "
                f"workload.iterations / num_actors or runtime.samples_per_insert, or lower the updates per iteration")


def pieces_in_all(cfg: RunConfig) -> int:
    """Off-policy pieces every worker sends in all (0: until stopped; on-policy rollouts are whole)."""
    p = algo_of(cfg).pacing(cfg)
    return 0 if p.lockstep else pieces_per_worker(cfg) * cfg.workload.num_actors


def pieces_per_worker(cfg: RunConfig) -> int:
    """Pieces each Worker sends in this invocation (0: until stopped). A resumed run under an
    env-step budget, or on-policy, sends only the rounds its commit has not covered (at least one rollout): off-policy
    by the committed ``env_steps``, on-policy by the rollouts trained (a resumed PPO worker allowed
    the whole budget's pieces acted a rollout or two past the budget before the stop reached it)."""
    p = algo_of(cfg).pacing(cfg)
    state = load_run_state(cfg) if p.max_pieces else {}
    if not state:
        return p.max_pieces
    if p.lockstep:  # the rollouts trained on: one acted but not yet trained at the commit is lost, and acted again
        done_rounds = rounds_trained(cfg, state)
    elif algo_of(cfg).budget(cfg).env_steps:
        round_steps = p.piece_steps * cfg.workload.envs_per_actor * cfg.workload.num_actors
        done_rounds = int(state.get("env_steps", 0)) // round_steps
    else:
        return p.max_pieces
    return max(p.pieces_per_rollout, p.max_pieces - done_rounds * p.pieces_per_rollout)


def layout(cfg: RunConfig) -> dict[str, tuple[str, str]]:
    """Component name -> (role, node label)."""
    n = cfg.workload.num_actors
    per_node = cfg.runtime.workers_per_node or n
    out = {"trainer": ("trainer", "node-0"), "trajectory_manager": ("trajectory_manager", "node-0")}
    for node in range(math.ceil(n / per_node)):
        out[f"proxy-{node}"] = ("proxy", f"node-{node}")
    for i in range(n):
        out[f"worker-{i}"] = ("worker", f"node-{i // per_node}")
    if evaluates(cfg):
        out["evaluator"] = ("evaluator", "node-0")
    out["orchestrator"] = ("orchestrator", "node-0")
    return out


def evaluates(cfg: RunConfig) -> bool:
    """Periodic evaluation is on (``runtime.eval_interval_steps``) for an algorithm with a policy."""
    return bool(cfg.runtime.eval_interval_steps) and algo_of(cfg).has_policy


def new_evaluator(cfg: RunConfig) -> Any:
    from janus.runtime.evaluator import Evaluator

    best = str(Path(cfg.runtime.best_dir) / "policy.pt") if cfg.runtime.best_dir else None
    return Evaluator("evaluator", "trainer", "orchestrator", partial(evaluation_policy, cfg),
                     cfg.runtime.eval_episodes, best, cfg.seed)


def evaluation_policy(cfg: RunConfig) -> Any:
    """A :class:`~janus.policy.Policy` of the run's algorithm; the Evaluator loads each snapshot into it."""
    from janus.policy import Policy, policy_module

    learner = algo_of(cfg).learner(cfg).learner  # type: ignore[attr-defined]  # a policy's algorithm: a GymLearnerSide
    policy_module(learner).eval()
    return Policy(cfg, learner, Path(cfg.runtime.best_dir or "."))


def build(cfg: RunConfig, backend: Backend, shared: SharedBuffer | None) -> dict[str, tuple[str, str]]:
    """Register every component with ``backend``; returns the layout. ``shared``: the buffer the
    Trainer and the TrajectoryManager share (:func:`trainer_takes_batches`), else None."""
    places = layout(cfg)
    roles = {name: role for name, (role, _) in places.items() if role != "orchestrator"}
    per_node: dict[str, int] = {}
    for role, node in places.values():
        if role == "worker":
            per_node[node] = per_node.get(node, 0) + 1
    for name, (role, node) in places.items():
        if role == "trainer":
            factory: Callable[[], Any] = partial(new_trainer, cfg, shared)
        elif role == "trajectory_manager":
            factory = partial(new_trajectory_manager, cfg, shared)
        elif role == "proxy":
            factory = partial(new_proxy, cfg, name, per_node[node])
        elif role == "worker":
            factory = partial(new_worker, cfg, int(name.split("-")[1]), f"proxy-{node.split('-')[1]}")
        elif role == "evaluator":
            factory = partial(new_evaluator, cfg)
        else:
            factory = partial(new_orchestrator, cfg, roles, backend.restart)
        backend.add(name, role, factory, node)
    return places


def make_backend(cfg: RunConfig) -> Backend:
    """The one place that picks a backend (``runtime.backend``)."""
    if cfg.runtime.backend == "process":
        from janus.runtime.backends.process import ProcessBackend

        return ProcessBackend(cfg)
    if cfg.runtime.backend == "ray":
        from janus.runtime.backends.ray import RayBackend

        return RayBackend(cfg.runtime.address, cfg.runtime.max_calls_in_flight)
    from janus.runtime.backends.local import LocalBackend

    return LocalBackend(serial=serial(cfg))


def run_runtime(cfg: RunConfig, progress: Progress | None = None, backend: Backend | None = None, timeout_s: float = 3600.0,
                observer: Observer | None = None) -> RunResult:
    """Run ``cfg`` (resolved) on its backend; stop cleanly on success, failure or Ctrl-C.

    ``observer`` (see :data:`Observer`) sees the run as it goes: live logs, periodic results."""
    cfg = replace(cfg, runtime=replace(cfg.runtime, backend=resolve_backend(cfg)))  # "auto" given here too
    check_progress_possible(cfg)
    if checkpointed(cfg):  # resuming: finish a commit a crash cut short, verify every file; then a new run id
        checkpoints.start_run(str(cfg.runtime.checkpoint_dir), cfg.runtime.resume)
    backend = backend or make_backend(cfg)
    total = algo_of(cfg).budget(cfg).total_updates
    earlier = load_run_state(cfg)  # a resumed run's sessions before this one ({} otherwise)
    shared = SharedBuffer(cfg) if trainer_takes_batches(cfg) else None
    with stopping.saving():  # a stop signal cuts only the start-up and the loop below, never the saving
        return _run_built(cfg, backend, shared, total, earlier, progress, timeout_s, observer)


def _run_built(cfg: RunConfig, backend: Backend, shared: SharedBuffer | None, total: int, earlier: dict[str, Any],
               progress: Progress | None, timeout_s: float, observer: Observer | None) -> RunResult:
    """:func:`run_runtime` from the build on: start-up and the poll loop may be interrupted by a
    stop signal (:func:`janus.stopping.interruptible`); the shutdown, the final commit and the
    summary that follow may not (a signal then is recorded, and the run saved as it ended)."""
    try:
        with stopping.interruptible():
            build(cfg, backend, shared)  # local: builds every component now
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
    try:
        with stopping.interruptible():
            _poll_until_finished(cfg, backend, start, total, earlier, progress, timeout_s, observer, last)
        wall = time.perf_counter() - start
    except KeyboardInterrupt as exc:
        interrupted, wall = exc, time.perf_counter() - start
    finally:
        alive = backend.shutdown()
        counters = backend.counters()
        failed = backend.fatal  # also an error while draining, after the goal was reached
        if failed is None and not getattr(backend, "gcs_lost", None):  # Ray's coordinator lost: counts unknown
            commit_final_checkpoint(cfg, backend)
    status = last[0]
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
        interrupted.partial_result = summarize(cfg, backend, status, counters, wall, earlier,  # type: ignore[attr-defined]  # rides on the interrupt
                                               outcome="interrupted")
        raise interrupted
    return summarize(cfg, backend, status, counters, wall, earlier)


def _poll_until_finished(cfg: RunConfig, backend: Backend, start: float, total: int, earlier: dict[str, Any],
                         progress: Progress | None, timeout_s: float, observer: Observer | None,
                         last: list[dict[str, Any]]) -> None:
    """Poll the Orchestrator until the run finishes (``last[0]``: the last poll's status);
    :class:`RunFailed` when a component fails, the Orchestrator gives up or ``timeout_s`` passes."""
    base_steps = int(earlier.get("env_steps", 0))  # a resumed run's rates count from here
    errors_shown = 0
    while True:
        status = last[0] = backend.orchestrator_status()
        errors_shown = report_worker_errors(status.get("worker_errors"), errors_shown)
        if progress is not None:
            note = rl_note(status["curve"], time.perf_counter() - start, int(status["env_steps"]), base_steps=base_steps)
            progress(min(status["trained"], total), total, note)
        if observer is not None:
            with stopping.saving():  # its periodic results files are written whole; a stop is raised after
                observer(status, partial(result_so_far, cfg, backend, status, start, earlier))
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
        if e["kind"] == "unresponsive":
            print(f"janus: worker {e['worker']!r} did not answer a ping for {e['silent_s']:.1f}s (a stopped or hung "
                  f"process); replaced it {e['lived_s']:.1f}s after its start", file=sys.stderr, flush=True)
        elif not e["stopped_run"]:
            print(f"janus: worker {e['worker']!r} raised {e['error']} ({e['in_a_row']} in a row); restarted it "
                  f"{e['lived_s']:.1f}s after its start", file=sys.stderr, flush=True)
    return total


def commit_final_checkpoint(cfg: RunConfig, backend: Backend) -> None:
    """Commit what every component staged on stop, if every one did (a component that crashed
    did not: the run then resumes from the last periodic commit, whole and consistent)."""
    names = checkpointed(cfg)
    folder = str(cfg.runtime.checkpoint_dir)
    if names and checkpoints.staged(folder, names, checkpoints.FINAL):
        status = backend.orchestrator_status()
        state = run_state(status)
        if "trajectory_manager" in names:  # the replay buffer's count, as periodic commits record it
            state["inserted"] = status["inserted"]
        checkpoints.commit(folder, names, checkpoints.FINAL, state)


def result_so_far(cfg: RunConfig, backend: Backend, status: dict[str, Any], start: float,
                  earlier: Mapping[str, Any] | None = None) -> RunResult:
    """The :class:`RunResult` of a run still going (counters as last reported)."""
    return summarize(cfg, backend, status, backend.counters(), time.perf_counter() - start, earlier, outcome="running")


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


def summarize(cfg: RunConfig, backend: Backend, status: dict[str, Any], counters: dict[str, dict[str, float]], wall: float,
              earlier: Mapping[str, Any] | None = None, outcome: str = "finished") -> RunResult:
    """The run's :class:`RunResult`: samples/s, stage times, counts and the runtime figures.
    ``earlier``: the run state this session resumed from (its counts start the whole run's);
    ``outcome``: its ``status`` (finished, interrupted or running)."""
    earlier = earlier or {}
    workers = {n: c for n, c in counters.items() if n.startswith("worker-")}
    tm, trainer = counters.get("trajectory_manager", {}), counters.get("trainer", {})
    proxies = {n: c for n, c in counters.items() if n.startswith("proxy-")}
    transitions = produced(workers, status, "transitions")
    trained = int(trainer.get("batches_trained", status.get("trained", 0)))
    update_s = trainer.get("update_s", 0.0)
    limiter = make_limiter(cfg)
    inserted = int(tm.get("transitions_inserted", 0))
    curve = learning_curve(status.get("curve", []))
    metrics = metric_columns(status.get("train_metrics", []))
    env_steps = produced(workers, status, "env_steps")
    faults = status.get("worker_errors", {})
    return RunResult(
        name=cfg.name,
        config=reported_config(cfg),
        status=outcome,
        samples_per_s=trained * cfg.minibatch_size / wall,
        actor_steps_per_s=transitions / wall,
        wall_s=wall,
        stage_s={
            "rollout": sum(c.get("rollout_s", 0.0) for c in workers.values()) / max(len(workers), 1),
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
            "transitions_collected": int(tm.get("buffer.transitions_collected", 0)),
            "collect_calls": int(tm.get("buffer.collect_calls", 0)),
            "select_calls": int(tm.get("buffer.select_calls", 0)),
            "batches_selected": int(tm.get("buffer.batches_selected", 0)),
        },
        runtime={
            "backend": cfg.runtime.backend,
            "learner_utilization": update_s / wall if wall > 0 else 0.0,
            "learner_wait_s": trainer.get("wait_s", 0.0),
            "pacing": {
                "samples_per_insert": limiter.samples_per_insert, "min_size_to_sample": limiter.min_size_to_sample,
                "error_buffer": limiter.error_buffer, "insert_piece": limiter.insert_piece,
                "sample_batch": limiter.sample_batch, "pieces_granted": int(status.get("pieces_granted", 0)),
                # granted once every piece of an env-step budget was in: the inserts that would have
                # earned them were lost (staged pieces of a killed predecessor); 0 in a clean run
                "batches_beyond_ratio": int(status.get("batches_beyond_ratio", 0)),
            },
            "messages": backend.stats.as_dict(),
            "param_versions_published": int(trainer.get("versions_published", 0)),
            "param_fetches_per_node": {n: int(c.get("param_fetches", 0)) for n, c in proxies.items()},
            "worker_restarts": status.get("restarts", {}),
            "worker_errors": faults.get("recent", []),  # the newest 20
            "worker_errors_total": int(faults.get("total", 0)),
            "stalls": status.get("stalls", 0),
            "priorities_dropped": int(tm.get("priorities_dropped", 0) + trainer.get("priorities_dropped", 0)),
            # only a backend spread over nodes (Ray) says where each component ran
            "nodes": backend.node_summary() if hasattr(backend, "node_summary") else {},
        },
        evaluations=list(status.get("evaluations", [])) if evaluates(cfg) else None,
        train_metrics=metrics or None,
        **curve,
    )


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
    if "inserted" in state:
        counts["transitions_inserted"] = int(state["inserted"])
    return RunResult(
        name=cfg.name, config=reported_config(cfg), status="finished",
        samples_per_s=trained * cfg.minibatch_size / wall if wall > 0 else 0.0,
        actor_steps_per_s=steps / wall if wall > 0 else 0.0, wall_s=wall, stage_s={}, counts=counts,
        runtime={"backend": cfg.runtime.backend, "worker_restarts": dict(state.get("restarts", {})),
                 "results_from": RESULTS_FROM_RUN_STATE},
        evaluations=[dict(e) for e in state.get("evaluations", [])] if evaluates(cfg) else None,
        train_metrics=metric_columns(list(state.get("train_metrics", []))) or None,
        **learning_curve([(t, s, r) for t, s, r in state.get("curve", [])]),
    )


def metric_columns(rows: list[dict[str, float]]) -> dict[str, list[float | None]]:
    """The Orchestrator's rows of training scalars as columns (``None`` where a row lacks one)."""
    names: dict[str, None] = {}
    for row in rows:
        names.update(dict.fromkeys(row))
    return {name: [row.get(name) for row in rows] for name in names}


def rl_note(curve: list[tuple[float, int, float]], elapsed: float, env_steps: int, window: int = 20,
            base_steps: int = 0) -> str:
    """Progress text for RL runs: mean return of the last episodes and env steps per second of this
    invocation (``env_steps``: the run's total now; ``base_steps``: where a resumed run started).

    The rate counts the steps workers report, not the last finished episode's: right after a
    resume the curve still ends in the earlier session, before ``base_steps``."""
    if not curve:
        return ""
    last = [r for _, _, r in curve[-window:]]
    rate = max(env_steps - base_steps, 0) / max(elapsed, 1e-9)
    return f"return {sum(last) / len(last):7.1f}  {rate:7.0f} env-steps/s"


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
