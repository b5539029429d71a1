"""The one result type of every run (``janus train``, ``compare``, ``eval``): :class:`RunResult`.

The runtime fills it (``janus.runtime.summary.summarize``); the harness reports it. :meth:`RunResult.to_dict`
is the one serialisation, as written to ``results.json``. Reports read results both fresh and loaded
from ``results.json``, so a result also reads like that dict (``result["counts"]["updates"]``).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Any

from janus import config

if TYPE_CHECKING:
    from janus.config import RunConfig

STAGE_NAMES = ("rollout", "collect", "select", "update", "learner_wait", "actor_blocked")
OLD_RATE_KEY = "actor_steps_per_s"
"""The name ``env_steps_per_s`` had in results written before it was renamed."""


@dataclass
class RunResult:
    """What one run measured.

    ``stage_s`` holds the seconds of each stage in :data:`STAGE_NAMES` (rollout: mean over workers);
    ``runtime`` holds the runtime's figures, among them ``learner_utilization`` (fraction of the
    wall time the Trainer spent in updates) and ``learner_wait_s`` (time it waited for a batch).
    """

    name: str
    config: dict[str, Any]
    samples_per_s: float
    env_steps_per_s: float
    """Env steps (transitions the actors produced) per second of ``wall_s``; results written before
    this name was used call it ``actor_steps_per_s`` (:meth:`from_dict` and :func:`env_steps_rate` read both)."""
    wall_s: float
    stage_s: dict[str, float]
    counts: dict[str, int]
    status: str = "finished"
    """``finished``; ``interrupted`` (Ctrl-C, SIGTERM: the run so far); ``stopped`` (a callback of
    :func:`janus.train` asked: the run so far, saved as for an interrupt); ``running`` (a periodic
    snapshot of a run still going: a run killed without a chance to stop keeps its last one)."""
    runtime: dict[str, Any] = field(default_factory=dict)
    learning_curve: dict[str, list[float]] | None = None
    """Episode ``return`` against ``env_steps`` and ``wall_s`` (RL runs)."""
    episodes: int | None = None
    final_mean_return: float | None = None
    """Mean return of the last 20 episodes (RL runs)."""
    evaluations: list[dict[str, Any]] | None = None
    """Periodic evaluations (``runtime.eval_interval_steps``): env steps, parameter version, mean and
    std of the greedy episodes' returns, wall time."""
    train_metrics: dict[str, list[float | None]] | None = None
    """The learner's training scalars as columns: ``wall_s``, ``env_steps``, ``updates`` and the
    mean of each metric over the updates of each row (DQN: ``loss``, ``q_mean``, ``grad_norm``, ``lr``,
    ``td_abs_mean`` and ``per_beta`` when prioritized, ``epsilon``; PPO: ``policy_loss``, ``value_loss``, ``entropy``,
    ``approx_kl``, ``clipfrac``, ``lr``), a row every few seconds (RL runs)."""
    stop_reason: str | None = None
    """Why the run ended: ``budget reached: 50,176 env steps``, a callback's (``EarlyStop: mean return
    480.2 >= 475 at 31,000 env steps``), ``SIGINT received (Ctrl-C)``, ``SIGTERM received ...``."""
    elapsed_s: float | None = None
    """Seconds this session took in all: ``wall_s`` (its running time) plus start-up and shutdown."""
    target_return: float | None = None
    """``runtime.target_return``: the evaluations' mean return that stops the run (None: none asked)."""
    solved: bool | None = None
    """Whether an evaluation reached ``target_return`` (None: no target)."""
    solved_at_s: float | None = None
    """Seconds from the command's start (the ``janus train`` process's, a :func:`janus.train` call's) to the
    evaluation that reached the target, start-up included: the user's time to solve. A resumed run adds the
    earlier sessions' running time (``wall_s``; their start-ups are not recorded)."""
    solved_at_env_steps: int | None = None
    """Env steps of the policy that reached the target (the evaluation's)."""
    solved_at_train_s: float | None = None
    """The run's own clock (as ``wall_s``, start-up excluded) at that evaluation."""

    def to_dict(self) -> dict[str, Any]:
        """The run as ``results.json`` holds it (fields that are None are left out)."""
        return {f.name: getattr(self, f.name) for f in fields(self) if getattr(self, f.name) is not None}

    @classmethod
    def from_dict(cls, run: dict[str, Any]) -> RunResult:
        """The result of a run as results.json holds it (keys that are no field are left out)."""
        given = dict(run)
        if OLD_RATE_KEY in given:  # written before the rate was named env_steps_per_s
            given.setdefault("env_steps_per_s", given.pop(OLD_RATE_KEY))
        return cls(**{k: v for k, v in given.items() if k in cls._names()})

    # read access as the results.json dict
    def __getitem__(self, key: str) -> Any:
        value = getattr(self, key, None) if key in self._names() else None
        if value is None:
            raise KeyError(key)
        return value

    def __contains__(self, key: object) -> bool:
        return isinstance(key, str) and key in self._names() and getattr(self, key) is not None

    def get(self, key: str, default: Any = None) -> Any:
        return self[key] if key in self else default  # noqa: SIM401  this is get() itself

    def keys(self) -> Iterator[str]:
        return iter(self.to_dict())

    @classmethod
    def _names(cls) -> set[str]:
        return {f.name for f in fields(cls)}


def reported_config(cfg: RunConfig) -> dict[str, Any]:
    """A run's config as its result reports it: as config.yaml records it (:func:`janus.config.recorded`:
    fully resolved, only what the run's algorithm reads), and ``minibatch_size``, the transitions
    of each learner batch (on-policy ``rollout / num_minibatches``, where ``batch_size`` is not read)."""
    out = config.recorded(cfg)
    return {**out, "minibatch_size": cfg.minibatch_size}


def as_dict(run: RunResult | dict[str, Any]) -> dict[str, Any]:
    """A run as a plain dict (a :class:`RunResult` serialised, a loaded dict as is)."""
    return run.to_dict() if isinstance(run, RunResult) else run


def env_steps_rate(run: RunResult | dict[str, Any]) -> float | None:
    """A run's env steps per second, from a result of any age (``actor_steps_per_s`` before the rename)."""
    value = run.get("env_steps_per_s")
    return run.get(OLD_RATE_KEY) if value is None else value
