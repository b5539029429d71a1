"""Importing and calling the user's own code (a custom ``--algo`` or ``--env`` module, an Algorithm's
constructor): whatever it raises, ``sys.exit()`` included, becomes one :class:`~janus.errors.ConfigError`
naming what was being loaded, never a traceback nor a silent exit with the module's code.

A :class:`KeyboardInterrupt` is passed on when it is a stop signal janus received (Ctrl-C, SIGTERM),
and reported as the module's error otherwise (a module that raises it itself).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from types import ModuleType
from typing import TypeVar

from janus import stopping
from janus.errors import ConfigError, JanusError

T = TypeVar("T")
MAX_TEXT = 300
"""Characters of the user's error message quoted."""


def described(exc: BaseException) -> str:
    """``Type: message`` of ``exc`` (``sys.exit(3)``: ``SystemExit: sys.exit(3)``), cut to a readable length."""
    if isinstance(exc, SystemExit):
        return f"SystemExit: sys.exit({exc.code!r})"
    text = str(exc)
    text = text if len(text) <= MAX_TEXT else text[: MAX_TEXT - 20] + " ..."
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def first_line(exc: BaseException, limit: int = MAX_TEXT) -> str:
    """The first line of ``exc``'s message (a component's error carries its traceback below), cut to ``limit``."""
    text = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
    return text if len(text) <= limit else text[: limit - 4] + " ..."


def passed_on(exc: BaseException) -> bool:
    """Whether ``exc`` must go on as it is: janus's own errors and a stop signal janus received."""
    return isinstance(exc, JanusError) or (isinstance(exc, KeyboardInterrupt) and stopping.signalled())


def import_user_module(module: str, what: str) -> ModuleType:
    """``importlib.import_module(module)``; what the module raises as it runs (``sys.exit()`` too) is a
    :class:`ConfigError` that starts with ``what`` (e.g. ``workload.algo 'pkg.mod:Algo'``)."""
    try:
        return importlib.import_module(module)
    except BaseException as exc:
        if passed_on(exc):
            raise
        hint = ("; a module named here must only define and register when imported (guard a script's own code "
                "with `if __name__ == \"__main__\":`)" if isinstance(exc, SystemExit) else "")
        raise ConfigError(f"{what}: cannot import module {module!r} ({described(exc)}){hint}") from exc


def call_user_code(call: Callable[[], T], what: str) -> T:
    """``call()`` (the user's code, e.g. an Algorithm's constructor); what it raises is a :class:`ConfigError`
    starting with ``what`` and naming the error, the original chained."""
    try:
        return call()
    except BaseException as exc:
        if passed_on(exc):
            raise
        raise ConfigError(f"{what} raised {described(exc)}") from exc
