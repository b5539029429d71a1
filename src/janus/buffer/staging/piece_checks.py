"""Checks of a rollout piece before ``JanusBuffer.put`` stages it.

A piece that differs from the first one accepted is refused by its own ``put``, so one bad producer
never fails the pipeline for all.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from janus.buffer.replay.field_checks import check_field_names, check_reserved_names
from janus.errors import BufferInputError, BufferTypeError, invalid


def check_piece(
    piece: Any, time_major_dims: int, schema: Mapping[str, tuple[str, tuple[int, ...]]] | None
) -> tuple[int, dict[str, tuple[str, tuple[int, ...]]]]:
    """Validate one piece for ``JanusBuffer.put`` before it is staged; return its transition count
    and its schema (field -> (dtype, item shape)). ``schema``: that of the first piece accepted;
    a piece that differs is refused here, so one bad producer never fails the pipeline for all."""
    if not isinstance(piece, Mapping):
        raise BufferTypeError(f"put() takes a mapping of field name -> array, got {type(piece).__name__}")
    if not piece:
        raise BufferInputError("put() got a piece with no fields")
    check_field_names(piece, "put()")
    if schema is None:  # later pieces must have the first one's fields
        check_reserved_names(piece)
    lead: tuple[int, ...] | None = None
    mine: dict[str, tuple[str, tuple[int, ...]]] = {}
    for name, value in piece.items():
        if not hasattr(value, "shape") or not hasattr(value, "dtype"):
            raise BufferTypeError(f"put() field {name!r}: expected a tensor or numpy array, got {type(value).__name__}")
        if isinstance(value.dtype, np.dtype) and value.dtype.kind not in "biufc":  # str, object, datetime...
            raise invalid(f"put() field {name!r} dtype", f"numpy {value.dtype}", "a numeric or bool dtype", BufferTypeError)
        shape = tuple(int(d) for d in value.shape)
        if len(shape) < time_major_dims:
            raise BufferInputError(f"put() field {name!r} has shape {shape}; expected at least {time_major_dims} leading dims")
        if 0 in shape[time_major_dims:]:
            raise invalid(f"put() field {name!r} item shape", shape[time_major_dims:], "dimensions >= 1 (() for scalars)",
                          BufferInputError)
        if lead is None:
            lead = shape[:time_major_dims]
        elif shape[:time_major_dims] != lead:
            raise BufferInputError(f"put() field {name!r} has leading dims {shape[:time_major_dims]}; other fields have {lead}")
        mine[name] = (str(value.dtype).replace("torch.", ""), shape[time_major_dims:])
    if schema is not None and mine != schema:
        if set(mine) != set(schema):
            raise BufferInputError(f"put() fields {sorted(mine)} differ from the first piece's {sorted(schema)}")
        name = next(k for k in schema if mine[k] != schema[k])
        raise BufferInputError(f"put() field {name!r}: dtype/item shape {mine[name]} differs from the first "
                               f"piece's {schema[name]}; the piece was refused")
    count = 1
    for d in lead or ():
        count *= d
    if count == 0:  # staged, it would fail the collection that writes it, and the pipeline with it
        raise BufferInputError(f"put() got a piece of 0 transitions (leading dims {lead}); a piece holds at least one")
    return count, mine


def check_frame_piece(schema: Mapping[str, tuple[str, tuple[int, ...]]]) -> None:
    """A piece for a frame-stack replay: ``obs`` and ``next_obs`` stacks of frames of one dtype
    and shape (``schema`` as :func:`check_piece` returns it)."""
    missing = [k for k in ("obs", "next_obs") if k not in schema]
    if missing:
        raise BufferInputError(f"put() with frame_stack=True needs fields 'obs' and 'next_obs' (stacks of frames); "
                               f"missing {missing}")
    if schema["next_obs"] != schema["obs"]:
        raise BufferInputError(f"put() field 'next_obs': dtype/item shape {schema['next_obs']} differs from "
                               f"'obs' {schema['obs']}; with frame_stack=True both are stacks of the same frames")
    if not schema["obs"][1]:
        raise BufferInputError("put() field 'obs' has item shape (); with frame_stack=True it is a stack of "
                               "frames, (k, *frame)")
    stream = schema.get("stream")
    if stream is not None and (stream[1] != () or not stream[0].startswith(("int", "uint"))):
        raise BufferInputError(f"put() field 'stream': dtype/item shape {stream}; accepted: one integer per row "
                               "(the environment it comes from)")
