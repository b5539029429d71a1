"""JanusBuffer: Dual-End Staging wired together.

``actors --put--> ActorBuffer --CollectionOp--> ExperienceBuffer --SelectionOp--> LearnerBuffer --get--> learner``

With ``overlap_collect=1`` a background thread runs collection while the actors keep rolling out;
with 0 the actor whose ``put`` completes a collection unit runs it inline. Likewise
``overlap_select=1`` runs selection in a background thread that prefetches while the learner
updates; with 0 the learner's ``get`` runs it inline when no batch is staged.

The buffer's :attr:`~JanusBuffer.rate_limiter` is its only pacing: collection writes a unit only
once the limiter admits it (held-back pieces stay staged, so the bounded ActorBuffer fills and
``put`` blocks: the backpressure actors feel), and selection reads only what the limiter grants.

Errors raised in a background thread are re-raised, with their original traceback, by the next
``put``/``get``; the pipeline then stops instead of hanging. ``close()`` joins every thread.

This module is the wiring and the public face; its parts are places of their own: the stages in
:mod:`janus.buffer.staging`, when collection and selection run in :mod:`janus.buffer.collector` and
:mod:`janus.buffer.selector`, their threads in :mod:`janus.buffer.stage_threads`, the counters in
:mod:`janus.buffer.stage_stats`, and why ``get`` found no batch in :mod:`janus.buffer.diagnosis`.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

import torch

from janus.buffer.arguments import check_int, check_timeout, is_int
from janus.buffer.collector import Collector
from janus.buffer.diagnosis import no_batch_message
from janus.buffer.frames.replay import FrameStackReplay
from janus.buffer.pacing.collection import CollectionUnit
from janus.buffer.pacing.queue_limiter import QueueLimiter
from janus.buffer.pacing.rate_limiter import RateLimiter
from janus.buffer.pacing.ratio_limiter import RatioLimiter
from janus.buffer.replay.experience import ExperienceBuffer
from janus.buffer.selector import Selector
from janus.buffer.settings import JanusConfig, resolve_janus
from janus.buffer.stage_stats import StageStats
from janus.buffer.stage_threads import start_stage_thread
from janus.buffer.staging.actor_buffer import ActorBuffer
from janus.buffer.staging.batch import Preprocess
from janus.buffer.staging.collection import CollectionOp
from janus.buffer.staging.learner_buffer import LearnerBuffer
from janus.buffer.staging.piece_checks import check_frame_piece, check_piece
from janus.buffer.staging.selection import SelectionOp
from janus.errors import BufferInputError, BufferTypeError, ConfigError, PipelineClosedError, StagingTimeout


class JanusBuffer:
    """The five parts of Dual-End Staging behind ``put`` (actor side) and ``get`` (learner side).

    Actors call :meth:`put`; the learner calls :meth:`get` and, prioritized, :meth:`update_priority`;
    :meth:`flush` writes staged pieces now, :meth:`close` stops every thread. :attr:`experience`
    is the :class:`~janus.buffer.replay.experience.ExperienceBuffer`, :attr:`stats` the per-stage counters.

    Args:
        config: data-path knobs; ``placement``/``learner_device`` may be ``auto``.
        rollout_size: on-policy, transitions per rollout (all actors); the storage holds one.
        num_epochs: on-policy, epochs over each rollout (>= 1).
        time_major_dims: leading dims of a put piece merged into the batch dim (2: ``[T, envs]``; >= 1).
        preprocess: optional function applied by collection to each concatenated batch.
        sampler, sampler_kwargs: off-policy sampler of the experience buffer.
        seed: seeds sampling and on-policy shuffling (same seed, same batches).
        min_size: off-policy, items stored before the first sample, in ``[1, buffer_capacity]``
            (default ``batch_size``).
        frame_stack: off-policy, ``obs``/``next_obs`` are stacks of frames: the experience buffer is a
            :class:`~janus.buffer.frames.replay.FrameStackReplay`, which stores each frame once (pieces may
            carry a ``stream`` field naming each row's environment). It keeps frames in host memory:
            placement ``auto`` means ``cpu_pageable`` for it, ``cuda`` is refused.
        beta_schedule: prioritized only: the importance exponent of the ``n``-th batch selected
            (``n`` from 0), e.g. ``LinearSchedule(0.4, 1.0, total_updates)`` from
            :mod:`janus.buffer.replay.prioritized`, which anneals it as the PER paper does; ``None``:
            the sampler's ``beta`` throughout. :attr:`beta` is the value the next batch gets.
        samples_per_insert, error_buffer: off-policy, the sample/insert ratio and how far it may
            drift, in sampled transitions (see :class:`~janus.buffer.pacing.ratio_limiter.RatioLimiter`;
            0: no ratio, sampling waits only for ``min_size``).
        max_staleness: on-policy, parameter versions a rollout may lag the learner's
            (:meth:`set_learner_version`, ``put(..., version=)``) before it is dropped unserved.
        queue_depth: on-policy, rollouts (queue items) admitted and not yet served at once: 1 for
            lockstep PPO; more lets an asynchronous algorithm's actors run ahead of the learner
            (IMPALA/APPO), the storage holding ``queue_depth x rollout_size`` transitions.
        collection: what one collection writes (:class:`~janus.buffer.pacing.collection.CollectionUnit`),
            as a run's plan derives it; default: from ``config.g_collect`` (and ``rollout_size`` on-policy).

    The rate limiter is built here from these arguments, not passed in, because its units are the
    buffer's own (the batch size, the rollout, the collection unit): off-policy a
    :class:`~janus.buffer.pacing.ratio_limiter.RatioLimiter`, on-policy a
    :class:`~janus.buffer.pacing.queue_limiter.QueueLimiter` (item = one rollout, served ``num_epochs``
    times, one deep). A resumed run restores its counts with ``rate_limiter.restore(...)``.
    """

    def __init__(
        self,
        config: JanusConfig,
        *,
        rollout_size: int | None = None,
        num_epochs: int = 1,
        time_major_dims: int = 2,
        preprocess: Preprocess | None = None,
        sampler: str = "uniform",
        seed: int | None = None,
        min_size: int | None = None,
        frame_stack: bool = False,
        beta_schedule: Callable[[int], float] | None = None,
        samples_per_insert: float = 0.0,
        error_buffer: float | None = None,
        max_staleness: int | None = None,
        queue_depth: int = 1,
        collection: CollectionUnit | None = None,
        **sampler_kwargs: Any,
    ) -> None:
        if not isinstance(config, JanusConfig):
            raise BufferTypeError(f"JanusBuffer(config) takes a JanusConfig, e.g. JanusConfig(batch_size=64), "
                                  f"got {type(config).__name__}")
        check_int("time_major_dims", time_major_dims, 1)
        if frame_stack and config.placement == "auto":  # frames live in host memory (see FrameStackReplay)
            config = replace(config, placement="cpu_pageable")
        self.config = cfg = resolve_janus(config)
        self._stats = StageStats()
        self._stats_lock = threading.Lock()
        self._time_major_dims = time_major_dims
        self._frame_stack = frame_stack
        self._failure: BaseException | None = None
        self._closed = False
        self._inserts_finished = False
        learner_device = torch.device(cfg.learner_device)
        self._collect_pieces: int | None
        self._collect_transitions: int | None
        if cfg.is_on_policy:
            if not is_int(rollout_size) or rollout_size < 1 or rollout_size % cfg.num_minibatches:
                raise ConfigError(
                    f"invalid rollout_size: got {rollout_size!r}; accepted: a positive multiple of "
                    f"num_minibatches={cfg.num_minibatches} (on-policy needs the rollout size)"
                )
            check_int("num_epochs", num_epochs, 1)
            if samples_per_insert or error_buffer is not None:
                raise ConfigError("samples_per_insert/error_buffer pace off-policy replay; on-policy each rollout is "
                                  "served num_epochs times (a queue), so leave them unset")
            rollout_size, num_epochs = int(rollout_size), int(num_epochs)
            check_int("queue_depth", queue_depth, 1)
            self.rate_limiter: RateLimiter = QueueLimiter(rollout_size, cfg.num_minibatches, num_epochs, queue_depth,
                                                          max_staleness)
            capacity, batch_size = rollout_size * queue_depth, rollout_size // cfg.num_minibatches
            batches_per_call = round(cfg.g_select * cfg.num_minibatches)
            self.min_size = batch_size
        else:
            if max_staleness is not None:
                raise ConfigError(f"invalid max_staleness: got {max_staleness!r} off-policy; accepted: None (staleness "
                                  "bounds a queue: on-policy or asynchronous algorithms)")
            if queue_depth != 1:
                raise ConfigError(f"invalid queue_depth: got {queue_depth!r} off-policy; accepted: 1 (the depth of an "
                                  "on-policy queue; off-policy replay holds buffer_capacity transitions)")
            capacity, batch_size = cfg.buffer_capacity, cfg.batch_size
            batches_per_call = int(cfg.g_select)
            if min_size is not None:  # sampling needs an item; more than the capacity would never be stored
                check_int("min_size", min_size, 1, capacity, f" (buffer_capacity={capacity})")
            self.min_size = batch_size if min_size is None else int(min_size)
        self.batch_size = batch_size
        # a run's plan (janus.runtime.plan) passes its own; a buffer built alone derives it from its config
        unit = collection or CollectionUnit.of(cfg.is_on_policy, cfg.g_collect, rollout_size)
        if (unit.transitions is not None) != cfg.is_on_policy:
            raise ConfigError(f"invalid collection: got {unit}; accepted: transitions on-policy, pieces off-policy")
        self._collect_pieces, self._collect_transitions = unit.pieces, unit.transitions

        self.experience: ExperienceBuffer | FrameStackReplay
        if frame_stack:
            if cfg.is_on_policy:
                raise ConfigError("frame_stack=True is a replay (off-policy) storage; on-policy rollouts are stored whole")
            self.experience = FrameStackReplay(capacity, cfg.placement, sampler, seed, **sampler_kwargs)
        else:
            self.experience = ExperienceBuffer(capacity, cfg.placement, "uniform" if cfg.is_on_policy else sampler, seed, **sampler_kwargs)
        if not cfg.is_on_policy:  # min size counts what the storage holds, a checkpoint loaded into it too
            self.rate_limiter = RatioLimiter(self.min_size, batch_size, samples_per_insert, error_buffer,
                                             stored=self.experience.__len__)
        self.actor_buffer = ActorBuffer(
            max(cfg.actor_buffer_size, unit.staged_pieces), min_transitions=unit.transitions or 0
        )
        self.learner_buffer = LearnerBuffer(cfg.prefetch)
        self.collection = CollectionOp(self.experience, time_major_dims, preprocess)
        if beta_schedule is not None and (sampler != "prioritized" or cfg.is_on_policy or not callable(beta_schedule)):
            raise ConfigError(f"invalid beta_schedule: got {type(beta_schedule).__name__}; accepted: a function of the "
                              "batch count, with sampler='prioritized' off-policy (it anneals prioritized "
                              "replay's importance exponent beta)")
        self.selection = SelectionOp(
            self.experience, batch_size, batches_per_call, learner_device, self.rate_limiter,
            None if seed is None else seed + 2, beta_schedule,
        )
        self._collector = Collector(self.actor_buffer, self.collection, self.rate_limiter, self._collect_pieces,
                                    self._collect_transitions, self._stats, self._stats_lock)
        self._selector = Selector(self.selection, self.learner_buffer, self.rate_limiter, self._stats, self._stats_lock)
        self._piece_schema: dict[str, tuple[str, tuple[int, ...]]] | None = None  # of the first piece put
        self._schema_lock = threading.Lock()
        self._threads: list[threading.Thread] = []
        if cfg.overlap_collect:
            self._start("janus-collect", self._collect_loop)
        if cfg.overlap_select:
            self._start("janus-select", self._select_loop)

    # ---- actor side ----------------------------------------------------------------------------
    def put(self, rollout: Mapping[str, Any], timeout: float | None = None, *, version: int | None = None) -> None:
        """Stage one rollout piece (fields shaped ``[T, envs, ...]`` by default); blocks when full.

        A piece holds at least one transition (on-policy at most ``rollout_size``) and the fields,
        dtypes and item shapes of the first piece; any other is refused here, before it is staged.
        ``version``: the parameter version the piece was acted with (on-policy ``max_staleness``
        drops a rollout that lags the learner's too far; None: never stale). ``timeout=0`` never
        blocks: a full ActorBuffer raises :class:`~janus.errors.StagingTimeout` at once.
        """
        timeout = check_timeout(timeout)
        self._raise_if_failed()
        if self._closed:
            raise PipelineClosedError("JanusBuffer is closed")
        if self._inserts_finished:
            raise PipelineClosedError("JanusBuffer.put after finish_inserts(): no insert was to come again")
        if version is not None:
            check_int("version", version, 0, why=" or None (never stale)", error=BufferInputError)
        known = self._piece_schema
        n, schema = check_piece(rollout, self._time_major_dims, known)
        if isinstance(self.rate_limiter, QueueLimiter) and n > self.rate_limiter.item_size:  # could never be written
            raise BufferInputError(f"put() got a piece of {n} transitions; an on-policy rollout holds "
                                   f"rollout_size={self.rate_limiter.item_size}")
        self.rate_limiter.check_insert(n)  # a piece the ratio could never admit is refused here, never left to hang
        if known is None:
            self._set_piece_schema(rollout, schema)
        blocked = self.actor_buffer.put((rollout, version, n), n, timeout)
        with self._stats_lock:
            self._stats.actor_blocked_s += blocked
            self._stats.pieces_put += 1
            self._stats.transitions_put += n
        if not self.config.overlap_collect:
            try:
                self._collector.collect_staged(block=False)
            except PipelineClosedError:
                self._raise_if_failed()  # closed by a background failure: raise the cause
                raise
            except BaseException as exc:  # an inline operator failed: the whole pipeline stops
                self._fail(exc)
                raise

    def wait_for_room(self, timeout: float) -> bool:
        """Wait at most ``timeout`` seconds until a :meth:`put` would not block (the ActorBuffer has
        room); False if it still would. A writer holding a piece back polls with this, cheaply
        (no checks of the piece, no exception per poll), then puts."""
        self._raise_if_failed()
        return self.actor_buffer.wait_room(check_timeout(timeout, none_ok=False) or 0.0)

    def _set_piece_schema(self, rollout: Mapping[str, Any], schema: dict[str, tuple[str, tuple[int, ...]]]) -> None:
        """Record the first piece's fields; a piece checked at the same time as another first piece
        is checked again against the one recorded first (and refused if it differs)."""
        with self._schema_lock:
            if self._piece_schema is None:
                if self._frame_stack:
                    check_frame_piece(schema)
                self._piece_schema = schema
            elif schema != self._piece_schema:
                check_piece(rollout, self._time_major_dims, self._piece_schema)  # raises, naming the field

    def flush(self) -> None:
        """Write every staged piece the rate limiter admits now, below the collection granularity
        too. Pieces the limiter holds back (the ratio, or a full on-policy queue) stay staged and
        flush returns without waiting for them: they are written once the learner has sampled
        enough (or after :meth:`finish_inserts`)."""
        self._raise_if_failed()
        self._collector.flush()

    def snapshot(self) -> tuple[dict[str, Any], int]:
        """The experience buffer's state and the transitions still staged, taken together: no
        collection runs in between (it holds the same lock), so the two agree."""
        with self._collector.lock:
            return self.experience.state_dict(), self.actor_buffer.transitions

    def finish_inserts(self) -> None:
        """No piece will be put again: the limiter stops holding sampling (and the staged pieces)
        back for inserts that will never come, and the staged pieces are written. Later puts raise."""
        self._inserts_finished = True
        self.rate_limiter.finish_inserts()
        self.flush()

    def set_learner_version(self, version: int) -> None:
        """The learner's parameter version now: on-policy, rollouts older than ``max_staleness``
        versions are dropped unserved (counted in ``stats.items_dropped_stale``), and their room
        goes to the staged pieces."""
        self.rate_limiter.set_learner_version(version)
        if not self.config.overlap_collect and not self._closed:
            self._collector.collect_staged(block=False)

    # ---- learner side --------------------------------------------------------------------------
    def get(self, timeout: float | None = None) -> dict[str, torch.Tensor]:
        """The next batch on the learner device (fields, ``"index"`` keys, ``"weight"`` if prioritized).

        Blocks until a batch is ready; past ``timeout`` seconds raises
        :class:`~janus.errors.StagingTimeout` (also when selection runs inline), saying
        what it waits for. Inline (``overlap_select=0``) it first writes the staged pieces the rate
        limiter now admits (``overlap_collect=0``), then selects if the limiter grants a sample:
        ``get(timeout=0)`` never blocks. After :meth:`close` raises :class:`PipelineClosedError`.
        """
        timeout = check_timeout(timeout)
        self._raise_if_failed()
        if self._closed:
            raise PipelineClosedError("JanusBuffer is closed")
        deadline = None if timeout is None else time.perf_counter() + timeout
        if not self.config.overlap_select and self.learner_buffer.ready() == 0:
            try:
                if not self.config.overlap_collect:
                    self._collector.collect_staged(block=False)
                self._select_once(inline=True, deadline=deadline)
            except StagingTimeout as exc:
                self._raise_if_failed()
                raise StagingTimeout(no_batch_message(timeout, exc, self.actor_buffer, self._collector.threshold(), self.rate_limiter,
                                                   self.config.g_collect)) from None
            except PipelineClosedError:
                self._raise_if_failed()  # closed by a background failure: raise the cause
                raise
            except BaseException as exc:  # an inline operator failed: the whole pipeline stops
                self._fail(exc)
                raise
        remaining = None if deadline is None else max(0.0, deadline - time.perf_counter())
        try:
            pending, waited = self.learner_buffer.get(remaining)
        except StagingTimeout as exc:
            raise StagingTimeout(no_batch_message(timeout, exc, self.actor_buffer, self._collector.threshold(), self.rate_limiter,
                                                   self.config.g_collect)) from None
        with self._stats_lock:
            self._stats.learner_wait_s += waited
            self._stats.batches_delivered += 1
            self._stats.select_s += pending.select_s
            self._stats.select_ahead_s -= pending.select_s
        return pending.wait()

    @property
    def beta(self) -> float | None:
        """Prioritized: the importance exponent the next selected batch gets (None: uniform)."""
        if self.selection.beta_schedule is not None:
            return float(self.selection.beta_schedule(self.selection.selected))
        beta = getattr(getattr(self.experience, "_sampler", None), "beta", None)
        return None if beta is None else float(beta)

    def update_priority(self, index: Any, priority: Any) -> int:
        """Set the priorities of delivered items: ``index`` is a batch's ``"index"`` (keys),
        ``priority`` one number >= 0 per key (e.g. ``|td_error|``). Returns how many were applied:
        keys of items overwritten since they were sampled are dropped; the last duplicate wins.
        Only a prioritized buffer (``sampler="prioritized"``) has priorities: any other raises
        :class:`~janus.errors.BufferInputError` (they would be ignored)."""
        return self.experience.update_priority(index, priority)

    def _select_once(self, inline: bool, deadline: float | None = None) -> None:
        self._selector.select_once(inline, deadline)
        if not self.config.overlap_collect:  # the grant may have made room: write what is now admitted
            self._collector.collect_staged(block=False)

    @property
    def selection_wait_s(self) -> float:
        """Seconds selection has spent waiting for the rate limiter's grant."""
        return self.rate_limiter.sample_wait_s

    @property
    def stats(self) -> StageStats:
        """Per-stage counters, with the rate limiter's waits and drops as of now."""
        stats = self._stats
        stats.insert_wait_s = self.rate_limiter.insert_wait_s
        stats.sample_wait_s = self.rate_limiter.sample_wait_s
        if isinstance(self.rate_limiter, QueueLimiter):
            stats.items_dropped_stale = self.rate_limiter.dropped_items
        return stats

    # ---- threads, errors, shutdown -------------------------------------------------------------
    def _start(self, name: str, loop: Callable[[], None]) -> None:
        start_stage_thread(self._threads, name, loop, self._fail)

    def _collect_loop(self) -> None:
        while not (self._closed and isinstance(self.rate_limiter, QueueLimiter)):  # on-policy: a closed rollout is dropped
            self._collector.collect_staged(block=True)

    def _select_loop(self) -> None:
        while not self._closed:
            self._select_once(inline=False)

    def _fail(self, exc: BaseException) -> None:
        if self._failure is None:
            self._failure = exc
        self.actor_buffer.close(exc)
        self.learner_buffer.close(exc)
        self.rate_limiter.close()

    def _raise_if_failed(self) -> None:
        if self._failure is not None:
            raise self._failure

    @property
    def failure(self) -> BaseException | None:
        """The first error raised in a background thread, if any."""
        return self._failure

    @property
    def threads(self) -> list[threading.Thread]:
        return list(self._threads)

    def close(self, timeout: float = 10.0) -> None:
        """Stop the pipeline and join every thread.

        Pieces still staged are written first where the rate limiter admits them (off-policy with
        no ratio: all of them); the rest (held back by the ratio, or on-policy the rest of a rollout
        that can no longer be served) are counted in ``stats.pieces_dropped_on_close``.
        """
        join_s = check_timeout(timeout, none_ok=False)  # inf: None, as Thread.join takes it
        if self._closed:
            return
        self._closed = True
        self.actor_buffer.close()
        self.rate_limiter.close()  # wakes every waiter; what it admits now still goes through
        if self._failure is None and not self.config.overlap_collect and isinstance(self.rate_limiter, RatioLimiter):
            self.flush()
        for thread in self._threads:
            if thread.name == "janus-collect":  # drains the staged pieces the limiter admits before exiting
                thread.join(join_s)
        self.learner_buffer.close()
        for thread in self._threads:
            thread.join(join_s)
        self._stats.pieces_dropped_on_close = len(self.actor_buffer)
        alive = [t.name for t in self._threads if t.is_alive()]
        if alive:
            raise RuntimeError(f"JanusBuffer.close(): threads still running after {timeout}s: {alive}")

    def __enter__(self) -> JanusBuffer:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

