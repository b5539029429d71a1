"""Message counts and payload bytes per message type."""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any

import numpy as np


def payload_bytes(msg: Any) -> int:
    """Bytes of the numpy/tensor payload a message carries (0 for control messages)."""
    total = 0
    for value in vars(msg).values() if hasattr(msg, "__dict__") else ():
        total += _nbytes(value)
    return total


def _nbytes(value: Any) -> int:
    if isinstance(value, np.ndarray):
        return int(value.nbytes)
    if hasattr(value, "element_size") and hasattr(value, "numel"):
        return int(value.element_size() * value.numel())
    if isinstance(value, Mapping):
        return sum(_nbytes(v) for v in value.values())
    return 0


class MessageStats:
    """Thread-safe counts and bytes per message type."""

    def __init__(self) -> None:
        self.count: dict[str, int] = {}
        self.bytes: dict[str, int] = {}
        self.dropped = 0
        self._lock = threading.Lock()

    def record(self, msg: Any, size: int | None = None) -> None:
        """Count ``msg`` (a message, or the name of a kind) and ``size`` bytes (default: its payload's)."""
        kind = msg if isinstance(msg, str) else type(msg).__name__
        size = payload_bytes(msg) if size is None else size
        with self._lock:
            self.count[kind] = self.count.get(kind, 0) + 1
            self.bytes[kind] = self.bytes.get(kind, 0) + size

    def merge(self, other: Mapping[str, Mapping[str, int]]) -> None:
        with self._lock:
            for kind, n in other.get("count", {}).items():
                self.count[kind] = self.count.get(kind, 0) + n
            for kind, n in other.get("bytes", {}).items():
                self.bytes[kind] = self.bytes.get(kind, 0) + n

    def as_dict(self) -> dict[str, Any]:
        with self._lock:
            return {
                kind: {"messages": self.count[kind], "bytes": self.bytes.get(kind, 0)} for kind in sorted(self.count)
            } | {"dropped": self.dropped}
