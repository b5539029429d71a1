"""Repeated measurements: interleaved rounds, the median run with its range, notes on overlaps."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from janus.cli import main
from janus.harness.experiments.repeats import interleaved, spread_notes, summarize
from janus.harness.reports.table import format_table

ROOT = Path(__file__).resolve().parents[2]
TINY = ["--iterations", "3", "--config", str(ROOT / "configs" / "default.yaml")]


def _run(name: str, sps: float, wall: float = 1.0) -> dict:
    return {"name": name, "samples_per_s": sps, "env_steps_per_s": sps / 2, "wall_s": wall,
            "stage_s": {"rollout": 0.2, "collect": 0.1, "select": 0.1, "update": 0.4}}


def test_interleaved_runs_every_configuration_once_per_round() -> None:
    assert interleaved(["a", "b"], 3) == [(0, "a"), (0, "b"), (1, "a"), (1, "b"), (2, "a"), (2, "b")]


def test_summary_is_the_median_run_whole_with_every_repeat() -> None:
    runs = [_run("a", 100, wall=3.0), _run("b", 50), _run("a", 300, wall=1.0), _run("a", 200, wall=2.0)]
    a, b = summarize(runs)
    assert a["samples_per_s"] == 200 and a["wall_s"] == 2.0, "the median run's own figures, not mixed"
    assert a["repeats"] == {"runs": 3, "samples_per_s": [100, 300, 200], "env_steps_per_s": [50, 150, 100],
                            "wall_s": [3.0, 1.0, 2.0]}
    assert "repeats" not in b, "a configuration run once is reported as it ran"
    even = summarize([_run("c", 10), _run("c", 40), _run("c", 20), _run("c", 30)])[0]
    assert even["samples_per_s"] == 20, "an even count takes the lower middle run"


def test_overlapping_ranges_are_called_no_difference_and_separate_ones_are_not() -> None:
    runs = summarize([_run("base", 100), _run("fast", 300), _run("fast2", 310),
                      _run("base", 110), _run("fast", 320), _run("fast2", 305)])
    notes = spread_notes(runs)
    assert len(notes) == 1 and notes[0].startswith(("fast vs fast2", "fast2 vs fast"))
    assert "not a measured difference" in notes[0]
    table = format_table(runs, baseline="base")
    assert "range" in table.splitlines()[0] and "100-110" in table and notes[0] in table
    assert "ran 2 times, interleaved" in table


def test_compare_repeats_interleaved_and_reports_medians(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["compare", "--quick", "--repeats", "2", "--out", str(tmp_path), *TINY]) == 0
    printed = capsys.readouterr().out
    order = [line.split("]")[1].split(":")[0].split(",")[0].strip() for line in printed.splitlines()
             if line.startswith("[")]
    assert order == ["baseline", "overlap", "granularity", "janus"] * 2, "round by round, not config by config"
    assert "smoke test (--quick)" in printed and "range" in printed
    runs = json.loads((tmp_path / "results.json").read_text())["runs"]
    assert [r["name"] for r in runs] == ["baseline", "overlap", "granularity", "janus"]
    for run in runs:
        sps = run["repeats"]["samples_per_s"]
        assert len(sps) == 2 and run["samples_per_s"] == min(sps), "of two, the lower middle one"


@pytest.mark.parametrize("bad", ["0", "-1"])
def test_repeats_below_one_is_refused(bad: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out"
    assert main(["compare", "--quick", "--repeats", bad, "--out", str(out), *TINY]) == 2
    assert "--repeats" in capsys.readouterr().err
    assert not out.exists(), "refused before anything is written"


def test_real_training_shows_the_return_beside_the_speed() -> None:
    runs = [{**_run("baseline", 100), "final_mean_return": 180.0}, {**_run("janus", 300), "final_mean_return": 455.5}]
    table = format_table(runs)
    header = table.splitlines()[0]
    assert header.rstrip().endswith("return") and "455.5" in table and "180.0" in table
    assert "return" not in format_table([_run("baseline", 100)]).splitlines()[0], "synthetic: no return column"


def test_the_compare_chart_shows_each_configurations_range_as_an_error_bar() -> None:
    from matplotlib.container import ErrorbarContainer

    from janus.harness.reports.table import annotate, chart_figure

    runs = annotate(summarize([_run("baseline", 100), _run("janus", 300), _run("baseline", 120),
                               _run("janus", 250), _run("baseline", 90), _run("janus", 320)]))
    left = chart_figure("compare", runs).axes[0]
    bars = [c for c in left.containers if isinstance(c, ErrorbarContainer)]
    assert len(bars) == 1, "one error bar per configuration, drawn once"
    segments = [sorted(seg[:, 1]) for seg in bars[0].lines[2][0].get_segments()]
    assert segments == [[90, 120], [250, 320]], "min-max of each configuration's repeats"
    assert [p.get_height() for p in left.patches] == [100, 300], "the bars are the median runs"
    assert "min-max" in left.get_title()
    assert [t.xy[1] for t in left.texts] == [120, 320], "the speedup is written above the error bar"
    once = chart_figure("compare", annotate([_run("baseline", 100), _run("janus", 300)])).axes[0]
    assert not [c for c in once.containers if isinstance(c, ErrorbarContainer)], "a single run has no range"


def test_ranges_overlap_is_the_one_test_compare_and_tune_share() -> None:
    from janus.harness.experiments.repeats import ranges_overlap

    assert ranges_overlap([1.0, 3.0], [2.0, 5.0]) and ranges_overlap([1.0, 2.0], [2.0, 3.0]), "touching ranges overlap"
    assert not ranges_overlap([1.0, 1.5], [2.0, 3.0]) and not ranges_overlap([4.0], [1.0, 3.0])
    assert not ranges_overlap([], [1.0]), "nothing measured is no overlap"
