"""``janus compare`` picks the janus configuration's granularity by measuring it.

A fixed granularity (4) is a guess: with the native replay kernels on a CPU, a call costs
microseconds, so bundling ``g`` operations per invocation saves little, and a larger bundle makes
the learner wait for more data at once. Before the measured rounds, a short probe runs the janus
configuration (both overlaps on, its placement) at each candidate granularity; the smallest one
within :data:`TIE` of the fastest wins (a larger bundle must pay for itself beyond the probe's
noise). ``--g_collect``/``--g_select`` given as flags skip the probe.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from fractions import Fraction
from typing import Any

from janus.config import RunConfig, resolve

OFF_POLICY_CANDIDATES = (1, 2, 4, 8)
TIE = 0.03  # a larger granularity is chosen only if its probe beats the smaller ones by more than this
PROBE_SHARE = 5  # each probe run does 1/PROBE_SHARE of the workload's iterations (at least PROBE_MIN)
PROBE_MIN = 12


@dataclass(frozen=True)
class ProbeResult:
    """The probe's throughput per granularity and the one chosen."""

    samples_per_s: dict[float, float]
    chosen: float
    iterations: int

    def describe(self) -> str:
        cells = ", ".join(f"g={_g(g)} {sps:,.0f}" for g, sps in self.samples_per_s.items())
        return (f"granularity probe (janus configuration, {self.iterations} iterations per candidate): {cells} "
                f"samples/s -> g={_g(self.chosen)}")

    def note(self) -> str | None:
        """Why granularity does not pay here, when the probe chose 1 (no bundling)."""
        if self.chosen != 1:
            return None
        best = max(self.samples_per_s.values())
        return (f"granularity does not pay on this machine: g=1 was within {TIE:.0%} of the fastest probe "
                f"({best:,.0f} samples/s); with the native replay kernels a collection or selection call costs "
                "microseconds, so bundling saves nothing the learner would notice (docs/design.md, granularity)")


def _g(g: float) -> str:
    return f"{Fraction(g).limit_denominator(64)}"


def candidates(cfg: RunConfig) -> list[float]:
    """Off-policy: 1, 2, 4, 8 operations per invocation; on-policy: k/M of an epoch, k = 1..M."""
    if cfg.janus.is_on_policy:
        m = cfg.janus.num_minibatches
        return [float(Fraction(k, m)) for k in range(1, m + 1)]
    return [float(g) for g in OFF_POLICY_CANDIDATES]


def choose(samples_per_s: dict[float, float]) -> float:
    """The smallest granularity whose throughput is within :data:`TIE` of the fastest."""
    best = max(samples_per_s.values())
    return min(g for g, sps in samples_per_s.items() if sps >= best * (1.0 - TIE))


def probe(cfg: RunConfig, run: Callable[[RunConfig], Any], progress: Callable[[str], None] | None = None) -> ProbeResult:
    """Run ``cfg`` (the janus configuration) shortly at each candidate granularity with ``run``
    (returns a run result with ``samples_per_s``) and choose one."""
    w = cfg.workload
    iterations = min(w.iterations, max(PROBE_MIN, w.iterations // PROBE_SHARE))
    steps = w.total_env_steps // PROBE_SHARE or w.total_env_steps  # an algorithm's budget is env steps
    short = replace(cfg, workload=replace(w, iterations=iterations, total_env_steps=steps))
    measured = {}
    for g in candidates(cfg):
        trial = resolve(replace(short, name=f"probe-g{_g(g)}", janus=replace(cfg.janus, g_collect=g, g_select=g)))
        measured[g] = float(run(trial)["samples_per_s"])
        if progress is not None:
            progress(f"g={_g(g)}: {measured[g]:,.0f} samples/s")
    return ProbeResult(measured, choose(measured), iterations)


def with_granularity(cfg: RunConfig, g: float) -> RunConfig:
    """``cfg`` with granularity ``g`` at both ends."""
    return replace(cfg, janus=replace(cfg.janus, g_collect=g, g_select=g))
