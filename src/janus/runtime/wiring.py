"""How a run's components are built and placed on a backend: the factories of every component
(top-level functions + ``partial``: picklable for Ray and worker processes), :func:`build`, which
registers them with a backend, and :func:`make_backend`, the one place that picks a backend.

What runs in the workers and the Trainer, the buffer, the budget and the rates come from the run's
:class:`~janus.runtime.plan.RunPlan` (its registered algorithm); this module names none.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import Any

from janus.buffer.pipeline import JanusBuffer
from janus.buffer.replay.experience import warm_up
from janus.config import RunConfig
from janus.runtime.backends.base import Backend
from janus.runtime.checkpoint_parties import Checkpointer, CheckpointSchedule
from janus.runtime.orchestrator import Orchestrator
from janus.runtime.plan import RunPlan, serial
from janus.runtime.replay_client import ReplayClient
from janus.runtime.trainer import Trainer
from janus.runtime.trajectory_manager import TrajectoryManager
from janus.runtime.worker import Worker
from janus.runtime.worker_proxy import WorkerProxy


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


def make_buffer(plan: RunPlan) -> JanusBuffer:
    spec, cfg = plan.spec, plan.cfg
    # The buffer's rate limiter is the run's one pacing, and its collection unit the workers' pieces':
    # both as the plan derives them.
    return JanusBuffer(
        replace(cfg.janus, learner_device=plan.replay_device),
        rollout_size=plan.rollout_size, num_epochs=cfg.workload.num_epochs,
        seed=cfg.seed, sampler=spec.sampler, frame_stack=spec.frame_stack,
        beta_schedule=plan.beta_schedule(), collection=plan.collection, **plan.buffer_limits.arguments(),
        **spec.sampler_kwargs,
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
                             sample_batch=sample_rows(plan),
                             batches_per_item=plan.cfg.updates_per_iteration if plan.spec.on_policy else 0)


def sample_rows(plan: RunPlan) -> int:
    """Rows one trained batch samples: on-policy a minibatch's transitions in rows (IMPALA's
    trajectories), off-policy ``batch_size`` rows (transitions, or R2D2's sequences)."""
    return plan.cfg.minibatch_size // plan.spec.row_steps if plan.spec.on_policy else plan.cfg.janus.batch_size


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
                        eval_interval_steps=r.eval_interval_steps if plan.evaluates else 0,
                        target_return=r.target_return if plan.evaluates else None)


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


def replay_host(plan: RunPlan) -> tuple[str, int, str]:
    """Who a remote replay client reaches and how: the host's name, its prefetch depth (batches
    in flight) and the learner device it delivers to."""
    return "trajectory_manager", plan.cfg.runtime.max_in_flight, plan.cfg.janus.learner_device


