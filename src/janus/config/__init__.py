"""Configuration: the run's dataclasses from mappings and their validation with clear errors.

What a run is asked (:mod:`janus.config.request`) becomes its configuration in one place
(:mod:`janus.config.build`: presets, the YAML file, ``quick``, the settings given); the file is read
by :mod:`janus.config.files`, the settings' names and kinds are :mod:`janus.config.flags`.

A YAML file holds the data-path knobs at the top level, with the artifact's names
(``placement``, ``overlap_collect``, ``g_select`` ...), and the workload under ``workload:``::

    placement: auto
    overlap_collect: 1
    g_collect: 4
    workload:
      num_actors: 2

Unknown keys, wrong types and out-of-range values raise :class:`~janus.errors.ConfigError` naming
the field, the value given and the accepted values. Placements that need CUDA raise
:class:`~janus.errors.PlacementUnavailableError` on machines without it, before any work starts.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import fields, replace
from pathlib import Path
from typing import Any

from janus.buffer.settings import (  # the data-path knobs (JanusConfig), below this module: also janus.config's names
    DEVICES as DEVICES,
    MAX_INT as MAX_INT,
    PLACEMENTS as PLACEMENTS,
    JanusConfig,
    _int,
    _is_number,
    cuda_available,
    parse_granularity as parse_granularity,
    resolve_janus,
    validate_janus,
)
from janus.config.files import (  # reading a config file: also janus.config's names
    MAX_CONFIG_BYTES as MAX_CONFIG_BYTES,
    default_config_file as default_config_file,
    read_default_config as read_default_config,
    read_yaml as read_yaml,
)
from janus.config.schema import (  # the types, below this module and the algorithms: also janus.config's names
    SYNTHETIC_FIELDS,
    RunConfig as RunConfig,
    RuntimeConfig as RuntimeConfig,
    SyntheticConfig as SyntheticConfig,
    WorkloadConfig as WorkloadConfig,
)
from janus.errors import ConfigError, invalid, one_of

OBS_DTYPES = ("float32", "uint8")
VECTOR_ENVS = ("sync", "async", "auto", "envpool")  # envpool: an optional extra (janus.envs.envpool_vector)


BACKENDS = ("local", "process", "ray", "auto")
MAX_WORKERS = 4096
"""Workers no run takes, whatever ``allow_oversubscribe`` says (the bounds by this machine: :mod:`janus.config.resources`)."""


def usable_cpus() -> int:
    """CPUs this process may run on (its affinity mask where the OS has one)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


# ---- what a run reads: the fields config.yaml and results.json record ------------------------------
SYNTHETIC_ONLY = (*(f"synthetic.{key}" for key in SYNTHETIC_FIELDS), "workload.hidden_size", "workload.num_layers",
                  "workload.iterations", "workload.updates_per_iteration", "runtime.samples_per_param_load")
"""Fields only the algorithms not acting in Gymnasium read: the synthetic workload's section, its network and
budget (a Gymnasium run takes them from its env, its budget and its ``algorithm:`` section, and publishes
parameters per round of pieces)."""
GYM_ONLY = ("workload.env", "workload.env_kwargs", "workload.vector_env", "workload.preset", "workload.total_env_steps",
            "runtime.eval_interval_steps", "runtime.eval_episodes", "runtime.target_return")
"""Fields only the Gymnasium algorithms (dqn, ppo, sac, appo, impala, r2d2) read."""
ON_POLICY_ONLY = ("num_minibatches", "workload.num_epochs")
OFF_POLICY_ONLY = ("batch_size", "workload.updates_per_iteration", "runtime.samples_per_param_load")
"""On-policy a learner batch is a minibatch, ``rollout / num_minibatches`` transitions: ``batch_size`` is not read."""
RAY_ONLY = ("runtime.address", "runtime.max_calls_in_flight")


