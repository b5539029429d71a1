"""Janus: Dual-End Staging for the data path of reinforcement learning."""

from janus.buffer.experience import ExperienceBuffer
from janus.buffer.frames import FrameStackReplay
from janus.buffer.janus import JanusBuffer, StageStats
from janus.config import JanusConfig, RunConfig, WorkloadConfig
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

__version__ = "0.1.0"

__all__ = [
    "BufferEmptyError",
    "BufferInputError",
    "CheckpointError",
    "ConfigError",
    "ExperienceBuffer",
    "FrameStackReplay",
    "JanusBuffer",
    "JanusConfig",
    "JanusError",
    "PipelineClosedError",
    "PlacementUnavailableError",
    "Policy",
    "RunConfig",
    "StageStats",
    "WorkloadConfig",
    "__version__",
    "load_policy",
]
