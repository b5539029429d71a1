"""janus tune: successive halving over the knobs this machine can run; best.yaml trains."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import yaml

from janus.cli import build_parser, config_from_args, main
from janus.config import from_dict, resolve
from janus.harness.tune import ETA, Candidate, defaults_of, search_space, successive_halving
from janus.harness.tune_command import best_config, write_tune

ROOT = Path(__file__).resolve().parents[2]
DEFAULT = str(ROOT / "configs" / "default.yaml")


def _cfg(*flags: str):
    return config_from_args(build_parser().parse_args(["tune", "--config", DEFAULT, *flags]))


def _speed(c) -> float:
    """A made-up machine: overlap and more workers pay, granularity 2 best, process a little slower."""
    j, w = c.janus, c.workload
    return (1000.0 * (1 + j.overlap_collect + 2 * j.overlap_select) * w.num_actors * (1.2 if j.g_select == 2 else 1.0)
            * (0.9 if c.runtime.backend == "process" else 1.0) + w.envs_per_actor)


def test_the_search_space_is_what_this_machine_runs() -> None:
    space = search_space(_cfg(), ["local", "process"], cpus=2)
    assert {c.placement for c in space} == {"cpu_pageable"} or all(c.placement for c in space)
    assert {(c.num_workers, c.envs_per_actor) for c in space} == {(2, 8)}, "synthetic: the workload's actors are its work"
    assert {c.backend for c in space} == {"local", "process"}
    assert {(c.overlap_collect, c.overlap_select) for c in space} == {(0, 0), (1, 0), (0, 1), (1, 1)}
    assert {c.granularity for c in space} == {1.0, 2.0, 4.0, 8.0}
    on = search_space(_cfg("--is_on_policy", "1", "--num_minibatches", "4"), ["local"], cpus=2)
    assert {c.granularity for c in on} == {0.25, 0.5, 0.75, 1.0}
    gym = search_space(config_from_args(build_parser().parse_args(["tune", "--algo", "dqn"])), ["local"], cpus=2)
    assert {c.vector_env for c in gym} == {"sync", "async"}
    assert {c.num_workers for c in gym} == {1, 2}, "never more workers than CPUs"
    assert {c.envs_per_actor for c in gym} == {1, 4, 8, 16}
    # an on-policy algorithm's granularities are fractions k/M even before its config is validated
    ppo = search_space(config_from_args(build_parser().parse_args(["tune", "--algo", "ppo"])), ["local"], cpus=2)
    assert {c.granularity for c in ppo} == {0.25, 0.5, 0.75, 1.0}
    # ... and its rollout keeps its size whatever the workers and envs: the same batches and updates
    ppo_cfg = config_from_args(build_parser().parse_args(["tune", "--algo", "ppo"]))
    for cand in ppo:
        tried = resolve(cand.apply(ppo_cfg))
        assert tried.rollout_transitions == resolve(ppo_cfg).rollout_transitions
        assert tried.minibatch_size == resolve(ppo_cfg).minibatch_size and tried.workload.rollout_length >= 8
    assert {(c.num_workers, c.envs_per_actor) for c in ppo} == {(w, e) for w in (1, 2) for e in (1, 4, 8, 16)}


def test_successive_halving_keeps_a_third_each_rung_and_finds_the_fastest() -> None:
    cfg = _cfg()
    space = search_space(cfg, ["local", "process"], cpus=2)
    runs: list[tuple[Candidate | None, float]] = []

    def run(c):
        runs.append((c.workload.num_actors, c.workload.iterations))
        return {"samples_per_s": _speed(c)}

    result = successive_halving(cfg, space, run, budget_s=1e6)
    best = max(space, key=lambda c: _speed(c.apply(cfg)))
    assert result.best == best, "every candidate of rung 0 ran with an unlimited budget"
    rung0 = [t for t in result.trials if t.rung == 0]
    rung1 = [t for t in result.trials if t.rung == 1 and not t.final]
    assert len(rung0) == len(space) and len(rung1) == -(-len(rung0) // ETA)
    assert rung1[0].share == pytest.approx(rung0[0].share * ETA)
    assert result.defaults == defaults_of(cfg) and rung0[0].candidate == result.defaults, "the defaults run first"
    finals = [t for t in result.trials if t.final]
    assert len(finals) == 4 and result.gain == pytest.approx(_speed(best.apply(cfg)) / _speed(result.defaults.apply(cfg)))


def test_a_spent_budget_stops_the_search_with_the_best_so_far() -> None:
    cfg = _cfg()
    space = search_space(cfg, ["local"], cpus=2)
    result = successive_halving(cfg, space, lambda c: {"samples_per_s": _speed(c)}, budget_s=0.0)
    assert 2 <= len([t for t in result.trials if t.rung == 0]) < len(space)
    assert result.best is not None


def test_a_refused_setting_is_recorded_not_fatal() -> None:
    cfg = _cfg()
    space = search_space(cfg, ["local"], cpus=2)

    def run(c):
        if c.janus.g_select == 8:
            from janus.errors import ConfigError
            raise ConfigError("not this one")
        return {"samples_per_s": _speed(c)}

    result = successive_halving(cfg, space, run, budget_s=1e6)
    refused = [t for t in result.trials if t.throughput is None]
    assert refused and all("not this one" in t.error for t in refused)
    assert result.best is not None and result.best.granularity != 8


def test_best_yaml_loads_back_as_the_best_setting(tmp_path: Path) -> None:
    cfg = _cfg()
    space = search_space(cfg, ["local", "process"], cpus=2)
    result = successive_halving(cfg, space, lambda c: {"samples_per_s": _speed(c)}, budget_s=1e6)
    write_tune(tmp_path, cfg, result)
    text = (tmp_path / "best.yaml").read_text()
    assert text.startswith("# written by janus tune") and "gain over the defaults" in text
    loaded = resolve(from_dict(yaml.safe_load(text)))
    assert loaded == resolve(best_config(cfg, result)), "train --config best.yaml runs the best setting"
    trials = json.loads((tmp_path / "tune.json").read_text())["trials"]
    assert len(trials) == len(result.trials)


@pytest.mark.parametrize("flags", [["--budget_s", "0"], ["--backends", "local,gpu"]])
def test_bad_tune_flags_are_refused_before_anything_runs(flags: list[str], tmp_path: Path,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out"
    assert main(["tune", "--quick", "--out", str(out), "--config", DEFAULT, *flags]) == 2
    assert flags[0] in capsys.readouterr().err and not out.exists()


@pytest.mark.slow
def test_tune_quick_writes_a_best_yaml_that_train_runs(tmp_path: Path) -> None:
    assert main(["tune", "--quick", "--budget_s", "20", "--out", str(tmp_path / "t"), "--config", DEFAULT]) == 0
    best = tmp_path / "t" / "best.yaml"
    assert main(["train", "--quick", "--config", str(best), "--out", str(tmp_path / "r")]) == 0
    assert (tmp_path / "r" / "results.json").is_file()
    assert not [p for p in os.listdir("/dev/shm") if p.startswith("janus")], "no segment left behind"


def test_plain_search_runs_each_candidate_at_the_full_trial_budget() -> None:
    cfg = _cfg()
    space = search_space(cfg, ["local"], cpus=2)
    result = successive_halving(cfg, space, lambda c: {"samples_per_s": _speed(c)}, budget_s=1e6, plain=True)
    searched = [t for t in result.trials if not t.final]
    assert len(searched) == len(space) and {t.rung for t in searched} == {0}
    assert all(t.share == pytest.approx(1 / ETA) for t in searched)
    assert result.best == max(space, key=lambda c: _speed(c.apply(cfg)))


def test_a_winner_that_loses_the_paired_rounds_leaves_the_defaults_in_best_yaml() -> None:
    cfg = _cfg()
    space = search_space(cfg, ["local"], cpus=2)
    seen: dict = {}

    def run(c):  # the short runs favour g=8; at the final budget the defaults are faster
        key = (c.janus.g_select, c.janus.overlap_collect, c.janus.overlap_select)
        seen[key] = seen.get(key, 0) + 1
        if c.workload.iterations >= 100:
            return {"samples_per_s": 200.0 if c.janus.g_select == 4 else 100.0}
        return {"samples_per_s": 1000.0 if c.janus.g_select == 8 else 10.0}

    result = successive_halving(cfg, space, run, budget_s=1e6)
    assert result.runner_up is not None and result.runner_up.granularity == 8
    assert result.best == result.defaults and result.gain == pytest.approx(0.5)
