"""Periodic evaluation: greedy episodes every ``eval_interval_steps``, the best policy kept in RUN_DIR/best."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

import janus
from janus.algorithms.base import algorithm
from janus.config import from_dict, resolve
from janus.errors import RunFailed
from janus.runtime.evaluator import Evaluator, previous_best, save_best
from janus.runtime.plan import RunPlan
from janus.runtime.run import run_runtime


def dqn_cfg(steps: int, best_dir: Path | None, **runtime: Any) -> Any:
    return resolve(from_dict({"workload": {"total_env_steps": steps},
                              "runtime": {"eval_interval_steps": 1000, "eval_episodes": 3,
                                          "best_dir": str(best_dir) if best_dir else None, **runtime}},
                             base=from_dict(algorithm("dqn").preset)))


@pytest.mark.parametrize("backend", ["local", "process"])
def test_evaluations_every_interval_and_the_best_policy_is_kept(tmp_path: Path, backend: str) -> None:
    cfg = dqn_cfg(3000, tmp_path / "best", backend=backend)
    assert "evaluator" in RunPlan.of(cfg).layout
    run = run_runtime(cfg, timeout_s=300)
    evals = run["evaluations"]
    assert [e["env_steps"] // 1000 for e in evals] == [1, 2, 3], evals  # one per 1,000 steps crossed
    assert all(e["episodes"] == 3 and np.isfinite(e["mean_return"]) for e in evals)
    assert [e["version"] for e in evals] == sorted(e["version"] for e in evals)
    assert not [t for t in threading.enumerate() if t.name.startswith("host-evaluator") or t.name.startswith("evaluator-")], \
        "the Evaluator's threads are joined at shutdown"
    best = max(evals, key=lambda e: e["mean_return"])
    saved = torch.load(tmp_path / "best" / "policy.pt", weights_only=True)["state"]
    assert saved["eval_return"] == pytest.approx(best["mean_return"]) and saved["env_steps"] == best["env_steps"]
    assert previous_best(tmp_path / "best" / "policy.pt") == pytest.approx(best["mean_return"])


def test_no_evaluator_unless_asked() -> None:
    assert "evaluator" not in RunPlan.of(dqn_cfg(3000, None, eval_interval_steps=0)).layout


def test_an_evaluation_that_fails_fails_the_run(monkeypatch: pytest.MonkeyPatch) -> None:
    import janus.policy as policy

    def broken(*_: Any, **__: Any) -> list[float]:
        raise RuntimeError("the evaluation env broke on purpose")

    monkeypatch.setattr(policy, "episode_returns", broken)
    with pytest.raises(RunFailed, match="evaluation env broke on purpose"):
        run_runtime(dqn_cfg(3000, None), timeout_s=300)


def test_a_worse_evaluation_keeps_the_best_file(tmp_path: Path) -> None:
    path = tmp_path / "best" / "policy.pt"
    params = {"w": torch.ones(2)}
    save_best(path, params, env_steps=1000, mean_return=50.0, version=3)
    before = path.read_bytes()
    evaluator = Evaluator("evaluator", "trainer", "orchestrator", lambda: None, 3, str(path), seed=0)
    evaluator.best_return = previous_best(path)  # what on_StartMsg does on a resumed run
    assert evaluator.best_return == 50.0
    evaluator.policy = type("P", (), {"load_params": lambda self, params: None})()

    import janus.policy as policy

    original_returns = policy.episode_returns
    policy.episode_returns = lambda *a, **k: [10.0, 20.0, 30.0]  # type: ignore[assignment]
    try:
        evaluator._play(2000, 7, {})
    finally:
        policy.episode_returns = original_returns
    assert evaluator.failure is None and evaluator.result == (2000, 7, [10.0, 20.0, 30.0])
    assert path.read_bytes() == before, "a worse policy does not replace the best one"


def test_cli_eval_flags_write_best_and_results(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The flags through ``janus.cli.main`` in this process (as test_resume.py's commands): two
    subprocesses cost ~5 s of interpreter and torch start-up; the CLI as a process is tested in
    tests/test_cli_flags.py."""
    from janus.cli import main

    out = tmp_path / "run"
    assert main(["train", "--algo", "dqn", "--total_env_steps", "2048", "--eval_interval_steps", "1024",
                 "--eval_episodes", "2", "--out", str(out)]) == 0
    results = json.loads((out / "results.json").read_text())
    evals = results["runs"][0]["evaluations"]
    # at the first report at or past each multiple of 1,024 (reports come a piece of 32 steps at a time)
    assert [e["env_steps"] // 1024 for e in evals] == [1, 2] and evals[-1]["env_steps"] == 2048
    policy = janus.load_policy(out / "best")
    assert policy.info["eval_return"] == pytest.approx(max(e["mean_return"] for e in evals))
    assert np.asarray(policy.predict(np.zeros(4, np.float32))).shape == ()
    capsys.readouterr()
    assert main(["train", "--eval_interval_steps", "100", "--out", str(tmp_path / "s")]) == 2
    assert "--eval_interval_steps" in capsys.readouterr().err
