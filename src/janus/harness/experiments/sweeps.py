"""The experiments behind ``janus compare``, ``janus train`` and ``janus eval --sweep``.

Each experiment is a list of named configurations derived from one base config; configurations
that cannot run on this machine (a CUDA placement without a GPU) are listed as skipped with the
reason instead of failing the whole experiment.
"""

from __future__ import annotations

from dataclasses import replace
from fractions import Fraction
from typing import Any

from janus.config import PLACEMENTS, RunConfig, available_placements, resolve
from janus.errors import ConfigError, JanusError, invalid, one_of

SWEEPS = ("placement", "granularity", "overlap")
GRANULARITIES = (1, 2, 4, 8, 16)


def best_placement() -> str:
    """The fastest placement available here: cuda, else cpu_pinned, else cpu_pageable."""
    usable = [p for p, reason in available_placements().items() if reason is None]
    return next(p for p in ("cuda", "cpu_pinned", "cpu_pageable") if p in usable)


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
