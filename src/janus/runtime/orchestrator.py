"""The Orchestrator: lifecycle (start, stop at the goal), health (ping/pong with timeouts, worker
restarts, stalls), checkpoints and the evaluation schedule.

It sees counts only — transitions and pieces inserted (from the TrajectoryManager), batches
trained (from the Trainer), env steps and episodes (from the Workers) — and issues no credits:
the replay's rate limiter, inside its JanusBuffer, is the run's only pacing. Bulk data never
passes through it.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict
from typing import Any

from janus.runtime.checkpoint_parties import CheckpointSchedule
from janus.runtime.component import Component, Handlers
from janus.runtime.faults import WorkerFaults
from janus.runtime.messages import (
    CheckpointMsg,
    CountsMsg,
    EvaluateMsg,
    EvaluationReport,
    FlushMsg,
    PieceCounts,
    PingMsg,
    PongMsg,
    ReplayCounts,
    StartMsg,
    StopMsg,
    TrainerCounts,
    WorkerDownMsg,
    WorkerUpMsg,
)
from janus.runtime.stalls import Rates, StallWatch, diagnose_stall
from janus.runtime.status import RunStatus, run_state
from janus.runtime.training_scalars import TrainingScalars


class Orchestrator(Component):
    """Starts everyone, watches health, restarts workers, checkpoints, stops at the goal.

    Args:
        roles: component name -> role (``trainer``, ``trajectory_manager``, ``proxy``, ``worker``).
        rates: the replay limiter's settings, for a stall's diagnosis only (it paces nothing).
        total_updates: stop once the Trainer has trained this many batches.
        restart: callback asking the backend to restart a worker (by name); it returns the
            replaced instance's error (None if it hung; see :meth:`Backend.restart`).
        checkpoints: when to ask the Trainer / TrajectoryManager for a consistent checkpoint.
        total_pieces: pieces all workers send in all (0: until stopped); once every one is
            inserted the TrajectoryManager is told to write what it staged (:class:`FlushMsg`).
        all_pieces: the goal also needs every one of ``total_pieces`` inserted, so the run does
            exactly its budget's work (see :attr:`janus.runtime.plan.RunPlan.takes_every_piece`).
        start_timeout_s: how long a restarted worker may take to answer its first ping (spawning a
            process or a Ray actor on a loaded machine can take far longer than ``pong_timeout_s``).
        stall_timeout_s: no transition inserted and no batch trained for this long (outside a
            checkpoint) fails the run with a message naming the starved stage (0: never).
        metrics_interval_s: the learner's metrics (sums the Trainer reports with its counts) are
            averaged into one row of :attr:`scalars` at most this often (and at the stop).
    """

    def __init__(
        self, name: str, roles: dict[str, str], rates: Rates, total_updates: int,
        restart: Callable[[str], str | None] | None = None, ping_interval_s: float = 0.5, pong_timeout_s: float = 5.0,
        initial: dict[str, Any] | None = None, checkpoints: CheckpointSchedule | None = None,
        total_pieces: int = 0, stall_timeout_s: float = 0.0, start_timeout_s: float = 120.0,
        all_pieces: bool = False, eval_interval_steps: int = 0,
        metrics_interval_s: float = 2.0, target_return: float | None = None,
    ) -> None:
        super().__init__(name)
        self.roles = roles
        self.rates = rates
        self.total_updates = total_updates
        self.restart = restart
        self.checkpoints = checkpoints
        self.ping_interval_s = ping_interval_s
        self.pong_timeout_s = pong_timeout_s
        self.start_timeout_s = start_timeout_s
        # restarted worker -> (restart time, last ping seq sent to its dead instance): it is not
        # timed out by pongs until it answers a newer ping (spawning one can take many seconds)
        self.starting: dict[str, tuple[float, int]] = {}
        self.tm = next(n for n, r in roles.items() if r == "trajectory_manager")
        self.trainer = next(n for n, r in roles.items() if r == "trainer")
        self.workers = [n for n, r in roles.items() if r == "worker"]
        self.seq = 0
        self.last_ping = 0.0
        self.last_pong: dict[str, float] = {}
        self.component_counters: dict[str, dict[str, float]] = {}
        self.restarts: dict[str, int] = {}  # by this process; so also which instance of a worker runs now
        self.faults = WorkerFaults()  # errors workers raised; a crash loop fails the run
        self.instance_started: dict[str, float] = {}  # when each worker's current instance started
        self.failure: str | None = None
        self.finished = False
        self.stall_watch = StallWatch()  # counts spells in which nothing moved (``stalls``)
        # (worker, instance) -> its last reported counts ("env_steps", "transitions"): every instance
        # of this process's session, replaced ones included (their processes took their counters along)
        self.instance_counts: dict[tuple[str, int], dict[str, int]] = {}
        self.started_at = time.monotonic()
        # a resumed run continues its counters, learning curve and clock
        initial = initial or {}
        self.trained = int(initial.get("trained", 0))
        self.inserted = int(initial.get("inserted", 0))  # the TrajectoryManager confirms it on restore
        self.pieces_inserted = 0  # worker pieces inserted by this session (the TrajectoryManager's report)
        self.batches_dropped = 0  # batches of on-policy items the replay dropped as too stale (never trained)
        self.trainer_dropped = 0  # batches the Trainer dropped as too stale (never trained)
        self.total_pieces = total_pieces
        self.all_pieces = all_pieces and total_pieces > 0
        self.flushed = False
        self.eval_interval = eval_interval_steps
        self.base_steps = int(initial.get("env_steps", 0))
        self.base_elapsed = float(initial.get("wall_s", 0.0))
        # (seconds, env steps, episode return) per finished episode
        self.curve: list[tuple[float, int, float]] = [tuple(c) for c in initial.get("curve", [])]
        self.evaluations = [dict(e) for e in initial.get("evaluations", [])]
        self.target_return = target_return
        # the evaluation that reached target_return: env_steps, mean_return, train_s (the run's clock), at (Unix s)
        self.solved: dict[str, Any] | None = None
        # the next evaluation: the first multiple of the interval past the steps already taken
        self.next_eval = (self.base_steps // self.eval_interval + 1) * self.eval_interval if self.eval_interval else 0
        self.last_eval_asked = -1
        self._last_progress = (0, 0)
        self._health_checked = False  # the first check (at the start) only records the progress
        self.stall_timeout_s = stall_timeout_s
        self.progress_at = time.monotonic()  # when inserted or trained last moved
        self.checkpoint_open = False  # a checkpoint was asked for and is not committed yet
        self.goal_reached_at: float | None = None  # when the goal was reached with an evaluation still pending
        self.evaluations_abandoned: list[int] = []  # env steps of evaluations that never came back (hung)
        # training scalars: one row (wall_s, env_steps, updates, mean of each learner metric since
        # the previous row, latest actor metrics averaged over workers) every metrics_interval_s
        self.scalars = TrainingScalars(metrics_interval_s, [dict(r) for r in initial.get("train_metrics", [])])
        self.worker_elapsed: dict[str, float] = {}  # when each worker last reported episodes

    def handlers(self) -> Handlers:
        return {
            **super().handlers(),
            CountsMsg: self.on_CountsMsg,
            PongMsg: self.on_PongMsg,
            CheckpointMsg: self.on_CheckpointMsg,
            WorkerDownMsg: self.on_WorkerDownMsg,
            WorkerUpMsg: self.on_WorkerUpMsg,
        }

    def on_StartMsg(self, msg: StartMsg) -> None:
        super().on_StartMsg(msg)
        order = ("trainer", "trajectory_manager", "evaluator", "proxy", "worker")
        for role in order:
            for name, r in self.roles.items():
                if r == role:
                    self.send(name, StartMsg())
        start = time.monotonic()
        self.started_at = self.progress_at = self.scalars.closed_at = start
        self.last_pong = {n: start for n in self.roles}
        self.instance_started = {n: start for n in self.workers}

    def on_CountsMsg(self, msg: CountsMsg) -> None:
        match msg.counters:
            case EvaluationReport() as evaluation:  # the Evaluator's report (see runtime/evaluator.py)
                self.evaluations.append({**asdict(evaluation), "wall_s": self.elapsed_s})
                self._check_target(self.evaluations[-1])
            case ReplayCounts() as replay:
                self.inserted = int(replay.inserted)
                if replay.pieces is not None:
                    self.pieces_inserted = int(replay.pieces)
                if replay.batches_dropped is not None:
                    self.batches_dropped = int(replay.batches_dropped)
            case TrainerCounts() as trainer:
                self.trained = int(trainer.trained)
                if trainer.batches_dropped is not None:
                    self.trainer_dropped = int(trainer.batches_dropped)
                self._add_metrics(trainer)
            case PieceCounts() as piece:  # a worker's piece: its counts, the learning curve, its actor metrics
                counts = self.instance_counts.setdefault((msg.sender, int(piece.instance)), {"env_steps": 0, "transitions": 0})
                before = counts["env_steps"]
                counts["env_steps"] = int(piece.env_steps)
                counts["transitions"] = int(piece.transitions)
                self._add_episodes(msg.sender, counts["env_steps"] - before, piece.episode_returns)
                if piece.actor_metrics:  # as fresh as the last piece (its Pong may come later: a short run's rows need them)
                    self.component_counters.setdefault(msg.sender, {}).update(piece.actor_metrics)

    def _check_target(self, evaluation: dict[str, Any]) -> None:
        """The first evaluation whose mean return reaches ``target_return`` solves the run: it is
        recorded (:attr:`solved`) and the run stops as at its goal."""
        if self.target_return is None or self.solved is not None or float(evaluation["mean_return"]) < self.target_return:
            return
        self.solved = {"env_steps": int(evaluation["env_steps"]), "mean_return": float(evaluation["mean_return"]),
                       "train_s": float(evaluation["wall_s"]), "at": time.time()}
        if not self.finished and not self.failure:
            self.stop_all("target return reached")

    def _add_episodes(self, worker: str, span: int, returns: list[float]) -> None:
        """Episodes a worker finished in its last piece (of ``span`` env steps), spread evenly over
        the env steps and the time of that piece in the order they finished (one rollout of PPO
        finishes many episodes: they must not all share its last step)."""
        steps, elapsed = self.env_steps, self.elapsed_s
        span = max(span, 0)
        last_point = self.curve[-1][0] if self.curve else self.base_elapsed  # wall times never decrease
        since = min(max(self.worker_elapsed.get(worker, self.base_elapsed), last_point), elapsed)
        self.worker_elapsed[worker] = elapsed
        k = len(returns)
        for i, r in enumerate(returns, 1):
            at_steps = steps - span + round(span * i / k)
            self.curve.append((since + (elapsed - since) * i / k, at_steps, float(r)))

    def _add_metrics(self, counts: TrainerCounts) -> None:
        """Add the Trainer's metric sums; close a row of training scalars when one is due."""
        self.scalars.add(counts)
        if self.finished or self.scalars.due:
            self._close_metrics_row()

    def _close_metrics_row(self) -> None:
        """A row of training scalars: the means since the last one (if any update reported)."""
        self.scalars.close_row({"wall_s": self.elapsed_s, "env_steps": self.env_steps, "updates": self.trained},
                               self.actor_metrics())

    def actor_metrics(self) -> dict[str, float]:
        """The workers' latest ``actor.<name>`` counters (from their pieces' counts and their Pongs),
        averaged over workers."""
        values: dict[str, list[float]] = {}
        for name in self.workers:
            for key, value in self.component_counters.get(name, {}).items():
                if key.startswith("actor."):
                    values.setdefault(key[len("actor."):], []).append(float(value))
        return {k: sum(v) / len(v) for k, v in values.items()}

    def on_CheckpointMsg(self, msg: CheckpointMsg) -> None:
        assert self.checkpoints is not None
        if self.checkpoints.ack(msg.sender, msg.tag, dict(msg.counters)):
            self.count("checkpoints_committed")
            self.checkpoint_open = False

    def run_state(self) -> dict[str, Any]:
        """What ``--resume`` continues: counters, learning curve and clock of this instant."""
        return run_state(self.status())

    def on_PongMsg(self, msg: PongMsg) -> None:
        started = self.starting.get(msg.sender)
        if started is not None:
            if msg.seq <= started[1]:
                return  # a late answer of the instance that was replaced
            del self.starting[msg.sender]
        self.last_pong[msg.sender] = time.monotonic()
        self.component_counters[msg.sender] = dict(msg.counters)

    def step(self) -> bool:
        if self.finished or self.failure:
            return False
        self._maybe_evaluate()
        # batches of items dropped as too stale are never trained: every piece in, each item trained or dropped
        if (self.trained + self.batches_dropped + self.trainer_dropped >= self.total_updates
                and (not self.all_pieces or self.pieces_inserted >= self.total_pieces)):
            if not self.evaluation_pending or self._evaluation_given_up():  # the last evaluation is part of the run
                self.stop_all("goal reached")
            return False
        if self.total_pieces and not self.flushed and self.pieces_inserted >= self.total_pieces:
            self.flushed = True
            self.send(self.tm, FlushMsg())  # the replay's inserts are finished: its last batches are let through
        now = time.monotonic()
        if now - self.last_ping >= self.ping_interval_s:
            self._health(now)
        if self.checkpoints is not None and self.checkpoints.due():
            tag = self.checkpoints.begin(self.run_state())
            self.checkpoint_open = True
            for name in self.checkpoints.names:
                self.send(name, CheckpointMsg(tag))
        return False

    def _maybe_evaluate(self) -> None:
        """Ask the Evaluator for an evaluation once the env steps cross the next multiple of the interval."""
        if self.next_eval and self.env_steps >= self.next_eval:
            self.send("evaluator", EvaluateMsg(self.env_steps))
            self.last_eval_asked = self.env_steps
            self.next_eval = (self.env_steps // self.eval_interval + 1) * self.eval_interval

    def _evaluation_given_up(self) -> bool:
        """At the goal, an evaluation still pending is waited for up to the stall timeout (nothing
        else moves then); past it, it is given up (hung: an evaluation env that does not return)
        and recorded in :attr:`evaluations_abandoned`, so the run ends rather than waiting forever."""
        now = time.monotonic()
        if self.goal_reached_at is None:
            self.goal_reached_at = now
        if not self.stall_timeout_s or now - self.goal_reached_at <= self.stall_timeout_s:
            return False
        self.evaluations_abandoned.append(self.last_eval_asked)
        self.last_eval_asked = -1  # no longer pending
        return True

    @property
    def evaluation_pending(self) -> bool:
        """An evaluation was asked for whose result has not arrived (the Evaluator plays the newest
        request, so its last result names the last env steps asked for)."""
        done = self.evaluations[-1]["env_steps"] if self.evaluations else -1
        return self.last_eval_asked > done

    def _health(self, now: float) -> None:
        self.last_ping = now
        progress = (self.inserted, self.trained)
        if not self._health_checked:  # at the first step: nothing could have progressed yet
            self._health_checked = True
        elif progress == self._last_progress and not self.checkpoint_open and not self.evaluation_pending:
            if self.stall_timeout_s and now - self.progress_at > self.stall_timeout_s:
                self.failure = self.stall_diagnosis(now - self.progress_at)
                self.stop_all(self.failure)
                return
        else:
            self.progress_at = now
        self._last_progress = progress
        self.stall_watch.check(now, (*progress, self.env_steps), excused=self.checkpoint_open or self.evaluation_pending)
        for name, role in self.roles.items():
            started = self.starting.get(name)
            if started is not None:
                silent, limit = now - started[0], self.start_timeout_s
            else:
                silent, limit = now - self.last_pong.get(name, now), self.pong_timeout_s
            if silent > limit:
                if role == "worker" and self.restart is not None:
                    if not self._replace(name, now, silent_s=silent):
                        return
                else:
                    self.failure = f"{role} {name!r} did not answer a ping within {limit:g}s"
                    self.stop_all(self.failure)
                    return
            self.seq += 1
            self.send(name, PingMsg(self.seq, now, self.name))

    def _replace(self, worker: str, now: float, silent_s: float | None = None) -> bool:
        """Have the backend replace ``worker`` by a fresh instance and start it; False if its
        errors amount to a crash loop (the run is then stopped). ``silent_s``: it is replaced for
        not answering pings that long (else: the backend reported it down)."""
        self.restarts[worker] = self.restarts.get(worker, 0) + 1
        self.starting[worker] = (now, self.seq)
        error = self.restart(worker)  # type: ignore[misc]  # set: only workers restart, checked by the caller
        lived = now - self.instance_started.get(worker, now)  # the replaced instance's time
        self.instance_started[worker] = now
        self.component_counters.pop(worker, None)
        if error is None and silent_s is not None:  # stopped (SIGSTOP) or hung: announced, and counted like an error
            crash_loop = self.faults.record_unresponsive(worker, silent_s, lived, self.elapsed_s)
        else:
            crash_loop = self.faults.record(worker, error, lived, self.elapsed_s)
        if crash_loop is not None:
            self.failure = crash_loop
            self.stop_all(crash_loop)
            return False
        self.send(worker, StartMsg())
        return True

    def on_WorkerDownMsg(self, msg: WorkerDownMsg) -> None:
        """A worker instance failed (the backend saw it): replace it now, not a pong timeout later."""
        if (self.finished or self.restart is None or self.roles.get(msg.worker) != "worker"
                or msg.instance != self.restarts.get(msg.worker, 0)):
            return  # stopping, not a worker, or an instance already replaced
        self._replace(msg.worker, time.monotonic())

    def on_WorkerUpMsg(self, msg: WorkerUpMsg) -> None:
        """A restarted worker's instance is up: from now on it must answer pings within the pong
        timeout like any other (building and resetting its environments included, as for the
        first instance), so one whose environment hangs as it starts is replaced in seconds."""
        if msg.worker in self.starting and msg.instance == self.restarts.get(msg.worker, 0):
            del self.starting[msg.worker]
            self.last_pong[msg.worker] = time.monotonic()

    def stall_diagnosis(self, idle_s: float) -> str:
        """Which stage starves, and the knob to change (the run made no progress for ``idle_s``)."""
        rollouts = sum(int(c.get("rollouts", 0)) for n, c in self.component_counters.items() if n in self.workers)
        return diagnose_stall(idle_s, self.rates, self.inserted, self.trained, self.total_updates,
                              self.component_counters.get(self.tm, {}), rollouts, self.restarts)

    @property
    def stalls(self) -> int:
        """Spells in which the pipeline was stuck (see :class:`StallWatch`)."""
        return self.stall_watch.count

    @property
    def env_steps(self) -> int:
        """Environment steps reported by every worker instance (plus those of the run being resumed)."""
        return self.base_steps + self.produced("env_steps")

    def produced(self, key: str, retired_only: bool = False) -> int:
        """The sum of count ``key`` (``env_steps``, ``transitions``) over every worker instance of this
        session as last reported, or over those a restart replaced only."""
        return sum(c[key] for (worker, instance), c in self.instance_counts.items()
                   if not retired_only or instance < self.restarts.get(worker, 0))

    @property
    def elapsed_s(self) -> float:
        return self.base_elapsed + time.monotonic() - self.started_at

    def stop_all(self, reason: str) -> None:
        """Stop production; the backend then stops the rest in data-flow order, draining."""
        for name, role in self.roles.items():
            if role == "worker":
                self.send(name, StopMsg(reason))
        self.finished = True
        self._close_metrics_row()  # the last window, not lost with the stop

    def on_StopMsg(self, msg: StopMsg) -> None:
        """The backend stops the Orchestrator last, after the Trainer's final report (an
        interrupted run, or one that failed, never went through :meth:`stop_all`): the metric sums
        since the last row become a row, not lost with the stop."""
        super().on_StopMsg(msg)
        self._close_metrics_row()

    def status(self) -> RunStatus:
        """A snapshot of the run as this Orchestrator sees it (what the driver polls)."""
        return RunStatus(
            inserted=self.inserted, trained=self.trained, pieces_inserted=self.pieces_inserted,
            restarts=dict(self.restarts), failure=self.failure, stalls=self.stalls,
            worker_errors=self.faults.summary(),
            curve=list(self.curve), env_steps=self.env_steps, elapsed_s=self.elapsed_s,
            evaluations=list(self.evaluations), retired_env_steps=self.produced("env_steps", retired_only=True),
            retired_transitions=self.produced("transitions", retired_only=True),
            worker_env_steps=self.produced("env_steps"), worker_transitions=self.produced("transitions"),
            train_metrics=list(self.scalars.rows), evaluations_abandoned=list(self.evaluations_abandoned),
            finished=self.finished, solved=dict(self.solved) if self.solved else None,
        )
