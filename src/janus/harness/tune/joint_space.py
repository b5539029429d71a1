"""What ``janus tune --objective time_to_solve`` searches: the algorithm's hyperparameters (the ranges
it declares, :attr:`~janus.algorithms.base.Algorithm.tunable_ranges`) together with the data-path
knobs (:mod:`janus.harness.tune.space`), one :class:`Setting` per point.

The space is described to Optuna parameter by parameter (:meth:`JointSpace.suggest`): each declared
range as a float, integer or categorical parameter, each knob as a categorical one (the knob
values of the throughput tune's candidates). Every range is widened to hold the run's own value, so
the defaults are a point of the search (:meth:`JointSpace.params_of` gives Optuna their values).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from fractions import Fraction
from typing import Any

from janus.algorithms.base import algorithm, learns_on_policy
from janus.algorithms.tunable import TunableRange
from janus.config import RunConfig, from_dict
from janus.harness.tune.space import Candidate, defaults_of

KNOB = "knob."
"""The prefix of the data-path knobs' parameter names (the hyperparameters are named by their config path)."""


@dataclass(frozen=True)
class Setting:
    """One point of a time-to-solve search: hyperparameter values by config path, and the knobs."""

    hyper: tuple[tuple[str, Any], ...]
    knobs: Candidate

    @property
    def backend(self) -> str:
        return self.knobs.backend

    def values(self) -> dict[str, Any]:
        """The hyperparameters by config path (``algorithm.lr``: 0.001)."""
        return dict(self.hyper)

    def label(self) -> str:
        """``lr=0.001 batch_size=64 | local cpu_pageable overlap=1/1 ...``: the hyperparameters, then the knobs."""
        shown = " ".join(f"{key.rpartition('.')[2]}={_short(value)}" for key, value in self.hyper)
        return f"{shown} | {self.knobs.label()}" if shown else self.knobs.label()

    def apply(self, cfg: RunConfig) -> RunConfig:
        """``cfg`` with these hyperparameters, then these knobs (not resolved); on-policy, the granularity
        is snapped to the nearest fraction k/M of the minibatches M these hyperparameters set."""
        nested: dict[str, Any] = {}
        for key, value in self.hyper:
            section, _, name = key.rpartition(".")
            (nested.setdefault(section, {}) if section else nested)[name] = value
        out = self.knobs.apply(from_dict(nested, base=cfg))
        if not learns_on_policy(out):
            return out
        g = on_policy_granularity(self.knobs.granularity, out.janus.num_minibatches)
        return replace(out, janus=replace(out.janus, g_collect=g, g_select=g))

    def to_dict(self) -> dict[str, Any]:
        """For tune.json: the hyperparameters by config path and the knobs by name."""
        return {"hyperparameters": self.values(), "knobs": vars(self.knobs)}


def on_policy_granularity(g: float, minibatches: int) -> float:
    """``g`` as the nearest fraction k/M (k = 1..M) of ``minibatches`` M: what on-policy accepts."""
    k = min(minibatches, max(1, round(g * minibatches)))
    return float(Fraction(k, minibatches))


def _short(value: Any) -> str:
    return f"{value:.3g}" if isinstance(value, float) else str(value)


def value_of(cfg: RunConfig, key: str) -> Any:
    """The value of config path ``key`` in ``cfg`` (a hyperparameter left unset: its default)."""
    section, _, name = key.rpartition(".")
    if section == "algorithm":
        return algorithm(cfg.workload.algo).hyperparameter(cfg, name)
    return getattr({"workload": cfg.workload, "runtime": cfg.runtime, "": cfg.janus}[section], name)


class JointSpace:
    """The declared ranges of ``cfg``'s algorithm (each widened to hold ``cfg``'s value) and the knob
    values of ``candidates``, as Optuna parameters; :attr:`defaults` is ``cfg``'s own setting."""

    def __init__(self, cfg: RunConfig, candidates: list[Candidate]) -> None:
        declared = algorithm(cfg.workload.algo).tunable_ranges
        self.ranges: dict[str, TunableRange] = {key: rng.holding(value_of(cfg, key)) for key, rng in sorted(declared.items())}
        knobs = defaults_of(cfg)
        self.defaults = Setting(tuple((key, value_of(cfg, key)) for key in self.ranges), knobs)
        self.knob_choices: dict[str, list[Any]] = {}
        for name in (*(n for n in vars(knobs) if n not in SPLIT), "split"):
            seen = [_knob(knobs, name)] + [_knob(c, name) for c in candidates]
            self.knob_choices[name] = list(dict.fromkeys(seen))  # in order, once each, the defaults' first

    def suggest(self, trial: Any) -> Setting:
        """The setting an Optuna ``trial`` asks for (``trial.suggest_*`` for every parameter)."""
        hyper = []
        for key, rng in self.ranges.items():
            if rng.choices:
                value = trial.suggest_categorical(key, list(rng.choices))
            elif rng.integer:
                value = trial.suggest_int(key, int(rng.low), int(rng.high), log=rng.log)
            else:
                value = trial.suggest_float(key, float(rng.low), float(rng.high), log=rng.log)
            hyper.append((key, value))
        knobs = {name: trial.suggest_categorical(KNOB + name, choices) for name, choices in self.knob_choices.items()}
        workers, envs = (int(n) for n in knobs.pop("split").split("x"))
        return Setting(tuple(hyper), Candidate(**knobs, num_workers=workers, envs_per_actor=envs))

    def params_of(self, setting: Setting) -> dict[str, Any]:
        """``setting`` as Optuna parameters (``study.enqueue_trial``)."""
        return {**setting.values(), **{KNOB + name: _knob(setting.knobs, name) for name in self.knob_choices}}


SPLIT = ("num_workers", "envs_per_actor")
"""Knobs chosen together, as one ``split`` (``2x4``): on-policy only some pairs divide the rollout."""


def _knob(cand: Candidate, name: str) -> Any:
    """Knob ``name`` of ``cand``; ``split``: its workers and envs per worker as ``WxE``."""
    return f"{cand.num_workers}x{cand.envs_per_actor}" if name == "split" else getattr(cand, name)
