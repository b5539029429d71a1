"""compare's janus granularity comes from a short probe, not a fixed 4."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from janus.cli import build_parser, config_from_args, main, request_from_args
from janus.harness import commands
from janus.harness.experiments.granularity import PROBE_ROUNDS, TIE, candidates, choose, probe

ROOT = Path(__file__).resolve().parents[2]
DEFAULT = str(ROOT / "configs" / "default.yaml")


def _cfg(*flags: str):
    return config_from_args(build_parser().parse_args(["compare", "--config", DEFAULT, *flags]))


def test_the_smallest_granularity_within_the_tie_wins() -> None:
    assert choose({1.0: 100.0, 2.0: 101.0, 4.0: 100.5}) == 1.0, "a bundle must pay beyond the probe's noise"
    assert choose({1.0: 100.0, 2.0: 100.0 / (1 - TIE) + 1, 4.0: 50.0}) == 2.0
    assert choose({1.0: 10.0, 8.0: 100.0}) == 8.0


def test_candidates_off_and_on_policy() -> None:
    assert candidates(_cfg()) == [1.0, 2.0, 4.0, 8.0]
    assert candidates(_cfg("--is_on_policy", "1", "--num_minibatches", "4")) == [0.25, 0.5, 0.75, 1.0]


def test_probe_runs_each_candidate_shortly_at_both_ends_with_and_without_overlap() -> None:
    seen = []

    def run(cfg):
        j = cfg.janus
        seen.append((j.overlap_collect, j.overlap_select, j.g_collect, j.g_select, cfg.workload.iterations))
        on = {1.0: 90.0, 2.0: 120.0, 4.0: 121.0, 8.0: 80.0}[j.g_select]
        return {"samples_per_s": on if j.overlap_collect else on / 2}

    result = probe(_cfg("--iterations", "300"), run)
    one_round = [(1, 1, g, g) for g in (1.0, 2.0, 4.0, 8.0)] + [(0, 0, g, g) for g in (1.0, 2.0, 4.0, 8.0)]
    assert [s[:4] for s in seen] == one_round * PROBE_ROUNDS, "every candidate once per round, rounds interleaved"
    assert {s[4] for s in seen} == {60}, "a fifth of the workload each"
    assert result.overlap and result.chosen == 2.0 and "-> overlap on, g=2" in result.describe()
    assert result.note() is None


def test_overlap_off_wins_only_beyond_the_tie() -> None:
    def run_with(off_factor):
        def run(cfg):
            base = 100.0 * (1.1 if cfg.janus.g_select == 4 else 1.0)
            return {"samples_per_s": base * (off_factor if not cfg.janus.overlap_collect else 1.0)}
        return run

    slower_threads = probe(_cfg(), run_with(1.2))
    assert not slower_threads.overlap and slower_threads.chosen == 4.0
    assert "overlap does not pay" in (slower_threads.note() or "")
    assert probe(_cfg(), run_with(1.0 + TIE / 2)).overlap, "a difference within the tie keeps the overlap"


def test_one_lucky_probe_run_does_not_choose() -> None:
    """g=2's first run is 30% fast, its second 2% slower than g=1: a lead not held in every round
    does not choose (g=1 stays; a bundle must pay in each round, not in one lucky run)."""
    count = {"g2": 0}

    def run(cfg):
        if cfg.janus.g_select == 2 and cfg.janus.overlap_collect:
            count["g2"] += 1
            return {"samples_per_s": 130.0 if count["g2"] == 1 else 98.0}
        return {"samples_per_s": 100.0 if cfg.janus.overlap_collect else 90.0}

    result = probe(_cfg(), run)
    assert result.overlap and result.chosen == 1.0, result.describe()


def test_compare_measures_the_granularity_unless_a_flag_names_it(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # a small synthetic step (few envs, short rollouts, a small learner): the probe's 16 runs and the
    # four configurations are what is checked, not how fast they go
    tiny = ["--config", DEFAULT, "--iterations", "12", "--repeats", "1", "--envs_per_actor", "2", "--rollout_length", "8",
            "--batch_size", "32", "--hidden_size", "32", "--env_step_ms", "0.05"]
    assert main(["compare", "--out", str(tmp_path / "a"), *tiny]) == 0
    printed = capsys.readouterr().out
    assert "knob probe" in printed and "warm-up" in printed
    runs = {r["name"]: r for r in json.loads((tmp_path / "a" / "results.json").read_text())["runs"]}
    probed = runs["janus"]["granularity_probe"]
    assert set(probed["samples_per_s"]) == {"1.0", "2.0", "4.0", "8.0"}
    assert runs["janus"]["config"]["g_select"] == runs["janus"]["config"]["g_collect"] == probed["chosen"]
    assert runs["janus"]["config"]["overlap_select"] == int(probed["overlap"])
    assert set(probed["without_overlap"]) == {"1.0", "2.0", "4.0", "8.0"}
    assert "placement does not pay" in printed or runs["janus"]["config"]["placement"] != "cpu_pageable"



def test_a_granularity_flag_skips_the_probe(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args, **kwargs):
        raise AssertionError("no probe when --g_select names the granularity")

    monkeypatch.setattr(commands, "probe", refuse)
    args = build_parser().parse_args(["compare", "--config", DEFAULT, "--g_select", "2"])
    configs, _, _ = commands.plan(request_from_args(args), config_from_args(args))
    kept, probed = commands.measured_granularity(request_from_args(args), configs)
    assert probed is None and kept == configs
    assert {c.name: c.janus.g_select for c in kept}["janus"] == 2
