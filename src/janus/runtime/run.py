"""One function wires every component of a training run, on either backend, and runs it.

Workers ``worker-i`` live on node ``i // workers_per_node``, each node has one ``proxy-<node>``;
one ``trajectory_manager`` hosts the JanusBuffer, one ``trainer`` learns, one ``orchestrator``
paces and watches. The returned run dict has the harness schema plus a ``runtime`` section.
"""

from __future__ import annotations

import math
import time
from functools import partial
from typing import Any, Callable

from janus.buffer.janus import JanusBuffer
from janus.config import RunConfig
from janus.errors import JanusError
from janus.runtime import checkpoints
from janus.runtime.checkpoints import Checkpointer, CheckpointSchedule
from janus.runtime.components import TrajectoryManager, Trainer, Worker, WorkerProxy
from janus.runtime.limiter import RateLimiter
from janus.runtime.messages import StartMsg
from janus.runtime.orchestrator import Orchestrator, run_state
from janus.workload import rl_runtime as rl

Progress = Callable[[int, int, str], None]


class RunFailed(JanusError, RuntimeError):
    """A Trainer, TrajectoryManager or Orchestrator failed; the run was stopped."""


# ---- factories (top-level functions + partial: picklable for Ray) ---------------------------------
def make_buffer(cfg: RunConfig) -> JanusBuffer:
    j = cfg.janus
    rollout = cfg.rollout_transitions if j.is_on_policy else None
    sampler, kwargs = "uniform", {}
    if cfg.workload.algo == "dqn":
        a = rl.algorithm_config(cfg)
        if a.prioritized:
            sampler, kwargs = "prioritized", {"alpha": a.per_alpha, "beta": a.per_beta}
    return JanusBuffer(
        j.__class__(**{**vars(j), "learner_device": "cpu"}),  # the Trainer moves batches to its device
        rollout_size=rollout, num_epochs=cfg.workload.num_epochs, seed=cfg.seed, sampler=sampler, **kwargs,
    )


def make_actor(cfg: RunConfig, index: int) -> Any:
    j, w = cfg.janus, cfg.workload
    piece_steps, _, _ = rl.worker_pieces(cfg)
    if w.algo != "synthetic":
        restored = load_run_state(cfg).get("env_steps", 0) // w.num_actors  # epsilon continues
        return rl.RLActorSide(cfg, index, piece_steps, initial_env_steps=restored)
    from janus.workload.synthetic import SyntheticActorSide

    return SyntheticActorSide(w, j.actor_device, cfg.seed * 1000 + index, not j.is_on_policy, piece_steps)


def make_learner(cfg: RunConfig) -> Any:
    if cfg.workload.algo != "synthetic":
        return rl.RLLearnerSide(cfg)
    from janus.workload.synthetic import SyntheticLearnerSide

    return SyntheticLearnerSide(cfg.workload, cfg.janus.learner_device, cfg.seed)


def new_worker(cfg: RunConfig, index: int, proxy: str) -> Worker:
    _, pieces, max_pieces = rl.worker_pieces(cfg)
    per_version, free, lag = rl.pacing(cfg)
    return Worker(f"worker-{index}", proxy, partial(make_actor, cfg, index), lockstep=cfg.janus.is_on_policy,
                  max_rollouts=max_pieces, pieces_per_rollout=pieces, orchestrator="orchestrator",
                  pieces_per_version=per_version, free_pieces=free, version_lag=lag)


def new_proxy(cfg: RunConfig, name: str, workers_on_node: int) -> WorkerProxy:
    w = cfg.workload
    return WorkerProxy(name, "trajectory_manager", "trainer", batch_transitions=w.envs_per_actor * w.rollout_length * workers_on_node,
                       max_delay_s=0.0 if serial(cfg) else 0.005)  # serial: flush every round, not by the clock


def checkpointed(cfg: RunConfig) -> tuple[str, ...]:
    """Components whose state is checkpointed (RL runs with a checkpoint folder; the replay
    buffer only off-policy: an on-policy rollout is consumed every iteration)."""
    if not cfg.runtime.checkpoint_dir or cfg.workload.algo == "synthetic":
        return ()
    return ("trainer",) if cfg.janus.is_on_policy else ("trainer", "trajectory_manager")


