"""The algorithms the runtime hosts: ``dqn``, ``ppo`` and the ``synthetic`` workload.

:mod:`janus.algorithms.base` is the seam (what an algorithm provides, and the registry); each
algorithm module registers itself when imported, and the registry imports it by name on first use.
"""
