"""docs/design.md's Layout section is the tree of src/janus as ``scripts/layout.py`` writes it: it
cannot go stale, and every module says what it is."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "scripts" / "layout.py"


def load_script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("janus_layout_script", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


layout = load_script()


def section_of(doc: str) -> str:
    return doc[doc.index(layout.BEGIN):doc.index(layout.END) + len(layout.END)]


def test_the_layout_section_is_the_tree_of_src_janus() -> None:
    written = section_of(layout.DOC.read_text(encoding="utf-8"))
    assert written == layout.layout(), (
        f"docs/design.md's Layout section is not the layout of src/janus: run `{layout.COMMAND}` and commit the change")


def test_it_lists_every_package_and_module_and_each_says_what_it_is() -> None:
    section = layout.layout()
    source = REPO / "src" / "janus"
    for path in sorted(source.rglob("*.py")):
        depth = len(path.relative_to(source).parts) - (1 if path.name == "__init__.py" else 0)
        name = path.parent.name + "/" if path.name == "__init__.py" else path.name
        line = "src/janus/" if path == source / "__init__.py" else " " * (2 * depth) + name
        assert any(row == line or row.startswith(line + " ") for row in section.splitlines()), \
            f"{path.relative_to(REPO)} is not listed"
    missing = [row.strip() for row in section.splitlines() if layout.NO_DOCSTRING in row]
    assert not missing, f"modules without a docstring (its first sentence says what the module is): {missing}"


def test_the_first_sentence_is_taken_whole_and_markup_is_dropped(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text('"""The replay, e.g. of :class:`~janus.buffer.Thing` (Schaul et al. 2016) and\n'
                      '``janus.train``. More text.\n\nAnother paragraph."""\n')
    assert layout.summary(module) == "The replay, e.g. of `Thing` (Schaul et al. 2016) and `janus.train`."
    module.write_text("x = 1\n")
    assert layout.summary(module) == layout.NO_DOCSTRING


def test_check_fails_on_a_stale_section_and_the_script_rewrites_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    doc = tmp_path / "design.md"
    doc.write_text(f"# Notes\n\n## Layout\n\n{layout.BEGIN}\nold/ a module that is gone\n{layout.END}\n\n## Next\n")
    monkeypatch.setattr(layout, "DOC", doc)
    monkeypatch.setattr(layout, "ROOT", tmp_path)
    assert layout.main(["--check"]) == 1
    assert f"run `{layout.COMMAND}`" in capsys.readouterr().err
    assert layout.main([]) == 0
    text = doc.read_text()
    assert text.startswith("# Notes\n\n## Layout\n\n") and text.endswith(f"{layout.END}\n\n## Next\n")
    assert "old/" not in text and "  buffer/" in text
    assert layout.main(["--check"]) == 0


def test_the_script_runs_alone_and_fast() -> None:
    """No janus import (``ast`` only): it runs on a checkout whatever is installed."""
    import subprocess
    import time

    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-X", "importtime", str(SCRIPT), "--check"], capture_output=True, text=True,
                          timeout=60, cwd=REPO)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "janus" not in {line.rsplit("|", 1)[-1].strip().split(".")[0] for line in done.stderr.splitlines()}
    assert time.perf_counter() - start < 10
