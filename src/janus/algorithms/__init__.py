"""The algorithms janus hosts: ``dqn``, ``ppo``, ``sac``, ``appo``, ``impala`` and the ``synthetic`` workload, and the seam
a custom algorithm implements.

:mod:`janus.algorithms.base` is the seam (what an algorithm provides, and the registry); each
built-in algorithm module registers itself when imported, and the registry imports it by name on
first use. A custom algorithm subclasses :class:`Algorithm` and is named ``package.module:Name`` to
``--algo`` / ``workload.algo``, or registered from Python with :func:`register` (see
docs/custom-algorithm.md).
"""

from janus.algorithms.base import (
    ActingPolicy,
    ActorSide,
    Algorithm,
    Budget,
    BufferSpec,
    CheckpointedLearnerSide,
    FamilyPreset,
    Hyperparameter,
    LearnerSide,
    algorithm,
    names,
    register,
)

__all__ = ["ActingPolicy", "ActorSide", "Algorithm", "Budget", "BufferSpec", "CheckpointedLearnerSide", "FamilyPreset",
           "Hyperparameter",
           "LearnerSide", "algorithm", "names", "register"]
