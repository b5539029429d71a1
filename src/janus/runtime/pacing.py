"""A re-export shim: the ratio's settings and arithmetic moved to
:mod:`janus.buffer.rate_limiter`, inside the replay (issue 36). The runtime imports
:class:`SampleToInsertRatio` from here until it is rewired onto the buffer's limiter; then this
module goes."""

from __future__ import annotations

from janus.buffer.rate_limiter import SampleToInsertRatio

__all__ = ["SampleToInsertRatio"]
