"""Hostile and extreme configuration inputs end in a janus error, quickly, with a short message."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from janus.cli import main
from janus.config import MAX_CONFIG_BYTES, from_dict, load_yaml, resolve
from janus.errors import ConfigError, invalid

BOMB = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{chr(98 + i)}: &{chr(98 + i)} [*{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, "
    f"*{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}]\n" for i in range(8)) + "workload: *i\n"


def test_yaml_alias_bomb_is_refused_before_it_expands(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "bomb.yaml"
    path.write_text(BOMB)  # 9**9 (387 million) elements once expanded
    start = time.monotonic()
    with pytest.raises(ConfigError, match="aliases"):
        load_yaml(path)
    assert main(["train", "--config", str(path)]) == 2
    err = capsys.readouterr().err
    assert "aliases" in err and len(err) < 500
    assert time.monotonic() - start < 5


def test_oversized_config_file_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "big.yaml"
    path.write_text("name: " + "x" * MAX_CONFIG_BYTES + "\n")
    with pytest.raises(ConfigError, match="at most"):
        load_yaml(path)


@pytest.mark.parametrize("data, field", [
    ({"seed": 2**64}, "seed"), ({"seed": -1}, "seed"), ({"seed": 10**5000}, "seed"),
    ({"buffer_capacity": 2**62}, "buffer_capacity"), ({"batch_size": 10**30}, "batch_size"),
    ({"workload": {"num_actors": 2**45}}, "workload.num_actors"),
])
def test_integers_past_what_the_code_can_hold_are_refused_with_a_bounded_message(data: dict, field: str) -> None:
    start = time.monotonic()
    with pytest.raises(ConfigError) as exc:
        resolve(from_dict(data))
    text = str(exc.value)
    assert field in text and len(text) < 400, text
    assert time.monotonic() - start < 2


def test_messages_quote_at_most_a_short_piece_of_a_huge_value() -> None:
    err = invalid("name", "y" * 100_000, "a short name")
    assert len(str(err)) < 300 and "100,002 characters" in str(err)  # the repr, quotes included
    assert "bits" in str(invalid("seed", 7**100_000, "an integer"))


def test_priorities_and_alpha_that_would_overflow_the_sum_tree_are_refused() -> None:
    """Issue 13 item 8: a sum of p**alpha past float64 made sampling return one item with NaN weights."""
    import torch

    from janus import ExperienceBuffer
    from janus.errors import BufferInputError

    with pytest.raises(BufferInputError, match="alpha"):
        ExperienceBuffer(8, "cpu_pageable", "prioritized", seed=0, alpha=1e300)
    buf = ExperienceBuffer(8, "cpu_pageable", "prioritized", seed=0, alpha=1.0)
    buf.extend({"x": torch.arange(8.0)})
    before = buf.state_dict()
    with pytest.raises(BufferInputError, match="priorities too large"):
        buf.update_priority(torch.arange(8), torch.full((8,), 1e308, dtype=torch.float64))
    after = buf.state_dict()
    assert torch.equal(before["sampler_state"]["rng_state"], after["sampler_state"]["rng_state"])
    assert buf.update_priority(torch.arange(8), torch.full((8,), 1e200, dtype=torch.float64)) == 8  # large but safe
    batch = buf.sample(64)
    assert torch.isfinite(batch["weight"]).all() and len(set(batch["index"].tolist())) > 1
