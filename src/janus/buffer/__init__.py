"""The Janus data path. Imports neither the runtime, Ray nor Gymnasium."""

from janus.buffer.experience import ExperienceBuffer
from janus.buffer.frames import FrameStackReplay

__all__ = ["ExperienceBuffer", "FrameStackReplay"]
