"""Where the replay kernels are cached (janus.buffer.kernels.cache): one per-user folder whatever
PYTHONDONTWRITEBYTECODE says, NUMBA_CACHE_DIR respected, a private fallback, and one line on a
compile. Each subprocess compiles one small kernel only (~1 s), not a whole buffer or run."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

SRC = str(Path(__file__).resolve().parents[2] / "src")
NOTE = "janus: compiling the replay kernels"
# compile (or load) one kernel, then print its cache misses, hits and folder
CALL = ("import numpy as np, janus.buffer.kernels.replay as k, janus.buffer.kernels.cache as c; "
        "k._next_u64(np.zeros(1, np.uint64)); s = k._next_u64.stats; "
        "print(sum(s.cache_misses.values()), sum(s.cache_hits.values()), c.cache_dir())")


def python(code: str, tmp: Path, **env: str) -> subprocess.CompletedProcess[str]:
    """``python -c code`` as a Docker-like user: PYTHONDONTWRITEBYTECODE=1, no NUMBA_CACHE_DIR or
    XDG_CACHE_HOME, HOME and TMPDIR under ``tmp``; ``env`` added on top."""
    base = {k: v for k, v in os.environ.items() if k not in ("NUMBA_CACHE_DIR", "XDG_CACHE_HOME", "HOME", "TMPDIR")}
    for name in ("home", "tmp"):
        (tmp / name).mkdir(exist_ok=True)
    full = {**base, "PYTHONDONTWRITEBYTECODE": "1", "PYTHONPATH": SRC, "HOME": str(tmp / "home"),
            "TMPDIR": str(tmp / "tmp"), **env}
    return subprocess.run([sys.executable, "-c", code], env=full, capture_output=True, text=True, check=True,
                          timeout=240)


def counts(proc: subprocess.CompletedProcess[str]) -> tuple[int, int, str]:
    misses, hits, folder = proc.stdout.split()
    return int(misses), int(hits), folder


def test_without_bytecode_or_numba_cache_dir_the_second_process_loads_what_the_first_compiled(tmp_path: Path) -> None:
    first = python(CALL, tmp_path)
    misses, hits, folder = counts(first)
    assert (misses, hits) == (1, 0)
    assert folder == str(tmp_path / "home" / ".cache" / "janus" / "numba")
    assert list(Path(folder).rglob("*._next_u64-*.nbi")), "nothing was written to the cache"
    assert first.stderr.count(NOTE) == 1 and folder in first.stderr  # said once, with where it goes

    second = python(CALL, tmp_path)
    assert counts(second) == (0, 1, folder)  # loaded, not compiled
    assert NOTE not in second.stderr


def test_xdg_cache_home_and_numba_cache_dir_are_respected(tmp_path: Path) -> None:
    xdg = tmp_path / "xdg"
    assert counts(python(CALL, tmp_path, XDG_CACHE_HOME=str(xdg)))[2] == str(xdg / "janus" / "numba")
    mine = tmp_path / "mine"
    proc = python(CALL, tmp_path, NUMBA_CACHE_DIR=str(mine), XDG_CACHE_HOME=str(xdg))
    assert counts(proc)[2] == str(mine)
    assert list(mine.rglob("*._next_u64-*.nbi"))
    assert not (tmp_path / "home" / ".cache").exists()


def test_an_unwritable_cache_home_falls_back_to_a_private_tmp_folder_and_says_so(tmp_path: Path) -> None:
    (tmp_path / "home").mkdir()
    (tmp_path / "home" / ".cache").write_text("a file where the folder would be")  # unwritable even for root
    proc = python(CALL, tmp_path)
    fallback = tmp_path / "tmp" / f"janus-numba-{os.getuid()}"
    assert counts(proc) == (1, 0, str(fallback))
    assert "cannot cache the replay kernels in" in proc.stderr and str(fallback) in proc.stderr
    assert oct(fallback.stat().st_mode & 0o777) == oct(0o700)
    assert counts(python(CALL, tmp_path)) == (0, 1, str(fallback))


def test_a_shared_fallback_folder_is_refused_and_nothing_is_cached(tmp_path: Path) -> None:
    (tmp_path / "home").mkdir()
    (tmp_path / "home" / ".cache").write_text("")
    shared = tmp_path / "tmp" / f"janus-numba-{os.getuid()}"
    shared.mkdir(parents=True)
    shared.chmod(0o777)  # another user could plant code there
    proc = python(CALL, tmp_path)
    assert counts(proc) == (1, 0, "None")
    assert "not private to this user" in proc.stderr and "every process compiles" in proc.stderr
    assert proc.stderr.count(NOTE) == 1 and "no cache folder could be written" in proc.stderr
    assert not list(shared.iterdir())


def test_only_janus_kernels_use_the_folder(tmp_path: Path) -> None:
    """numba's own setting is left as it was for the caller's code, and both kernel modules cache
    in the chosen folder (the frame kernels too, without compiling anything)."""
    code = ("import numba.core.config as cfg, janus.buffer.kernels.replay as k, janus.buffer.kernels.frames as f, "
            "janus.buffer.kernels.cache as c; "
            "print(repr(cfg.CACHE_DIR), k._put._cache._cache_path.startswith(c.cache_dir()), "
            "f.insert._cache._cache_path.startswith(c.cache_dir()))")
    assert python(code, tmp_path).stdout.split() == ["''", "True", "True"]


@pytest.mark.parametrize("module", ["janus.buffer.kernels.replay", "janus.buffer.kernels.frames"])
def test_the_kernels_are_cached_whatever_the_environment(module: str) -> None:
    import importlib

    assert importlib.import_module(module)._JIT["cache"] is True