def checkpointer(cfg: RunConfig, name: str) -> Checkpointer | None:
    if name not in checkpointed(cfg):
        return None
    return Checkpointer(str(cfg.runtime.checkpoint_dir), name, cfg.runtime.resume)


def load_run_state(cfg: RunConfig) -> dict[str, Any]:
    """Counters and learning curve of the run being resumed ({} when not resuming)."""
    if not cfg.runtime.resume or not cfg.runtime.checkpoint_dir:
        return {}
    return checkpoints.read_run_state(cfg.runtime.checkpoint_dir)


def serial(cfg: RunConfig) -> bool:
    """Local runs with both overlaps off use the deterministic serial scheduler."""
    j = cfg.janus
    return cfg.runtime.backend == "local" and not j.overlap_collect and not j.overlap_select


def new_trajectory_manager(cfg: RunConfig) -> TrajectoryManager:
    return TrajectoryManager("trajectory_manager", "trainer", "orchestrator", partial(make_buffer, cfg),
                             checkpointer(cfg, "trajectory_manager"), inline_serve=serial(cfg))


def new_trainer(cfg: RunConfig) -> Trainer:
    publish = rl.publish_every(cfg)
    return Trainer("trainer", "trajectory_manager", "orchestrator", partial(make_learner, cfg), publish,
                   cfg.janus.learner_device, checkpointer(cfg, "trainer"))


def new_orchestrator(cfg: RunConfig, roles: dict[str, str], restart: Callable[[str], None] | None) -> Orchestrator:
    r = cfg.runtime
    min_inserts, samples_per_insert = rl.rates(cfg)
    limiter = RateLimiter(cfg.minibatch_size, min_inserts or cfg.minibatch_size, samples_per_insert, r.max_in_flight)
    total = rl.total_updates(cfg)
    names = checkpointed(cfg)
    schedule = CheckpointSchedule(str(r.checkpoint_dir), names, r.checkpoint_interval_s) if names else None
    return Orchestrator("orchestrator", roles, limiter, total, restart, r.ping_interval_s, r.pong_timeout_s,
                        initial=load_run_state(cfg), checkpoints=schedule)


def layout(cfg: RunConfig) -> dict[str, tuple[str, str]]:
    """Component name -> (role, node label)."""
    n = cfg.workload.num_actors
    per_node = cfg.runtime.workers_per_node or n
    out = {"trainer": ("trainer", "node-0"), "trajectory_manager": ("trajectory_manager", "node-0")}
    for node in range(math.ceil(n / per_node)):
        out[f"proxy-{node}"] = ("proxy", f"node-{node}")
    for i in range(n):
        out[f"worker-{i}"] = ("worker", f"node-{i // per_node}")
    out["orchestrator"] = ("orchestrator", "node-0")
    return out


def build(cfg: RunConfig, backend: Any) -> dict[str, tuple[str, str]]:
    """Register every component with ``backend``; returns the layout."""
    places = layout(cfg)
    roles = {name: role for name, (role, _) in places.items() if role != "orchestrator"}
    per_node: dict[str, int] = {}
    for role, node in places.values():
        if role == "worker":
            per_node[node] = per_node.get(node, 0) + 1
    for name, (role, node) in places.items():
        if role == "trainer":
            factory: Callable[[], Any] = partial(new_trainer, cfg)
        elif role == "trajectory_manager":
            factory = partial(new_trajectory_manager, cfg)
        elif role == "proxy":
            factory = partial(new_proxy, cfg, name, per_node[node])
        elif role == "worker":
            factory = partial(new_worker, cfg, int(name.split("-")[1]), f"proxy-{node.split('-')[1]}")
        else:
            factory = partial(new_orchestrator, cfg, roles, backend.restart)
        backend.add(name, role, factory, node)
    return places


def make_backend(cfg: RunConfig) -> Any:
    if cfg.runtime.backend == "ray":
        from janus.runtime.backends.ray import RayBackend

        return RayBackend(cfg.runtime.address, cfg.runtime.max_calls_in_flight)
    from janus.runtime.backends.local import LocalBackend

    return LocalBackend(serial=serial(cfg))


