"""The Janus data path, a library: imports neither the runtime, Ray nor Gymnasium.

The names below are imported on first use (PEP 562), so the run-level configuration can read the
data-path knobs (:mod:`janus.buffer.settings`) without loading torch.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

_WHERE = {
    "ExperienceBuffer": "janus.buffer.replay.experience",
    "FrameStackReplay": "janus.buffer.frames.replay",
}
__all__ = ["ExperienceBuffer", "FrameStackReplay"]

if TYPE_CHECKING:
    from janus.buffer.frames.replay import FrameStackReplay
    from janus.buffer.replay.experience import ExperienceBuffer


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(f"module 'janus.buffer' has no attribute {name!r}")
    value = getattr(importlib.import_module(_WHERE[name]), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_WHERE})
