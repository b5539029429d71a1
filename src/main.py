"""The artifact's entry point: ``python src/main.py compare|train|eval ...`` (same as ``janus``).

Run by an interpreter without the project's dependencies (e.g. the system ``python`` outside the
virtual environment), it says exactly what to run instead of printing an import traceback.
"""

import sys
from pathlib import Path

SRC = Path(__file__).resolve().parent
sys.path.insert(0, str(SRC))


def _missing_dependency(name: str) -> int:
    """Exit 2 naming the missing package and the command that has it."""
    venv = SRC.parent / ".venv" / "bin" / "python"
    args = " ".join(sys.argv[1:])
    if venv.is_file():
        fix = f"run it with the project's environment: {venv} {Path(__file__)} {args}".rstrip()
    else:
        fix = f"create the environment first (make -C {SRC.parent} compare, or pip install -e {SRC.parent})"
    print(f"janus: error: {sys.executable} cannot import {name!r}, which janus needs; {fix}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    import importlib.util

    for dependency in ("yaml", "numpy", "torch"):  # janus.cli imports torch only once a run starts
        if importlib.util.find_spec(dependency) is None:
            sys.exit(_missing_dependency(dependency))
    try:
        from janus.cli import main
    except ModuleNotFoundError as exc:
        if not exc.name or exc.name.split(".")[0] == "janus":
            raise
        sys.exit(_missing_dependency(exc.name.split(".")[0]))
    sys.exit(main())