def run_runtime(cfg: RunConfig, progress: Progress | None = None, backend: Any = None, timeout_s: float = 3600.0) -> dict[str, Any]:
    """Run ``cfg`` (resolved) on its backend; stop cleanly on success, failure or Ctrl-C."""
    if checkpointed(cfg):  # resuming: finish a commit a crash cut short, verify every file; then a new run id
        checkpoints.start_run(str(cfg.runtime.checkpoint_dir), cfg.runtime.resume)
    backend = backend or make_backend(cfg)
    build(cfg, backend)
    total = rl.total_updates(cfg)
    backend.start()  # ray: returns once every actor is up, so wall_s excludes process start-up
    start = time.perf_counter()
    backend.deliver("orchestrator", StartMsg())
    status: dict[str, Any] = {}
    try:
        while True:
            status = backend.orchestrator_status()
            if progress is not None:
                progress(min(status["trained"], total), total, rl_note(status["curve"], time.perf_counter() - start))
            if backend.fatal is not None:
                name, text = backend.fatal
                raise RunFailed(f"component {name!r} failed; the run was stopped:\n{text}")
            if status["failure"]:
                raise RunFailed(f"the run was stopped: {status['failure']}")
            if status["finished"]:
                break
            if time.perf_counter() - start > timeout_s:
                raise RunFailed(f"the run did not finish within {timeout_s:.0f}s")
            time.sleep(0.05)
        wall = time.perf_counter() - start
    finally:
        alive = backend.shutdown()
        counters = backend.counters()
        commit_final_checkpoint(cfg, backend)
    if alive:
        raise RunFailed(f"shutdown left components running: {alive}")
    return summarize(cfg, backend, status, counters, wall)


def commit_final_checkpoint(cfg: RunConfig, backend: Any) -> None:
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


def summarize(cfg: RunConfig, backend: Any, status: dict[str, Any], counters: dict[str, dict[str, float]], wall: float) -> dict[str, Any]:
    """The harness run dict (samples/s, stage times) plus the runtime figures."""
    workers = {n: c for n, c in counters.items() if n.startswith("worker-")}
    tm, trainer = counters.get("trajectory_manager", {}), counters.get("trainer", {})
    proxies = {n: c for n, c in counters.items() if n.startswith("proxy-")}
    transitions = sum(c.get("transitions", 0) for c in workers.values())
    trained = int(trainer.get("msgs_in.BatchTrainingDataMsg", status.get("trained", 0)))
    return {
        "name": cfg.name,
        "config": cfg.to_dict(),
        "samples_per_s": trained * cfg.minibatch_size / wall,
        "actor_steps_per_s": transitions / wall,
        "wall_s": wall,
        "stage_s": {
            "rollout": sum(c.get("rollout_s", 0.0) for c in workers.values()) / max(len(workers), 1),
            "collect": tm.get("buffer.collect_s", 0.0),
            "select": tm.get("buffer.select_s", 0.0),
            "update": trainer.get("update_s", 0.0),
            "learner_wait": tm.get("buffer.learner_wait_s", 0.0),
            "actor_blocked": tm.get("buffer.actor_blocked_s", 0.0),
        },
        "counts": {
            "updates": trained, "transitions_produced": int(transitions),
            "transitions_inserted": int(tm.get("transitions_inserted", 0)),
            "transitions_collected": int(tm.get("buffer.transitions_collected", 0)),
            "collect_calls": int(tm.get("buffer.collect_calls", 0)),
            "select_calls": int(tm.get("buffer.select_calls", 0)),
            "batches_selected": int(tm.get("buffer.batches_selected", 0)),
        },
        "runtime": {
            "backend": cfg.runtime.backend,
            "messages": backend.stats.as_dict(),
            "param_versions_published": int(trainer.get("versions_published", 0)),
            "param_fetches_per_node": {n: int(c.get("param_fetches", 0)) for n, c in proxies.items()},
            "worker_restarts": status.get("restarts", {}),
            "stalls": status.get("stalls", 0),
            "priorities_dropped": int(tm.get("priorities_dropped", 0)),
            "nodes": backend.node_summary() if hasattr(backend, "node_summary") else {},
        },
        **learning_curve(status.get("curve", [])),
    }


def rl_note(curve: list[tuple[float, int, float]], elapsed: float, window: int = 20) -> str:
    """Progress text for RL runs: mean return of the last episodes and env steps per second."""
    if not curve:
        return ""
    last = [r for _, _, r in curve[-window:]]
    return f"return {sum(last) / len(last):7.1f}  {curve[-1][1] / max(elapsed, 1e-9):7.0f} env-steps/s"


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
