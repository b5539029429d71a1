"""``python -m janus.cli ARGS``: the same commands as the ``janus`` script."""

import sys

from janus.cli import main

if __name__ == "__main__":
    sys.exit(main())
