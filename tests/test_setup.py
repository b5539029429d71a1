"""The set-up tells the truth (issue 12 item 9): one documented variable picks the CPU build of torch."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def dry_run(tmp_path: Path, *assignments: str) -> str:
    """The commands ``make setup`` would run for a fresh venv (``make -n``: nothing is executed)."""
    venv = tmp_path / "venv"
    proc = subprocess.run(["make", "-n", "-C", str(ROOT), "setup", f"VENV={venv}", *assignments],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


@pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")
def test_torch_index_url_installs_torch_from_that_index_only(tmp_path: Path) -> None:
    url = "https://download.pytorch.org/whl/cpu"
    plain = [line for line in dry_run(tmp_path).splitlines() if "pip install" in line]
    chosen = [line for line in dry_run(tmp_path, f"TORCH_INDEX_URL={url}").splitlines() if "pip install" in line]
    torch_line = next(line for line in chosen if line.rstrip().endswith(" torch"))
    assert f"--index-url {url}" in torch_line and "-c constraints.txt" in torch_line
    assert not any("--index-url" in line for line in plain), "unset: pip's own configuration decides"
    assert not any("--index-url" in line for line in chosen if line is not torch_line), "only torch comes from it"
    assert "torch==2.13.0" in (ROOT / "constraints.txt").read_text()
    readme = (ROOT / "README.md").read_text()
    assert "TORCH_INDEX_URL" in readme and "CUDA" in readme
