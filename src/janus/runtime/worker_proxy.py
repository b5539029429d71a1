"""The WorkerProxy: one per node, between its Workers and the replay host and Trainer."""

from __future__ import annotations

import time
from typing import cast

import numpy as np

from janus.runtime.component import Component, Handlers
from janus.runtime.messages import FetchParamsMsg, InsertTransitionMsg, LoadParamsMsg, StopMsg


class WorkerProxy(Component):
    """One per node: batches its workers' inserts and fetches parameters once per node per version."""

    def __init__(self, name: str, trajectory_manager: str, trainer: str, batch_transitions: int, max_delay_s: float = 0.005) -> None:
        super().__init__(name)
        self.tm = trajectory_manager
        self.trainer = trainer
        self.batch_transitions = batch_transitions
        self.max_delay_s = max_delay_s
        self.pending: list[InsertTransitionMsg] = []
        self.pending_count = 0
        self.oldest = 0.0
        self.waiting: dict[str, int] = {}  # local worker -> min version it waits for
        self.upstream_min: int | None = None  # min version of the one fetch in flight upstream
        self.cached: LoadParamsMsg | None = None
        self.fetches_per_version: dict[int, int] = {}

    def handlers(self) -> Handlers:
        return {
            **super().handlers(),
            InsertTransitionMsg: self.on_InsertTransitionMsg,
            FetchParamsMsg: self.on_FetchParamsMsg,
            LoadParamsMsg: self.on_LoadParamsMsg,
        }

    def on_InsertTransitionMsg(self, msg: InsertTransitionMsg) -> None:
        if not self.pending:
            self.oldest = time.perf_counter()
        self.pending.append(msg)
        self.pending_count += msg.count
        if self.pending_count >= self.batch_transitions:
            self._flush()

    def step(self) -> bool:
        if self.pending and time.perf_counter() - self.oldest >= self.max_delay_s:
            self._flush()
        return False

    def _flush(self) -> None:
        msgs, self.pending, self.pending_count = self.pending, [], 0
        first = msgs[0].transitions
        if len(msgs) == 1:
            merged = dict(first)
        else:
            parts = {k: np.concatenate([m.transitions[k] for m in msgs], axis=0) if _same_tail(msgs, k) else None for k in first}
            if any(v is None for v in parts.values()):  # pieces of different env counts: send separately
                for m in msgs:
                    self.send(self.tm, InsertTransitionMsg(self.name, m.transitions, m.count, m.params_version, m.pieces,
                                                           m.by_worker()))
                return
            merged = cast(dict[str, np.ndarray], parts)  # no None left
        count = sum(m.count for m in msgs)
        origins: dict[str, int] = {}
        for m in msgs:
            for worker, pieces in m.by_worker():
                origins[worker] = origins.get(worker, 0) + pieces
        self.send(self.tm, InsertTransitionMsg(self.name, merged, count, min(m.params_version for m in msgs),
                                               sum(m.pieces for m in msgs), tuple(origins.items())))
        self.count("inserts_forwarded")

    def on_StopMsg(self, msg: StopMsg) -> None:
        if self.pending:  # never drop staged transitions
            self._flush()
        super().on_StopMsg(msg)

    def on_FetchParamsMsg(self, msg: FetchParamsMsg) -> None:
        if self.cached is not None and self.cached.version >= msg.min_version:
            self.send(msg.requester, self.cached)
            return
        self.waiting[msg.requester] = msg.min_version
        self._ask_upstream()

    def _ask_upstream(self) -> None:
        """At most one fetch in flight upstream, for the lowest version a local worker waits for."""
        if self.waiting and self.upstream_min is None:
            self.upstream_min = min(self.waiting.values())
            self.send(self.trainer, FetchParamsMsg(self.name, self.upstream_min))
            self.count("fetches_upstream")

    def on_LoadParamsMsg(self, msg: LoadParamsMsg) -> None:
        self.upstream_min = None
        if self.cached is None or msg.version > self.cached.version:
            self.outbox.resolve(msg.params)  # pull to this node once
            self.cached = msg
            self.fetches_per_version[msg.version] = self.fetches_per_version.get(msg.version, 0) + 1
            self.count("param_fetches")
        for worker, need in list(self.waiting.items()):
            if self.cached.version >= need:
                self.send(worker, self.cached)
                del self.waiting[worker]
        self._ask_upstream()


def _same_tail(msgs: list[InsertTransitionMsg], key: str) -> bool:
    tail = msgs[0].transitions[key].shape[1:]
    return all(m.transitions[key].shape[1:] == tail for m in msgs)

