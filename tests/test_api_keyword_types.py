"""janus.train's keywords are typed like the flags they stand for (issue 46, item 5).

``force="no"`` moved an existing run aside and ``quick="no"`` ran the quick workload: any truthy
value switched an on/off keyword on. Now every keyword is checked against the type its flag parses
to, from the settings' table the flags follow too (not a list of names): booleans are bools (numpy's too),
ints are ints, floats are numbers, text is text. The same for the other on/off keywords of the API
(``evaluate``, ``predict``, ``load_policy``).
"""

from __future__ import annotations

import argparse
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import janus
from janus.api.keywords import keyword_request, typed_request
from janus.cli import build_parser
from janus.cli.parser import _bool
from janus.config.flags import setting_kinds
from janus.config.request import RunRequest


def on_off_keywords() -> list[str]:
    """Every keyword whose setting is on/off (``--force``) or takes a bool (``--normalize_obs true``)."""
    return sorted(n for n, kind in setting_kinds().items() if kind == "bool")


def train_arguments(algo: str, flags: dict[str, Any]) -> RunRequest:
    """The typed request of ``janus.train(algo, **flags)``."""
    return typed_request(keyword_request(algo, flags))


def test_the_on_off_keywords_are_found_from_the_flags() -> None:
    found = on_off_keywords()
    assert {"force", "quick", "verbose", "tensorboard", "wandb", "normalize_obs", "anneal_lr"} <= set(found)
    train = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)).choices["train"]
    flags = {o[2:] for a in train._actions for o in a.option_strings
             if o.startswith("--") and (isinstance(a, argparse._StoreTrueAction) or a.type is _bool)}
    assert flags == set(found), "the parser's on/off flags are the table's bool settings"


@pytest.mark.parametrize("name", on_off_keywords())
@pytest.mark.parametrize("value", ["no", "false", "yes", 0, 1, 1.0, [True]])
def test_an_on_off_keyword_takes_only_a_bool(name: str, value: Any) -> None:
    with pytest.raises(janus.ConfigError, match=rf"^invalid {name}: got .*; accepted: True or False \(a bool\)$"):
        train_arguments("dqn", {name: value})


@pytest.mark.parametrize("value, expected", [(True, True), (False, False), (np.bool_(True), True), (np.False_, False)])
def test_bools_and_numpy_bools_are_taken(value: Any, expected: bool) -> None:
    request = train_arguments("dqn", {"force": value, "normalize_obs": value})
    assert request.force is expected and request.settings["normalize_obs"] is expected


@pytest.mark.parametrize("flags, message", [
    ({"seed": 1.5}, r"invalid seed: got 1\.5 \(float\); accepted: an int"),
    ({"seed": 2.0}, r"invalid seed: got 2\.0 \(float\); accepted: an int"),
    ({"seed": True}, r"invalid seed: got True \(bool\); accepted: an int"),
    ({"lr": True}, r"invalid lr: got True \(bool\); accepted: a number"),
    ({"lr": "1e-3"}, r"invalid lr: got '1e-3' \(str\); accepted: a number"),
    ({"total_env_steps": False}, r"invalid total_env_steps: got False \(bool\)"),
    ({"total_env_steps": [100]}, r"invalid total_env_steps: got \[100\] \(list\)"),
    ({"name": 3}, r"invalid name: got 3 \(int\); accepted: a str"),
    ({"env_kwargs": '{"max_episode_steps": 5}'}, r"invalid env_kwargs: got .* \(str\); accepted: a dict"),
    ({"net_arch": [64, True]}, r"invalid net_arch: got \[64, True\]; accepted: a list, each item an int"),
])
def test_keywords_of_other_types_are_checked_like_their_flags(flags: dict[str, Any], message: str) -> None:
    with pytest.raises(janus.ConfigError, match=message):
        train_arguments("dqn", flags)


def test_numpy_numbers_and_ints_for_floats_are_taken() -> None:
    given = train_arguments("dqn", {"seed": np.int64(3), "lr": 1, "gamma": np.float32(0.5),
                                     "net_arch": (np.int32(8),)}).settings
    assert given["seed"] == 3 and type(given["seed"]) is int and given["lr"] == 1 and given["gamma"] == 0.5
    assert given["net_arch"] == (8,) and type(given["net_arch"][0]) is int


def test_force_no_leaves_an_existing_run_where_it_is(tmp_path: Path, finished_dqn_run: Path) -> None:
    out = tmp_path / "run"
    shutil.copytree(finished_dqn_run, out)
    before = sorted(p.name for p in tmp_path.iterdir())
    for flags in ({"force": "no"}, {"quick": "no"}, {"force": "no", "quick": "no"}):
        with pytest.raises(janus.ConfigError, match="accepted: True or False"):
            janus.train("dqn", env="CartPole-v1", out=out, total_env_steps=200, **flags)
    assert sorted(p.name for p in tmp_path.iterdir()) == before, "the run was moved aside"
    assert (out / "checkpoint").is_dir()


def test_on_off_arguments_of_load_policy_evaluate_and_predict_take_only_bools(finished_dqn_run: Path) -> None:
    with pytest.raises(janus.ConfigError, match=r"invalid trust: got 'yes' \(str\)"):
        janus.load_policy(finished_dqn_run, trust="yes")  # type: ignore[arg-type]
    policy = janus.load_policy(finished_dqn_run)
    with pytest.raises(janus.ConfigError, match=r"invalid deterministic: got 'no' \(str\)"):
        policy.predict(np.zeros(4), deterministic="no")  # type: ignore[arg-type]
    with pytest.raises(janus.ConfigError, match=r"invalid deterministic: got 0 \(int\)"):
        janus.evaluate(policy, episodes=1, deterministic=0)  # type: ignore[arg-type]
    assert policy.predict(np.zeros(4), deterministic=np.True_) in (0, 1)
