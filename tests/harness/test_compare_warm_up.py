"""compare and eval, --quick included, load (or compile) the replay kernels before the first
measured configuration, so that first use is charged to none of them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import janus.harness.commands as commands
from janus.cli import main

ROOT = Path(__file__).resolve().parents[2]
TINY = ["--iterations", "3", "--config", str(ROOT / "configs" / "default.yaml")]


def _loaded() -> set[tuple[str, str, Any]]:
    """Every (module, kernel, signature) loaded in this process so far."""
    import janus.buffer.kernels.frames as fk
    import janus.buffer.kernels.replay as k

    out = set()
    for module in (k, fk):
        for name, thing in vars(module).items():
            for sig in getattr(thing, "overloads", {}):
                out.add((module.__name__, name, sig))
    return out


@pytest.mark.parametrize("command", [["compare"], ["eval", "--sweep", "overlap"]])
def test_quick_runs_load_every_kernel_before_the_first_measured_configuration(
        command: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    real = commands.run_configuration
    seen: list[tuple[bool, set[tuple[str, str, Any]]]] = []  # (measured?, loaded at its start) per run

    def run(cfg: Any, progress: Any, observer: Any) -> Any:
        seen.append((progress is not None, _loaded()))
        return real(cfg, progress, observer)

    monkeypatch.setattr(commands, "run_configuration", run)
    assert main([*command, "--quick", "--out", str(tmp_path / "out"), *TINY]) == 0
    assert "warm-up: one tiny run of the first configuration" in capsys.readouterr().out
    assert not seen[0][0], "the first run is the unmeasured warm-up"
    measured = [loaded for is_measured, loaded in seen if is_measured]
    assert len(measured) >= 2
    assert measured[0], "the warm-up loaded the kernels"
    assert _loaded() == measured[0], "a measured configuration loaded or compiled a kernel the warm-up had not"
