"""The component base class and the loop that hosts one component.

A component reacts to one message at a time, through the handler its :meth:`Component.handlers`
table names for the message's type, and may do a unit of background work in
:meth:`Component.step` when its inbox is empty (a Worker rolls out there). It sends through an
:class:`Outbox` that the backend provides; it never calls another component.
"""

from __future__ import annotations

import queue
import threading
import time
import traceback
from collections.abc import Callable
from typing import Any, Protocol

from janus.runtime.messages import PingMsg, PongMsg, StartMsg, StopMsg

Handlers = dict[type[Any], Callable[[Any], None]]
"""A component's handler table: message type -> the bound method that handles it."""


class Outbox(Protocol):
    """What a backend gives a component to talk to the rest of the system."""

    def send(self, dest: str, msg: Any) -> None:
        """Deliver ``msg`` to the component named ``dest`` (asynchronously)."""

    def share(self, snapshot: Any) -> Any:
        """A handle to an immutable snapshot that any component can :meth:`resolve`."""

    def resolve(self, handle: Any) -> Any:
        """The snapshot behind a handle from :meth:`share`."""


class Component:
    """Base class: message dispatch, ping/pong, started/stopped state and counters."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.out: Outbox | None = None
        self.started = False
        self.stopped = False
        self.counters: dict[str, float] = {}
        self.instance = 0
        """Which instance of this component it is: 0 the first, +1 per restart (set by the backend
        that builds it, before it starts; a Worker's experience stream depends on it)."""
        self._handlers: Handlers | None = None  # handlers(), built at the first message

    def bind(self, outbox: Outbox) -> None:
        self.out = outbox

    def send(self, dest: str, msg: Any) -> None:
        assert self.out is not None, f"{self.name} is not bound to a backend"
        self.out.send(dest, msg)

    @property
    def outbox(self) -> Outbox:
        """The backend's outbox (bound before any message is handled)."""
        assert self.out is not None, f"{self.name} is not bound to a backend"
        return self.out

    def count(self, key: str, amount: float = 1) -> None:
        self.counters[key] = self.counters.get(key, 0) + amount

    def handlers(self) -> Handlers:
        """The messages this component handles: message type -> its bound handler. A subclass
        extends its base's table (``{**super().handlers(), EvaluateMsg: self.on_EvaluateMsg}``);
        an override of a handler method is found through the table as any method is."""
        return {StartMsg: self.on_StartMsg, StopMsg: self.on_StopMsg, PingMsg: self.on_PingMsg}

    def receive(self, msg: Any) -> None:
        """Dispatch ``msg`` to its handler (:meth:`handlers`); a message type without one is an error."""
        if self._handlers is None:
            self._handlers = self.handlers()
        handler = self._handlers.get(type(msg))
        if handler is None:
            raise TypeError(f"{type(self).__name__} {self.name!r} cannot handle {type(msg).__name__}")
        self.count("msgs_in." + type(msg).__name__)
        handler(msg)

    def step(self) -> bool:
        """One unit of background work; return True if work was done (the host polls again at once)."""
        return False

    def on_StartMsg(self, msg: StartMsg) -> None:
        self.started = True

    def on_StopMsg(self, msg: StopMsg) -> None:
        self.stopped = True

    def on_PingMsg(self, msg: PingMsg) -> None:
        self.send(msg.reply_to, PongMsg(msg.seq, self.name, msg.sent_at, dict(self.counters)))

    def close(self) -> None:
        """Release resources (threads, buffers); called once: by the host when it exits, or by the
        backend's shutdown for a component built but never started (a later one failed to build)."""


class Host:
    """Runs one component: an inbox queue and a loop alternating messages and ``step``.

    Used by both backends (a thread in-process; inside a Ray actor's process on Ray). An exception
    in the component ends the loop and is kept in :attr:`error` with its formatted traceback; an
    exception of the component's ``close()`` (called once the loop ends) in :attr:`close_failure`,
    which the backend's ``shutdown`` reports.
    """

    IDLE_WAIT_S = 0.02

    def __init__(self, component: Component) -> None:
        self.component = component
        self.inbox: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self.error: BaseException | None = None
        self.error_text = ""
        self.done = threading.Event()
        self.instance = 0  # which instance of its component: 0 the first, +1 per restart
        self.close_failure: str | None = None  # set when the component's close() raised
        self._thread: threading.Thread | None = None

    @classmethod
    def of_failed_build(cls, name: str, exc: BaseException) -> Host:
        """A host that ended before it began: the factory of its component ``name`` raised ``exc``
        (a worker rebuilt on a restart; reported like a worker that crashed)."""
        host = cls(Component(name))
        host.error, host.error_text = exc, error_text(exc)
        host.done.set()
        return host

    def post(self, msg: Any) -> None:
        self.inbox.put(msg)

    def start_thread(self, on_exit: Any = None) -> threading.Thread:
        def run() -> None:
            self.loop()
            if on_exit is not None:
                on_exit(self)

        self._thread = threading.Thread(target=run, name=f"host-{self.component.name}", daemon=True)
        self._thread.start()
        return self._thread

    @property
    def thread(self) -> threading.Thread | None:
        return self._thread

    def loop(self) -> None:
        import torch

        torch.set_num_threads(1)
        c = self.component
        try:
            while not c.stopped:
                busy = c.started and c.step()
                try:
                    msg = self.inbox.get(block=not busy, timeout=None if busy else self.IDLE_WAIT_S)
                except queue.Empty:
                    continue
                c.receive(msg)
                while not c.stopped:  # drain what is queued before the next step
                    try:
                        c.receive(self.inbox.get_nowait())
                    except queue.Empty:
                        break
        except BaseException as exc:  # noqa: BLE001 - reported by the backend
            self.error = exc
            self.error_text = error_text(exc)
        finally:
            try:
                c.close()
            except BaseException as exc:  # noqa: BLE001 - reported by the backend's shutdown
                self.close_failure = closing_failed(c.name, exc)
            finally:
                self.done.set()


def closing_failed(name: str, exc: BaseException) -> str:
    """How a component whose ``close()`` raised is reported by a backend's ``shutdown``."""
    return f"{name} (closing it failed: {type(exc).__name__}: {exc})"


def error_text(exc: BaseException) -> str:
    """How a component's failure is reported: a :class:`~janus.errors.JanusError` (a bad setting,
    a full ``/dev/shm``: the user's to fix) by its message, anything else with its traceback."""
    from janus.errors import JanusError

    if isinstance(exc, JanusError):
        return f"{type(exc).__name__}: {exc}"
    return "".join(traceback.format_exception(exc))


def now() -> float:
    return time.monotonic()
