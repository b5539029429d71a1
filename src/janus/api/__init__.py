"""The Python API, the core every surface calls: :func:`janus.train` (one seed or several), :func:`janus.evaluate`."""
