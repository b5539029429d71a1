"""The algorithm seam holds: no module outside ``janus.algorithms`` asks which algorithm it has by
name (it reads what the algorithm declares: ``acts_in_gymnasium``, ``simulates_environments``,
``is_on_policy`` ...), and on-policy is decided in one place."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import janus
from janus.algorithms import base

SRC = Path(janus.__file__).resolve().parent
BUILT_IN = set(base.MODULES)
"""The built-in algorithms' names: ``dqn``, ``ppo``, ``sac``, ``appo``, ``impala``, ``synthetic``."""


def _names_in(node: ast.expr) -> set[str]:
    """Built-in algorithm names ``node`` spells as a string constant, or as one of a tuple, list or set of them."""
    items = node.elts if isinstance(node, (ast.Tuple, ast.List, ast.Set)) else [node]
    return {i.value for i in items if isinstance(i, ast.Constant) and i.value in BUILT_IN}


def name_comparisons(source: str) -> list[tuple[int, str]]:
    """``(line, name)`` for every comparison (``==``, ``!=``, ``in``, ``not in``, a ``match`` case)
    in ``source`` against a built-in algorithm's name."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Compare):
            spelled = set().union(*(_names_in(o) for o in [node.left, *node.comparators]))
        elif isinstance(node, ast.MatchValue):
            spelled = _names_in(node.value)
        else:
            continue
        found += [(node.lineno, name) for name in sorted(spelled)]
    return found


def test_no_module_outside_the_algorithms_compares_an_algorithm_name() -> None:
    outside = sorted(p for p in SRC.rglob("*.py") if p.relative_to(SRC).parts[0] != "algorithms")
    assert len(outside) > 50  # the walk sees the package
    found = [f"{p.relative_to(SRC.parent)}:{line}: {name!r}" for p in outside for line, name in name_comparisons(p.read_text())]
    assert found == [], "compare what the algorithm declares, not its name:\n" + "\n".join(found)


def test_the_check_finds_each_kind_of_comparison() -> None:
    source = ("def f(cfg, algo):\n    if cfg.workload.algo != 'synthetic':\n        return algo in ('dqn', 'x')\n"
              "    match algo:\n        case 'ppo':\n            return 1\n    return algo == 'custom'\n")
    assert name_comparisons(source) == [(2, "synthetic"), (3, "dqn"), (5, "ppo")]


def test_on_policy_is_decided_by_the_algorithm_in_one_place() -> None:
    """:func:`~janus.algorithms.base.learns_on_policy` asks the algorithm; nothing outside it ORs
    the data-path knob with the algorithm's answer (a second place that decides)."""
    from janus.config import from_dict

    assert base.learns_on_policy(from_dict({"workload": {"algo": "ppo"}}))
    assert not base.learns_on_policy(from_dict({"workload": {"algo": "dqn"}}))
    assert base.learns_on_policy(from_dict({"is_on_policy": True})) and not base.learns_on_policy(from_dict({}))
    for path in SRC.rglob("*.py"):
        assert "janus.is_on_policy or algorithm(" not in path.read_text(), path


def test_a_run_folder_from_before_the_synthetic_section_loads_and_resumes_unchanged(tmp_path) -> None:
    """Its config.yaml has the synthetic workload's keys under ``workload:``: they are read into the
    ``synthetic:`` section, the same run as one recorded today, and restating them on resume changes nothing."""
    import yaml

    from janus.config import SyntheticConfig, from_dict, recorded, validate
    from janus.harness.resume_checks import check_changes, stored_config

    new = validate(from_dict({"workload": {"algo": "synthetic", "iterations": 5},
                              "synthetic": {"obs_shape": [4, 84, 84], "obs_dtype": "uint8", "env_step_ms": 0.0}}))
    old = recorded(new)
    old["workload"].update(old.pop("synthetic"))  # as config.yaml recorded them before the section
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(old))
    stored = validate(stored_config(tmp_path))
    assert stored.synthetic == SyntheticConfig(obs_shape=(4, 84, 84), obs_dtype="uint8", env_step_ms=0.0)
    assert stored == new and recorded(stored) == recorded(new)
    check_changes(tmp_path, stored, new)  # the same run: nothing changed
    with pytest.raises(Exception, match="--obs_shape"):
        check_changes(tmp_path, stored, validate(from_dict({"synthetic": {"obs_shape": [8]}}, base=new)))
