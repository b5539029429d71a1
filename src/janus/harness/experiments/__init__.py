"""The measured experiments behind ``janus compare`` and ``janus eval --sweep``."""
