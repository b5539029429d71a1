"""Resource bounds of a run, checked before anything starts: workers, environments, processes and the
replay's memory against what this machine has.

A run past a bound is refused with one line that names the bound, what this machine has and the
deliberate override, ``runtime.allow_oversubscribe`` (``--allow_oversubscribe``,
``janus.train(allow_oversubscribe=True)``): with it the run starts as asked. Without these checks
``num_workers=10**6`` passed validation, grew the process by ~50 MB/s building workers and was
killed by the kernel with no word, and a replay larger than the machine's memory was allocated
lazily and killed the run later. Checked by :func:`janus.harness.commands.run_command` (``janus train``,
``compare``, ``eval``, :func:`janus.train`) before the run folder is opened, and once for ``--seeds``
before any seed starts; ``janus tune`` sizes its own trials.

Bounds (``C`` = CPUs this process may use, :func:`janus.config.usable_cpus`):

* workers (``--num_workers``): at most ``WORKERS_PER_CPU x C`` (at least ``MIN_WORKERS_BOUND``);
* environments: at most ``MAX_ENVS_PER_WORKER`` per worker (``--envs_per_actor``, SB3's ``n_envs``) and
  ``ENVS_PER_CPU x C`` in all (at least ``MIN_ENVS_BOUND``);
* processes: worker processes (``--backend process``/``ray``) plus one per environment with
  ``--vector_env async``, at most ``PROCESSES_PER_CPU x C`` (at least ``MIN_PROCESSES_BOUND``);
* memory: the replay's observations alone (``buffer_capacity`` rows of one observation each, a
  lower bound of what it allocates) must fit in the memory available now (MemAvailable; else the
  machine's physical memory). A GPU-placed replay is not checked here. With it, the network's
  float32 weights (its hidden layers, and its input layer for vector observations), once for the
  learner and once per worker where they are on the CPU, must fit too.

Hard limits that no override lifts are part of validation (:mod:`janus.config`: at most
``MAX_WORKERS`` workers).
"""

from __future__ import annotations

import itertools
import math
import os
from pathlib import Path

from janus.config import RunConfig, usable_cpus
from janus.errors import ConfigError

WORKERS_PER_CPU = 4
MIN_WORKERS_BOUND = 8
PROCESSES_PER_CPU = 8
MIN_PROCESSES_BOUND = 16
MAX_ENVS_PER_WORKER = 1024
ENVS_PER_CPU = 128
MIN_ENVS_BOUND = 512
OVERRIDE = "allow_oversubscribe"
"""The runtime field (flag ``--allow_oversubscribe``, keyword ``allow_oversubscribe=True``) that lifts the bounds."""


def check_resources(cfg: RunConfig) -> None:
    """Raise :class:`~janus.errors.ConfigError` (one line naming the override) when ``cfg`` asks for more
    workers, environments, processes or replay memory than this machine can give; nothing when
    ``runtime.allow_oversubscribe`` is set."""
    if cfg.runtime.allow_oversubscribe:
        return
    cpus = usable_cpus()
    w = cfg.workload
    workers, envs = w.num_actors, w.envs_per_actor
    override = f"to run it anyway, give --{OVERRIDE} ({OVERRIDE}=True in janus.train)"
    here = f"{cpus} usable CPU{'s' if cpus != 1 else ''}"
    worker_bound = max(WORKERS_PER_CPU * cpus, MIN_WORKERS_BOUND)
    if workers > worker_bound:
        raise ConfigError(f"invalid workload.num_actors: got {workers:,}; accepted: at most {worker_bound} workers on "
                          f"this machine ({WORKERS_PER_CPU} per CPU, {here}); {override}")
    if envs > MAX_ENVS_PER_WORKER:
        raise ConfigError(f"invalid workload.envs_per_actor: got {envs:,}; accepted: at most {MAX_ENVS_PER_WORKER} "
                          f"environments per worker; {override}")
    env_bound = max(ENVS_PER_CPU * cpus, MIN_ENVS_BOUND)
    if workers * envs > env_bound:
        raise ConfigError(f"{workers:,} workers x {envs:,} environments = {workers * envs:,} environments in all; "
                          f"accepted: at most {env_bound:,} on this machine ({ENVS_PER_CPU} per CPU, {here}); {override}")
    processes, process_bound = processes_of(cfg), max(PROCESSES_PER_CPU * cpus, MIN_PROCESSES_BOUND)
    if processes > process_bound:
        raise ConfigError(f"the run would start {processes:,} processes (backend {cfg.runtime.backend}, vector_env "
                          f"{w.vector_env}: {workers:,} worker(s) x {envs:,} environments); accepted: at most "
                          f"{process_bound} on this machine ({PROCESSES_PER_CPU} per CPU, {here}); {override}")
    replay, have = replay_bytes(cfg) or 0, available_memory()
    if replay > have:
        raise ConfigError(f"invalid buffer_capacity: got {cfg.janus.buffer_capacity:,}; its observations alone take "
                          f"{_size(replay)}, more than the {_size(have)} of memory available on this machine; give a "
                          f"smaller buffer_capacity (SB3: buffer_size); {override}")
    weights, copies = network_bytes(cfg)
    if weights and replay + weights * copies > have:
        raise ConfigError(f"the network's weights take at least {_size(weights)} a copy, {copies} cop"
                          f"{'y' if copies == 1 else 'ies'} in this machine's memory (the learner's, one per worker), "
                          f"{_size(weights * copies + replay)} with the replay: more than the {_size(have)} available; "
                          f"give smaller hidden layers (net_arch, hidden_size, num_layers) or fewer workers; {override}")


