"""``python -m janus ARGS``: the same commands as the ``janus`` script."""

from janus.cli import console

if __name__ == "__main__":
    console()
