"""JanusBuffer: Dual-End Staging wired together.

``actors --put--> ActorBuffer --CollectionOp--> ExperienceBuffer --SelectionOp--> LearnerBuffer --get--> learner``

With ``overlap_collect=1`` a background thread runs collection while the actors keep rolling out;
with 0 the actor whose ``put`` completes a collection unit runs it inline. Likewise
``overlap_select=1`` runs selection in a background thread that prefetches while the learner
updates; with 0 the learner's ``get`` runs it inline when no batch is staged.

Errors raised in a background thread are re-raised, with their original traceback, by the next
``put``/``get``; the pipeline then stops instead of hanging. ``close()`` joins every thread.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, replace
from typing import Any

import numpy as np
import torch

from janus.buffer.experience import ExperienceBuffer
from janus.buffer.frames import FrameStackReplay
from janus.buffer.operators import CollectionOp, OnPolicySchedule, Preprocess, SelectionOp
from janus.buffer.staging import ActorBuffer, LearnerBuffer, StagingTimeout
from janus.buffer.validation import check_frame_piece, check_int, check_piece, is_int
from janus.datapath import JanusConfig, resolve_janus
from janus.errors import BufferInputError, BufferTypeError, ConfigError, PipelineClosedError, invalid


@dataclass
class StageStats:
    """Seconds and counts per stage, accumulated since the buffer was created."""

    collect_s: float = 0.0
    collect_calls: int = 0
    transitions_collected: int = 0
    select_s: float = 0.0  # selecting the batches the learner took (so within the run's time)
    select_ahead_s: float = 0.0  # selecting batches not taken (yet; after close: never), e.g. prefetched past a run's end
    select_calls: int = 0
    batches_selected: int = 0
    batches_delivered: int = 0
    learner_wait_s: float = 0.0
    actor_blocked_s: float = 0.0
    pieces_put: int = 0
    transitions_put: int = 0
    pieces_dropped_on_close: int = 0

    def as_dict(self) -> dict[str, float]:
        return asdict(self)


def _check_timeout(timeout: Any, none_ok: bool = True) -> float | None:
    """A timeout is a number of seconds >= 0 (``None``: wait as long as it takes, where allowed);
    returned as a float, or ``None`` for an infinite one (a condition cannot wait ``inf`` seconds)."""
    if timeout is None and none_ok:
        return None
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float, np.integer, np.floating)) or not timeout >= 0:
        raise invalid("timeout", timeout, "a number of seconds >= 0" + (" or None" if none_ok else ""))
    return None if timeout == float("inf") else float(timeout)


class JanusBuffer:
    """The five parts of Dual-End Staging behind ``put`` (actor side) and ``get`` (learner side).

    Actors call :meth:`put`; the learner calls :meth:`get` and, prioritized, :meth:`update_priority`;
    :meth:`flush` writes staged pieces now, :meth:`close` stops every thread. :attr:`experience`
    is the :class:`~janus.buffer.experience.ExperienceBuffer`, :attr:`stats` the per-stage counters.

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
            :class:`~janus.buffer.frames.FrameStackReplay`, which stores each frame once (pieces may
            carry a ``stream`` field naming each row's environment). It keeps frames in host memory:
            placement ``auto`` means ``cpu_pageable`` for it, ``cuda`` is refused.
        beta_schedule: prioritized only: the importance exponent of the ``n``-th batch selected
            (``n`` from 0), e.g. ``LinearSchedule(0.4, 1.0, total_updates)`` from
            :mod:`janus.buffer.prioritized`, which anneals it as the PER paper does; ``None``:
            the sampler's ``beta`` throughout. :attr:`beta` is the value the next batch gets.
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
        **sampler_kwargs: Any,
    ) -> None:
        if not isinstance(config, JanusConfig):
            raise BufferTypeError(f"JanusBuffer(config) takes a JanusConfig, e.g. JanusConfig(batch_size=64), "
                                  f"got {type(config).__name__}")
        check_int("time_major_dims", time_major_dims, 1)
        if frame_stack and config.placement == "auto":  # frames live in host memory (see FrameStackReplay)
            config = replace(config, placement="cpu_pageable")
        self.config = cfg = resolve_janus(config)
        self.stats = StageStats()
        self._stats_lock = threading.Lock()
        self._time_major_dims = time_major_dims
        self._frame_stack = frame_stack
        self._failure: BaseException | None = None
        self._closed = False
        self._data_cond = threading.Condition()
        self._select_wait_s = 0.0
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
            rollout_size, num_epochs = int(rollout_size), int(num_epochs)
            self.schedule: OnPolicySchedule | None = OnPolicySchedule(rollout_size, cfg.num_minibatches, num_epochs)
            capacity, batch_size = rollout_size, rollout_size // cfg.num_minibatches
            self._collect_pieces, self._collect_transitions = None, round(cfg.g_collect * rollout_size)
            batches_per_call = round(cfg.g_select * cfg.num_minibatches)
            self.min_size = batch_size
        else:
            self.schedule = None
            capacity, batch_size = cfg.buffer_capacity, cfg.batch_size
            self._collect_pieces, self._collect_transitions = int(cfg.g_collect), None
            batches_per_call = int(cfg.g_select)
            if min_size is not None:  # sampling needs an item; more than the capacity would never be stored
                check_int("min_size", min_size, 1, capacity, f" (buffer_capacity={capacity})")
            self.min_size = batch_size if min_size is None else int(min_size)
        self.batch_size = batch_size

        self.experience: ExperienceBuffer | FrameStackReplay
        if frame_stack:
            if cfg.is_on_policy:
                raise ConfigError("frame_stack=True is a replay (off-policy) storage; on-policy rollouts are stored whole")
            self.experience = FrameStackReplay(capacity, cfg.placement, sampler, seed, **sampler_kwargs)
        else:
            self.experience = ExperienceBuffer(capacity, cfg.placement, "uniform" if cfg.is_on_policy else sampler, seed, **sampler_kwargs)
        self.actor_buffer = ActorBuffer(
            max(cfg.actor_buffer_size, self._collect_pieces or 1), min_transitions=self._collect_transitions or 0
        )
        self.learner_buffer = LearnerBuffer(cfg.prefetch)
        self.collection = CollectionOp(self.experience, time_major_dims, preprocess, self.schedule)
        if beta_schedule is not None and (sampler != "prioritized" or cfg.is_on_policy or not callable(beta_schedule)):
            raise ConfigError(f"invalid beta_schedule: got {type(beta_schedule).__name__}; accepted: a function of the "
                              "batch count, with sampler='prioritized' off-policy (it anneals prioritized "
                              "replay's importance exponent beta)")
        self.selection = SelectionOp(
            self.experience, batch_size, batches_per_call, learner_device, self.schedule,
            None if seed is None else seed + 2, self._wait_for_data, beta_schedule,
        )
        self._collect_lock = threading.Lock()
        self._piece_schema: dict[str, tuple[str, tuple[int, ...]]] | None = None  # of the first piece put
        self._schema_lock = threading.Lock()
        self._threads: list[threading.Thread] = []
        if cfg.overlap_collect:
            self._start("janus-collect", self._collect_loop)
        if cfg.overlap_select:
            self._start("janus-select", self._select_loop)

    # ---- actor side ----------------------------------------------------------------------------
    def put(self, rollout: Mapping[str, Any], timeout: float | None = None) -> None:
        """Stage one rollout piece (fields shaped ``[T, envs, ...]`` by default); blocks when full.

        A piece holds at least one transition (on-policy at most ``rollout_size``) and the fields,
        dtypes and item shapes of the first piece; any other is refused here, before it is staged.
        """
        timeout = _check_timeout(timeout)
        self._raise_if_failed()
        if self._closed:
            raise PipelineClosedError("JanusBuffer is closed")
        known = self._piece_schema
        n, schema = check_piece(rollout, self._time_major_dims, known)
        if self.schedule is not None and n > self.schedule.rollout_size:  # could never be written
            raise BufferInputError(f"put() got a piece of {n} transitions; an on-policy rollout holds "
                                   f"rollout_size={self.schedule.rollout_size}")
        if known is None:
            self._set_piece_schema(rollout, schema)
        blocked = self.actor_buffer.put(rollout, n, timeout)
        with self._stats_lock:
            self.stats.actor_blocked_s += blocked
            self.stats.pieces_put += 1
            self.stats.transitions_put += n
        if not self.config.overlap_collect:
            try:
                waited = self._collect_staged(block=False)
            except PipelineClosedError:
                self._raise_if_failed()  # closed by a background failure: raise the cause
                raise
            except BaseException as exc:  # an inline operator failed: the whole pipeline stops
                self._fail(exc)
                raise
            if waited:  # on-policy: the actor waited inline for the previous rollout to be read
                with self._stats_lock:
                    self.stats.actor_blocked_s += waited

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
        """Write every staged piece now, below the collection granularity too (off-policy)."""
        self._raise_if_failed()
        with self._collect_lock:
            pieces = self.actor_buffer.take(len(self.actor_buffer) or 1, None, block=False)
            if pieces:
                self._run_collection(pieces)
        # pieces the background collector took before this flush locked: wait until they are
        # written (outside the lock, which the collector needs), so the buffer holds every piece put
        # (off-policy only: on-policy a collection may wait for the learner to read a rollout)
        while self.schedule is None and not self.actor_buffer.wait_released(timeout=0.1):
            self._raise_if_failed()

    def _collect_threshold(self) -> tuple[int | None, int | None]:
        if self.schedule is None:
            return self._collect_pieces, None
        assert self._collect_transitions is not None  # on-policy: set with the schedule
        return None, min(self._collect_transitions, self.schedule.remaining_to_write() or self.schedule.rollout_size)

    def _collect_staged(self, block: bool) -> float:
        """Collect staged pieces; returns seconds spent waiting for the on-policy schedule.

        ``block=True`` (the background collector) waits for one collection unit *outside* the
        collect lock, so ``flush`` is never locked out; ``block=False`` (inline) collects every
        complete unit that is staged.
        """
        if block:
            pieces = self.actor_buffer.take(*self._collect_threshold(), block=True, hold=True)
            try:
                with self._collect_lock:
                    return self._run_collection(pieces)
            finally:
                self.actor_buffer.release(len(pieces))
        waited = 0.0
        while True:
            with self._collect_lock:
                pieces = self.actor_buffer.take(*self._collect_threshold(), block=False)
                if not pieces:
                    return waited
                waited += self._run_collection(pieces)

    def _run_collection(self, pieces: list[Any]) -> float:
        start = time.perf_counter()
        wait_before = self._schedule_wait()
        n = self.collection(pieces)
        waited = self._schedule_wait() - wait_before
        with self._stats_lock:
            self.stats.collect_s += time.perf_counter() - start - waited
            self.stats.collect_calls += 1
            self.stats.transitions_collected += n
        with self._data_cond:
            self._data_cond.notify_all()
        return waited

    def _schedule_wait(self) -> float:
        return self.schedule.write_wait_s if self.schedule is not None else 0.0

    # ---- learner side --------------------------------------------------------------------------
    def get(self, timeout: float | None = None) -> dict[str, torch.Tensor]:
        """The next batch on the learner device (fields, ``"index"`` keys, ``"weight"`` if prioritized).

        Blocks until a batch is ready; past ``timeout`` seconds raises
        :class:`~janus.buffer.staging.StagingTimeout` (also when selection runs inline).
        After :meth:`close` raises :class:`PipelineClosedError`.
        """
        timeout = _check_timeout(timeout)
        self._raise_if_failed()
        if self._closed:
            raise PipelineClosedError("JanusBuffer is closed")
        deadline = None if timeout is None else time.perf_counter() + timeout
        if not self.config.overlap_select and self.learner_buffer.ready() == 0:
            try:
                self._select_once(inline=True, deadline=deadline)
            except StagingTimeout as exc:
                self._raise_if_failed()
                raise StagingTimeout(self._no_batch_message(timeout, exc)) from None
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
            raise StagingTimeout(self._no_batch_message(timeout, exc)) from None
        with self._stats_lock:
            self.stats.learner_wait_s += waited
            self.stats.batches_delivered += 1
            self.stats.select_s += pending.select_s
            self.stats.select_ahead_s -= pending.select_s
        return pending.wait()

    @property
    def beta(self) -> float | None:
        """Prioritized: the importance exponent the next selected batch gets (None: uniform)."""
        if self.selection.beta_schedule is not None:
            return float(self.selection.beta_schedule(self.selection.selected))
        beta = getattr(getattr(self.experience, "_sampler", None), "beta", None)
        return None if beta is None else float(beta)

    def _no_batch_message(self, timeout: float | None, exc: StagingTimeout) -> str:
        """Why :meth:`get` found no batch within ``timeout``: the pieces staged below the collection
        granularity (which :meth:`flush` writes now), too little stored, or the stage's own message."""
        head = "JanusBuffer.get: no batch" + (f" within {timeout:g}s" if timeout is not None else "")
        staged, transitions = len(self.actor_buffer), self.actor_buffer.transitions
        pieces_needed, transitions_needed = self._collect_threshold()
        if staged and ((pieces_needed is not None and staged < pieces_needed)
                       or (transitions_needed is not None and transitions < transitions_needed)):
            unit = (f"g_collect={pieces_needed} pieces" if pieces_needed is not None else
                    f"{transitions_needed} transitions (g_collect={self.config.g_collect:g} of a rollout)")
            return (f"{head}: collection is waiting for {unit} before it writes, and {staged} piece(s) "
                    f"({transitions} transitions) are staged; put more pieces, or call flush() to write "
                    "the staged ones now")
        stored = len(self.experience)
        if self.schedule is None and stored < self.min_size:
            return (f"{head}: the buffer stores {stored} transitions and sampling starts at min_size="
                    f"{self.min_size}; {staged} piece(s) are staged: put more pieces")
        return f"{head}: {exc}"

    def update_priority(self, index: Any, priority: Any) -> int:
        """Set the priorities of delivered items: ``index`` is a batch's ``"index"`` (keys),
        ``priority`` one number >= 0 per key (e.g. ``|td_error|``). Returns how many were applied:
        keys of items overwritten since they were sampled are dropped; the last duplicate wins.
        Only a prioritized buffer (``sampler="prioritized"``) has priorities: any other raises
        :class:`~janus.errors.BufferInputError` (they would be ignored)."""
        return self.experience.update_priority(index, priority)

    def _select_once(self, inline: bool, deadline: float | None = None) -> None:
        start = time.perf_counter()
        wait_before = self.selection_wait_s
        bundle = self.selection(deadline)
        waited = self.selection_wait_s - wait_before
        spent = time.perf_counter() - start - waited
        for pending in bundle:  # counted in select_s when the learner takes the batch
            pending.select_s = spent / max(len(bundle), 1)
        with self._stats_lock:
            self.stats.select_ahead_s += spent
            self.stats.select_calls += 1
            self.stats.batches_selected += len(bundle)
            if inline:
                self.stats.learner_wait_s += waited
        self.learner_buffer.put(bundle)

    @property
    def selection_wait_s(self) -> float:
        """Seconds selection has spent waiting for data to be written."""
        return self._select_wait_s + (self.schedule.read_wait_s if self.schedule is not None else 0.0)

    def _wait_for_data(self, deadline: float | None = None) -> None:
        start = time.perf_counter()
        with self._data_cond:
            while len(self.experience) < self.min_size:
                self._raise_if_failed()
                if self._closed:
                    raise PipelineClosedError("JanusBuffer is closed")
                remaining = 0.1 if deadline is None else min(0.1, deadline - time.perf_counter())
                if remaining <= 0:
                    raise StagingTimeout(
                        f"JanusBuffer.get: timed out waiting for {self.min_size} stored transitions "
                        f"(have {len(self.experience)})"
                    )
                self._data_cond.wait(remaining)
        self._select_wait_s += time.perf_counter() - start

    # ---- threads, errors, shutdown -------------------------------------------------------------
    def _start(self, name: str, loop: Callable[[], None]) -> None:
        ready = threading.Event()
        thread = threading.Thread(target=self._guard(loop, ready), name=name, daemon=True)
        self._threads.append(thread)
        intra_op_threads = torch.get_num_threads()
        thread.start()
        ready.wait(10.0)
        # torch.set_num_threads() in the background thread also sets the default that every thread
        # started later inherits (the learner's too): restore it, the background thread keeps 1.
        torch.set_num_threads(intra_op_threads)

    def _guard(self, loop: Callable[[], None], ready: threading.Event) -> Callable[[], None]:
        def run() -> None:
            try:
                torch.set_num_threads(1)
            finally:
                ready.set()
            try:
                loop()
            except PipelineClosedError:
                pass
            except BaseException as exc:  # noqa: BLE001 - handed to the caller
                self._fail(exc)

        return run

    def _collect_loop(self) -> None:
        while True:
            self._collect_staged(block=True)

    def _select_loop(self) -> None:
        while not self._closed:
            self._select_once(inline=False)

    def _fail(self, exc: BaseException) -> None:
        if self._failure is None:
            self._failure = exc
        self.actor_buffer.close(exc)
        self.learner_buffer.close(exc)
        if self.schedule is not None:
            self.schedule.close()
        with self._data_cond:
            self._data_cond.notify_all()

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

        Off-policy, pieces still staged are written first; on-policy they cannot be (the rollout
        they belong to is incomplete) and are counted in ``stats.pieces_dropped_on_close``.
        """
        join_s = _check_timeout(timeout, none_ok=False)  # inf: None, as Thread.join takes it
        if self._closed:
            return
        self._closed = True
        self.actor_buffer.close()
        if self.schedule is not None:
            self.schedule.close()
        elif self._failure is None and not self.config.overlap_collect:
            self.flush()
        for thread in self._threads:
            if thread.name == "janus-collect":  # drains the staged pieces before exiting
                thread.join(join_s)
        self.learner_buffer.close()
        with self._data_cond:
            self._data_cond.notify_all()
        for thread in self._threads:
            thread.join(join_s)
        self.stats.pieces_dropped_on_close = len(self.actor_buffer)
        alive = [t.name for t in self._threads if t.is_alive()]
        if alive:
            raise RuntimeError(f"JanusBuffer.close(): threads still running after {timeout}s: {alive}")

    def __enter__(self) -> JanusBuffer:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

