"""Loading a run folder from elsewhere runs none of its code, and never loads into a wrong env or network.

Issue 46, items 4-6: ``janus.load_policy(folder)`` and ``janus rollout --checkpoint folder`` imported
the modules config.yaml names, so a folder beside the current one (``evilrun/evil.py``, a namespace
package from the cwd) ran on load; an oversized ``hidden`` allocated before any check; a NaN
observation gave DQN's action 0 without a word. The attacks run in this process, with ``''`` first on
sys.path and the cwd the attacker's folder, as ``python -c`` and the REPL have them.
"""

from __future__ import annotations

import shutil
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import yaml

import janus
from janus.cli import main
from janus.errors import ConfigError

EVIL = "from pathlib import Path\nPath({marker!r}).write_text('ran')\n"


@pytest.fixture
def hostile(tmp_path: Path, finished_dqn_run: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A copy of the session's DQN run as ``tmp/run`` with ``tmp/evilrun/evil.py`` beside it (it writes
    ``tmp/ran`` when imported), the cwd ``tmp`` and ``''`` first on sys.path; the modules it names
    are taken out of sys.modules after."""
    shutil.copytree(finished_dqn_run, tmp_path / "run")
    (tmp_path / "evilrun").mkdir()
    (tmp_path / "evilrun" / "evil.py").write_text(EVIL.format(marker=str(tmp_path / "ran")))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", ["", *sys.path])
    yield tmp_path / "run"
    for name in [n for n in sys.modules if n.split(".")[0] in ("evilrun", "colorsys", "evil")]:
        del sys.modules[name]


def name_in_config(run: Path, **workload: str) -> None:
    config = yaml.safe_load((run / "config.yaml").read_text())
    config["workload"].update(workload)
    (run / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))


@pytest.mark.parametrize("key, value", [("env", "evilrun.evil:CartPole-v1"), ("algo", "evilrun.evil:Algo")])
def test_a_module_beside_the_run_folder_is_not_imported_on_load(hostile: Path, key: str, value: str) -> None:
    name_in_config(hostile, **{key: value})
    with pytest.raises(ConfigError, match=r"names module 'evilrun\.evil' \(workload\.%s\).*trust=True" % key) as err:
        janus.load_policy(hostile)
    assert "\n" not in str(err.value)
    assert not (hostile.parent / "ran").exists() and "evilrun" not in sys.modules, "the folder's code ran"
    with pytest.raises(ConfigError):
        janus.evaluate(hostile, episodes=1)  # a folder given to evaluate is loaded the same way
    assert not (hostile.parent / "ran").exists()


def test_janus_rollout_refuses_in_one_line_and_trust_imports_it(hostile: Path, capsys: pytest.CaptureFixture[str]) -> None:
    name_in_config(hostile, env="evilrun.evil:CartPole-v1")
    assert main(["rollout", "--checkpoint", str(hostile), "--episodes", "1"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "janus rollout --trust" in err and "Traceback" not in err, err
    assert not (hostile.parent / "ran").exists()
    # the owner's deliberate choice: the module is imported (and the policy plays CartPole as before)
    assert main(["rollout", "--checkpoint", str(hostile), "--episodes", "1", "--trust"]) == 0
    assert (hostile.parent / "ran").read_text() == "ran"


def test_a_module_inside_the_run_folder_is_refused_with_the_folder_as_cwd(hostile: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    (hostile / "evil.py").write_text(EVIL.format(marker=str(hostile.parent / "ran")))
    name_in_config(hostile, env="evil:CartPole-v1")
    monkeypatch.chdir(hostile)
    with pytest.raises(ConfigError, match="names module 'evil'"):
        janus.load_policy(".")
    assert not (hostile.parent / "ran").exists()


def test_a_file_in_the_cwd_shadowing_an_installed_module_is_refused(hostile: Path) -> None:
    """colorsys is in the standard library; ``colorsys.py`` in the cwd is what the import would load."""
    assert "colorsys" not in sys.modules
    (hostile.parent / "colorsys.py").write_text(EVIL.format(marker=str(hostile.parent / "ran")))
    name_in_config(hostile, env="colorsys:CartPole-v1")
    with pytest.raises(ConfigError, match="not the installed module an import would load"):
        janus.load_policy(hostile)
    assert not (hostile.parent / "ran").exists()


def test_an_installed_module_loads_without_trust(hostile: Path) -> None:
    name_in_config(hostile, env="gymnasium.envs.classic_control:CartPole-v1")
    policy = janus.load_policy(hostile)
    assert policy.predict(np.zeros(4, dtype=np.float32)) in (0, 1)


@pytest.mark.parametrize("module", ["json", "sys", "collections.abc", "numpy", "gymnasium.envs.classic_control",
                                    "janus.envs.image_catch"])
def test_installed_modules_of_every_kind_qualify(hostile: Path, module: str) -> None:
    """The standard library (a file, a compiled-in module, a package's submodule), site-packages and
    janus itself (an editable install here), with '' and the attacker's folder on the path."""
    from janus.module_trust import not_installed

    assert not_installed(module, hostile) is None


def test_an_oversized_hidden_in_config_yaml_is_refused_before_it_is_allocated(
        tmp_path: Path, finished_dqn_run: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    run = tmp_path / "run"
    shutil.copytree(finished_dqn_run, run)
    config = yaml.safe_load((run / "config.yaml").read_text())
    config["algorithm"]["hidden"] = [100_000_000]  # 500 M parameters a layer: GiBs, were it built
    (run / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    with pytest.raises(ConfigError, match=r"hidden.*parameters.*JANUS_MAX_NETWORK_PARAMS"):
        janus.load_policy(run)
    assert main(["rollout", "--checkpoint", str(run), "--episodes", "1"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "JANUS_MAX_NETWORK_PARAMS" in err, err
    # the limit is the variable's: the run's own network (64, 64) is refused under a limit of 1000
    monkeypatch.setenv("JANUS_MAX_NETWORK_PARAMS", "1000")
    with pytest.raises(ConfigError, match="over the limit of 1,000"):
        janus.load_policy(finished_dqn_run)


@pytest.fixture(scope="module")
def ppo_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny PPO run on Pendulum (Box actions): PPO's predict raised a torch error on NaN."""
    out = tmp_path_factory.mktemp("ppo") / "run"
    janus.train("ppo", env="Pendulum-v1", total_env_steps=64, num_actors=1, envs_per_actor=2, rollout_length=16,
                backend="local", out=out)
    return out


@pytest.mark.parametrize("algo", ["dqn", "ppo"])
@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_predict_of_a_non_finite_observation_is_a_clear_error(finished_dqn_run: Path, ppo_run: Path, algo: str,
                                                              bad: float) -> None:
    policy = janus.load_policy(finished_dqn_run if algo == "dqn" else ppo_run)
    obs = np.zeros((3, *policy.observation_space.shape), dtype=np.float32)
    obs[1, -1] = bad
    with pytest.raises(ValueError, match=r"^predict: observation 1 of 3 holds NaN or an infinity") as err:
        policy.predict(obs)
    assert isinstance(err.value, ConfigError) and "\n" not in str(err.value)
    with pytest.raises(ValueError, match=r"observation 0 of 1"):
        policy.predict(obs[1], deterministic=False)


def test_an_oversized_network_asked_for_by_a_new_run_is_refused_and_leaves_nothing(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"^network too large: hidden widths \[50000, 50000\].*2,500,350,001 parameters"):
        janus.train("ppo", env="CartPole-v1", net_arch=[50_000, 50_000], total_env_steps=64, backend="local",
                    out=tmp_path / "run")
    assert not list((tmp_path / "run").rglob("*")), "nothing is left that blocks a rerun"


ENV_MODULE = '''
import gymnasium as gym
gym.register("JanusTrustCartPole-v0", entry_point="gymnasium.envs.classic_control:CartPoleEnv", max_episode_steps=50)
'''


def test_a_run_trained_from_a_module_in_the_cwd_is_the_callers_own(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Training from one's own folder is not loading someone else's: ``janus.train(...).policy`` imports
    as training did; loading the same folder afresh asks for ``trust``."""
    (tmp_path / "my_trust_envs.py").write_text(ENV_MODULE)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", ["", *sys.path])
    monkeypatch.delitem(sys.modules, "my_trust_envs", raising=False)
    run = janus.train("dqn", env="my_trust_envs:JanusTrustCartPole-v0", total_env_steps=200, learning_starts=64,
                      backend="local", out=tmp_path / "runs" / "mine")
    assert run.policy.predict(np.zeros(4, dtype=np.float32)) in (0, 1)
    with pytest.raises(ConfigError, match="names module 'my_trust_envs'"):
        janus.load_policy(run.out)
    assert janus.load_policy(run.out, trust=True).cfg.workload.env == "my_trust_envs:JanusTrustCartPole-v0"
