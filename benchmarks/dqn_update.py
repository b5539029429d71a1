"""The bare DQN update, by hand (janus.algorithms.linear_chain) vs autograd, paired.

Two learners from the same seed, one forced onto autograd, update on the same replay batches in
alternating blocks in one process (one torch thread); the table gives the median time per update
of each and the median of the per-block ratios (the ratio is what to read: this machine's speed
drifts between blocks more than the gap).

    PYTHONPATH=src python benchmarks/dqn_update.py [--blocks 15] [--updates 200] [--batch 128]

``--noise-threads N`` adds N threads that each wake every 0.5 ms and run ~10 us of Python, as the
other threads of a learner process do when messages arrive: the update's wall and CPU time per
update (``time.thread_time``) show what those wake-ups cost it beyond the GIL time they hold.
"""

from __future__ import annotations

import argparse
import queue
import statistics
import threading
import time

import gymnasium as gym
import numpy as np
import torch

from janus.algorithms.dqn_agent import DQNConfig, DQNLearner


def batches(count: int, size: int, obs_dim: int, actions: int) -> list[dict[str, torch.Tensor]]:
    """Replay-like batches (distinct tensors, as the replay's gathers give the learner)."""
    g = torch.Generator().manual_seed(0)
    return [{"obs": torch.randn(size, obs_dim, generator=g), "next_obs": torch.randn(size, obs_dim, generator=g),
             "action": torch.randint(0, actions, (size,), generator=g), "reward": torch.randn(size, generator=g),
             "discount": torch.full((size,), 0.99 ** 3), "index": torch.arange(size)} for _ in range(count)]


def block(learner: DQNLearner, data: list[dict[str, torch.Tensor]], updates: int) -> tuple[float, float]:
    """Wall and CPU (this thread's) seconds per update over ``updates`` updates."""
    start, cpu = time.perf_counter(), time.thread_time()
    for i in range(updates):
        learner.update(data[i % len(data)])
    return (time.perf_counter() - start) / updates, (time.thread_time() - cpu) / updates


def noise(stop: threading.Event, period_s: float = 0.0005, work: int = 200) -> None:
    """Wake every ``period_s`` (a timed queue wait, as a host loop's) and count to ``work`` (~10 us)."""
    idle: queue.SimpleQueue[None] = queue.SimpleQueue()
    while not stop.is_set():
        try:
            idle.get(timeout=period_s)
        except queue.Empty:
            pass
        x = 0
        for _ in range(work):
            x += 1


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--blocks", type=int, default=15)
    parser.add_argument("--updates", type=int, default=200, help="updates per block")
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--obs-dim", type=int, default=4, help="CartPole: 4")
    parser.add_argument("--actions", type=int, default=2)
    parser.add_argument("--hidden", type=int, nargs="+", default=[128, 128])
    parser.add_argument("--noise-threads", type=int, default=0, help="threads waking every 0.5 ms (see the doc)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    cfg = DQNConfig(hidden=tuple(args.hidden))  # the batch size is the batches' own (--batch)
    space = gym.spaces.Box(-np.inf, np.inf, (args.obs_dim,), np.float32)
    by_hand = DQNLearner(cfg, space, gym.spaces.Discrete(args.actions), 0)
    autograd = DQNLearner(cfg, space, gym.spaces.Discrete(args.actions), 0)
    autograd._chains = (None, None)
    assert by_hand._chains[0] is not None, "the Q-network is not a plain MLP: nothing to compare"
    data = batches(64, args.batch, args.obs_dim, args.actions)
    for learner in (by_hand, autograd):
        block(learner, data, 100)  # warm-up: allocator, Adam's state
    stop = threading.Event()
    for _ in range(args.noise_threads):
        threading.Thread(target=noise, args=(stop,), daemon=True).start()
    hand, auto, ratios = [], [], []
    for i in range(args.blocks):
        order = (by_hand, autograd) if i % 2 == 0 else (autograd, by_hand)
        times = {id(learner): block(learner, data, args.updates) for learner in order}
        hand.append(times[id(by_hand)])
        auto.append(times[id(autograd)])
        ratios.append(auto[-1][0] / hand[-1][0])
    stop.set()
    print(f"DQN update, batch {args.batch}, MLP {args.obs_dim}-{'-'.join(map(str, args.hidden))}-{args.actions}, "
          f"{args.blocks} paired blocks of {args.updates} updates, torch {torch.__version__}, 1 thread, "
          f"{args.noise_threads} noise threads")
    print(f"{'':10s} {'median us':>10s} {'fastest us':>11s} {'median CPU us':>14s}")
    for name, rows in (("autograd", auto), ("by hand", hand)):
        wall = [w for w, _ in rows]
        print(f"{name:10s} {1e6 * statistics.median(wall):10.0f} {1e6 * min(wall):11.0f} "
              f"{1e6 * statistics.median(c for _, c in rows):14.0f}")
    print(f"by hand is {statistics.median(ratios):.2f}x faster (median of the paired ratios; "
          f"range {min(ratios):.2f}x-{max(ratios):.2f}x)")


if __name__ == "__main__":
    main()
