"""The README's Python blocks run as pasted, verbatim: each as a script (no ``__main__`` guard),
fed on stdin (``python - <<EOF``) and as the cells of a Jupyter notebook, in that order in a fresh
folder (a later block may read what an earlier one wrote: ``load_policy("runs/dqn")``)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"
BLOCKS = re.findall(r"^```python\n(.*?)^```", README.read_text(encoding="utf-8"), re.S | re.M)
TIMEOUT_S = 240


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST")}
    env["PYTHONDONTWRITEBYTECODE"] = "1"  # as on the machines users paste into (Docker images set it)
    return env


def _check(proc: subprocess.CompletedProcess[str], what: str) -> None:
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, f"{what} failed (exit {proc.returncode}):\n{out[-4000:]}"
    assert "Traceback" not in out, f"{what} printed a traceback:\n{out[-4000:]}"


def test_the_readme_has_the_python_blocks_this_test_runs() -> None:
    assert len(BLOCKS) >= 3
    assert any("janus.train(" in b for b in BLOCKS) and any("load_policy(" in b for b in BLOCKS)
    trains = next(b for b in BLOCKS if "janus.train(" in b)
    assert "__main__" not in trains, "the first example must be what a user pastes: no guard"


@pytest.mark.parametrize("how", ["script", "stdin"])
def test_every_readme_block_runs_verbatim(how: str, tmp_path: Path) -> None:
    for i, block in enumerate(BLOCKS):
        if how == "script":
            script = tmp_path / f"block_{i}.py"
            script.write_text(block, encoding="utf-8")
            proc = subprocess.run([sys.executable, script.name], cwd=tmp_path, env=_env(), capture_output=True,
                                  text=True, timeout=TIMEOUT_S, stdin=subprocess.DEVNULL)
        else:
            proc = subprocess.run([sys.executable, "-"], cwd=tmp_path, env=_env(), input=block, capture_output=True,
                                  text=True, timeout=TIMEOUT_S)
        _check(proc, f"README block {i} ({how})")
    assert (tmp_path / "runs" / "dqn" / "results.json").is_file()
    assert not list((tmp_path / "runs").glob("dqn.old-*")), "a block ran its training twice (a worker re-ran the script)"


def test_every_readme_block_runs_in_a_jupyter_kernel(tmp_path: Path) -> None:
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    pytest.importorskip("ipykernel")
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(b) for b in BLOCKS])
    saved = dict(os.environ)
    os.environ["PYTHONDONTWRITEBYTECODE"] = "1"  # the kernel process inherits this process's environment
    try:
        client = nbclient.NotebookClient(notebook, timeout=TIMEOUT_S, kernel_name="python3",
                                         resources={"metadata": {"path": str(tmp_path)}})
        client.execute()
    finally:
        os.environ.clear()
        os.environ.update(saved)
    errors = [o for c in notebook.cells for o in c.get("outputs", []) if o.get("output_type") == "error"]
    assert not errors, errors
    assert (tmp_path / "runs" / "dqn" / "results.json").is_file()
