"""Environments: Gymnasium vector envs as the algorithms use them, Atari preprocessing and the
generated test environment ``janus/ImageCatch-v0``.

:mod:`janus.envs.vector` builds vector envs (and registers ``janus/ImageCatch-v0`` when imported),
:mod:`janus.envs.atari` preprocesses ``ALE/`` games, :mod:`janus.envs.image_catch` is the image env.
Nothing here imports an algorithm, the runtime or the harness.
"""
