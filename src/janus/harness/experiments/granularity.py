"""``janus compare`` picks the janus configuration's granularity (and overlap) by measuring them.

A fixed granularity (4) is a guess: with the native replay kernels on a CPU, a call costs
microseconds, so bundling ``g`` operations per invocation saves little, and a larger bundle makes
the learner wait for more data at once. Before the measured rounds, a short probe runs the janus
configuration (both overlaps on, its placement) at each candidate granularity; the smallest one
within :data:`TIE` of the fastest wins (a larger bundle must pay for itself beyond the probe's
noise). The same candidates run with both overlaps off too: where threads cost a learner-bound
run more than they overlap (DQN on a 2-core machine, all threads sharing one GIL), janus runs
without them. ``--g_collect``/``--g_select`` given as flags skip the probe.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from fractions import Fraction
from typing import Any

from janus.algorithms.base import learns_on_policy
from janus.config import RunConfig, resolve

OFF_POLICY_CANDIDATES = (1, 2, 4, 8)
TIE = 0.03  # a larger granularity is chosen only if its probe beats the smaller ones by more than this
PROBE_SHARE = 5  # each probe run does 1/PROBE_SHARE of the workload's iterations (at least PROBE_MIN)
PROBE_MIN = 12
PROBE_ROUNDS = 2
"""Interleaved rounds of the probe; each candidate's figure is its slower round, so a candidate wins
only by a lead it holds in every round. One round chose g = 1/2 with overlap for PPO on a 13% lead
that the measured rounds did not show (janus 0.74x against overlap's 0.84x: docs/benchmarks.md)."""


@dataclass(frozen=True)
class ProbeResult:
    """The probe's throughput per granularity, with both overlaps on (``samples_per_s``) and off
    (``without_overlap``), and the combination chosen."""

    samples_per_s: dict[float, float]
    chosen: float
    iterations: int
    without_overlap: dict[float, float] = field(default_factory=dict)
    overlap: bool = True  # the chosen combination overlaps collection and selection

    def describe(self) -> str:
        """One line: each candidate's throughput (its slower round) and the combination chosen."""
        cells = ", ".join(f"g={_g(g)} {sps:,.0f}" for g, sps in self.samples_per_s.items())
        off = ", ".join(f"g={_g(g)} {sps:,.0f}" for g, sps in self.without_overlap.items())
        return (f"knob probe (janus configuration, {self.iterations} iterations per candidate, the slower "
                f"of {PROBE_ROUNDS} interleaved rounds): overlap on: {cells}"
                + (f"; overlap off: {off}" if off else "") + f" samples/s -> overlap {'on' if self.overlap else 'off'}, "
                f"g={_g(self.chosen)}")

    def note(self) -> str | None:
        """Why a knob does not pay here: overlap (the probe chose it off) or granularity (it chose 1)."""
        if not self.overlap:
            return (f"overlap does not pay for this workload on this machine: without it the probe ran "
                    f"{max(self.without_overlap.values()):,.0f} samples/s against {max(self.samples_per_s.values()):,.0f} "
                    "with it (threads in one process share the GIL: a learner-bound run gains nothing from "
                    "collection and selection off its thread and pays for their hand-offs); janus runs without it")
        if self.chosen != 1:
            return None
        best = max(self.samples_per_s.values())
        return (f"granularity does not pay on this machine: g=1 was within {TIE:.0%} of the fastest probe "
                f"({best:,.0f} samples/s); with the native replay kernels a collection or selection call costs "
                "microseconds, so bundling saves nothing the learner would notice (docs/design.md, granularity)")


def _g(g: float) -> str:
    return f"{Fraction(g).limit_denominator(64)}"


def candidates(cfg: RunConfig) -> list[float]:
    """Off-policy: 1, 2, 4, 8 operations per invocation; on-policy: k/M of an epoch, k = 1..M
    (on-policy as the algorithm says: ``cfg`` may not be validated yet, its ``is_on_policy`` unset)."""
    if learns_on_policy(cfg):
        m = cfg.janus.num_minibatches
        return [float(Fraction(k, m)) for k in range(1, m + 1)]
    return [float(g) for g in OFF_POLICY_CANDIDATES]


def choose(samples_per_s: dict[float, float]) -> float:
    """The smallest granularity whose throughput is within :data:`TIE` of the fastest."""
    best = max(samples_per_s.values())
    return min(g for g, sps in samples_per_s.items() if sps >= best * (1.0 - TIE))


def probe(cfg: RunConfig, run: Callable[[RunConfig], Any], progress: Callable[[str], None] | None = None) -> ProbeResult:
    """Run ``cfg`` (the janus configuration) shortly at each candidate granularity, with both
    overlaps on and then off, with ``run`` (returns a run result with ``samples_per_s``), and choose
    the combination: overlap on at the smallest granularity within :data:`TIE` of its fastest,
    unless overlap off beats that by more than :data:`TIE`."""
    w = cfg.workload
    iterations = min(w.iterations, max(PROBE_MIN, w.iterations // PROBE_SHARE))
    steps = w.total_env_steps // PROBE_SHARE or w.total_env_steps  # an algorithm's budget is env steps
    short = replace(cfg, workload=replace(w, iterations=iterations, total_env_steps=steps))
    runs: dict[bool, dict[float, list[float]]] = {True: {}, False: {}}
    for round_ in range(PROBE_ROUNDS):  # interleaved: a slow spell of the machine falls on every candidate
        for overlap in (True, False):
            for g in candidates(cfg):
                knobs = replace(cfg.janus, g_collect=g, g_select=g, overlap_collect=int(overlap), overlap_select=int(overlap))
                trial = resolve(replace(short, name=f"probe-{'overlap' if overlap else 'serial'}-g{_g(g)}", janus=knobs))
                runs[overlap].setdefault(g, []).append(float(run(trial)["samples_per_s"]))
                if progress is not None:
                    progress(f"overlap {'on' if overlap else 'off'}, g={_g(g)}, round {round_ + 1} of {PROBE_ROUNDS}: "
                             f"{runs[overlap][g][-1]:,.0f} samples/s")
    measured = {overlap: {g: min(v) for g, v in by_g.items()} for overlap, by_g in runs.items()}
    on, off = choose(measured[True]), choose(measured[False])
    overlap = not measured[False][off] > measured[True][on] * (1.0 + TIE)
    return ProbeResult(measured[True], on if overlap else off, iterations, measured[False], overlap)


def with_granularity(cfg: RunConfig, g: float, overlap: bool | None = None) -> RunConfig:
    """``cfg`` with granularity ``g`` at both ends (and both overlaps on or off, if given)."""
    janus = replace(cfg.janus, g_collect=g, g_select=g)
    if overlap is not None:
        janus = replace(janus, overlap_collect=int(overlap), overlap_select=int(overlap))
    return replace(cfg, janus=janus)
