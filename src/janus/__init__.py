"""Janus: Dual-End Staging for the data path of reinforcement learning.

The public names below are imported on first use (PEP 562), so ``import janus`` and the
``janus`` command start without loading torch; ``from janus import ExperienceBuffer`` works as usual.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

_WHERE = {
    "train": "janus.api.train",
    "TrainedRun": "janus.api.train",
    "RunRequest": "janus.config.request",
    "SeedRuns": "janus.api.seeds",
    "Callback": "janus.callbacks",
    "Checkpoint": "janus.callbacks",
    "EarlyStop": "janus.callbacks",
    "Evaluation": "janus.callbacks",
    "Progress": "janus.callbacks",
    "ProgressStats": "janus.callbacks",
    "RunInfo": "janus.callbacks",
    "ExperienceBuffer": "janus.buffer.replay.experience",
    "FrameStackReplay": "janus.buffer.frames.replay",
    "JanusBuffer": "janus.buffer.pipeline",
    "StageStats": "janus.buffer.stage_stats",
    "JanusConfig": "janus.config",
    "RunConfig": "janus.config",
    "WorkloadConfig": "janus.config",
    "BufferEmptyError": "janus.errors",
    "BufferInputError": "janus.errors",
    "CheckpointError": "janus.errors",
    "ConfigError": "janus.errors",
    "JanusError": "janus.errors",
    "PipelineClosedError": "janus.errors",
    "PlacementUnavailableError": "janus.errors",
    "evaluate": "janus.api.evaluate",
    "EvaluationResult": "janus.api.evaluate",
    "Policy": "janus.policy",
    "load_policy": "janus.policy",
}

__all__ = sorted([*_WHERE, "__version__"])

if TYPE_CHECKING:  # for type checkers and IDEs; at run time each name is imported on first use
    from janus.api.evaluate import EvaluationResult, evaluate
    from janus.api.seeds import SeedRuns
    from janus.api.train import TrainedRun, train
    from janus.buffer.frames.replay import FrameStackReplay
    from janus.buffer.pipeline import JanusBuffer
    from janus.buffer.replay.experience import ExperienceBuffer
    from janus.buffer.stage_stats import StageStats
    from janus.callbacks import Callback, Checkpoint, EarlyStop, Evaluation, Progress, ProgressStats, RunInfo
    from janus.config import JanusConfig, RunConfig, WorkloadConfig
    from janus.config.request import RunRequest
    from janus.errors import (
        BufferEmptyError,
        BufferInputError,
        CheckpointError,
        ConfigError,
        JanusError,
        PipelineClosedError,
        PlacementUnavailableError,
    )
    from janus.policy import Policy, load_policy


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(f"module 'janus' has no attribute {name!r}")
    value = getattr(importlib.import_module(_WHERE[name]), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_WHERE})