def unread_fields(cfg: RunConfig) -> set[str]:
    """The configuration paths (``batch_size``, ``synthetic.obs_shape`` ...) a run of ``cfg`` never reads:
    those of the other kind of workload (synthetic or Gymnasium), of the other policy mode, of Ray
    on another backend."""
    from janus.algorithms.base import algorithm

    algo = algorithm(cfg.workload.algo)
    unread = set(SYNTHETIC_ONLY if algo.acts_in_gymnasium else GYM_ONLY)
    unread |= set(OFF_POLICY_ONLY if algo.is_on_policy(cfg) else ON_POLICY_ONLY)
    if cfg.runtime.backend != "ray":
        unread |= set(RAY_ONLY)
    return unread


PER_INVOCATION = ("resume", "best_dir", "checkpoint_dir")
"""Runtime fields ``janus train`` sets on each invocation (``--resume``; RUN_DIR/best; RUN_DIR/checkpoint
unless the user chose a folder): not part of what a run records as its configuration."""


def recorded(cfg: RunConfig) -> dict[str, Any]:
    """The run as ``config.yaml`` and ``results.json`` record it: :meth:`RunConfig.to_dict` without the
    fields the run never reads (:func:`unread_fields`), with its algorithm's every hyperparameter in
    ``algorithm:`` (defaults included, the data-path knobs that set some of them left at their own
    place; see :meth:`~janus.algorithms.base.Algorithm.hyperparameters`), and without what ``janus
    train`` sets per invocation (:data:`PER_INVOCATION`; ``checkpoint_dir`` is kept where set). It
    loads back as the same run (:func:`from_dict` on the algorithm's preset)."""
    from janus.algorithms.base import algorithm

    out = cfg.to_dict()
    for path in unread_fields(cfg):
        section, _, key = path.rpartition(".")
        (out[section] if section else out).pop(key, None)
    if not out.get("synthetic"):  # a Gymnasium run reads none of the synthetic workload's section
        out.pop("synthetic", None)
    for key in PER_INVOCATION:  # janus train sets them itself on each invocation
        out["runtime"].pop(key, None)
    if cfg.runtime.checkpoint_dir is not None:  # a folder of the user's choosing (else: none, or RUN_DIR/checkpoint)
        out["runtime"]["checkpoint_dir"] = cfg.runtime.checkpoint_dir
    out.pop("algorithm", None)
    hyperparameters = algorithm(cfg.workload.algo).hyperparameters(cfg)
    if hyperparameters:
        out["algorithm"] = hyperparameters
    return out


_SECTIONS = ("name", "seed", "workload", "runtime", "algorithm", "synthetic")
"""The top-level keys that are not data-path knobs."""
_TOP_LEVEL = {f.name for f in fields(JanusConfig)} | set(_SECTIONS)
_WORKLOAD = {f.name for f in fields(WorkloadConfig)} | set(SYNTHETIC_FIELDS)  # the latter: files from before synthetic:
_RUNTIME = {f.name for f in fields(RuntimeConfig)}


def _check_keys(given: Mapping[str, Any], accepted: set[str], where: str) -> None:
    unknown = sorted(set(given) - accepted, key=repr)  # YAML keys may be ints, None...
    if unknown:
        raise ConfigError(
            f"unknown key(s) {', '.join(map(repr, unknown))} in {where}; accepted keys: "
            + ", ".join(sorted(accepted))
        )


