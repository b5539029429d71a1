"""The Janus data path. Imports neither the runtime, Ray nor Gymnasium."""

from janus.buffer.experience import ExperienceBuffer

__all__ = ["ExperienceBuffer"]
