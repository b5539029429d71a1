"""Hostile and extreme configuration inputs end in a janus error, quickly, with a short message."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
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


# ---- issue 35 item 10: clear errors, not tracebacks or silent exits ------------------------------
def _janus(*argv: str, cwd: Path, stdin: str | None = None, pythonpath: str = "") -> subprocess.CompletedProcess:
    """``janus ARGV`` in a real subprocess (its exit code and stderr are what a user sees)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (os.environ.get("PYTHONPATH", ""), pythonpath) if p)}
    return subprocess.run([sys.executable, "-m", "janus.cli", *argv], cwd=cwd, env=env, input=stdin,
                          capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("text, named", [
    ("seed: " + "1" * 5000, "4,300 digits"),  # Python's int-digit limit, hit inside PyYAML
    ("workload:\n  num_actors: " + "9" * 4301, "4,300 digits"),
    ("name: 2001-13-45", "month must be in 1..12"),  # a timestamp PyYAML cannot build
])
def test_a_config_value_yaml_cannot_build_is_a_config_error(tmp_path: Path, text: str, named: str) -> None:
    """A config integer over 4,300 digits (or a bad date) ended in a raw ValueError traceback."""
    path = tmp_path / "c.yaml"
    path.write_text(text + "\n")
    with pytest.raises(ConfigError, match=named) as exc:
        load_yaml(path)
    assert str(path) in str(exc.value) and len(str(exc.value)) < 400


def test_a_path_part_over_255_bytes_is_an_error_naming_the_flag(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """An --out (or --resume, --config, --checkpoint, --video) path with a part over the file system's
    255-byte limit ended in a raw OSError (ENAMETOOLONG) traceback."""
    long = str(tmp_path / ("a" * 300))
    for argv, flag in ((["train", "--out", long], "--out"), (["train", "--resume", long], "--resume"),
                       (["train", "--config", long + ".yaml"], "config file"),
                       (["rollout", "--checkpoint", long], "--checkpoint"),
                       (["rollout", "--checkpoint", str(tmp_path), "--video", long + ".gif"], "--video")):
        assert main(argv) == 2, argv
        err = capsys.readouterr().err
        assert f"invalid {flag}" in err and "File name too long" in err and "Traceback" not in err, err
        assert len(err) < 600, err


def test_config_from_a_fifo_or_stdin_is_read(tmp_path: Path) -> None:
    """``--config /dev/stdin`` and a named pipe said "config file not found"; they are read like a file."""
    out = tmp_path / "stdin-run"
    proc = _janus("train", "--config", "/dev/stdin", "--out", str(out), "--iterations", "2", "--quick",
                  cwd=tmp_path, stdin="seed: 7\nname: from-stdin\n")
    assert proc.returncode == 0, proc.stderr
    assert "seed: 7" in (out / "config.yaml").read_text()
    fifo = tmp_path / "config.fifo"
    os.mkfifo(fifo)
    writer = threading.Thread(target=lambda: fifo.write_text("seed: 9\n"), daemon=True)
    writer.start()
    cfg = load_yaml(fifo)
    writer.join(10)
    assert cfg.seed == 9


def test_an_env_module_that_exits_on_import_is_an_error(tmp_path: Path) -> None:
    """An --env module:Id whose module calls sys.exit(0) on import made janus exit 0 silently, having
    run nothing; it is an error (exit 2) naming the module and the exit."""
    (tmp_path / "quitter_env.py").write_text("import sys\nsys.exit(0)\n")
    proc = _janus("train", "--algo", "dqn", "--env", "quitter_env:Quit-v0", "--quick", "--out", str(tmp_path / "run"),
                  cwd=tmp_path, pythonpath=str(tmp_path))
    assert proc.returncode == 2, (proc.returncode, proc.stderr)
    assert "quitter_env" in proc.stderr and "sys.exit(0)" in proc.stderr
    assert not (tmp_path / "run" / "config.yaml").exists()


def test_env_kwargs_json_with_an_integer_over_the_digit_limit_is_a_short_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    """``--env_kwargs`` whose JSON holds an integer over 4,300 digits quoted all of it back."""
    with pytest.raises(SystemExit) as exc:
        main(["train", "--algo", "dqn", "--env_kwargs", '{"a": ' + "1" * 5000 + "}"])
    err = capsys.readouterr().err
    assert exc.value.code == 2 and "4300 digits" in err and "1" * 1000 not in err
