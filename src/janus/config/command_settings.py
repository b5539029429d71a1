"""What a command sets of a configuration itself: ``--quick``'s tiny workload, and the knobs that
``janus compare`` and ``janus eval --sweep`` set per configuration (so a flag for one is refused)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from janus.config import RunConfig, parse_granularity
from janus.errors import ConfigError

QUICK_ITERATIONS = 6


def quick(cfg: RunConfig) -> RunConfig:
    """A version of ``cfg`` that finishes in seconds (smoke tests, the quick SLURM script)."""
    from janus.algorithms.base import algorithm

    w = cfg.workload
    steps = min(w.total_env_steps, algorithm(w.algo).quick_env_steps or w.total_env_steps)
    return replace(cfg, workload=replace(w, iterations=min(w.iterations, QUICK_ITERATIONS), total_env_steps=steps))


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
