"""The synchronous loop: the artifact's one-thread training loop, and the choice between it and the runtime.

``rollout -> collect -> select -> update`` in ONE control flow: no components, no messages, no
scheduler. The algorithm's actor sides and learner side come through the Algorithm seam (as the
runtime builds them: :func:`janus.runtime.wiring.make_actor` / ``make_learner``), the replay is the
run's JanusBuffer with both overlaps off, so its ``put`` collects inline and its ``get`` selects
inline. Each iteration every actor's rollout pieces are put, one actor after the other, then the
learner trains the iteration's batches. It is the baseline the overlapped configurations of
``janus compare`` are measured against: what it spends outside the four stages is the little
a loop must (a parameter hand-off per version, counting), so the speedups measure the staging.

:func:`run_configuration` picks it for a configuration the serial scheduler would run (local,
both overlaps off) when there is nothing but the data path to run: an algorithm without a policy
(the synthetic workload), so no evaluation, checkpoint or learning curve. Everything else (DQN,
PPO, SAC with both overlaps off too) runs on the runtime.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np
import torch

from janus import stopping
from janus.algorithms.base import algorithm
from janus.buffer.pipeline import JanusBuffer
from janus.buffer.replay.experience import warm_up
from janus.config import RunConfig
from janus.errors import ConfigError, RunFailed, StagingTimeout
from janus.result import RunResult, reported_config
from janus.runtime.messages import ParamsSnapshot
from janus.runtime.plan import RunPlan, plan_of
from janus.runtime.run import Observer, Progress, run_runtime
from janus.runtime.status import RunStatus
from janus.runtime.summary import metric_columns
from janus.runtime.trainer import check_finite_losses
from janus.runtime.wiring import make_actor, make_buffer, make_learner

LOOP = "synchronous"
"""``runtime.loop`` of a result the synchronous loop produced."""
METRICS_INTERVAL_S = 2.0
"""Seconds between rows of training scalars (as the Orchestrator's ``metrics_interval_s``)."""
REPORT_INTERVAL_S = 0.25
"""Seconds between calls of the progress line and the observer (each call is time outside the stages)."""


def runs_synchronously(plan: RunPlan) -> bool:
    """Whether the synchronous loop runs ``plan``: the serial scheduler's case (local backend, both
    overlaps off) with nothing to run beside the data path (an algorithm without a policy: nothing
    to evaluate, checkpoint or resume)."""
    return plan.serial and not plan.algo.has_policy and not plan.checkpointed and not plan.resumed


def on_synchronous_loop(cfg: RunConfig) -> bool:
    """Whether :func:`run_configuration` runs ``cfg`` on the synchronous loop."""
    # an algorithm with a policy never runs here: its plan (a resumed run's read of run_state.json) is the runtime's
    return not algorithm(cfg.workload.algo).has_policy and runs_synchronously(plan_of(cfg))


def run_configuration(cfg: RunConfig, progress: Progress | None = None, observer: Observer | None = None) -> RunResult:
    """Run one configuration of a ``janus`` command: on the synchronous loop where
    :func:`runs_synchronously` says so, else on the runtime (:func:`janus.runtime.run.run_runtime`)."""
    if on_synchronous_loop(cfg):
        return run_sync_loop(cfg, progress, observer)
    return run_runtime(cfg, progress, observer=observer)


def run_sync_loop(cfg: RunConfig, progress: Progress | None = None, observer: Observer | None = None) -> RunResult:
    """Run ``cfg`` on the synchronous loop and measure it (the :class:`RunResult` the runtime returns).

    Everything is built and the buffer's kernels loaded before the clock starts. A stop signal
    (Ctrl-C) raises KeyboardInterrupt with the run so far as its ``partial_result``."""
    plan = plan_of(cfg)
    if not runs_synchronously(plan):
        raise ConfigError(f"configuration {cfg.name!r} cannot run on the synchronous loop: it needs backend local, "
                          f"overlap_collect 0, overlap_select 0 and an algorithm without a policy (got backend "
                          f"{plan.cfg.runtime.backend}, overlaps {cfg.janus.overlap_collect}/{cfg.janus.overlap_select}, "
                          f"algo {cfg.workload.algo})")
    plan.check_progress_possible()
    with stopping.saving():  # as the runtime: a stop signal cuts the start-up and the loop, never the summary
        with stopping.interruptible():
            loop = SyncLoop(plan)
        try:
            with stopping.interruptible():
                loop.run(progress, observer)
        except KeyboardInterrupt as exc:
            exc.partial_result = loop.result(stopping.outcome_of(exc))  # type: ignore[attr-defined]  # rides on the interrupt
            raise
        finally:
            loop.close()
        return loop.result()


class SyncLoop:
    """One run of the synchronous loop: built on construction, run by :meth:`run`, measured by :meth:`result`."""

    def __init__(self, plan: RunPlan) -> None:
        self.plan = plan
        cfg = plan.cfg
        torch.set_num_threads(1)  # as every runtime component's thread
        self.buffer: JanusBuffer = make_buffer(plan)
        try:
            if cfg.janus.placement != "cuda":  # host placements: compiled kernels load now, not in timed calls
                warm_up()
            self.actors = [make_actor(plan, i) for i in range(cfg.workload.num_actors)]
            self.learner = make_learner(plan)
            self.version = -1
            self.publish()  # the actors start with version 0, as the Trainer publishes it at its start
        except BaseException:
            self.buffer.close()
            raise
        self.rollout_s = [0.0] * len(self.actors)
        self.update_s = 0.0
        self.trained = 0
        self.env_steps = 0
        self.transitions = 0
        self.pieces = 0
        self.start = self.wall = 0.0
        self.metric_rows: list[dict[str, float]] = []
        self._metric_sums: dict[str, float] = {}
        self._metric_updates = 0
        self._metrics_at = 0.0

    # ---- the loop ------------------------------------------------------------------------------
    def run(self, progress: Progress | None = None, observer: Observer | None = None) -> None:
        """``iterations`` rounds: every actor's rollout pieces put, then the round's batches trained.
        Batches the buffer cannot give yet (a collection unit of ``g_collect`` pieces not yet
        staged, too little stored) are owed and trained as soon as it can; the last are trained
        once every piece is written (:meth:`JanusBuffer.finish_inserts`)."""
        plan, cfg = self.plan, self.plan.cfg
        per_round = cfg.updates_per_iteration
        total = plan.total_updates
        owed = 0
        self.start = self._metrics_at = reported_at = time.perf_counter()
        try:
            for _ in range(plan.budget.iterations):
                for index, actor in enumerate(self.actors):
                    for _ in range(plan.pacing.pieces_per_rollout):
                        self.put(self.act(index, actor))
                owed = min(owed + per_round, total - self.trained)
                owed -= self.train(owed)
                if time.perf_counter() - reported_at >= REPORT_INTERVAL_S:
                    reported_at = self.report(progress, observer)
            self.buffer.finish_inserts()  # every piece written, sampling no longer held back for more
            if self.train(owed) < owed:
                raise RunFailed(f"the synchronous loop trained {self.trained:,} of {total:,} batches: the buffer gives "
                                f"no more once every piece is written ({self.transitions:,} transitions)")
        finally:
            self.wall = time.perf_counter() - self.start
        self._close_metrics_row()
        if progress is not None:
            progress(self.trained, total, "")

    def act(self, index: int, actor: Any) -> dict[str, torch.Tensor]:
        """One piece of actor ``index`` (timed as its rollout), as the tensors the replay host puts."""
        t0 = time.perf_counter()
        piece, info = actor.rollout()
        self.rollout_s[index] += time.perf_counter() - t0
        count = int(np.prod(next(iter(piece.values())).shape[:2]))
        self.pieces += 1
        self.transitions += count
        self.env_steps += int(info.get("env_steps", count))
        return {k: torch.from_numpy(np.asarray(v)) for k, v in piece.items()}

    def put(self, piece: dict[str, torch.Tensor]) -> None:
        """Put a piece (its collection runs inline); a full staging is emptied by training first."""
        while True:
            try:
                self.buffer.put(piece, timeout=0.0, version=self.version)
                return
            except StagingTimeout:
                if not self.train(1):  # one control flow: nothing else would ever empty it
                    raise RunFailed("the synchronous loop is stuck: the actor-side staging is full and the buffer "
                                    "gives no batch (the sample/insert ratio holds both back)") from None

    def train(self, batches: int) -> int:
        """Train up to ``batches`` batches, as many as the buffer gives now; returns how many."""
        done = 0
        while done < batches:
            try:
                batch = self.buffer.get(timeout=0.0)  # inline: collects what is staged, selects; never blocks
            except StagingTimeout:
                break
            self.update(batch)
            done += 1
        return done

    def update(self, batch: dict[str, Any]) -> None:
        """One learner update, as the Trainer makes it: priorities, finite losses, a version per ``publish_every``."""
        t0 = time.perf_counter()
        result = self.learner.update(batch)
        self.update_s += time.perf_counter() - t0
        self.trained += 1
        metrics = dict(getattr(result, "metrics", {}) or {})
        check_finite_losses(metrics, self.trained)
        if metrics:
            self._metric_updates += 1
            for key, value in metrics.items():
                self._metric_sums[key] = self._metric_sums.get(key, 0.0) + float(value)
        priorities = getattr(result, "priorities", None)
        if priorities is not None:
            self.buffer.update_priority(batch["index"], priorities.detach())
        if self.trained % self.plan.pacing.publish_every == 0:
            self.publish()

    def publish(self) -> None:
        """Hand the actors the learner's parameters as the next version (one snapshot, shared)."""
        self.version += 1
        snapshot = ParamsSnapshot.freeze(self.version, self.learner.params())
        for actor in self.actors:
            actor.load_params(snapshot)
        self.buffer.set_learner_version(self.version)

    def report(self, progress: Progress | None, observer: Observer | None) -> float:
        """Progress line, training-scalar rows and the observer; returns when (the loop's clock)."""
        now = time.perf_counter()
        if now - self._metrics_at >= METRICS_INTERVAL_S:
            self._close_metrics_row()
        if progress is not None:
            progress(self.trained, self.plan.total_updates, "")
        if observer is not None:
            with stopping.saving():
                observer(self.status(), lambda: self.result("running"))
            stopping.raise_if_stopped()
        return time.perf_counter()

    def _close_metrics_row(self) -> None:
        self._metrics_at = time.perf_counter()
        if not self._metric_updates:
            return
        row = {"wall_s": self.elapsed_s, "env_steps": float(self.env_steps), "updates": float(self.trained)}
        row.update({k: v / self._metric_updates for k, v in self._metric_sums.items()})
        self.metric_rows.append(row)
        self._metric_sums, self._metric_updates = {}, 0

    @property
    def elapsed_s(self) -> float:
        return self.wall or (time.perf_counter() - self.start if self.start else 0.0)

    def status(self) -> RunStatus:
        """The run now, as an observer reads the Orchestrator's status (no episodes, no evaluations)."""
        return RunStatus(trained=self.trained, env_steps=self.env_steps, elapsed_s=self.elapsed_s,
                         train_metrics=list(self.metric_rows))

    def close(self) -> None:
        """Close the buffer and the actors' environments (where they have any)."""
        self.buffer.close()
        for actor in self.actors:
            close = getattr(actor, "close", None)
            if close is not None:
                close()

    # ---- the measurement ------------------------------------------------------------------------
    def result(self, outcome: str = "finished") -> RunResult:
        """The run as the runtime reports one (:func:`janus.runtime.summary.summarize`).

        Its rollout stage is the SUM of the actors' rollout times (the runtime's: their mean):
        here they take turns in one control flow, so the loop spends their sum; the four stages
        then add up to nearly all of ``wall_s``."""
        cfg, stats = self.plan.cfg, self.buffer.stats
        wall = self.elapsed_s
        limiter = self.plan.limiter
        return RunResult(
            name=cfg.name, config=reported_config(cfg), status=outcome,
            samples_per_s=self.trained * cfg.minibatch_size / wall if wall > 0 else 0.0,
            env_steps_per_s=self.transitions / wall if wall > 0 else 0.0,
            wall_s=wall,
            stage_s={"rollout": sum(self.rollout_s), "collect": stats.collect_s, "select": stats.select_s,
                     "update": self.update_s, "learner_wait": stats.learner_wait_s, "actor_blocked": stats.actor_blocked_s},
            counts={"updates": self.trained, "transitions_produced": self.transitions, "env_steps": self.env_steps,
                    "run_env_steps": self.env_steps, "run_updates": self.trained, "pieces": self.pieces,
                    "transitions_inserted": stats.transitions_put, "transitions_collected": stats.transitions_collected,
                    "collect_calls": stats.collect_calls, "select_calls": stats.select_calls,
                    "batches_selected": stats.batches_selected},
            runtime={
                "backend": cfg.runtime.backend, "loop": LOOP,
                "learner_utilization": self.update_s / wall if wall > 0 else 0.0,
                "learner_wait_s": stats.learner_wait_s,  # inline: waiting on the limiter only
                "rollout_s_per_actor": list(self.rollout_s),
                "pacing": {"samples_per_insert": limiter.samples_per_insert, "min_size_to_sample": limiter.min_size_to_sample,
                           "error_buffer": limiter.error_buffer, "sample_batch": limiter.sample_batch,
                           "insert_wait_s": stats.insert_wait_s, "sample_wait_s": stats.sample_wait_s},
                "param_versions_published": self.version + 1,
            },
            train_metrics=metric_columns(self.metric_rows) or None,
        )

