"""The artifact's entry point: ``python src/main.py compare|train|eval ...`` (same as ``janus``)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from janus.cli import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