def from_dict(data: Mapping[str, Any], base: RunConfig | None = None) -> RunConfig:
    """Build a validated-shape (not yet resolved) :class:`RunConfig` from a flat mapping."""
    if not isinstance(data, Mapping):
        raise ConfigError(f"a config must be a mapping of keys to values, got {type(data).__name__}")
    _check_keys(data, _TOP_LEVEL, "config")
    cfg = base or RunConfig()
    janus_kw = {k: v for k, v in data.items() if k not in _SECTIONS}
    algorithm = data.get("algorithm") or {}
    if not isinstance(algorithm, Mapping):
        raise invalid("algorithm", algorithm, "a mapping of algorithm hyperparameters")
    runtime = data.get("runtime") or {}
    if not isinstance(runtime, Mapping):
        raise invalid("runtime", runtime, "a mapping of runtime keys")
    _check_keys(runtime, _RUNTIME, "runtime")
    workload = data.get("workload") or {}
    if not isinstance(workload, Mapping):
        raise invalid("workload", workload, "a mapping of workload keys")
    _check_keys(workload, _WORKLOAD, "workload")
    workload = dict(workload)
    if isinstance(workload.get("algo"), str):  # --algo PPO, algo: PPO: the registry's spelling
        from janus.algorithms.base import canonical_name

        workload["algo"] = canonical_name(workload["algo"])
    synthetic = data.get("synthetic") or {}
    if not isinstance(synthetic, Mapping):
        raise invalid("synthetic", synthetic, "a mapping of the synthetic workload's keys")
    _check_keys(synthetic, set(SYNTHETIC_FIELDS), "synthetic")
    # the synthetic workload's keys under workload: (a config or run folder from before synthetic:, the flags)
    synthetic = {**{key: workload.pop(key) for key in SYNTHETIC_FIELDS if key in workload}, **synthetic}
    if "obs_shape" in synthetic:
        shape = synthetic["obs_shape"]
        if isinstance(shape, int):
            shape = [shape]
        if not isinstance(shape, (list, tuple)):
            raise invalid("synthetic.obs_shape", shape, "a list of positive integers, e.g. [4, 84, 84]")
        synthetic["obs_shape"] = tuple(shape)
    return RunConfig(
        janus=replace(cfg.janus, **janus_kw),
        workload=replace(cfg.workload, **workload),
        synthetic=replace(cfg.synthetic, **synthetic),
        runtime=replace(cfg.runtime, **runtime),
        algorithm={**cfg.algorithm, **algorithm},
        name=data.get("name", cfg.name),  # checked by validate(): a list is not a name
        seed=data.get("seed", cfg.seed),
    )


SEED_LIMIT = 1 << 32  # the range every seeded library accepts (numpy's legacy seeding is 32-bit)


def load_yaml(path: str | Path) -> RunConfig:
    """Load a YAML config file (not yet resolved; call :func:`resolve`)."""
    return from_dict(read_yaml(path))


def validate_synthetic(s: SyntheticConfig) -> SyntheticConfig:
    """The ``synthetic:`` section checked, its numbers normalised."""
    if s.obs_dtype not in OBS_DTYPES:
        raise invalid("synthetic.obs_dtype", s.obs_dtype, one_of(OBS_DTYPES))
    if not s.obs_shape or not all(isinstance(d, int) and not isinstance(d, bool) and d > 0 for d in s.obs_shape):
        raise invalid("synthetic.obs_shape", list(s.obs_shape), "a non-empty list of positive integers")
    for key in ("env_step_ms", "env_compute_ms"):
        value = getattr(s, key)
        if not _is_number(value) or not 0 <= value <= 60_000:
            raise invalid(f"synthetic.{key}", value, "a finite number in [0, 60000] (milliseconds)")
    return replace(s, num_actions=_int("synthetic.num_actions", s.num_actions), env_step_ms=float(s.env_step_ms),
                   env_compute_ms=float(s.env_compute_ms))


