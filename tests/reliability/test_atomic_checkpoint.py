"""Checkpoint writes are atomic: killing the writer mid-save leaves the previous checkpoint loadable."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import torch

from janus import ExperienceBuffer

WRITER = r"""
import sys, torch
sys.path.insert(0, sys.argv[2])
from janus import ExperienceBuffer
buf = ExperienceBuffer(200_000, seed=0)
path = sys.argv[1]
version = 0
while True:  # each save holds one value everywhere: a mix would mean a torn file
    version += 1
    buf.extend({"x": torch.full((100_000, 64), float(version))})
    buf.save(path)
    print(version, flush=True)
"""


def test_killing_the_writer_mid_save_leaves_a_loadable_checkpoint(tmp_path: Path) -> None:
    path = tmp_path / "buffer.pt"
    src = str(Path(__file__).resolve().parents[2] / "src")
    proc = subprocess.Popen([sys.executable, "-c", WRITER, str(path), src], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        first = proc.stdout.readline()  # one complete save exists
        assert first.strip() == "1"
        time.sleep(0.15)  # the next save (~100 MB) is under way
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(10)
    finally:
        if proc.poll() is None:
            proc.kill()
    loaded = ExperienceBuffer.load(path)
    rows = loaded.gather(torch.arange(len(loaded)))
    # a complete save only: the item with key k was written by save k // 100k + 1, with that value
    assert loaded.total_written % 100_000 == 0 and loaded.total_written >= 100_000
    expected = (rows["index"] // 100_000 + 1).to(torch.float32).unsqueeze(1).expand(-1, 64)
    assert torch.equal(rows["x"], expected)
    leftovers = [p.name for p in tmp_path.iterdir() if p.name != "buffer.pt"]
    assert all(name.startswith(".buffer.pt.") for name in leftovers), leftovers  # only our temporary files
