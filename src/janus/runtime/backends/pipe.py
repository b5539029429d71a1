"""The records the ``process`` backend sends over a worker's pipe: one small frozen dataclass per
kind, dispatched by type at each end (a record of any other type is refused with a clear error).

Learner -> worker: :class:`Deliver` (a message for the worker's component), :class:`StoreAnnounced`
(the parameter store to map). Worker -> learner: :class:`Forward` (a message for a learner-process
component), :class:`RingAnnounced` (the worker's slot ring), :class:`PieceInSlot` (a rollout piece
written into a slot), :class:`Ready`, :class:`Done` and :class:`BuildFailed`. Also
:class:`SharedSnapshot`, the parameter handle that crosses a pipe as its version alone.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from janus.runtime.messages import ParamsSnapshot
from janus.runtime.shm import Layout


@dataclass(frozen=True)
class SharedSnapshot:
    """A parameter version published in the backend's :class:`~janus.runtime.shm.ParamStore`.

    In the learner process it holds the snapshot itself (its components resolve it by reference).
    Pickled, on its way to a worker process, it is its version alone: the arrays never cross a pipe,
    the worker copies them out of the store (:meth:`~janus.runtime.backends.worker_process.WorkerOutbox.resolve`).
    """

    version: int
    snapshot: ParamsSnapshot | None = None  # None in a worker process

    def __reduce__(self) -> tuple[Any, tuple[int]]:
        return SharedSnapshot, (self.version,)


# ---- learner -> worker ----------------------------------------------------------------------------
@dataclass(frozen=True)
class Deliver:
    """A message for the worker's component."""

    msg: Any


@dataclass(frozen=True)
class StoreAnnounced:
    """The learner's parameter store: its segment's name and layout (sent once it exists)."""

    name: str
    layout: Layout
    stats_name: ClassVar[str] = "<store>"


# ---- worker -> learner ----------------------------------------------------------------------------
@dataclass(frozen=True)
class Forward:
    """A message of the worker's component for ``dest``, a component of the learner process."""

    dest: str
    msg: Any


@dataclass(frozen=True)
class RingAnnounced:
    """The worker created its slot ring (at its first piece): the learner maps it."""

    layout: Layout
    slots: int


@dataclass(frozen=True)
class PieceInSlot:
    """An :class:`~janus.runtime.messages.InsertTransitionMsg` for ``dest`` whose arrays are in
    ``slot`` of the worker's ring; the rest of the message's fields travel here."""

    dest: str
    slot: int
    source: str
    count: int
    params_version: int
    pieces: int


@dataclass(frozen=True)
class Ready:
    """The worker's component is built and its host loop about to run."""

    name: str


@dataclass(frozen=True)
class Done:
    """The worker's host loop ended: its counters, its error (traceback, or ``""``), its outbox's
    pipe figures and how closing its component failed (or ``""``)."""

    name: str
    counters: Mapping[str, float]
    error: str
    stats: Mapping[str, int]
    close_failure: str


@dataclass(frozen=True)
class BuildFailed:
    """The worker's component could not be built (``error``: the traceback)."""

    name: str
    error: str


ToWorker = Deliver | StoreAnnounced
ToLearner = Forward | RingAnnounced | PieceInSlot | Ready | Done | BuildFailed


def stats_name(record: ToWorker) -> Any:
    """What the learner's pipe statistics count a record it sent under: a delivered message as its
    own type, anything else as ``<kind>``."""
    return record.msg if isinstance(record, Deliver) else record.stats_name


def refused(record: object, sender: str) -> TypeError:
    """The error for a record of a type this end of the pipe does not take."""
    return TypeError(f"{sender} sent {type(record).__name__} over its pipe, which is no record of the process "
                     f"backend's pipe (janus.runtime.backends.pipe); refused")