def validate(cfg: RunConfig) -> RunConfig:
    """Check every field of a run; return a copy with normalised types. Raises ConfigError."""
    from janus.algorithms.base import algorithm  # the registry: imports the algorithm's module by name

    w = cfg.workload
    algo = algorithm(w.algo)  # unknown names: an error listing the registered ones (and custom ones imported)
    # the algorithm states whether it learns on-policy; the data path's knob follows it
    janus = validate_janus(replace(cfg.janus, is_on_policy=algo.is_on_policy(cfg)))
    synthetic = validate_synthetic(cfg.synthetic)
    check_env_kwargs(w.env_kwargs)
    if w.vector_env not in VECTOR_ENVS:
        raise invalid("workload.vector_env", w.vector_env, one_of(VECTOR_ENVS))
    from janus.algorithms.presets import CHOICES as PRESETS

    if w.preset not in PRESETS:
        raise invalid("workload.preset", w.preset, one_of(PRESETS))
    workload = replace(
        w,
        num_actors=_int("workload.num_actors", w.num_actors, high=MAX_WORKERS),
        envs_per_actor=_int("workload.envs_per_actor", w.envs_per_actor),
        rollout_length=_int("workload.rollout_length", w.rollout_length),
        hidden_size=_int("workload.hidden_size", w.hidden_size),
        num_layers=_int("workload.num_layers", w.num_layers, low=0),
        iterations=_int("workload.iterations", w.iterations),
        updates_per_iteration=_int("workload.updates_per_iteration", w.updates_per_iteration),
        num_epochs=_int("workload.num_epochs", w.num_epochs),
        total_env_steps=_int("workload.total_env_steps", w.total_env_steps),
    )
    if not isinstance(cfg.name, str) or not cfg.name.strip():
        raise invalid("name", cfg.name, "a non-empty string (the run's name in reports)")
    if isinstance(cfg.seed, bool) or not isinstance(cfg.seed, int) or not 0 <= cfg.seed < SEED_LIMIT:
        raise invalid("seed", cfg.seed, f"an integer in [0, {SEED_LIMIT - 1:,}]")
    runtime = with_target(validate_runtime(cfg.runtime), workload.total_env_steps, algo.has_policy, w.algo)
    out = replace(cfg, janus=janus, workload=workload, runtime=runtime, synthetic=synthetic)
    algo.validate(out)  # after the types above: an algorithm's own checks may compute with the fields
    if janus.is_on_policy:
        rollout = out.rollout_transitions
        # a whole-run check: the knob's own (a fraction k/M of a rollout) is validate_janus's
        piece = workload.rollout_length * janus.g_collect
        if abs(piece - round(piece)) > 1e-9:
            raise invalid(
                "g_collect", janus.g_collect,
                f"a fraction k/M that splits workload.rollout_length={workload.rollout_length} into whole steps",
            )
        if rollout % janus.num_minibatches:
            raise invalid(
                "num_minibatches", janus.num_minibatches,
                f"a divisor of the rollout size num_actors*envs_per_actor*rollout_length={rollout}",
            )
        if janus.buffer_capacity < rollout:
            raise invalid("buffer_capacity", janus.buffer_capacity, f"at least one rollout ({rollout}) on-policy")
        for name in ("min_inserts", "samples_per_insert"):
            if getattr(out.runtime, name):
                raise invalid(
                    f"runtime.{name}", getattr(out.runtime, name),
                    "0 on-policy (the on-policy schedule paces sampling; this rate applies off-policy only)",
                )
    return out


def check_env_kwargs(kwargs: Any, name: str = "workload.env_kwargs") -> dict[str, Any]:
    """``env_kwargs`` is a mapping of keyword names (strings) to values; returns it as a dict."""
    if not isinstance(kwargs, Mapping) or not all(isinstance(k, str) and k.isidentifier() for k in kwargs):
        raise invalid(name, kwargs, 'a mapping of gymnasium.make keyword names to values, e.g. {"max_episode_steps": 50}')
    return dict(kwargs)


