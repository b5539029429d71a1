"""The data path on a GPU: CUDA and pinned placements, side-stream transfers to a CUDA learner.

Every test here needs CUDA; on machines without it they skip with that reason. The error paths for
asking for CUDA without it are tested in test_config.py / test_cli.py / test_experience.py.
"""

from __future__ import annotations

import threading

import pytest
import torch

from janus import ExperienceBuffer, JanusBuffer, JanusConfig

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA not available on this machine")

PLACEMENTS = ["cpu_pageable", "cpu_pinned", "cuda"]


@pytest.mark.parametrize("placement", PLACEMENTS)
def test_experience_buffer_placement_devices(placement: str) -> None:
    buf = ExperienceBuffer(1000, placement=placement, seed=0)
    buf.extend({"x": torch.arange(100, dtype=torch.float32).unsqueeze(1)})
    assert buf.device.type == ("cuda" if placement == "cuda" else "cpu")
    if placement == "cpu_pinned":
        assert buf._storage.fields["x"].is_pinned()
    batch = buf.sample(32)
    assert batch["x"].device == buf.device
    assert torch.all(batch["x"][:, 0].cpu() == batch["index"].cpu().float())


@pytest.mark.parametrize("placement", PLACEMENTS)
@pytest.mark.parametrize("overlap", [0, 1])
def test_off_policy_batches_arrive_on_the_gpu_intact(placement: str, overlap: int) -> None:
    cfg = JanusConfig(placement=placement, learner_device="cuda", overlap_collect=overlap, overlap_select=overlap,
                      g_collect=2, g_select=4, batch_size=64, buffer_capacity=4096)
    with JanusBuffer(cfg, seed=0) as jb:
        for i in range(8):  # ids identify each transition: [T=16, envs=4]
            ids = torch.arange(i * 64, (i + 1) * 64, dtype=torch.float32).reshape(16, 4)
            jb.put({"id": ids, "twice": ids * 2})
        jb.flush()
        for _ in range(20):
            batch = jb.get(timeout=10)
            assert batch["id"].device.type == "cuda"
            # consumed on the default stream right away: the side-stream copy must be complete
            assert torch.equal(batch["twice"], batch["id"] * 2)
            assert int(batch["id"].max().item()) < 512


@pytest.mark.parametrize("placement", PLACEMENTS)
def test_on_policy_exactly_once_on_the_gpu(placement: str) -> None:
    cfg = JanusConfig(placement=placement, learner_device="cuda", actor_device="cuda", is_on_policy=True,
                      overlap_collect=1, overlap_select=1, g_collect=0.25, g_select=0.25, num_minibatches=4)
    rollout, epochs = 2 * 32 * 4, 2
    seen = []
    with JanusBuffer(cfg, rollout_size=rollout, num_epochs=epochs, seed=0) as jb:
        def actor(a: int) -> None:
            for piece in range(4):
                base = a * 10_000 + piece * 100
                jb.put({"id": (torch.arange(8 * 4, device="cuda", dtype=torch.float32) + base).reshape(8, 4)})

        threads = [threading.Thread(target=actor, args=(a,)) for a in range(2)]
        for t in threads:
            t.start()
        for _ in range(epochs * 4):
            seen.append(jb.get(timeout=10)["id"].cpu())
        for t in threads:
            t.join(10)
    ids = torch.cat(seen)
    assert ids.numel() == rollout * epochs
    values, counts = ids.unique(return_counts=True)
    assert values.numel() == rollout and bool((counts == epochs).all())
