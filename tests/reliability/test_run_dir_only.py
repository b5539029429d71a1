"""Issue 6 (Security): nothing writes outside the run directory the user chose.

Every command runs as a real subprocess (``python src/main.py ...``, the artifact's entry point)
on the local backend, with a fresh empty working directory, HOME and TMPDIR (XDG_* unset, so
user-level caches fall under HOME). Every file and folder under those, under the output folders and
in the source checkout the command runs from is recorded (path, size, mtime) before and after each
command (two independent commands at a time, for the suite's time: then before and after both):
whatever is new, changed or gone must lie inside the ``--out`` folder of that command (of those two)
(``janus rollout`` only reads, so it may write nothing), apart from the short list of third-party
caches in :data:`THIRD_PARTY_CACHES`. Without ``--out`` the results go to
``runs/<command>-<timestamp>`` under the working directory, and nowhere else.

The source checkout is a private copy of this repository's ``src/`` (``src/main.py`` puts its own
folder first on ``sys.path``, so that copy is what runs), watched like the folders above: a write
next to the code (``__file__``, ``src/``, the checkout root) shows up there, while people editing the
real checkout during the test cannot make it fail. The tests of this module share that copy and a
Numba cache beside it, so that the replay kernels compile once, not once per test.
"""

from __future__ import annotations

import fnmatch
import os
import re
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
QUICK = ["--quick", "--iterations", "3"]  # the synthetic workload: a few seconds per command

# The only writes allowed outside OUT: those third-party libraries make on their own, into their
# documented user-level cache locations; janus itself writes nothing there. (base folder, path
# relative to it, kind), matched part by part with fnmatch; the parent folders of an entry
# (HOME/.cache, HOME/.cache/matplotlib, HOME/.config) may be created with it.
THIRD_PARTY_CACHES = (
    # matplotlib builds its font list cache on first import of matplotlib.font_manager, in
    # $XDG_CACHE_HOME/matplotlib (default ~/.cache/matplotlib), shared by every matplotlib program.
    ("HOME", ".cache/matplotlib/fontlist-v*.json", "file"),
    # matplotlib creates its config folder $XDG_CONFIG_HOME/matplotlib (default ~/.config/matplotlib)
    # on import, to look for a matplotlibrc there; it stays empty.
    ("HOME", ".config/matplotlib", "dir"),
    # torch creates its (empty) TorchInductor cache folder $TMPDIR/torchinductor_<user> when
    # torch._dynamo is imported, which torch.optim does on first use.
    ("TMPDIR", "torchinductor_*", "dir"),
)

Snapshot = dict[str, tuple]


def snapshot(root: Path) -> Snapshot:
    """``{absolute path: ("dir",) or ("file", size, mtime_ns)}`` of everything under ``root``."""
    out: Snapshot = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for d in dirnames:
            out[os.path.join(dirpath, d)] = ("dir",)
        for f in filenames:
            path = os.path.join(dirpath, f)
            try:
                st = os.lstat(path)
            except FileNotFoundError:  # removed meanwhile
                continue
            out[path] = ("file", st.st_size, st.st_mtime_ns)
    return out


def _matches(rel: Path, parts: list[str]) -> bool:
    return len(rel.parts) == len(parts) and all(fnmatch.fnmatchcase(p, q) for p, q in zip(rel.parts, parts))


def third_party_cache(path: Path, kind: str, dirs: dict[str, Path]) -> bool:
    """Is ``path`` (a "dir" or "file") an entry of :data:`THIRD_PARTY_CACHES`, or a parent folder of one?"""
    for base, pattern, entry_kind in THIRD_PARTY_CACHES:
        root, parts = dirs[base], pattern.split("/")
        if root not in path.parents:
            continue
        rel = path.relative_to(root)
        if kind == entry_kind and _matches(rel, parts):
            return True
        if kind == "dir" and len(rel.parts) < len(parts) and _matches(rel, parts[:len(rel.parts)]):
            return True
    return False


def stray_writes(before: Snapshot, after: Snapshot, allowed: list[Path], dirs: dict[str, Path]) -> list[str]:
    """Paths created, changed or removed outside ``allowed`` folders and the third-party caches."""
    stray = []
    for path in sorted(set(before) | set(after)):
        old, new = before.get(path), after.get(path)
        if old == new or (old and new and old[0] == new[0] == "dir"):
            continue
        p = Path(path)
        if any(p == a or a in p.parents for a in allowed):
            continue
        if old is None and new[0] == "dir" and any(p in a.parents for a in allowed):
            continue  # a parent folder of OUT, created with it (runs/ for the default OUT)
        if new is not None and old is None and third_party_cache(p, new[0], dirs):
            continue
        if new is not None and old is not None and new[0] == "file" and third_party_cache(p, "file", dirs):
            continue  # a cache file rewritten
        what = "new" if old is None else "removed" if new is None else "changed"
        stray.append(f"{what} {(new or old)[0]}: {path}")
    return stray


