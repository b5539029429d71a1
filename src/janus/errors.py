"""Exception types raised by janus.

Every error a user can trigger with bad input is a :class:`JanusError` that also subclasses the
matching built-in (``ValueError``, ``TypeError``, ``RuntimeError``...), so ``except ValueError`` keeps
working. Messages name the field, what was given and what is accepted.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, TypeVar, overload


class JanusError(Exception):
    """Base class of every janus error."""


class ConfigError(JanusError, ValueError):
    """A configuration value (YAML key, CLI flag, constructor argument) is invalid."""


class PlacementUnavailableError(ConfigError):
    """A placement or device was asked for that this machine cannot provide (e.g. CUDA)."""


class BufferInputError(JanusError, ValueError):
    """Data handed to a buffer (extend / sample / update_priority) is malformed."""


class BufferTypeError(JanusError, TypeError):
    """Data handed to a buffer has the wrong type."""


class BufferEmptyError(JanusError, RuntimeError):
    """A sample was requested before enough data was written."""


class AllocationError(JanusError, MemoryError):
    """Memory for a buffer's storage, trees or sampled batch cannot be allocated (too large)."""


class CheckpointError(JanusError, ValueError):
    """A checkpoint file is missing, truncated or not a janus checkpoint."""


class PipelineClosedError(JanusError, RuntimeError):
    """The pipeline was closed (or failed) and can no longer accept or deliver data."""


class StagingTimeout(JanusError, TimeoutError):
    """A blocking call of the data path (a staging queue, the rate limiter) did not complete within its timeout."""


class RunFolderError(JanusError, ValueError):
    """An output folder janus may not use (taken, locked, not a folder, not writable), or a resume
    that would change what its checkpoint fixes."""

    @classmethod
    def naming(cls, flag: str, path: object, why: str) -> RunFolderError:
        """The error of the folder ``path`` given by ``flag`` (``--out``, ``--resume``...): ``why``."""
        return cls(f"{flag} {str(path)!r}: {why}")


MAX_SHOWN = 120  # characters of a bad value quoted in a message


def shown(value: Any, limit: int = MAX_SHOWN) -> str:
    """``repr(value)`` cut to ``limit`` characters (a hostile value never makes a huge message;
    an int too large for Python to print is described by its size)."""
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 256:
        return f"<an integer of {value.bit_length():,} bits>"
    try:
        text = repr(value)
    except (ValueError, RecursionError):  # e.g. a deeply nested or self-referencing structure
        return f"<a {type(value).__name__}>"
    return text if len(text) <= limit else text[: limit - 25] + f"... ({len(text):,} characters)"


_E = TypeVar("_E", bound="JanusError")


@overload
def invalid(field: str, given: Any, accepted: str) -> ConfigError: ...
@overload
def invalid(field: str, given: Any, accepted: str, cls: type[_E]) -> _E: ...
def invalid(field: str, given: Any, accepted: str, cls: type[JanusError] = ConfigError) -> JanusError:
    """Build an error whose message names ``field``, the value ``given`` and what is ``accepted``."""
    name = field if len(field) <= 200 else field[:175] + f"... ({len(field):,} characters)"
    return cls(f"invalid {name}: got {shown(given)}; accepted: {accepted}")


def one_of(values: Iterable[Any]) -> str:
    """Render a list of accepted values for an error message."""
    return "one of " + ", ".join(repr(v) for v in values)


class TrainingDiverged(JanusError, FloatingPointError):
    """A learner's loss became NaN or infinite: its parameters are no longer usable."""


class RunFailed(JanusError, RuntimeError):
    """A Trainer, TrajectoryManager or Orchestrator failed (or a backend could not start); the run was stopped."""


class CallbackError(JanusError, RuntimeError):
    """A :class:`janus.Callback` raised in one of its hooks (the original exception is chained) or
    returned something other than None, True or False; a run it stopped is saved with status ``failed``."""