def validate_runtime(r: RuntimeConfig) -> RuntimeConfig:
    """Check the runtime section."""
    if r.backend not in BACKENDS:
        raise invalid("backend", r.backend, one_of(BACKENDS))
    if r.address is not None and (not isinstance(r.address, str) or not r.address):
        raise invalid("address", r.address, "'auto' or HOST:PORT of a Ray cluster")
    for name in ("ping_interval_s", "pong_timeout_s", "checkpoint_interval_s", "results_interval_s"):
        value = getattr(r, name)
        if not _is_number(value) or value <= 0:
            raise invalid(name, value, "a finite number of seconds > 0")
    if not _is_number(r.stall_timeout_s) or r.stall_timeout_s < 0:
        raise invalid("stall_timeout_s", r.stall_timeout_s, "a finite number of seconds >= 0 (0: never)")
    spi = r.samples_per_insert
    if not _is_number(spi) or spi < 0:
        raise invalid("samples_per_insert", spi, "a finite number >= 0 (0: unlimited)")
    if r.checkpoint_dir is not None and (not isinstance(r.checkpoint_dir, str) or not r.checkpoint_dir):
        raise invalid("checkpoint_dir", r.checkpoint_dir, "a folder path (string) or null")
    if not isinstance(r.resume, bool):
        raise invalid("resume", r.resume, "true or false")
    if not isinstance(r.allow_oversubscribe, bool):
        raise invalid("allow_oversubscribe", r.allow_oversubscribe, "true or false")
    if r.best_dir is not None and (not isinstance(r.best_dir, str) or not r.best_dir):
        raise invalid("best_dir", r.best_dir, "a folder path (string) or null")
    return replace(
        r,
        eval_interval_steps=_int("eval_interval_steps", r.eval_interval_steps, low=0),
        eval_episodes=_int("eval_episodes", r.eval_episodes),
        workers_per_node=_int("workers_per_node", r.workers_per_node, low=0),
        min_inserts=_int("min_inserts", r.min_inserts, low=0),
        samples_per_param_load=_int("samples_per_param_load", r.samples_per_param_load),
        max_in_flight=_int("max_in_flight", r.max_in_flight),
        max_calls_in_flight=_int("max_calls_in_flight", r.max_calls_in_flight),
        samples_per_insert=float(spi), stall_timeout_s=float(r.stall_timeout_s),
    )


TARGET_EVALUATIONS = 50
"""With ``target_return`` and no ``eval_interval_steps``, the run evaluates this many times over its budget."""


def target_eval_interval(total_env_steps: int) -> int:
    """The evaluation interval a run with ``target_return`` and no ``eval_interval_steps`` takes:
    ``total_env_steps / 50`` rounded down to 500 env steps, 1,000 at least."""
    return max(1_000, total_env_steps // TARGET_EVALUATIONS // 500 * 500)


def with_target(r: RuntimeConfig, total_env_steps: int, has_policy: bool, algo: str) -> RuntimeConfig:
    """Check ``target_return`` (a finite number, for an algorithm with a policy to evaluate) and give a
    run with one an evaluation interval when it has none."""
    if r.target_return is None:
        return r
    if not _is_number(r.target_return):
        raise invalid("target_return", r.target_return, "a finite number (the evaluations' mean return that stops the run) or null")
    if not has_policy:
        raise invalid("target_return", r.target_return,
                      f"null for --algo {algo}: it has no policy to evaluate (target_return stops a run at an evaluation's return)")
    interval = r.eval_interval_steps or target_eval_interval(total_env_steps)
    return replace(r, target_return=float(r.target_return), eval_interval_steps=interval)


def resolve_backend(cfg: RunConfig) -> str:
    """``runtime.backend`` for this machine: ``auto`` becomes ``local`` when both overlaps are off
    (the serial scheduler, the ``--seed``-reproducible path, runs on ``local`` only) or when this
    process may use a single CPU (worker processes would only take turns with the learner), else
    ``process``; any other value is kept."""
    if cfg.runtime.backend != "auto":
        return cfg.runtime.backend
    serial = not cfg.janus.overlap_collect and not cfg.janus.overlap_select
    return "local" if serial or usable_cpus() < 2 else "process"


def resolve(cfg: RunConfig) -> RunConfig:
    """Validate a run, then resolve ``auto`` placements (see :func:`resolve_janus`) and the ``auto``
    backend (see :func:`resolve_backend`) for this machine."""
    cfg = validate(cfg)
    return replace(cfg, janus=resolve_janus(cfg.janus), runtime=replace(cfg.runtime, backend=resolve_backend(cfg)))


def available_placements() -> dict[str, str | None]:
    """Each placement mapped to ``None`` if usable here, else the reason it is not."""
    reason = None if cuda_available() else "CUDA is not available on this machine"
    return {"cpu_pageable": None, "cpu_pinned": reason, "cuda": reason}
