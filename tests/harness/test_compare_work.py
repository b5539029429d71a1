"""``janus compare`` gives every configuration the same work, and its table says so."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from janus.cli import main

ROOT = Path(__file__).resolve().parents[2]
TINY = ["--iterations", "4", "--config", str(ROOT / "configs" / "default.yaml"), "--env_step_ms", "0.2"]


@pytest.mark.parametrize("policy", [[], ["--is_on_policy", "1", "--g_collect", "1/4"]], ids=["off-policy", "on-policy"])
def test_compare_runs_every_configuration_on_the_same_work(policy: list[str], tmp_path: Path,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["compare", "--quick", "--out", str(tmp_path), *TINY, *policy]) == 0
    runs = {r["name"]: r for r in json.loads((tmp_path / "results.json").read_text())["runs"]}
    assert list(runs) == ["baseline", "overlap", "granularity", "janus"]
    cfg = runs["baseline"]["config"]
    w = cfg["workload"]
    steps = 4 * w["num_actors"] * w["envs_per_actor"] * w["rollout_length"]
    updates = 4 * (w["num_epochs"] * cfg["num_minibatches"] if policy else w["updates_per_iteration"])
    for name, run in runs.items():
        assert (run["counts"]["env_steps"], run["counts"]["updates"]) == (steps, updates), name
        assert run["counts"]["transitions_collected"] == steps, name
    # the configurations with both overlaps off run the synchronous loop, the others the runtime
    assert [r["runtime"].get("loop") for r in runs.values()] == ["synchronous", None, "synchronous", None]
    base = runs["baseline"]
    staged = sum(base["stage_s"][s] for s in ("rollout", "collect", "select", "update"))
    assert 0 < staged <= base["wall_s"]
    printed = capsys.readouterr().out
    assert f"work: every configuration took {steps:,} env steps and trained {updates:,} updates" in printed
    assert "NOT do the same work" not in printed
    assert "baseline ran the synchronous loop" in printed
