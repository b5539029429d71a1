"""Sample Factory's APPO on CartPole-v1 as a peer of janus: env steps/s and final return (run on demand).

Sample Factory 2.x pins ``gymnasium<1.0`` and ``numpy<2``, which janus's own environment cannot
hold, so it runs in a virtualenv of its own, ``.venv-sf/`` (gitignored), made by ``setup``:

    python3 benchmarks/sf_appo.py setup                     # once: .venv-sf with sample-factory + CPU torch
    python3 benchmarks/sf_appo.py run --steps 200000 --seed 0 [--json runs/sf.json]

``run`` needs no janus and no venv of its own: it starts ``.venv-sf/bin/python`` on this file's
``train`` command (SF's trainer in a fresh process, its own experiment folder in a temporary
directory) and prints one JSON object: env_steps, wall_s, env_steps_per_s, final_return (the mean
of the last episodes' returns SF recorded in its TensorBoard summaries, ``--window`` of them),
episodes, and the settings used.

Torch: the CPU build is installed first, pinned by a constraints file (``torch==2.13.0+cpu``, the
version constraints.txt pins), so resolving sample-factory can never pull torch's CUDA build and its
3 GB of nvidia-* packages. Where pip's configuration offers no CPU build (a find-links folder or an
index), set ``TORCH_INDEX_URL`` to an index that has it, as for ``make setup``; pip then fails
rather than falls back to CUDA.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
VENV = ROOT / ".venv-sf"
SF_VERSION = "2.1.1"  # the last release (2023): gymnasium<1.0, numpy<2, torch>=1.9,<3
TORCH_PIN = "torch==2.13.0+cpu"  # constraints.txt's version, CPU build only
ENV_ID = "CartPole-v1"


def venv_python() -> Path:
    return VENV / "bin" / "python"


def setup(python: str = sys.executable) -> None:
    """Create ``.venv-sf`` and install sample-factory with its own pins over a CPU-only torch."""
    if not venv_python().exists():
        subprocess.run([python, "-m", "venv", str(VENV)], check=True)
    pip = [str(venv_python()), "-m", "pip", "install", "-q"]
    with tempfile.TemporaryDirectory() as tmp:
        constraints = Path(tmp) / "constraints.txt"
        constraints.write_text(TORCH_PIN + "\n")  # every install below: this torch or none
        index = os.environ.get("TORCH_INDEX_URL", "").strip()
        torch_from = ["--index-url", index] if index else []
        subprocess.run(pip + ["-c", str(constraints), *torch_from, "torch"], check=True)
        subprocess.run(pip + ["-c", str(constraints), f"sample-factory=={SF_VERSION}"], check=True)
    check = "import sample_factory, torch, gymnasium, numpy; print(torch.__version__, gymnasium.__version__, numpy.__version__)"
    out = subprocess.run([str(venv_python()), "-c", check], check=True, capture_output=True, text=True).stdout
    print(f"{VENV}: sample-factory {SF_VERSION}, torch/gymnasium/numpy {out.strip()}")
