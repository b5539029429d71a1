"""Issue 12 items 4, 5, 10: every flag acts or is an error naming it; hyperparameters from the CLI;
--version, ``python -m janus``, ``src/main.py`` without the venv; custom environments and env kwargs.

Errors are checked through real subprocesses where the issue names a command line; values that
need a configuration (defaults, network sizes) are checked on what :func:`config_from_args` builds.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import textwrap
from concurrent.futures import ThreadPoolExecutor
from dataclasses import fields
from importlib import metadata
from pathlib import Path

import pytest
import yaml

from janus import cli
from janus.algorithms.base import algorithm
from janus.algorithms.gym_algorithm import MAPPED, NOT_FLAGS
from janus.cli import parser as cli_parser
from janus.config import resolve, validate
from janus.config.flags import close_names, hyperparameters, value_of
from janus.errors import JanusError

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src"


def janus(*args: str, env: dict[str, str] | None = None, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """``python -m janus ARGS`` on this checkout's code."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(SRC), *(env or {}).get("PYTHONPATH", "").split(os.pathsep)]),
           **{k: v for k, v in (env or {}).items() if k != "PYTHONPATH"}, "OMP_NUM_THREADS": "1"}
    return subprocess.run([sys.executable, "-m", "janus", *args], capture_output=True, text=True, timeout=timeout,
                          cwd=ROOT, env=env)


def config(*argv: str):
    return cli.config_from_args(cli.parse_args(list(argv)))


# ---- item 1: no prefix matching ------------------------------------------------------------------
@pytest.mark.parametrize("flag", [["--envs", "3"], ["--hidden", "64"]])
def test_abbreviated_flags_are_errors_naming_them(flag: list[str]) -> None:
    proc = janus("train", "--quick", *flag)
    assert proc.returncode == 2
    assert f"janus train: error: unrecognized arguments: {' '.join(flag)}" in proc.stderr


def test_an_unknown_flag_suggests_the_flags_that_hold_its_name_or_look_like_it(capsys: pytest.CaptureFixture[str]) -> None:
    known = ["--total_env_steps", "--exploration_steps", "--seed", "--n_step", "--eval_interval_steps", "--lr"]
    assert close_names("--steps", known) == ["--total_env_steps", "--exploration_steps", "--eval_interval_steps"]
    assert close_names("--seeed=3", known) == ["--seed"]  # a value glued on does not hide it
    assert close_names("--ep", known) == []  # too short a word to search for (in "--exploration_steps")
    assert close_names("--zzz", known) == []
    with pytest.raises(SystemExit):
        cli.parse_args(["train", "--steps", "6000"])
    assert "unrecognized arguments: --steps 6000 (did you mean --total_env_steps or" in capsys.readouterr().err


