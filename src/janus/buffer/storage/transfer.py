"""Device moves for the data path: pinned staging and non-blocking copies on a side CUDA stream.

:class:`BatchTransfer` moves a gathered bundle (mapping of field -> tensor) to the learner device:

* same device: nothing to do;
* host -> CUDA: pin the host tensors (pageable storage) and copy with ``non_blocking=True`` on a
  side stream; an event marks completion and the consumer's stream waits on it (no host sync);
* CUDA -> CUDA: the gather itself runs on the side stream (see :meth:`stream_context`);
* CUDA -> host: a synchronous copy.

A :class:`Pending` is what the learner buffer stores: the tensors plus the event to wait on.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import torch


@dataclass
class Pending:
    """A batch whose copy may still be in flight on a side stream."""

    tensors: dict[str, torch.Tensor]
    event: Any = None  # torch.cuda.Event or None
    select_s: float = 0.0  # this batch's share of the selection call that made it

    def wait(self) -> dict[str, torch.Tensor]:
        """Make the current CUDA stream wait for the copy; return the tensors, safe to use."""
        if self.event is not None:
            stream = torch.cuda.current_stream()
            stream.wait_event(self.event)
            for t in self.tensors.values():
                t.record_stream(stream)  # the caching allocator must not reuse the memory early
        return self.tensors


class BatchTransfer:
    """Moves bundles from the experience buffer's device to the learner device."""

    def __init__(self, source: torch.device, target: torch.device) -> None:
        self.source = torch.device(source)
        self.target = torch.device(target)
        self.uses_cuda = "cuda" in (self.source.type, self.target.type)
        self._stream = torch.cuda.Stream(device=self._cuda_device()) if self.uses_cuda else None

    def _cuda_device(self) -> torch.device:
        return self.target if self.target.type == "cuda" else self.source

    @contextlib.contextmanager
    def stream_context(self) -> Iterator[None]:
        """Run the enclosed work (gather + copy) on the side stream when CUDA is involved."""
        if self._stream is None:
            yield
            return
        # The side stream must see every write the producer made on the default stream.
        self._stream.wait_stream(torch.cuda.current_stream(self._stream.device))
        with torch.cuda.stream(self._stream):
            yield

    def __call__(self, tensors: Mapping[str, torch.Tensor]) -> Pending:
        """Start moving ``tensors`` (call inside :meth:`stream_context`)."""
        if self.target == self.source or (self.target.type == "cpu" and self.source.type == "cpu"):
            return Pending(dict(tensors))
        if self.target.type == "cpu":  # CUDA -> host
            return Pending({k: t.to(self.target) for k, t in tensors.items()})
        moved = {}
        for k, t in tensors.items():
            if t.device.type == "cpu" and not t.is_pinned():
                t = t.pin_memory()
            moved[k] = t.to(self.target, non_blocking=True)
        event = torch.cuda.Event()
        event.record(self._stream)
        return Pending(moved, event)
