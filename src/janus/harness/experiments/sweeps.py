"""The experiments behind ``janus compare``, ``janus train`` and ``janus eval --sweep``.

Each experiment is a list of named configurations derived from one base config; configurations
that cannot run on this machine (a CUDA placement without a GPU) are listed as skipped with the
reason instead of failing the whole experiment.
"""

from __future__ import annotations

from dataclasses import replace
from fractions import Fraction
from typing import Any

from janus.config import PLACEMENTS, RunConfig, available_placements, parse_granularity, resolve
from janus.errors import ConfigError, JanusError, invalid, one_of

SWEEPS = ("placement", "granularity", "overlap")
GRANULARITIES = (1, 2, 4, 8, 16)
QUICK_ITERATIONS = 6


def quick(cfg: RunConfig) -> RunConfig:
    """A version of ``cfg`` that finishes in seconds (smoke tests, the quick SLURM script)."""
    from janus.algorithms.base import algorithm

    w = cfg.workload
    steps = min(w.total_env_steps, algorithm(w.algo).quick_env_steps or w.total_env_steps)
    return replace(cfg, workload=replace(w, iterations=min(w.iterations, QUICK_ITERATIONS), total_env_steps=steps))


def best_placement() -> str:
    """The fastest placement available here: cuda, else cpu_pinned, else cpu_pageable."""
    usable = [p for p, reason in available_placements().items() if reason is None]
    return next(p for p in ("cuda", "cpu_pinned", "cpu_pageable") if p in usable)


SET_PER_CONFIGURATION = {
    "compare": ("placement", "overlap_collect", "overlap_select"),
    "placement": ("placement",),
    "granularity": ("g_collect", "g_select"),
    "overlap": ("overlap_collect", "overlap_select"),
}
"""The knobs ``janus compare`` and each ``janus eval --sweep`` set themselves, per configuration."""


def check_flags_not_overridden(command: str, sweep: str | None, flags: set[str]) -> None:
    """Refuse a flag for a knob the command sets per configuration: it would be silently ignored.

    ``compare`` reads one granularity for both ends of its granularity and janus configurations,
    so ``--g_collect`` and ``--g_select`` given with different values are refused too."""
    key = "compare" if command == "compare" else sweep if command == "eval" else None
    if key is None:
        return
    given = [k for k in SET_PER_CONFIGURATION[key] if k in flags]
    if given:
        what = "janus compare" if key == "compare" else f"janus eval --sweep {key}"
        hint = ("baseline, overlap and granularity run on cpu_pageable, janus on the best placement here; "
                "to run one placement use janus train --placement X" if "placement" in given else
                "each configuration sets its own; to run one setting use janus train")
        raise ConfigError(f"{', '.join('--' + k for k in given)}: {what} sets "
                          f"{'this knob' if len(given) == 1 else 'these knobs'} per configuration, so "
                          f"{'the flag' if len(given) == 1 else 'the flags'} would be ignored ({hint})")


def compare_granularity(command: str, typed: dict[str, Any]) -> dict[str, Any]:
    """``compare``'s flags with ``--g_collect``/``--g_select`` as one granularity for both ends.

    Its granularity and janus configurations use one value at both ends, so one of the two flags
    sets both, and the two given with different values are refused."""
    if command != "compare" or not {"g_collect", "g_select"} & set(typed):
        return typed
    g = typed.get("g_select", typed.get("g_collect"))
    other = typed.get("g_collect", g)
    if parse_granularity("g_collect", other) != parse_granularity("g_select", g):  # "1/4" is 0.25
        raise ConfigError(f"--g_collect {other} and --g_select {g}: janus compare runs its "
                          f"granularity and janus configurations with one granularity at both ends; give one "
                          f"value (or use janus train to set them apart)")
    return {**typed, "g_collect": g, "g_select": g}


def _knobs(cfg: RunConfig, name: str, **knobs: Any) -> RunConfig:
    return replace(cfg, name=name, janus=replace(cfg.janus, **knobs))


def one_backend(cfg: RunConfig) -> RunConfig:
    """``cfg`` with ``auto`` as ``local``: every configuration of an experiment runs on one backend,
    so what differs between them is the knob compared. ``auto`` would put the configurations with
    both overlaps off on ``local`` (the serial scheduler) and the others on ``process``; ``local``
    is where overlap on and off mean what the Janus design compares. ``--backend process`` runs
    them all there."""
    if cfg.runtime.backend != "auto":
        return cfg
    return replace(cfg, runtime=replace(cfg.runtime, backend="local"))


def _granular(cfg: RunConfig) -> float:
    """The granularity the ``granularity``/``janus`` presets use: the config's, if it is not 1."""
    j = cfg.janus
    g = j.g_select if j.g_select != 1 else j.g_collect
    if g != 1:
        return g
    return 1 / j.num_minibatches if j.is_on_policy else 4


def compare_configs(cfg: RunConfig) -> list[RunConfig]:
    """The four predefined configurations on the workload of ``cfg``, on one backend."""
    cfg, g = one_backend(cfg), _granular(cfg)
    return [
        _knobs(cfg, "baseline", placement="cpu_pageable", overlap_collect=0, overlap_select=0, g_collect=1, g_select=1),
        _knobs(cfg, "overlap", placement="cpu_pageable", overlap_collect=1, overlap_select=1, g_collect=1, g_select=1),
        _knobs(cfg, "granularity", placement="cpu_pageable", overlap_collect=0, overlap_select=0, g_collect=g, g_select=g),
        _knobs(cfg, "janus", placement=best_placement(), overlap_collect=1, overlap_select=1, g_collect=g, g_select=g),
    ]


def sweep_configs(cfg: RunConfig, sweep: str) -> tuple[list[RunConfig], list[dict[str, str]]]:
    """Configurations of one sweep, on one backend, and those skipped here (with the reason)."""
    if sweep not in SWEEPS:
        raise invalid("--sweep", sweep, one_of(SWEEPS))
    cfg = one_backend(cfg)
    skipped: list[dict[str, str]] = []
    if sweep == "placement":
        runs = []
        for placement in PLACEMENTS:
            reason = available_placements()[placement]
            if reason:
                skipped.append({"name": placement, "reason": reason})
            else:
                runs.append(_knobs(cfg, placement, placement=placement))
        return runs, skipped
    if sweep == "overlap":
        return [
            _knobs(cfg, f"collect{c}-select{s}", overlap_collect=c, overlap_select=s) for c in (0, 1) for s in (0, 1)
        ], skipped
    j = cfg.janus
    if j.is_on_policy:
        m = j.num_minibatches
        values = [Fraction(k, m) for k in range(1, m + 1)]
        return [_knobs(cfg, f"g={v}", g_collect=float(v), g_select=float(v)) for v in values], skipped
    return [_knobs(cfg, f"g={g}", g_collect=g, g_select=g) for g in GRANULARITIES], skipped


def resolve_all(configs: list[RunConfig]) -> list[RunConfig]:
    """Resolve every configuration before any run starts, so a bad one fails at once."""
    out = []
    for c in configs:
        try:
            out.append(resolve(c))
        except JanusError as exc:
            raise ConfigError(f"configuration {c.name!r}: {exc}") from None
    return out
