"""janus tune: successive halving over the knobs this machine can run; best.yaml trains."""

from __future__ import annotations

import itertools
import json
import os
from pathlib import Path

import pytest
import yaml

from janus.cli import build_parser, config_from_args, main
from janus.config import from_dict, resolve
from janus.harness.tune.command import best_config, format_tune, write_tune
from janus.harness.tune.search import ETA, FINAL_FRACTION, FINAL_ROUNDS, successive_halving
from janus.harness.tune.space import Candidate, defaults_of, search_space

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

    def run(c, s):
        runs.append((c.workload.num_actors, c.workload.iterations))
        return {"samples_per_s": _speed(c)}

    result = successive_halving(cfg, space, run, budget_s=1e6)
    best = max(space, key=lambda c: _speed(c.apply(cfg)))
    assert result.best == best, "every candidate of rung 0 ran with an unlimited budget"
    assert result.trials[0].warmup and result.trials[0].candidate == result.defaults, "the warm-up is a trial"
    rung0 = [t for t in result.trials if t.rung == 0 and not t.warmup]
    rung1 = [t for t in result.trials if t.rung == 1 and not t.final]
    assert len(rung0) == len(space) and len(rung1) == -(-len(rung0) // ETA)
    assert rung1[0].share == pytest.approx(rung0[0].share * ETA)
    assert result.defaults == defaults_of(cfg) and rung0[0].candidate == result.defaults, "the defaults run first"
    finals = [t for t in result.trials if t.final]
    assert len(finals) == 2 * FINAL_ROUNDS and result.verdict == "gain"
    assert result.gain == pytest.approx(_speed(best.apply(cfg)) / _speed(result.defaults.apply(cfg)))


def test_a_spent_budget_starts_nothing() -> None:
    cfg = _cfg()
    space = search_space(cfg, ["local"], cpus=2)
    result = successive_halving(cfg, space, lambda c, s: {"samples_per_s": _speed(c)}, budget_s=0.0)
    assert result.trials == [] and result.best == result.defaults and result.verdict == "not_measured"
    assert result.gain is None and "not measured" in format_tune(result)


def test_a_refused_setting_is_recorded_not_fatal() -> None:
    cfg = _cfg()
    space = search_space(cfg, ["local"], cpus=2)

    def run(c, s):
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
    result = successive_halving(cfg, space, lambda c, s: {"samples_per_s": _speed(c)}, budget_s=1e6)
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
    result = successive_halving(cfg, space, lambda c, s: {"samples_per_s": _speed(c)}, budget_s=1e6, plain=True)
    searched = [t for t in result.trials if not t.final and not t.warmup]
    assert len(searched) == len(space) and {t.rung for t in searched} == {0}
    assert all(t.share == pytest.approx(1 / ETA) for t in searched)
    assert result.best == max(space, key=lambda c: _speed(c.apply(cfg)))


def test_a_winner_that_loses_the_paired_rounds_leaves_the_defaults_in_best_yaml() -> None:
    cfg = _cfg()
    space = search_space(cfg, ["local"], cpus=2)
    seen: dict = {}

    def run(c, s):  # the short runs favour g=8; at the final budget the defaults are faster
        key = (c.janus.g_select, c.janus.overlap_collect, c.janus.overlap_select)
        seen[key] = seen.get(key, 0) + 1
        if c.workload.iterations >= 100:
            return {"samples_per_s": 200.0 if c.janus.g_select == 4 else 100.0}
        return {"samples_per_s": 1000.0 if c.janus.g_select == 8 else 10.0}

    result = successive_halving(cfg, space, run, budget_s=1e6)
    assert result.runner_up is not None and result.runner_up.granularity == 8 and result.verdict == "lost"
    assert result.best == result.defaults and result.gain == pytest.approx(0.5)


class FakeMachine:
    """A clock and a runner: a trial costs ``startup`` + ``per_share`` x its share seconds (x ``slow``
    for the settings ``slow_if`` picks), and a runner given less time cuts it at its deadline."""

    def __init__(self, cfg, startup=1.0, per_share: float = 27.0, slow: float = 1.0, slow_if=None,
                 speed=None) -> None:
        self.cfg, self.startup, self.per_share, self.slow, self.slow_if = cfg, startup, per_share, slow, slow_if
        self.speed = speed or (lambda c: {"samples_per_s": _speed(c)})
        self.now = 0.0
        self.started: list[tuple[float, float]] = []  # (when, allowed)

    def clock(self) -> float:
        return self.now

    def run(self, c, allowed: float) -> dict:
        self.started.append((self.now, allowed))
        share = c.workload.iterations / self.cfg.workload.iterations
        work = self.per_share * share * (self.slow if self.slow_if and self.slow_if(c) else 1.0)
        startup = self.startup(c) if callable(self.startup) else self.startup
        if startup > allowed:
            self.now += max(allowed, 0.0)
            raise RuntimeError("did not start within its deadline")
        if startup + work > allowed:
            self.now += max(allowed, 0.0)
            return {**self.speed(c), "wall_s": max(allowed - startup, 0.0), "cut": True}
        self.now += startup + work
        return {**self.speed(c), "wall_s": work}


@pytest.mark.parametrize("budget_s", [60.0, 120.0, 600.0])
def test_the_budget_is_kept_warm_up_search_and_paired_rounds_together(budget_s: float) -> None:
    cfg = _cfg()
    space = search_space(cfg, ["local", "process"], cpus=2)
    machine = FakeMachine(cfg)
    result = successive_halving(cfg, space, machine.run, budget_s, clock=machine.clock)
    assert machine.now <= budget_s, "every trial, the paired rounds included, ends within the budget"
    assert result.elapsed_s == machine.now
    search = [t for t in result.trials if not t.final and not t.warmup]
    paired = [t for t in result.trials if t.final]
    assert result.trials[0].warmup and search
    assert not any(t.cut for t in result.trials), "sized from the measured rate: nothing had to be cut"
    search_end = max(machine.started[result.trials.index(t)][0] for t in search)
    assert search_end < budget_s * (1 - FINAL_FRACTION), "the paired rounds' time is set aside up front"
    if budget_s >= 120:  # long enough to find a setting faster than the defaults (the 60 s one does not)
        assert result.verdict == "gain" and result.best != result.defaults and len(paired) == 2 * FINAL_ROUNDS
    assert (len(paired) == 2 * FINAL_ROUNDS) == (result.verdict != "defaults")


def test_a_slow_setting_is_cut_at_its_deadline_and_ranked_behind_those_that_finished() -> None:
    cfg = _cfg()
    space = search_space(cfg, ["local", "process"], cpus=2)
    # the fastest setting by throughput hangs for 100x its time: it must not eat the budget or win
    fastest = max(space, key=lambda c: _speed(c.apply(cfg)))
    machine = FakeMachine(cfg, slow=100.0, slow_if=lambda c: c == resolve(fastest.apply(c)))
    result = successive_halving(cfg, space, machine.run, 300.0, clock=machine.clock)
    cut = [t for t in result.trials if t.cut]
    assert cut and all(t.candidate == fastest for t in cut)
    assert machine.now <= 300.0 and result.best != fastest and result.runner_up != fastest
    for when, allowed in machine.started[1:]:
        assert allowed <= 300.0 - when + 1e-9, "no trial is allowed past the budget"


def test_a_trial_that_cannot_finish_in_the_time_left_is_not_started() -> None:
    cfg = _cfg()
    space = search_space(cfg, ["local"], cpus=2)
    machine = FakeMachine(cfg, startup=5.0, per_share=100.0)  # ~9 s a rung-0 trial, ~38 s at the last share
    result = successive_halving(cfg, space, machine.run, 40.0, clock=machine.clock)
    assert machine.now <= 40.0
    assert result.stopped_early or len([t for t in result.trials if not t.warmup and t.rung == 0]) < len(space)
    assert all(when + allowed <= 40.0 + 1e-9 for when, allowed in machine.started)


def test_overlapping_paired_runs_are_not_a_measured_difference_and_keep_the_defaults(tmp_path: Path) -> None:
    cfg = _cfg()
    space = search_space(cfg, ["local"], cpus=2)
    noise = {8: itertools.cycle([0.0, 100.0, 200.0]), 4: itertools.cycle([50.0, 150.0, 250.0])}

    def speed(c):
        if c.workload.iterations >= 100:  # the paired rounds: the winner's median ahead, the ranges overlapping
            g = int(c.janus.g_select)
            return {"samples_per_s": (1100.0 if g == 8 else 1000.0) + next(noise[g])}
        return {"samples_per_s": 1000.0 if c.janus.g_select == 8 else 10.0}

    machine = FakeMachine(cfg, startup=0.0, per_share=1.0, speed=speed)
    result = successive_halving(cfg, space, machine.run, 1e6, clock=machine.clock)
    assert result.verdict == "within_spread" and result.gain is not None and result.gain > 1.0
    assert result.best == result.defaults and result.runner_up is not None and result.runner_up.granularity == 8
    text = format_tune(result)
    assert "not a measured difference (within the paired runs' spread" in text and "best.yaml holds the defaults" in text
    write_tune(tmp_path, cfg, result)
    assert "not a measured difference" in (tmp_path / "best.yaml").read_text().splitlines()[0]
    assert resolve(from_dict(yaml.safe_load((tmp_path / "best.yaml").read_text()))) == resolve(result.defaults.apply(cfg))
    assert json.loads((tmp_path / "tune.json").read_text())["verdict"] == "within_spread"


def test_a_failing_warm_up_is_a_failed_trial_not_an_abort() -> None:
    cfg = _cfg()
    space = search_space(cfg, ["local"], cpus=2)
    calls = []

    def run(c, s):
        calls.append(c)
        if len(calls) == 1:
            raise RuntimeError("the warm-up broke")
        return {"samples_per_s": _speed(c)}

    snapshots = []
    result = successive_halving(cfg, space, run, 1e6, snapshot=lambda r: snapshots.append(len(r.trials)))
    warm = result.trials[0]
    assert warm.warmup and warm.throughput is None and "RuntimeError: the warm-up broke" in warm.error
    assert len(result.trials) > 1 and result.best is not None
    assert snapshots == list(range(1, len(result.trials) + 1)), "a snapshot after every trial"


def test_tune_json_is_kept_with_the_trials_so_far_on_a_stop(tmp_path: Path) -> None:
    import signal
    import subprocess
    import sys
    import time

    out = tmp_path / "t"
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    proc = subprocess.Popen([sys.executable, "-m", "janus.cli", "tune", "--quick", "--budget_s", "300",
                             "--backends", "local", "--config", DEFAULT, "--out", str(out)], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        while not (out / "tune.json").exists() or not json.loads((out / "tune.json").read_text())["trials"]:  # the warm-up ran
            assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
            time.sleep(0.1)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, err
    data = json.loads((out / "tune.json").read_text())
    assert data["status"] == "stopped" and data["trials"] and data["trials"][0]["warmup"], (data, err)
    assert data["best"] is not None or data["trials"][0]["throughput"] is None


@pytest.mark.parametrize("overlap", ["0", "1"])  # the synchronous loop and the runtime
def test_a_real_trial_is_stopped_at_its_deadline_and_measured_on_what_it_did(overlap: str) -> None:
    import time

    from janus.harness.tune.command import run_trial

    flags = ("--backend", "local", "--overlap_collect", overlap, "--overlap_select", overlap)
    assert not run_trial(resolve(_cfg("--quick", *flags)), float("inf"))["cut"]  # warm: kernels loaded
    cfg = resolve(_cfg(*flags, "--iterations", "100000"))
    start = time.monotonic()
    result = run_trial(cfg, 3.0)
    assert result["cut"] and result["samples_per_s"] > 0 and 0 < result["wall_s"] < 60
    assert time.monotonic() - start < 60, "stopped long before its 100,000 iterations"


def test_the_deadline_never_fires_into_the_tunes_own_code() -> None:
    import time

    from janus.harness.tune.command import deadline

    with deadline(0.01) as raised:  # outside a run's start-up or poll loop: nothing is raised
        time.sleep(0.3)
    assert raised == []


def test_a_stop_signal_is_never_taken_for_a_trials_deadline(monkeypatch: pytest.MonkeyPatch) -> None:
    from janus import stopping
    from janus.harness.tune.command import TrialDeadline, is_deadline

    raised = [TrialDeadline()]
    assert is_deadline(raised[0], raised) and not is_deadline(KeyboardInterrupt(), [])
    # Ctrl-C landing as a cut trial unwinds: it replaces the deadline's exception, and stops the tune
    monkeypatch.setattr(stopping, "_handler", stopping.StopSignals())
    stopping._handler.first = "SIGINT"  # type: ignore[union-attr]
    assert not is_deadline(KeyboardInterrupt(), raised) and not is_deadline(raised[0], raised)


def test_the_first_trial_on_a_backend_is_not_cut_by_another_backends_estimate() -> None:
    cfg = _cfg()
    space = search_space(cfg, ["local", "process"], cpus=2)
    # a process trial starts processes: far above a local trial's start-up
    machine = FakeMachine(cfg, startup=lambda c: 8.0 if c.runtime.backend == "process" else 0.5)
    result = successive_halving(cfg, space, machine.run, 300.0, clock=machine.clock)
    process = [t for t in result.trials if t.candidate.backend == "process"]
    assert process and not any(t.cut or t.throughput is None for t in process)
    assert machine.now <= 300.0


def test_where_the_defaults_lead_the_search_the_best_other_setting_is_paired_against_them() -> None:
    cfg = _cfg()
    space = search_space(cfg, ["local"], cpus=2)
    defaults = defaults_of(cfg)
    calls = [0]

    def search_speed(c):  # the short runs favour the defaults, then g=8
        calls[0] += 1
        knobs = (c.janus.g_select, c.janus.overlap_collect, c.janus.overlap_select)
        if knobs == (defaults.granularity, defaults.overlap_collect, defaults.overlap_select):
            return {"samples_per_s": 1000.0}
        return {"samples_per_s": 500.0 if c.janus.g_select == 8 else 10.0}

    machine = FakeMachine(cfg, startup=0.0, per_share=1.0, speed=search_speed)
    first = successive_halving(cfg, space, machine.run, 1e6, clock=machine.clock)
    searched = len(first.trials) - 2 * FINAL_ROUNDS
    assert first.runner_up is not None and first.runner_up.granularity == 8 and first.verdict == "lost"

    def speed(c):  # the same search; in the paired rounds g=8 is ahead beyond the spread
        if calls[0] >= searched:
            calls[0] += 1
            return {"samples_per_s": 2000.0 if c.janus.g_select == 8 else 1000.0}
        return search_speed(c)

    calls[0] = 0
    machine = FakeMachine(cfg, startup=0.0, per_share=1.0, speed=speed)
    result = successive_halving(cfg, space, machine.run, 1e6, clock=machine.clock)
    assert [t.candidate for t in result.trials[:searched]] == [t.candidate for t in first.trials[:searched]]
    assert result.verdict == "gain" and result.best.granularity == 8 and result.gain == pytest.approx(2.0)


def test_a_rung_cut_short_by_the_clock_still_leaves_the_next_rung_its_time() -> None:
    cfg = _cfg()
    space = search_space(cfg, ["local", "process"], cpus=2)
    machine = FakeMachine(cfg, startup=0.5, per_share=60.0)
    result = successive_halving(cfg, space, machine.run, 200.0, clock=machine.clock)
    per_rung = [len([t for t in result.trials if t.rung == k and not t.final and not t.warmup]) for k in range(3)]
    assert per_rung[1] < -(-per_rung[0] // ETA), "rung 1 was cut short by the clock"
    assert per_rung[2] >= 1 and result.stopped_early, "rung 2 still ran in the search's time left"
    assert machine.now <= 200.0
