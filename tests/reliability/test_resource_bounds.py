"""Issue 46 item 7: a run's resources are bounded by this machine before anything starts (workers,
environments, processes, the replay's memory), each refused with one line naming the deliberate
override ``allow_oversubscribe`` (``--allow_oversubscribe``), with which the run starts as asked.

``num_workers=10**6`` passed validation, grew memory ~50 MB/s and was SIGKILLed with no message.
The machine's CPUs and free memory are set per test (:mod:`janus.config.resources` reads them), so the
bounds are the same on any machine.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import janus
from janus import cli
from janus.config import MAX_WORKERS, resources
from janus.errors import ConfigError

OVERRIDE = "--allow_oversubscribe"


@pytest.fixture
def two_cpus(monkeypatch: pytest.MonkeyPatch) -> None:
    """A machine of 2 usable CPUs: at most 8 workers, 16 processes, 512 environments."""
    monkeypatch.setattr(resources, "usable_cpus", lambda: 2)


def refused(tmp_path: Path, match: str, **flags: Any) -> str:
    """janus.train with ``flags`` is refused naming ``match`` and the override; nothing is written."""
    with pytest.raises(ConfigError, match=match) as caught:
        janus.train("dqn", env="CartPole-v1", out=tmp_path / "run", **flags)
    assert "allow_oversubscribe" in str(caught.value) and "\n" not in str(caught.value)
    assert not (tmp_path / "run").exists()
    return str(caught.value)


def test_a_million_workers_is_refused_whatever_the_override(tmp_path: Path) -> None:
    for override in (False, True):
        with pytest.raises(ConfigError, match=rf"^invalid num_actors: got 1000000; .*at most {MAX_WORKERS:,}"):
            janus.train("dqn", env="CartPole-v1", out=tmp_path / "run", num_workers=10**6, allow_oversubscribe=override)
    assert not (tmp_path / "run").exists()


@pytest.mark.usefixtures("two_cpus")
@pytest.mark.parametrize(("flags", "match"), [
    ({"num_workers": 9}, r"^invalid num_actors: got 9; accepted: at most 8 workers on this machine \(4 per CPU, 2 usable"),
    ({"envs_per_actor": 1025}, r"^invalid envs_per_actor: got 1,025; accepted: at most 1024 environments per worker"),
    ({"n_envs": 2000}, r"at most 1024 environments per worker"),  # SB3's name
    ({"num_workers": 4, "envs_per_actor": 200}, r"^4 workers x 200 environments = 800 .* at most 512 on this machine"),
    ({"backend": "local", "vector_env": "async", "envs_per_actor": 17}, r"^the run would start 17 processes .*at most 16"),
    ({"backend": "process", "num_workers": 3, "vector_env": "async", "envs_per_actor": 5},
     r"^the run would start 18 processes \(backend process"),
])
def test_workers_envs_and_processes_past_the_machine_are_refused(tmp_path: Path, flags: dict[str, Any], match: str) -> None:
    refused(tmp_path, match, **flags)


def test_a_replay_larger_than_the_free_memory_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """CartPole's observations are 16 bytes: 100,000 of them (1.5 MiB) do not fit in 1 MiB."""
    monkeypatch.setattr(resources, "available_memory", lambda: 2**20)
    text = refused(tmp_path, r"^invalid buffer_capacity: got 100,000; its observations alone take 2 MiB, more than the "
                             r"1 MiB", buffer_capacity=100_000)
    assert "smaller buffer_capacity" in text


def test_the_override_runs_past_the_bounds(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """9 workers on a "2-CPU" machine with a replay past its "free memory": refused, then run with the override."""
    monkeypatch.setattr(resources, "usable_cpus", lambda: 2)
    monkeypatch.setattr(resources, "available_memory", lambda: 2**20)
    flags: dict[str, Any] = {"num_workers": 9, "backend": "local", "total_env_steps": 1200, "learning_starts": 100}
    refused(tmp_path, r"at most 8 workers", **flags)
    run = janus.train("dqn", env="CartPole-v1", out=tmp_path / "run", allow_oversubscribe=True, **flags)
    assert run.status == "finished"
    assert run.result.counts["run_env_steps"] >= 1200
    assert json.loads((run.out / "results.json").read_text())["runs"][0]["config"]["workload"]["num_actors"] == 9


@pytest.mark.usefixtures("two_cpus")
def test_the_command_line_refuses_in_one_line_and_takes_the_flag(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    argv = ["train", "--algo", "dqn", "--env", "CartPole-v1", "--num_workers", "12", "--out", str(tmp_path / "run")]
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if "error:" in line]
    assert len(lines) == 1 and "Traceback" not in err, err
    assert lines[0].startswith("janus train: error: invalid --num_actors: got 12; accepted: at most 8 workers")
    assert OVERRIDE in lines[0]
    assert not (tmp_path / "run").exists()
    ran: list[Any] = []
    monkeypatch.setattr("janus.harness.commands._run_in", lambda *args, **kwargs: ran.append(args) or 0)
    for given, value in (([OVERRIDE], True), ([OVERRIDE, "true"], True), ([OVERRIDE, "0"], False)):
        parsed = cli.parse_args([*argv, *given])
        assert parsed.allow_oversubscribe is value
    assert cli.main([*argv, OVERRIDE]) == 0 and len(ran) == 1  # past the bounds: the run starts


def test_bounds_scale_with_the_machine(monkeypatch: pytest.MonkeyPatch) -> None:
    """The same configuration is refused on 2 CPUs and accepted on 16 (the bounds are per CPU)."""
    from janus.cli import configured

    cfg = configured(cli.parse_args(["train", "--algo", "dqn", "--env", "CartPole-v1", "--num_workers", "20"]))
    monkeypatch.setattr(resources, "usable_cpus", lambda: 2)
    with pytest.raises(ConfigError, match="at most 8 workers"):
        resources.check_resources(cfg)
    monkeypatch.setattr(resources, "usable_cpus", lambda: 16)
    resources.check_resources(cfg)


@pytest.mark.usefixtures("two_cpus")
def test_seed_runs_are_refused_before_any_seed_starts(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``--seeds`` (a ``janus train`` process per seed) was refused by each seed's process in turn, then exit 1."""
    out = tmp_path / "seeds"
    code = cli.main(["train", "--seeds", "0", "1", "--algo", "dqn", "--env", "CartPole-v1", "--num_workers", "12",
                     "--out", str(out)])
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err, err
    assert [line for line in err.splitlines() if "error:" in line] == [next(
        line for line in err.splitlines() if line.startswith("janus train: error: invalid --num_actors: got 12"))]
    with pytest.raises(ConfigError, match="at most 8 workers.*allow_oversubscribe"):
        janus.train("dqn", env="CartPole-v1", seeds=[0, 1], num_workers=12, out=out)
    assert not out.exists()


def test_a_network_larger_than_the_free_memory_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """--net_arch 2048 2048 on CartPole: ~16 MiB of weights a copy, the learner's and the worker's (32 MiB)
    do not fit in 16 MiB; the replay (1.5 MiB) does."""
    monkeypatch.setattr(resources, "available_memory", lambda: 16 * 2**20)
    text = refused(tmp_path, r"^the network's weights take at least 16 MiB a copy, 2 copies .* more than the 16 MiB "
                             r"available", net_arch=[2048, 2048], num_workers=1, buffer_capacity=100_000,
                   backend="local")
    assert "net_arch" in text