@pytest.fixture(scope="module")
def checkout(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The private copy of the code (checkout) and its Numba cache, shared by this module's tests."""
    code = tmp_path_factory.mktemp("checkout")
    shutil.copytree(REPO / "src" / "janus", code / "src" / "janus", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy2(REPO / "src" / "main.py", code / "src" / "main.py")
    return {"checkout": code, "numba_cache": tmp_path_factory.mktemp("numba-cache")}  # the cache is not watched


@pytest.fixture
def dirs(tmp_path: Path, checkout: dict[str, Path]) -> dict[str, Path]:
    """Fresh folders under tmp_path: cwd, HOME, TMPDIR, outs (for --out); and the module's checkout (the code)."""
    d = {"base": tmp_path}
    for name in ("cwd", "HOME", "TMPDIR", "outs"):
        d[name] = tmp_path / name.lower()
        d[name].mkdir()
    return d | checkout


def watched(dirs: dict[str, Path]) -> Snapshot:
    """Snapshot of the test's folders (under tmp_path) and of the checkout."""
    return snapshot(dirs["base"]) | snapshot(dirs["checkout"])


def janus(args: list[str], dirs: dict[str, Path]) -> subprocess.CompletedProcess[str]:
    """``janus ARGS`` in a subprocess with a clean environment: fresh cwd, HOME and TMPDIR, no XDG_*."""
    env = {
        "PATH": os.environ.get("PATH", os.defpath),
        "HOME": str(dirs["HOME"]),
        "TMPDIR": str(dirs["TMPDIR"]),
        "PYTHONDONTWRITEBYTECODE": "1",
        # Under PYTHONDONTWRITEBYTECODE janus's CPU replay kernels are cached only where
        # NUMBA_CACHE_DIR says (docs/design.md); a folder outside the watched ones, shared by the
        # commands of a test, so that they compile once instead of once each.
        "NUMBA_CACHE_DIR": str(dirs["numba_cache"]),
    }
    env.update({k: os.environ[k] for k in ("USER", "LOGNAME") if k in os.environ})
    main = dirs["checkout"] / "src" / "main.py"
    proc = subprocess.run([sys.executable, str(main), *args], cwd=dirs["cwd"], env=env,
                          capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, f"janus {' '.join(args)} failed:\n{proc.stdout}\n{proc.stderr}"
    return proc


def check(args: list[str], stray: list[str], allowed: list[Path]) -> None:
    where = ", ".join(str(a) for a in allowed) or "nowhere (it only reads)"
    assert not stray, f"janus {' '.join(args)} may write only in {where}; it also wrote:\n  " + "\n  ".join(stray)


def run_and_check(args: list[str], allowed: list[Path], dirs: dict[str, Path]) -> subprocess.CompletedProcess[str]:
    """Run ``janus ARGS``; fail on any write outside ``allowed`` (and the third-party caches)."""
    return run_together_and_check([(args, allowed)], dirs)[0]


def run_together_and_check(commands: list[tuple[list[str], list[Path]]],
                           dirs: dict[str, Path]) -> list[subprocess.CompletedProcess[str]]:
    """Run independent commands ``(ARGS, allowed)`` at once (the suite's time: each is mostly its
    interpreter's start-up); fail on any write outside every one's ``allowed`` folders. Commands run
    together never name each other's folders, so one could write into another's only by guessing it."""
    before = watched(dirs)
    with ThreadPoolExecutor(len(commands)) as pool:
        procs = list(pool.map(lambda command: janus(command[0], dirs), commands))
    allowed = [a for _, folders in commands for a in folders]
    check([a for args, _ in commands for a in [*args, ";"]][:-1], stray_writes(before, watched(dirs), allowed, dirs), allowed)
    return procs


def test_every_command_writes_only_into_its_out_folder(dirs: dict[str, Path]) -> None:
    outs = dirs["outs"]
    compare, run, sweep = outs / "compare", outs / "run", outs / "eval"

    run_together_and_check([(["compare", *QUICK, "--out", str(compare)], [compare]),
                            (["train", "--algo", "dqn", "--total_env_steps", "1500", "--out", str(run)], [run])], dirs)
    assert (compare / "results.json").is_file()
    for name in ("checkpoint/trainer.pt", "config.yaml", "results.json", "learning_curve.png"):
        assert (run / name).is_file(), name
    first = (run / "results.json").read_text()

    run_together_and_check([(["train", "--resume", str(run), "--total_env_steps", "2500"], [run]),
                            (["eval", "--sweep", "overlap", *QUICK, "--out", str(sweep)], [sweep])], dirs)
    assert (run / "results.json").read_text() != first  # continued in place
    assert (sweep / "results.json").is_file()

    proc = run_and_check(["rollout", "--checkpoint", str(run), "--episodes", "2"], [], dirs)
    assert "mean return" in proc.stdout

    assert not any(dirs["cwd"].iterdir()), "the working directory must stay empty when --out is given"


def test_default_out_is_runs_under_the_working_directory(dirs: dict[str, Path]) -> None:
    args = ["compare", *QUICK]
    before = watched(dirs)
    proc = janus(args, dirs)
    found = re.search(r"output in (\S+)", proc.stdout)
    assert found, proc.stdout
    out = Path(found.group(1))
    assert re.fullmatch(r"runs/compare-\d{8}-\d{6}(-\d+)?", out.as_posix()), out  # relative: under cwd
    check(args, stray_writes(before, watched(dirs), [dirs["cwd"] / out], dirs), [dirs["cwd"] / out])
    assert (dirs["cwd"] / out / "results.json").is_file()
    assert [p.name for p in (dirs["cwd"] / "runs").iterdir()] == [out.name]
    assert not (REPO / out).exists(), f"the run also went to the repository's {REPO / out}"
