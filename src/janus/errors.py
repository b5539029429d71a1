"""Exception types raised by janus.

Every error a user can trigger with bad input is a :class:`JanusError` that also subclasses the
matching built-in (``ValueError``, ``TypeError``, ``RuntimeError``...), so ``except ValueError`` keeps
working. Messages name the field, what was given and what is accepted.
"""

from __future__ import annotations

from typing import Any, Iterable


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


def invalid(field: str, given: Any, accepted: str, cls: type[JanusError] = ConfigError) -> JanusError:
    """Build an error whose message names ``field``, the value ``given`` and what is ``accepted``."""
    return cls(f"invalid {field}: got {given!r}; accepted: {accepted}")


def one_of(values: Iterable[Any]) -> str:
    """Render a list of accepted values for an error message."""
    return "one of " + ", ".join(repr(v) for v in values)


class RunFailed(JanusError, RuntimeError):
    """A Trainer, TrajectoryManager or Orchestrator failed (or a backend could not start); the run was stopped."""
