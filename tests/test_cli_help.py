"""``janus train --algo X --help``: X's flags first, with X's defaults and words; the full help
without ``--algo`` keeps every flag, and its text no longer limits environments or algorithms."""

from __future__ import annotations

import pytest

from janus import cli
from janus.cli.help import algo_asked, for_algorithm


def help_of(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    with pytest.raises(SystemExit) as exit_:
        cli.parse_args(["train", *argv, "--help"])
    assert exit_.value.code == 0
    return capsys.readouterr().out


def test_algo_help_shows_its_flags_with_its_defaults_first(capsys: pytest.CaptureFixture[str]) -> None:
    text = help_of(capsys, "--algo", "PPO")
    full = help_of(capsys)
    assert len(text.splitlines()) < len(full.splitlines()) / 2
    assert text.splitlines()[0] == "usage: janus train --algo ppo [FLAGS]"
    first = text.index("--algo ppo: its hyperparameters")
    assert first < text.index("--clip_coef") < text.index("--env ENV") < text.index("Other flags --algo ppo reads")
    clip = text[text.index("--clip_coef"):text.index("--norm_adv")]
    assert "Clip range of the probability ratio" in clip and "[default 0.2]" in clip, "ppo's own words and default"
    assert "APPO" not in clip and " for dqn" not in text
    for other in ("--learning_starts", "--iterations", "--init_alpha"):  # dqn's, the synthetic workload's, sac's
        assert other not in text and other in full
    assert "--overlap_collect" in text[text.index("Other flags"):], "the rest named, for janus train --help"


def test_dqn_help_holds_its_replay_settings(capsys: pytest.CaptureFixture[str]) -> None:
    text = help_of(capsys, "--algo=dqn")
    hyper = text[:text.index("the environment and the budget")]
    for flag in ("--learning_starts", "--batch_size", "--buffer_capacity", "--net_arch", "--activation"):
        assert flag in hyper
    assert "--clip_coef CLIP_COEF" not in text and "--critic_net_arch W" not in text


def test_full_help_has_no_stale_limits(capsys: pytest.CaptureFixture[str]) -> None:
    full = " ".join(help_of(capsys).split())
    assert "with a Box observation space" not in full
    assert "dqn/ppo/sac" not in full
    assert "--learning_starts" in full and "--clip_coef" in full and "Stable-Baselines3 names" in full


@pytest.mark.parametrize("argv, asked", [
    (["train", "--algo", "SAC", "-h"], "sac"),
    (["train", "--help", "--algo=impala"], "impala"),
    (["train", "--help"], None),
    (["train", "--algo", "ppo"], None),
    (["train", "--algo", "nosuch", "--help"], None),  # the parser's full help, then its error at run time
    (["compare", "--algo", "ppo", "--help"], None),
])
def test_which_calls_get_the_algorithm_page(argv: list[str], asked: str | None) -> None:
    assert algo_asked(argv) == asked


def test_a_flag_help_keeps_the_algorithm_default_only() -> None:
    text = "Discount factor. [default 0.99 for dqn; 0.98 for ppo] (dqn, ppo only)"
    assert for_algorithm(text, "ppo") == "Discount factor. [default 0.98]"
    assert for_algorithm("Seed. [default 0]", "ppo") == "Seed. [default 0]"