# ---- item 2: flags that do not apply are errors; none is silently ignored ---------------------------
def test_prioritized_with_ppo_names_the_flag() -> None:
    proc = janus("train", "--algo", "ppo", "--prioritized", "--quick")
    assert proc.returncode == 2
    assert "janus train: error: --prioritized does not apply to --algo ppo" in proc.stderr
    assert "algorithm.prioritized" not in proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.parametrize("argv,flag", [
    (["--algo", "dqn", "--iterations", "5"], "--iterations"),
    (["--algo", "dqn", "--num_epochs", "3"], "--num_epochs"),
    (["--algo", "ppo", "--learning_starts", "64"], "--learning_starts"),  # (--batch_size: SB3's minibatch, converted)
    (["--algo", "ppo", "--n_step", "5"], "--n_step"),
    (["--algo", "synthetic", "--env", "CartPole-v1"], "--env"),
    (["--algo", "synthetic", "--lr", "0.1"], "--lr"),
    (["--algo", "dqn", "--obs_shape", "8"], "--obs_shape"),
    (["--address", "auto"], "--address"),
    # dqn/sac publish once per round of pieces, ppo once per rollout: the flag changed nothing
    (["--algo", "dqn", "--samples_per_param_load", "2"], "--samples_per_param_load"),
    (["--algo", "sac", "--samples_per_param_load", "2"], "--samples_per_param_load"),
])
def test_flags_the_run_does_not_read_are_errors(argv: list[str], flag: str, capsys: pytest.CaptureFixture[str],
                                                tmp_path: Path) -> None:
    assert cli.main(["train", *argv, "--out", str(tmp_path / "run")]) == 2
    assert f"janus train: error: {flag} " in capsys.readouterr().err
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("argv,flags", [
    (["compare", "--placement", "cpu_pageable"], "--placement"),
    (["compare", "--overlap_collect", "0", "--overlap_select", "1"], "--overlap_collect, --overlap_select"),
    (["eval", "--sweep", "placement", "--placement", "cpu_pageable"], "--placement"),
    (["eval", "--sweep", "granularity", "--g_select", "2"], "--g_select"),
    (["eval", "--sweep", "overlap", "--overlap_select", "0"], "--overlap_select"),
])
def test_flags_for_the_knob_a_command_sets_are_errors(argv: list[str], flags: str, capsys: pytest.CaptureFixture[str],
                                                      tmp_path: Path) -> None:
    """compare and eval --sweep set these knobs per configuration: the flag would be silently ignored."""
    assert cli.main([*argv, "--quick", "--out", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err
    assert f"janus {argv[0]}: error: {flags}: janus {argv[0]}" in err and "per configuration" in err
    assert not (tmp_path / "run").exists()


def test_flags_for_the_knobs_a_sweep_leaves_alone_still_apply() -> None:
    swept = {c.name: c for c in resolve_all_of("eval", "--sweep", "granularity", "--placement", "cpu_pageable",
                                               "--overlap_select", "0")}
    assert {c.janus.placement for c in swept.values()} == {"cpu_pageable"}
    assert {c.janus.overlap_select for c in swept.values()} == {0}
    assert [c.janus.g_select for c in swept.values()] == [1, 2, 4, 8, 16]


def test_compare_takes_one_granularity_for_both_ends(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    for flag in ("--g_collect", "--g_select"):  # either flag alone sets both (the YAML's other value is not kept)
        runs = {c.name: c.janus for c in resolve_all_of("compare", flag, "2")}
        assert (runs["janus"].g_collect, runs["janus"].g_select) == (2, 2)
        assert (runs["granularity"].g_collect, runs["granularity"].g_select) == (2, 2)
        assert (runs["baseline"].g_collect, runs["baseline"].g_select) == (1, 1)
    on_policy = {c.name: c.janus for c in resolve_all_of("compare", "--algo", "ppo", "--g_collect", "1/4", "--g_select", "0.25")}
    assert on_policy["janus"].g_collect == on_policy["janus"].g_select == 0.25  # the same fraction, written two ways
    assert cli.main(["compare", "--g_collect", "2", "--g_select", "4", "--out", str(tmp_path / "run")]) == 2
    assert "--g_collect 2 and --g_select 4: janus compare" in capsys.readouterr().err


def resolve_all_of(*argv: str) -> list:
    """The resolved configurations a compare/eval command line runs (no run starts)."""
    from janus.harness.commands import plan

    args = cli.parse_args(list(argv))
    return plan(cli.request_from_args(args), cli.config_from_args(args))[0]


def test_env_with_a_synthetic_config_file_is_an_error() -> None:
    proc = janus("train", "--config", str(ROOT / "configs" / "default.yaml"), "--env", "CartPole-v1", "--quick")
    assert proc.returncode == 2
    assert "--env does not apply to --algo synthetic" in proc.stderr and "--algo dqn or --algo ppo" in proc.stderr


@pytest.mark.parametrize("env,algo", [("CartPole-v1", "ppo"), ("Acrobot-v1", "ppo"), ("Pendulum-v1", "sac"),
                                      ("janus/ImageCatch-v0", "dqn")])  # no family: Discrete -> dqn
def test_env_without_algo_picks_by_action_space(env: str, algo: str, monkeypatch: pytest.MonkeyPatch,
                                                capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    monkeypatch.chdir(tmp_path)  # any folder: the packaged default (the synthetic workload) is read
    cfg = config("train", "--env", env)
    assert cfg.workload.algo == algo and cfg.workload.env == env
    assert validate(cfg).janus.is_on_policy is algorithm(algo).on_policy, "the algorithm states it, the data path follows"
    assert f"running --algo {algo}" in capsys.readouterr().out


def _parameters(module) -> int:
    return sum(p.numel() for p in module.parameters())


def test_hidden_size_and_num_layers_change_the_dqn_network() -> None:
    cfg = resolve(config("train", "--algo", "dqn", "--hidden_size", "32", "--num_layers", "3"))
    learner = algorithm("dqn").learner(cfg).learner
    actor = algorithm("dqn").actor(cfg, 0).actor
    obs, actions = 4, 2  # CartPole-v1
    expected = (obs * 32 + 32) + 2 * (32 * 32 + 32) + (32 * actions + actions)
    assert _parameters(learner.q) == _parameters(actor.net) == expected
    actor.close()


def test_hidden_size_changes_the_ppo_networks_keeping_the_preset_depth() -> None:
    cfg = resolve(config("train", "--algo", "ppo", "--hidden_size", "16"))
    agent = algorithm("ppo").learner(cfg).learner.agent
    obs, actions = 4, 2
    critic = (obs * 16 + 16) + (16 * 16 + 16) + (16 + 1)
    policy = (obs * 16 + 16) + (16 * 16 + 16) + (16 * actions + actions)
    assert _parameters(agent) == critic + policy
    assert cfg.workload.hidden_size == 16, "config.yaml records the network it ran"


@pytest.mark.parametrize("value", ["0", "2.5"])
def test_num_layers_out_of_range_names_the_flag(value: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["train", "--algo", "dqn", "--num_layers", value]) == 2
    assert "invalid --num_layers" in capsys.readouterr().err


@pytest.mark.parametrize("argv, named", [
    (["--batch_size", "0"], "--batch_size"),  # a data-path setting (batch_size in a config file)
    (["--num_actors", "0"], "--num_actors"),  # workload.num_actors
    (["--placement", "gpu"], "--placement"),
    (["--max_in_flight", "0"], "--max_in_flight"),  # runtime.max_in_flight
    (["--algo", "dqn", "--buffer_capacity", "0"], "--buffer_capacity"),
])
def test_an_invalid_flag_value_is_named_by_the_flag(argv: list[str], named: str, capsys: pytest.CaptureFixture[str],
                                                    tmp_path: Path) -> None:
    assert cli.main(["train", *argv, "--out", str(tmp_path / "run")]) == 2
    assert f"janus train: error: invalid {named}: got " in capsys.readouterr().err


def test_an_invalid_config_file_value_keeps_its_key_beside_typed_flags(capsys: pytest.CaptureFixture[str],
                                                                        tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("workload: {num_actors: 0}\n")
    assert cli.main(["train", "--config", str(path), "--batch_size", "64", "--out", str(tmp_path / "run")]) == 2
    assert "janus train: error: invalid workload.num_actors: got 0" in capsys.readouterr().err


def test_compare_backend_ray_hands_ray_to_the_runtime(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Every configuration of ``compare --backend ray`` runs on the Ray backend (not a local run)."""
    from janus.runtime import synchronous as sync_loop
    from janus.runtime.backends.ray import RayBackend
    from janus.runtime.wiring import make_backend

    ran: list[str] = []

    def fake_run_runtime(cfg, progress, observer=None):
        ran.append(type(make_backend(cfg)).__name__)
        raise JanusError("stop before starting Ray")

    monkeypatch.setattr(sync_loop, "run_runtime", fake_run_runtime)
    assert cli.main(["compare", "--quick", "--backend", "ray", "--out", str(tmp_path / "out")]) == 2
    assert ran == [RayBackend.__name__]


def test_quick_keeps_the_budget_flags_the_user_typed() -> None:
    assert config("train", "--quick", "--iterations", "9").workload.iterations == 9
    assert config("train", "--quick").workload.iterations == 6
    assert config("train", "--quick", "--algo", "ppo", "--total_env_steps", "9000").workload.total_env_steps == 9000
    assert config("train", "--quick", "--algo", "ppo").workload.total_env_steps == algorithm("ppo").quick_env_steps


# ---- item 3: help shows a sentence per flag and the defaults a run resolves --------------------------
def _subcommands() -> dict[str, argparse.ArgumentParser]:
    parser = cli.build_parser()
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(action.choices)


def test_every_option_of_every_command_has_help_text() -> None:
    for name, parser in {"janus": cli.build_parser(), **_subcommands()}.items():
        for action in parser._actions:
            if action.option_strings and action.dest != "help":
                text = action.help or ""
                if text == argparse.SUPPRESS:  # an SB3 name: listed, with its janus flag, in its group's text
                    group = next(g for g in parser._action_groups if action in g._group_actions)
                    assert action.option_strings[0].lstrip("-") in (group.description or ""), action.option_strings
                    continue
                assert len(text.split()) >= 2, f"janus {name} {action.option_strings[0]} has no help text"


def test_help_shows_the_defaults_a_run_resolves(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.chdir(tmp_path)  # not the repository: the packaged default is read from any folder
    defaults = cli_parser.flag_defaults()
    builtin = ("dqn", "ppo", "sac", "impala", "appo", "r2d2")
    assert defaults["overlap_collect"] == dict.fromkeys(("synthetic", *builtin), 1), "the default config runs 1, not 0"
    assert defaults["g_collect"]["synthetic"] == 4
    helps = {a.dest: a.help for a in _subcommands()["train"]._actions}
    # validated (what the run gets, before `auto` placements resolve for this machine)
    runs = {"synthetic": validate(config("train")), **{a: validate(config("train", "--algo", a)) for a in builtin}}
    for flag, by_algo in defaults.items():
        for algo_name, value in by_algo.items():
            if flag == "preset":  # the request (auto); a run records the family it resolved to (test_presets.py)
                assert value == "auto" and runs[algo_name].workload.preset in ("classic_control", "none")
                assert cli_parser.shown(value) in helps[flag]
                continue
            assert value_of(runs[algo_name], flag) == value, f"--{flag} for {algo_name}"
            assert cli_parser.shown(value) in helps[flag], f"--{flag}: help does not show {value!r}"


def test_help_of_a_subcommand_runs() -> None:
    proc = janus("train", "--help")
    assert proc.returncode == 0
    assert "--overlap_collect" in proc.stdout and "--lr" in proc.stdout and "--env_kwargs" in proc.stdout


# ---- item 4: hyperparameters from the command line ------------------------------------------------
def test_hyperparameter_flags_are_generated_from_the_algorithms_fields() -> None:
    for name in ("dqn", "ppo"):
        declared = {f.name for f in fields(algorithm(name).config_class)} - set(MAPPED) - NOT_FLAGS
        assert declared == {k for k, owners in hyperparameters().items() if name in owners} == set(algorithm(name).flags())


def test_hyperparameter_flags_reach_the_learner() -> None:
    cfg = resolve(config("train", "--algo", "dqn", "--lr", "1e-3", "--gamma", "0.9", "--target_update_interval", "7",
                         "--eps_end", "0.1", "--prioritized"))
    learner = algorithm("dqn").learner(cfg).learner
    assert learner.opt.param_groups[0]["lr"] == pytest.approx(1e-3)
    assert (learner.cfg.gamma, learner.cfg.target_update_interval, learner.cfg.eps_end) == (0.9, 7, 0.1)
    assert algorithm("dqn").buffer_spec(cfg).sampler == "prioritized"
    ppo = algorithm("ppo").config(resolve(config("train", "--algo", "ppo", "--clip_coef", "0.1", "--anneal_lr", "false")))
    assert (ppo.clip_coef, ppo.anneal_lr) == (0.1, False)


def test_bad_hyperparameter_value_names_the_flag() -> None:
    with ThreadPoolExecutor(2) as pool:  # two independent commands, each refused before any work: at once
        gae_lambda = pool.submit(janus, "train", "--algo", "ppo", "--gae_lambda", "2")
        n_step = pool.submit(janus, "train", "--algo", "dqn", "--n_step", "1e3")
    proc = gae_lambda.result()
    assert proc.returncode == 2 and "invalid --gae_lambda" in proc.stderr
    proc = n_step.result()
    assert proc.returncode == 2 and "--n_step" in proc.stderr


# ---- item 5: --version, python -m janus, src/main.py without the venv ---------------------------------
def test_version_from_package_metadata() -> None:
    proc = janus("--version")
    assert proc.returncode == 0
    assert proc.stdout.strip() == f"janus {metadata.version('janus-rl')}"


def test_main_py_without_the_dependencies_says_what_to_run() -> None:
    # -S: no site-packages, like a system python outside the venv
    proc = subprocess.run([sys.executable, "-S", str(SRC / "main.py"), "--version"], capture_output=True, text=True,
                          timeout=60, cwd=ROOT)
    assert proc.returncode == 2
    assert "janus: error:" in proc.stderr and "cannot import" in proc.stderr and "Traceback" not in proc.stderr
    assert ".venv/bin/python" in proc.stderr or "pip install -e" in proc.stderr


# ---- item 6: custom environments and env kwargs --------------------------------------------------
TINY_ENV = textwrap.dedent('''
    import gymnasium as gym
    import numpy as np


    class Endless(gym.Env):
        """Never ends by itself: only max_episode_steps (an env kwarg) cuts its episodes."""

        observation_space = gym.spaces.Box(-1.0, 1.0, (3,), np.float32)
        action_space = gym.spaces.Discrete(2)

        def reset(self, seed=None, options=None):
            super().reset(seed=seed)
            return np.zeros(3, np.float32), {}

        def step(self, action):
            return np.full(3, 0.5, np.float32), float(action), False, False, {}


    gym.register("Endless-v0", entry_point=Endless)
''')


def test_custom_env_module_and_env_kwargs_through_train_and_rollout(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    """A user's env module on the import path (PYTHONPATH for a user; sys.path here: the commands run
    through cli.main in this process, which saves two interpreter and torch start-ups, ~6 s)."""
    (tmp_path / "tiny_envs.py").write_text(TINY_ENV)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "tiny_envs", raising=False)
    run = tmp_path / "run"
    code = cli.main(["train", "--env", "tiny_envs:Endless-v0", "--env_kwargs", '{"max_episode_steps": 5}',
                     "--total_env_steps", "600", "--learning_starts", "256", "--out", str(run)])
    proc = capsys.readouterr()
    assert code == 0, proc.out[-2000:] + proc.err[-2000:]
    assert "running --algo dqn" in proc.out
    saved = yaml.safe_load((run / "config.yaml").read_text())["workload"]
    assert saved["env"] == "tiny_envs:Endless-v0" and saved["env_kwargs"] == {"max_episode_steps": 5}
    (result,) = json.loads((run / "results.json").read_text())["runs"]
    assert result["episodes"] >= 40, "every episode cut at 5 steps by the env kwarg (none end otherwise)"
    # tiny_envs.py sits beside the run folder, not installed: loading imports it only when trusted
    code = cli.main(["rollout", "--checkpoint", str(run), "--episodes", "2", "--trust"])  # endless without the kwarg
    proc = capsys.readouterr()
    assert code == 0, proc.err[-2000:]
    best = float(re.search(r"max (\S+)\)", proc.out)[1])
    assert 0 <= best <= 5, "rollout episodes are cut at 5 steps too (reward <= 1 per step)"


@pytest.mark.parametrize("argv,expected", [
    (["--env", "no_such_module_xyz:Foo-v0"], "invalid --env: got 'no_such_module_xyz:Foo-v0', but module"),
    (["--env", "json:Foo-v0"], "module 'json' did not register 'Foo-v0'"),
    (["--env", "CartPole-v1", "--env_kwargs", '{"no_such_kwarg": 1}'], "invalid --env_kwargs"),
    (["--env", "CartPole-v1", "--env_kwargs", "[1, 2]"], "--env_kwargs: expected a JSON object"),
])
def test_bad_custom_env_or_kwargs_name_the_flag(argv: list[str], expected: str, tmp_path: Path) -> None:
    proc = janus("train", "--algo", "ppo", *argv, "--quick", "--out", str(tmp_path / "run"))
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert expected in proc.stderr and "Traceback" not in proc.stderr
    assert not (tmp_path / "run").exists()


# ---- config values of the wrong type, names, refused runs -----------------------------------------
@pytest.mark.parametrize("yaml_text, match", [
    ("workload: 5\n", "invalid workload: got 5"),
    ("workload: {algo: dqn, rollout_length: x}\n", "invalid workload.rollout_length: got 'x'"),
    ("workload: {algo: dqn, env_kwargs: 5}\n", "invalid workload.env_kwargs: got 5"),
    ("name: [1, 2]\nworkload: {algo: dqn}\n", "invalid name: got"),
])
def test_config_values_of_the_wrong_type_are_errors_naming_the_key(tmp_path: Path, yaml_text: str, match: str,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(yaml_text)
    assert cli.main(["train", "--config", str(path), "--out", str(tmp_path / "run")]) == 2
    assert match in capsys.readouterr().err
    assert not (tmp_path / "run").exists()


def test_the_yaml_name_names_the_run_and_a_refused_run_leaves_its_folder_usable(tmp_path: Path,
                                                                               capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "run"
    # refused while its settings are checked, before any work: in this process (no start-up to pay)
    code = cli.main(["train", "--algo", "dqn", "--total_env_steps", "256", "--out", str(out)])
    err = capsys.readouterr().err
    assert code == 2 and "can never sample" in err and "workload.total_env_steps" in err, err[-2000:]
    assert not (out / "config.yaml").exists()
    path = tmp_path / "c.yaml"
    path.write_text("name: cartpole-dqn\nworkload: {algo: dqn, total_env_steps: 1000}\n")
    ran = janus("train", "--config", str(path), "--out", str(out))  # the same --out, now accepted
    assert ran.returncode == 0, ran.stderr
    assert "name: cartpole-dqn" in (out / "config.yaml").read_text()
    assert json.loads((out / "results.json").read_text())["runs"][0]["name"] == "cartpole-dqn"


# ---- a diverging learner is an error, not a finished run on NaN parameters ---------------------------
def test_a_learner_whose_loss_becomes_nan_stops_the_run_naming_the_cause(tmp_path: Path) -> None:
    """Before, --lr 1e30 trained to its budget on NaN parameters, wrote results and exited 0."""
    proc = janus("train", "--algo", "dqn", "--lr", "1e30", "--total_env_steps", "3000", "--out", str(tmp_path / "run"))
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert re.search(r"TrainingDiverged: training diverged: the learner's loss is (nan|inf) at update \d", proc.stderr), \
        proc.stderr[-2000:]
    assert "--lr" in proc.stderr and "Traceback" not in proc.stderr
    assert not (tmp_path / "run" / "results.json").exists()


def test_only_non_finite_losses_count_as_divergence() -> None:
    from janus.errors import TrainingDiverged
    from janus.runtime.trainer import check_finite_losses

    check_finite_losses({"loss": 1e30, "q_mean": float("nan"), "explained_variance": float("nan")}, 1)  # not losses
    for name in ("loss", "q_loss", "value_loss"):
        with pytest.raises(TrainingDiverged, match=f"{name} is inf at update 7"):
            check_finite_losses({name: float("inf")}, 7)