def processes_of(cfg: RunConfig) -> int:
    """Processes the run starts besides this one: a worker process each on ``process``/``ray``, and one
    per environment with ``vector_env: async``."""
    w = cfg.workload
    own = w.num_actors if cfg.runtime.backend in ("process", "ray") else 0
    return own + (w.num_actors * w.envs_per_actor if w.vector_env == "async" else 0)


def observations(cfg: RunConfig) -> tuple[tuple[int, ...], int, bool] | None:
    """The shape of one observation, its bytes per element and whether it is a frame stack (stored
    once per frame); None when unknown (a custom algorithm's, a space without a shape)."""
    from janus.algorithms.base import algorithm

    w = cfg.workload
    algo = algorithm(w.algo)
    if not algo.acts_in_gymnasium:  # the synthetic workload's are its config's; a custom algorithm's its own
        return algo.observations(cfg)
    from janus.envs.vector import env_spaces, is_frame_stack

    obs_space, _ = env_spaces(w.env, w.env_kwargs)
    shape, dtype = getattr(obs_space, "shape", None), getattr(obs_space, "dtype", None)
    if not shape or dtype is None:
        return None
    return tuple(shape), int(dtype.itemsize), is_frame_stack(obs_space)


def observation_bytes(cfg: RunConfig) -> int | None:
    """Bytes of one observation the replay stores (one frame of a frame stack), None when unknown."""
    seen = observations(cfg)
    if seen is None:
        return None
    shape, itemsize, frames = seen
    size = math.prod(shape) * itemsize
    return size // shape[0] if frames else size


def network_bytes(cfg: RunConfig) -> tuple[int, int]:
    """A lower bound of the bytes of one copy of the run's network (its hidden layers' float32 weights,
    with the input layer where observations are vectors) and how many copies this machine's memory holds
    (the learner's unless it is on a GPU, one per worker on CPU actors; the synthetic workload's
    simulated actors hold none); ``(0, 0)`` where the layers are unknown."""
    from janus.algorithms.base import algorithm
    from janus.buffer.settings import resolve_janus

    w = cfg.workload
    algo = algorithm(w.algo)
    layers = algo.network_widths(cfg)
    if layers is None:  # a custom algorithm's network is its own
        return 0, 0
    seen = observations(cfg)
    inputs = math.prod(seen[0]) if seen is not None and len(seen[0]) == 1 else 0  # a CNN's input is its own
    widths = [inputs, *layers] if inputs else list(layers)
    weights = 4 * sum(a * b for a, b in itertools.pairwise(widths))
    j = resolve_janus(cfg.janus)
    copies = (j.learner_device != "cuda") + (w.num_actors if algo.acts_in_gymnasium and j.actor_device != "cuda" else 0)
    return weights, copies


def replay_bytes(cfg: RunConfig) -> int | None:
    """A lower bound of the host memory the run's replay takes: ``buffer_capacity`` observations
    (None where the replay is placed on a GPU or its observations are unknown)."""
    from janus.buffer.settings import resolve_janus

    if resolve_janus(cfg.janus).placement == "cuda":
        return None
    size = observation_bytes(cfg)
    return None if size is None else size * cfg.janus.buffer_capacity


def available_memory() -> int:
    """Bytes of memory available to a new allocation now (``MemAvailable``), else the physical memory."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))


def _size(n: int) -> str:
    return f"{n / 2**30:,.1f} GiB" if n >= 2**30 else f"{n / 2**20:,.0f} MiB"
