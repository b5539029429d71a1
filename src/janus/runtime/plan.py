"""The run plan: everything a run derives from its config, worked out once, before anything is built.

:meth:`RunPlan.of` reads the algorithm (its budget, pacing and buffer spec), the run state of the
run being resumed (one read of ``run_state.json``), and works out the layout of the components,
the pieces each worker sends and what is checkpointed. Every factory of :mod:`janus.runtime.run`
takes the plan, so no component re-derives it (nor reads the run state again in each worker).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, replace
from typing import Any

from janus.algorithms.base import Algorithm, Budget, BufferSpec, algorithm, learns_on_policy
from janus.algorithms.pacing import Pacing, largest_insert
from janus.buffer.pacing.collection import CollectionUnit
from janus.buffer.pacing.ratio_limiter import SampleToInsertRatio
from janus.buffer.replay.prioritized import LinearSchedule
from janus.config import RunConfig, resolve_backend
from janus.errors import ConfigError
from janus.runtime import checkpoints
from janus.runtime.stalls import Rates


@dataclass(frozen=True)
class BufferLimits:
    """The replay's rate limiter settings, as :class:`JanusBuffer <janus.buffer.pipeline.JanusBuffer>`
    takes them: off-policy the algorithm's sample/insert ratio from its sampling threshold, on-policy
    the queue's depth and staleness bound (the other mode's fields at their defaults)."""

    min_size: int | None = None
    samples_per_insert: float = 0.0
    error_buffer: float | None = None
    queue_depth: int = 1
    max_staleness: int | None = None

    def arguments(self) -> dict[str, Any]:
        """The JanusBuffer keyword arguments."""
        return asdict(self)


@dataclass(frozen=True)
class RunPlan:
    """One run's derived settings (picklable: it travels to worker processes and Ray actors)."""

    cfg: RunConfig
    algo: Algorithm
    budget: Budget
    pacing: Pacing
    spec: BufferSpec
    resumed: Mapping[str, Any]
    """The commit record of the run being resumed, with the counts it continues from
    (:func:`resumed_counts`); ``{}`` for a fresh run."""
    pieces_per_worker: int
    """Pieces each Worker sends in this invocation (0: until stopped)."""
    layout: Mapping[str, tuple[str, str]]
    """Component name -> (role, node label)."""
    checkpointed: tuple[str, ...]
    """Components whose state a checkpoint holds."""
    serial: bool
    """The deterministic serial scheduler runs it (local, both overlaps off)."""
    evaluates: bool
    """Periodic evaluation is on."""
    replay_device: str
    """Where the replay host's JanusBuffer delivers batches: the learner device where the Trainer
    shares its process, else ``cpu`` (the remote replay client moves them)."""
    collection: CollectionUnit
    """What one of the replay's collections writes (``g_collect`` pieces, or k/M of a rollout)."""

    @classmethod
    def of(cls, cfg: RunConfig) -> RunPlan:
        """The plan of ``cfg`` (its backend resolved: not ``auto``)."""
        algo = algorithm(cfg.workload.algo)
        pacing = algo.pacing(cfg)
        budget = algo.budget(cfg)
        state: dict[str, Any] = {}
        if cfg.runtime.resume and cfg.runtime.checkpoint_dir:
            state = resumed_counts(cfg, pacing, checkpoints.read_run_state(cfg.runtime.checkpoint_dir))
        spec = algo.buffer_spec(cfg)
        names: tuple[str, ...] = ()
        if cfg.runtime.checkpoint_dir:
            names = ("trainer",) * spec.checkpoint_learner + ("trajectory_manager",) * spec.checkpoint_replay
        j = cfg.janus
        evaluates = evaluation_on(cfg, algo)
        return cls(
            cfg=cfg, algo=algo, budget=budget, pacing=pacing, spec=spec, resumed=state,
            pieces_per_worker=pieces_per_worker(cfg, pacing, budget, state),
            layout=layout(cfg, evaluates), checkpointed=names,
            serial=serial(cfg),
            evaluates=evaluates,
            replay_device=j.learner_device if cfg.runtime.backend != "ray" else "cpu",
            collection=CollectionUnit.of(j.is_on_policy, j.g_collect, rollout_size(cfg, spec)),
        )

    @property
    def total_updates(self) -> int:
        return self.budget.total_updates

    @property
    def pieces_in_all(self) -> int:
        """Off-policy pieces every worker sends in all (0: until stopped; on-policy rollouts are whole)."""
        return 0 if self.pacing.lockstep else self.pieces_per_worker * self.cfg.workload.num_actors

    @property
    def takes_every_piece(self) -> bool:
        """The run ends only once every worker sent all its pieces (and the learner trained
        ``total_updates`` batches): so every run of a budget does the same work, whatever its
        data-path knobs. Off-policy with a finite budget of pieces: always under an env-step
        budget (its updates follow from the ratio), else (the synthetic workload's ``iterations``)
        where the replay's ratio can admit every piece once the last batch is sampled; a ratio that
        could not ends the run at its updates, as before. On-policy (lockstep) the workers act exactly
        the rollouts the updates train on, so the updates decide."""
        pieces = self.pieces_in_all
        if not pieces:
            return False
        if self.budget.env_steps:
            return True
        limiter, cfg = self.limiter, self.cfg
        produced = pieces * self.pacing.piece_steps * cfg.workload.envs_per_actor + int(self.resumed.get("inserted", 0))
        sampled = self.total_updates * cfg.minibatch_size  # at least: prefetched batches are sampled too
        return not limiter.limits_inserts or limiter.diff(produced, sampled) <= limiter.error_buffer

    @property
    def largest_insert(self) -> int:
        """The most rows the replay's collection writes at once (off-policy): transitions, or R2D2's
        sequences (``spec.row_steps`` new env steps each)."""
        return largest_insert(self.cfg, self.pacing.piece_steps * self.cfg.workload.envs_per_actor // self.spec.row_steps)

    @property
    def limiter(self) -> SampleToInsertRatio:
        """The run's sample/insert ratio, from its algorithm's pacing, checked against deadlock for
        the largest insert the replay makes (the replay's limiter enforces it)."""
        p, cfg = self.pacing, self.cfg
        return SampleToInsertRatio(p.samples_per_insert, p.min_size_to_sample, p.error_buffer,
                                   insert_piece=self.largest_insert, sample_batch=cfg.minibatch_size)

    @property
    def rollout_size(self) -> int | None:
        """On-policy: rows (transitions, or IMPALA's trajectories) per rollout of every worker; None off-policy."""
        return rollout_size(self.cfg, self.spec)

    @property
    def buffer_limits(self) -> BufferLimits:
        """The replay's rate limiter settings: off-policy the algorithm's sample/insert ratio (its
        deadlock check passed when the plan was made) from its first batch at the algorithm's threshold
        (DQN's learning_starts, which may be below batch_size: sampling is with replacement); on-policy
        a queue of ``queue_depth`` rollouts, each served num_epochs times."""
        p, spec = self.pacing, self.spec
        if spec.on_policy:
            return BufferLimits(queue_depth=spec.queue_depth, max_staleness=spec.max_staleness)
        return BufferLimits(min_size=p.min_size_to_sample, samples_per_insert=p.samples_per_insert,
                            error_buffer=p.error_buffer if p.samples_per_insert else None)

    @property
    def rates(self) -> Rates:
        """The limiter's settings as the Orchestrator names them in a stall's diagnosis."""
        p = self.pacing
        return Rates(p.min_size_to_sample, p.samples_per_insert, p.error_buffer)

    @property
    def env_step_total(self) -> int:
        """Env steps an RL run takes in all, for its progress line: ``total_env_steps`` in whole
        rounds of every worker's rollouts (0 for the synthetic workload, which counts updates)."""
        if not self.algo.has_policy:
            return 0
        rounds = math.ceil(self.cfg.workload.total_env_steps / self.cfg.rollout_transitions)
        return self.budget.env_steps or max(1, rounds) * self.cfg.rollout_transitions

    @property
    def restored_env_steps(self) -> int:
        """Env steps of the run being resumed (0 for a fresh run)."""
        return int(self.resumed.get("env_steps", 0))

    @property
    def session(self) -> int:
        """The experience-stream session: 0 for a fresh run, ``1 + env steps resumed from`` for a
        resumed one (see :mod:`janus.algorithms.seeding`)."""
        return 1 + self.restored_env_steps if self.resumed else 0

    def beta_schedule(self) -> LinearSchedule | None:
        """Prioritized replay's importance exponent over the run's updates (``spec.beta_final`` set):
        linear from ``beta`` at update 0 to ``beta_final`` at the budget's last, continued by a resumed
        run from the updates it had trained (as PPO's learning rate, it follows the budget: one raised
        on resume spreads the schedule over the new budget, so beta resumes at its value there)."""
        if self.spec.beta_final is None:
            return None
        return LinearSchedule(self.spec.sampler_kwargs["beta"], self.spec.beta_final, self.total_updates,
                              offset=int(self.resumed.get("trained", 0)))

    def check_progress_possible(self) -> None:
        """Reject, before any work, a run whose sampling threshold its workers can never meet, or whose
        ratio can never allow the batches it must train (a run without an env-step budget; one with a
        budget takes its update count from the ratio, and gets its last batches once every piece is in)."""
        p, cfg = self.pacing, self.cfg
        limiter = self.limiter  # built here: a deadlocking ratio is refused before any work
        pieces = self.pieces_in_all
        produced = pieces * p.piece_steps * cfg.workload.envs_per_actor + int(self.resumed.get("inserted", 0))
        if pieces and p.min_size_to_sample > produced:
            raise ConfigError(
                f"this run can never sample: sampling starts after {p.min_size_to_sample:,} transitions "
                f"(runtime.min_inserts / learning_starts) but its workers produce {produced:,} in all; "
                f"lower the minimum or raise the budget (workload.total_env_steps, or workload.iterations where no "
                f"env-step budget is set) or workload.num_actors")
        if pieces and p.samples_per_insert and not self.budget.env_steps:
            allowed = limiter.batches_allowed(produced)
            if allowed < self.total_updates:
                raise ConfigError(
                    f"this run can never train its {self.total_updates:,} batches: at samples_per_insert "
                    f"{p.samples_per_insert:g} its workers' {produced:,} transitions (minus min_size_to_sample "
                    f"{p.min_size_to_sample:,}) allow {allowed:,} batches of {limiter.sample_batch}; raise "
                    f"workload.iterations / num_actors or runtime.samples_per_insert, or lower the updates per iteration")


def resumed_counts(cfg: RunConfig, pacing: Pacing, state: dict[str, Any]) -> dict[str, Any]:
    """The commit record ``state`` with the counts a resumed run continues from.

    On-policy (lockstep) a rollout acted but not wholly trained at the commit is lost with the
    resume and acted again (:func:`pieces_per_worker`), so the run continues from the env steps of
    the rollouts trained: the steps and episodes of the lost one are not counted twice, and the
    run ends at its env-step budget, as one that was never stopped does."""
    if not trains_what_it_acts(cfg, pacing) or not state:
        return state
    w = cfg.workload
    steps = rounds_trained(cfg, state) * pacing.pieces_per_rollout * pacing.piece_steps * w.envs_per_actor * w.num_actors
    if int(state.get("env_steps", 0)) <= steps:
        return state
    return {**state, "env_steps": steps, "curve": [c for c in state.get("curve", []) if c[1] <= steps]}


def trains_what_it_acts(cfg: RunConfig, pacing: Pacing) -> bool:
    """On-policy with a budget of pieces (PPO's lockstep, IMPALA/APPO's queue): each round acted is
    trained whole, and one acted but not trained at a commit is lost with a resume (the queue is not
    checkpointed), so a resumed run continues from the rounds trained."""
    return pacing.lockstep or (bool(pacing.max_pieces) and learns_on_policy(cfg))


def rounds_trained(cfg: RunConfig, state: Mapping[str, Any]) -> int:
    """On-policy: the rounds (every worker's rollout) wholly trained at the commit ``state``."""
    return int(state.get("trained", 0)) // cfg.updates_per_iteration


def pieces_per_worker(cfg: RunConfig, pacing: Pacing, budget: Budget, state: Mapping[str, Any]) -> int:
    """Pieces each Worker sends in this invocation (0: until stopped). A resumed run under an
    env-step budget, or on-policy, sends only the rounds its commit has not covered (at least one rollout): off-policy
    by the committed ``env_steps``, on-policy by the rollouts trained (a resumed PPO worker allowed
    the whole budget's pieces acted a rollout or two past the budget before the stop reached it)."""
    p = pacing
    if not p.max_pieces or not state:
        return p.max_pieces
    if trains_what_it_acts(cfg, p):  # the rollouts trained on: one acted but not yet trained at the commit is lost, and acted again
        done_rounds = rounds_trained(cfg, state)
    elif budget.env_steps:
        round_steps = p.piece_steps * cfg.workload.envs_per_actor * cfg.workload.num_actors
        done_rounds = int(state.get("env_steps", 0)) // round_steps
    else:
        return p.max_pieces
    return max(p.pieces_per_rollout, p.max_pieces - done_rounds * p.pieces_per_rollout)


def rollout_size(cfg: RunConfig, spec: BufferSpec) -> int | None:
    """On-policy: rows the replay's queue item holds (every worker's rollout); None off-policy."""
    return cfg.rollout_transitions // spec.row_steps if spec.on_policy else None


def evaluation_on(cfg: RunConfig, algo: Algorithm) -> bool:
    """Periodic evaluation is on: an interval is set and the algorithm has a policy to evaluate."""
    return bool(cfg.runtime.eval_interval_steps) and algo.has_policy


def serial(cfg: RunConfig) -> bool:
    """Local runs with both overlaps off use the deterministic serial scheduler."""
    j = cfg.janus
    return cfg.runtime.backend == "local" and not j.overlap_collect and not j.overlap_select


def layout(cfg: RunConfig, evaluates: bool) -> dict[str, tuple[str, str]]:
    """Component name -> (role, node label). Workers ``worker-i`` live on node ``i // workers_per_node``,
    each node has one ``proxy-<node>``; the replay host, the Trainer and the Orchestrator are on node 0."""
    n = cfg.workload.num_actors
    per_node = cfg.runtime.workers_per_node or n
    out = {"trainer": ("trainer", "node-0"), "trajectory_manager": ("trajectory_manager", "node-0")}
    for node in range(math.ceil(n / per_node)):
        out[f"proxy-{node}"] = ("proxy", f"node-{node}")
    for i in range(n):
        out[f"worker-{i}"] = ("worker", f"node-{i // per_node}")
    if evaluates:
        out["evaluator"] = ("evaluator", "node-0")
    out["orchestrator"] = ("orchestrator", "node-0")
    return out


def plan_of(cfg: RunConfig) -> RunPlan:
    """The plan of ``cfg`` with ``runtime.backend: auto`` resolved for this machine."""
    return RunPlan.of(replace(cfg, runtime=replace(cfg.runtime, backend=resolve_backend(cfg))))
