"""A custom algorithm from outside janus (tests/algorithms/tiny_custom_algo.py): trained through
``janus train --algo module:Name``, registered from Python, recorded in its run folder, and the
clear errors for a name that does not load."""

from __future__ import annotations

import csv
import json
import sys
from pathlib import Path

import pytest
import yaml

from janus.algorithms import Algorithm, algorithm, base, names, register
from janus.cli import main
from janus.config import from_dict, validate
from janus.errors import ConfigError

HERE = str(Path(__file__).resolve().parent)
SPEC = "tiny_custom_algo:TinyAlgo"


@pytest.fixture
def importable(monkeypatch: pytest.MonkeyPatch):
    """tiny_custom_algo importable (as PYTHONPATH would make it); the custom names registered taken
    out of the registry after (the built-in ones register once per process, on import)."""
    monkeypatch.syspath_prepend(HERE)
    before = set(base._REGISTRY)
    yield
    for name in set(base._REGISTRY) - before - set(base.MODULES):
        base._REGISTRY.pop(name)


def test_a_custom_algorithm_trains_through_the_cli(importable: None, tmp_path: Path) -> None:
    import tiny_custom_algo

    out = tmp_path / "run"
    start = len(tiny_custom_algo.LEARNERS)
    assert main(["train", "--algo", SPEC, "--backend", "local", "--lr", "0.2", "--out", str(out)]) == 0
    learner = tiny_custom_algo.LEARNERS[start]  # the one the Trainer trained (a local run: this process)
    preset = tiny_custom_algo.TinyAlgo.preset["workload"]
    assert learner.updates == preset["iterations"] * preset["updates_per_iteration"] == 24
    assert learner.q[1] > 0.5 > learner.q[0] >= 0.0, "arm 1 pays, arm 0 does not: the values learnt it"
    run = json.loads((out / "results.json").read_text())["runs"][-1]
    assert run["status"] == "finished" and run["counts"]["updates"] == 24
    saved = yaml.safe_load((out / "config.yaml").read_text())
    assert saved["workload"]["algo"] == SPEC, "the name a resume, rollout or report of the folder looks up"
    assert saved["algorithm"] == {"lr": 0.2}, "its hyperparameters, from its flags()"
    assert "env" not in saved["workload"], "it acts in no Gymnasium environment: workload.env is not recorded"
    with open(out / "results.csv") as f:
        row = next(csv.DictReader(f))
    assert row["algo"] == SPEC and row["env"] == "" and row["env_steps"] == ""


def test_its_flags_are_checked_and_a_flag_it_does_not_read_is_refused(importable: None, tmp_path: Path,
                                                                       capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(ConfigError, match=r"invalid algorithm.lr: got 'fast'; accepted: a finite number"):
        validate(from_dict({"workload": {"algo": SPEC}, "algorithm": {"lr": "fast"}}))
    assert main(["train", "--algo", SPEC, "--gamma", "0.9", "--out", str(tmp_path / "b")]) == 2
    err = capsys.readouterr().err
    assert "--gamma does not apply to --algo tiny_custom_algo:TinyAlgo" in err
    with pytest.raises(ConfigError, match=r"unknown key 'gamma' in algorithm; accepted keys for tiny_custom_algo:TinyAlgo: lr"):
        validate(from_dict({"workload": {"algo": SPEC}, "algorithm": {"gamma": 0.9}}))


def test_register_from_python_makes_a_name_the_config_accepts(importable: None) -> None:
    from tiny_custom_algo import TinyAlgo

    registered = register(TinyAlgo(), name="bandit")
    assert algorithm("bandit") is registered and registered.name == "bandit" and "bandit" in names()
    cfg = validate(from_dict({"workload": {"algo": "bandit"}, "algorithm": {"lr": 0.5}}))
    assert registered.budget(cfg).total_updates == cfg.workload.iterations * cfg.workload.updates_per_iteration
    assert registered.hyperparameters(cfg) == {"lr": 0.5}
    assert isinstance(register(TinyAlgo, name="bandit-class"), Algorithm), "a subclass is instantiated"


@pytest.mark.parametrize(("spec", "message"), [
    ("no_such_module_xyz:Algo", r"cannot import module 'no_such_module_xyz' \(ModuleNotFoundError: .*importable"),
    ("tiny_custom_algo:Missing", r"module 'tiny_custom_algo' has no attribute 'Missing'"),
    ("tiny_custom_algo:NOT_AN_ALGORITHM", r"tiny_custom_algo.NOT_AN_ALGORITHM is a type, not a janus Algorithm"),
    ("tiny_custom_algo:NoLearner", r"NoLearner does not define learner; an Algorithm defines actor.*and learner"),
    ("tiny_custom_algo:", r"a custom algorithm is named package.module:Name"),
])
def test_a_name_that_does_not_load_is_a_clear_error(importable: None, spec: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        algorithm(spec)
    assert spec not in names()


def test_the_cli_names_the_module_that_does_not_import(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["train", "--algo", "no_such_module_xyz:Algo", "--out", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err
    assert "janus train: error:" in err and "cannot import module 'no_such_module_xyz'" in err
    assert not (tmp_path / "r").exists(), "refused before anything was written"


def test_its_run_folder_finds_it_again_or_says_the_module_is_gone(importable: None, tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "run"
    assert main(["train", "--algo", SPEC, "--backend", "local", "--iterations", "2", "--out", str(out)]) == 0
    capsys.readouterr()
    # found again by its recorded name: it keeps no checkpoint, so its resume is refused as such
    assert main(["train", "--resume", str(out)]) == 2
    assert "--algo tiny_custom_algo:TinyAlgo keeps no checkpoint" in capsys.readouterr().err
    # in a process where the module does not import, the error says so
    base._REGISTRY.pop(SPEC)
    monkeypatch.delitem(sys.modules, "tiny_custom_algo")
    monkeypatch.setattr(sys, "path", [p for p in sys.path if Path(p or ".").resolve() != Path(HERE)])
    assert main(["train", "--resume", str(out)]) == 2
    assert "cannot import module 'tiny_custom_algo'" in capsys.readouterr().err


def test_a_custom_algorithm_declares_family_presets_that_janus_train_applies(
        importable: None, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Its ``family_presets`` are looked up as the built-in ones are: the env's family picks the
    overlay, printed and recorded; ``--preset none`` keeps its own preset; flags still win."""
    from janus.algorithms.presets import preset_for
    from janus.cli import configured, parse_args

    spec = "tiny_custom_algo:ClassicDQN"
    assert preset_for(spec, "CartPole-v1").describe() == f"preset: {spec}/classic_control (tiny_custom_algo's own)"
    cfg = configured(parse_args(["train", "--algo", spec, "--env", "CartPole-v1"]))
    assert f"janus: preset: {spec}/classic_control (tiny_custom_algo's own)" in capsys.readouterr().out
    assert (cfg.janus.batch_size, cfg.workload.total_env_steps, cfg.algorithm["lr"]) == (48, 3_000, 5e-4)
    assert cfg.workload.preset == "classic_control"
    own = configured(parse_args(["train", "--algo", spec, "--env", "CartPole-v1", "--preset", "none"]))
    assert own.janus.batch_size == 128 and "lr" not in own.algorithm
    flagged = configured(parse_args(["train", "--algo", spec, "--env", "CartPole-v1", "--lr", "0.002"]))
    assert flagged.algorithm["lr"] == 0.002 and flagged.janus.batch_size == 48
