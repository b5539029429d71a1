"""One default (issue 37 item 6): the packaged janus/configs/default.yaml is what a run without
``--config`` reads, from any folder; the repository's configs/default.yaml is the same file, the
wheel and the sdist carry it, and the dataclass defaults of the synthetic workload agree with it."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest
import yaml

from janus import cli
from janus.config import SyntheticConfig, WorkloadConfig, default_config_file, read_default_config, read_yaml, validate

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src"
REPO_DEFAULT = ROOT / "configs" / "default.yaml"
PACKAGED = SRC / "janus" / "configs" / "default.yaml"

RESOLVE_SNIPPET = """
import json
from janus import cli
from janus.config import recorded, validate
args = cli.parse_args(["train", "--quick"])
print(json.dumps({"default": str(cli.parser.DEFAULT_CONFIG), "config": recorded(validate(cli.config_from_args(args)))}))
"""
"""What ``janus train --quick`` resolves (validated, before ``auto`` placements resolve), as config.yaml records it."""


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(SRC), "OMP_NUM_THREADS": "1"}


def _resolved_in(folder: Path) -> dict:
    proc = subprocess.run([sys.executable, "-c", RESOLVE_SNIPPET], capture_output=True, text=True, timeout=120,
                          cwd=folder, env=_env())
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.splitlines()[-1])


def test_the_repository_copy_is_the_packaged_file() -> None:
    assert REPO_DEFAULT.read_bytes() == PACKAGED.read_bytes(), (
        "configs/default.yaml and src/janus/configs/default.yaml differ: edit one, copy it over the other")
    assert Path(str(default_config_file())).resolve() == PACKAGED.resolve(), "janus reads the file in its own package"
    assert read_default_config() == read_yaml(REPO_DEFAULT)


def test_workload_dataclass_defaults_are_the_packaged_workload() -> None:
    workload = read_default_config()["workload"]
    defaults = dataclasses.asdict(WorkloadConfig())
    differ = {key: (value, defaults[key]) for key, value in workload.items() if defaults[key] != value}
    assert not differ, f"default.yaml vs WorkloadConfig() (file, dataclass): {differ}"
    synthetic = read_default_config()["synthetic"]
    defaults = {**dataclasses.asdict(SyntheticConfig()), "obs_shape": list(SyntheticConfig().obs_shape)}
    differ = {key: (value, defaults[key]) for key, value in synthetic.items() if defaults[key] != value}
    assert not differ, f"default.yaml vs SyntheticConfig() (file, dataclass): {differ}"


def test_the_default_differs_from_the_dataclasses_only_in_the_knobs_it_turns_on() -> None:
    """A synthetic --config file's missing keys take the dataclass defaults: the default file's values but
    for overlap and granularity, which JanusConfig() keeps at the baseline (README, DEFAULTS_NOTE)."""
    from janus.config import RunConfig

    base = RunConfig().to_dict()
    differ = {key for key, value in read_default_config().items() if key not in ("workload", "synthetic") and base[key] != value}
    assert differ == {"overlap_collect", "overlap_select", "g_collect", "g_select"}
    assert all(word in cli.parser.DEFAULTS_NOTE for word in differ)


def test_a_process_in_another_folder_resolves_the_repository_default(tmp_path: Path) -> None:
    elsewhere = _resolved_in(tmp_path)
    here = _resolved_in(ROOT)
    assert elsewhere["config"] == here["config"]
    assert Path(elsewhere["default"]).resolve() == PACKAGED.resolve()
    expected = read_yaml(REPO_DEFAULT)
    workload, synthetic = elsewhere["config"]["workload"], elsewhere["config"]["synthetic"]
    for key in ("hidden_size", "num_actors", "updates_per_iteration"):
        assert workload[key] == expected["workload"][key], key
    for key in ("env_step_ms", "obs_shape"):
        assert synthetic[key] == expected["synthetic"][key], key
    for key in ("overlap_collect", "g_collect", "batch_size", "buffer_capacity"):
        assert elsewhere["config"][key] == expected[key], key


def test_help_defaults_do_not_depend_on_the_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    defaults = cli.parser.flag_defaults()
    expected, synthetic = read_yaml(REPO_DEFAULT)["workload"], read_yaml(REPO_DEFAULT)["synthetic"]
    assert defaults["iterations"] == {"synthetic": expected["iterations"]}
    assert defaults["env_step_ms"] == {"synthetic": synthetic["env_step_ms"]}
    assert defaults["hidden_size"]["synthetic"] == expected["hidden_size"]
    recorded = validate(cli.config_from_args(cli.parse_args(["train"]))).to_dict()
    assert {key: recorded["workload"][key] for key in expected} == expected
    assert {key: recorded["synthetic"][key] for key in synthetic} == synthetic


@pytest.mark.slow  # two real runs (each ~10 s on a loaded machine)
def test_train_from_another_folder_records_the_config_of_the_repository_root(tmp_path: Path) -> None:
    def run_in(folder: Path, out: Path) -> dict:
        proc = subprocess.run([sys.executable, "-m", "janus", "train", "--quick", "--iterations", "2", "--backend", "local",
                               "--out", str(out)], capture_output=True, text=True, timeout=240, cwd=folder, env=_env())
        assert proc.returncode == 0, proc.stderr[-3000:]
        return yaml.safe_load((out / "config.yaml").read_text())

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    assert run_in(elsewhere, tmp_path / "a") == run_in(ROOT, tmp_path / "b")


def test_wheel_and_sdist_carry_the_default(tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    tree.mkdir()
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy(ROOT / name, tree / name)
    shutil.copytree(SRC, tree / "src", ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    dist = tmp_path / "dist"
    dist.mkdir()
    for hook in ("build_wheel", "build_sdist"):  # one process each: a second hook in one process builds into the first's folder
        build = f"import sys; from setuptools import build_meta; build_meta.{hook}(sys.argv[1])"
        proc = subprocess.run([sys.executable, "-c", build, str(dist)], capture_output=True, text=True, timeout=120, cwd=tree)
        assert proc.returncode == 0, proc.stderr[-3000:]
    (wheel,), (sdist,) = list(dist.glob("*.whl")), list(dist.glob("*.tar.gz"))
    with zipfile.ZipFile(wheel) as whl:
        assert whl.read("janus/configs/default.yaml") == PACKAGED.read_bytes()
    with tarfile.open(sdist) as tar:
        member = tar.extractfile(f"{sdist.name.removesuffix('.tar.gz')}/src/janus/configs/default.yaml")
        assert member is not None and member.read() == PACKAGED.read_bytes()
