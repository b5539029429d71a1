"""The Worker: rolls out with its actor and sends every piece to its node's WorkerProxy."""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np

from janus import timeline
from janus.algorithms.base import ActorSide
from janus.runtime.component import Component, Handlers
from janus.runtime.messages import (
    CountsMsg,
    FetchParamsMsg,
    InsertTransitionMsg,
    LoadParamsMsg,
    PieceCounts,
    PiecesAcceptedMsg,
    StartMsg,
)

PIECES_UNACCEPTED = 2
"""Pieces a Worker may have sent and the replay not yet taken into its staging: enough that it
rolls out while its last piece travels, few enough that a rate limiter holding inserts back stops
it within a piece or two (see :class:`~janus.runtime.messages.PiecesAcceptedMsg`)."""


class Worker(Component):
    """Rolls out in the background and sends its transitions to its node's WorkerProxy.

    Two rules say when the next piece may start; neither is a rate (the replay's rate limiter is
    the run's only pacing):

    * backpressure: at most ``max_unaccepted`` pieces sent and not yet taken by the replay
      (:class:`PiecesAcceptedMsg`). When the replay's limiter holds inserts back, its staging fills
      and acceptances stop. A restarted worker starts with none outstanding.
    * ``lockstep`` (on-policy: the actor half of the replay's staleness bound 0): rollout ``i``
      acts with parameters of version ``>= base + i``, i.e. trained on rollout ``i-1``; the replay
      drops a rollout acted with older ones. Off-policy, a worker asks for a newer version after
      each piece but never waits for it.

    ``make_actor`` builds the actor when the worker starts; with ``actor_takes_instance`` it is
    given the worker's :attr:`instance` (0 the first, +1 per restart), so that a restarted worker
    acts in an experience stream of its own (see :mod:`janus.algorithms.seeding`).
    """

    def __init__(
        self, name: str, proxy: str, make_actor: Callable[..., ActorSide], lockstep: bool,
        max_rollouts: int = 0, pieces_per_rollout: int = 1, orchestrator: str | None = None,
        actor_takes_instance: bool = False, max_unaccepted: int = PIECES_UNACCEPTED,
    ) -> None:
        super().__init__(name)
        self.proxy = proxy
        self.orchestrator = orchestrator
        self.make_actor = make_actor
        self.actor_takes_instance = actor_takes_instance
        self.lockstep = lockstep
        self.max_rollouts = max_rollouts  # pieces to produce; 0: unlimited
        self.pieces_per_rollout = pieces_per_rollout
        self.max_unaccepted = max_unaccepted
        self.unaccepted = 0  # pieces sent that the replay has not taken yet
        self.actor: ActorSide | None = None
        self.version = -1
        self.base_version = 0  # first version loaded: lockstep counts from there (resume, restart)
        self.fetch_pending = False
        self.rollouts = 0

    def required_version(self) -> int:
        """The parameter version the next piece needs (lockstep only; else any loaded version)."""
        if not self.lockstep:
            return 0
        return self.base_version + self.rollouts // self.pieces_per_rollout

    def handlers(self) -> Handlers:
        return {
            **super().handlers(),
            PiecesAcceptedMsg: self.on_PiecesAcceptedMsg,
            LoadParamsMsg: self.on_LoadParamsMsg,
        }

    def on_StartMsg(self, msg: StartMsg) -> None:
        super().on_StartMsg(msg)
        if self.actor is None:
            self.actor = self.make_actor(self.instance) if self.actor_takes_instance else self.make_actor()
        self._fetch(0)

    def on_PiecesAcceptedMsg(self, msg: PiecesAcceptedMsg) -> None:
        # a replaced instance's pieces may be accepted after this one started: never below 0
        self.unaccepted = max(0, self.unaccepted - msg.pieces)

    def _fetch(self, min_version: int) -> None:
        if not self.fetch_pending:
            self.fetch_pending = True
            self.send(self.proxy, FetchParamsMsg(self.name, min_version))

    def on_LoadParamsMsg(self, msg: LoadParamsMsg) -> None:
        self.fetch_pending = False
        if self.actor is None:  # a fetch of the instance this one replaced, answered before this one started
            return  # (it fetches on start)
        if msg.version > self.version:
            self.actor.load_params(self.outbox.resolve(msg.params))
            if self.version < 0:
                self.base_version = msg.version
            self.version = msg.version
            self.count("params_loaded")

    def step(self) -> bool:
        if self.actor is None or (self.max_rollouts and self.rollouts >= self.max_rollouts):
            return False
        if self.unaccepted >= self.max_unaccepted:
            return False
        needed = self.required_version()
        if self.version < needed:
            self._fetch(needed)
            return False
        if self.rollouts == 0:
            timeline.mark("first_env_step")
        t0 = time.perf_counter()
        piece, info = self.actor.rollout()
        self.count("rollout_s", time.perf_counter() - t0)
        count = int(np.prod(next(iter(piece.values())).shape[:2]))
        self.rollouts += 1
        self.unaccepted += 1
        self.count("transitions", count)
        self.count("rollouts")
        self.count("env_steps", info.get("env_steps", count))
        actor_metrics = {f"actor.{key}": float(value) for key, value in info.get("metrics", {}).items()}  # DQN's epsilon
        self.counters.update(actor_metrics)
        returns = list(info.get("episode_returns", ()))
        if returns:
            self.count("episodes", len(returns))
        if self.orchestrator is not None:  # metrics, not data: a few floats (every piece: the counts stay exact)
            # before the piece: an instance killed between the two has its piece counted as produced
            # (and lost), never inserted without being produced; the Orchestrator keeps every
            # instance's counts, so a replaced one's still count when its process took its counters
            self.send(self.orchestrator, CountsMsg(self.name, PieceCounts(
                self.instance, self.counters["env_steps"], self.counters["transitions"], returns, actor_metrics)))
        self.send(self.proxy, InsertTransitionMsg(self.name, piece, count, self.version))
        if not self.lockstep:
            self._fetch(self.version + 1)
        return True

    def close(self) -> None:
        """Close the actor's environments when it has any (subprocesses of ``vector_env: async``)."""
        close = getattr(self.actor, "close", None)
        if close is not None:
            close()

