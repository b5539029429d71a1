"""The components' handler tables: every message a component is sent has a handler in its table
(read from the table, as :meth:`Component.receive` dispatches), and nothing else reaches one."""

from __future__ import annotations

from typing import Any

import pytest

from janus.runtime.component import Component
from janus.runtime.evaluator import Evaluator
from janus.runtime.messages import (
    MESSAGE_TYPES,
    CheckpointMsg,
    CountsMsg,
    EvaluateMsg,
    FetchParamsMsg,
    FlushMsg,
    InsertTransitionMsg,
    LoadParamsMsg,
    PiecesAcceptedMsg,
    PingMsg,
    PongMsg,
    StartMsg,
    StopMsg,
    WorkerDownMsg,
    WorkerUpMsg,
)
from janus.runtime.orchestrator import Orchestrator
from janus.runtime.trainer import Trainer
from janus.runtime.trajectory_manager import TrajectoryManager
from janus.runtime.worker import Worker
from janus.runtime.worker_proxy import WorkerProxy

CONTROL = {StartMsg, StopMsg, PingMsg}  # the Orchestrator starts and pings every component; a backend stops each

SENT_TO: dict[type[Component], set[type[Any]]] = {
    # component -> every message type some sender sends it (see the senders named beside each)
    Worker: CONTROL | {PiecesAcceptedMsg,  # the TrajectoryManager, per piece it took
                       LoadParamsMsg},  # its node's WorkerProxy
    WorkerProxy: CONTROL | {InsertTransitionMsg,  # its workers' pieces
                            FetchParamsMsg,  # its workers
                            LoadParamsMsg},  # the Trainer, answering its fetch
    TrajectoryManager: CONTROL | {InsertTransitionMsg,  # the proxies
                                  FlushMsg, CheckpointMsg},  # the Orchestrator
    Trainer: CONTROL | {FetchParamsMsg,  # the proxies and the Evaluator
                        CheckpointMsg},  # the Orchestrator
    Evaluator: CONTROL | {EvaluateMsg,  # the Orchestrator
                          LoadParamsMsg},  # the Trainer, answering its fetch
    Orchestrator: {StartMsg, StopMsg,  # the driver; the backend's shutdown
                   PongMsg, CountsMsg, CheckpointMsg,  # every component; the checkpointed ones
                   WorkerDownMsg, WorkerUpMsg},  # the backend
}


def table_of(cls: type[Component]) -> dict[type[Any], Any]:
    """``cls``'s handler table, read without building the component (its handlers are bound methods)."""
    return object.__new__(cls).handlers()


@pytest.mark.parametrize("cls", list(SENT_TO), ids=lambda c: c.__name__)
def test_a_components_table_handles_every_message_it_is_sent(cls: type[Component]) -> None:
    table = table_of(cls)
    assert SENT_TO[cls] <= set(table), f"{cls.__name__} has no handler for {SENT_TO[cls] - set(table)}"
    assert set(table) - SENT_TO[cls] <= CONTROL, f"{cls.__name__} handles what nobody sends it: {set(table) - SENT_TO[cls]}"
    for kind, handler in table.items():
        assert callable(handler) and handler.__name__ == f"on_{kind.__name__}", (kind, handler)


def test_every_message_type_has_a_receiver_and_tables_name_only_messages() -> None:
    handled = set().union(*(table_of(cls) for cls in SENT_TO))
    assert handled == set(MESSAGE_TYPES)


def test_an_override_is_reached_through_the_base_table() -> None:
    """A subclass overriding a base handler (the Orchestrator's StopMsg closes a metrics row) is
    dispatched to its override, not to the base method."""
    assert table_of(Orchestrator)[StopMsg].__func__ is Orchestrator.on_StopMsg


def test_a_message_without_a_handler_is_a_clear_error() -> None:
    component = Component("c")
    component.receive(StartMsg())
    assert component.started and component.counters["msgs_in.StartMsg"] == 1
    with pytest.raises(TypeError, match="Component 'c' cannot handle EvaluateMsg"):
        component.receive(EvaluateMsg(5))
    assert "msgs_in.EvaluateMsg" not in component.counters
