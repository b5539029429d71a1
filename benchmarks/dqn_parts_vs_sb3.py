"""janus's DQN against Stable-Baselines3's, part by part, with the randomness taken out.

``rl_peers.py`` compares whole training runs, whose returns differ by seed far more than any
difference between the libraries. This script compares the two deterministic parts directly:

1. **The update.** janus's ``DQNLearner`` and SB3's ``DQN.train`` start from the same weights and
   take the same batches (``--updates`` of them, with target copies every
   ``target_update_interval``). Printed: the largest parameter difference from SB3 as it ships
   (foreach Adam) and from SB3 with ``Adam(fused=True)``, the kernel janus uses.
2. **The stored transitions.** A ``DQNActor`` acting at random in ``--envs`` CartPole envs with a
   short time limit (so windows end by termination and by truncation); the same raw steps go into
   SB3's ``NStepReplayBuffer``, one per env, read back at every index whose window is complete.
   Printed: the largest difference per field between janus's n-step transitions and SB3's.

    NUMBA_CACHE_DIR=.venv/numba-cache PYTHONPATH=src .venv/bin/python benchmarks/dqn_parts_vs_sb3.py
"""

from __future__ import annotations

import argparse
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from stable_baselines3 import DQN
from stable_baselines3.common.buffers import NStepReplayBuffer
from stable_baselines3.common.logger import configure
from stable_baselines3.common.type_aliases import ReplayBufferSamples
from stable_baselines3.common.utils import polyak_update
from torch import nn

from janus.algorithms.dqn_agent import DQNActor, DQNConfig, DQNLearner
from janus.envs.vector import next_obs_of

BATCH_SIZE = 128  # the top-level batch_size of --algo dqn's preset (janus's data-path knob, not DQNConfig's)
PIECE_STEPS = 8  # vector-env steps per piece


def random_batches(cfg: DQNConfig, count: int, seed: int) -> list[dict[str, np.ndarray]]:
    """CartPole-shaped n-step batches: some windows end early, some by termination (discount 0)."""
    rng, b = np.random.default_rng(seed), BATCH_SIZE
    out = []
    for _ in range(count):
        obs = rng.normal(0, 1, (b, 4)).astype(np.float32)
        steps = np.where(rng.random(b) < 0.1, rng.integers(1, cfg.n_step, b), cfg.n_step)
        terminated = rng.random(b) < 0.05
        out.append({
            "obs": obs, "action": rng.integers(0, 2, b), "next_obs": (obs + rng.normal(0, 0.1, (b, 4))).astype(np.float32),
            "reward": ((1 - cfg.gamma ** steps) / (1 - cfg.gamma)).astype(np.float32),
            "discount": np.where(terminated, 0.0, cfg.gamma ** steps).astype(np.float32),
        })
    return out


class ReplayOfBatches:
    """Stands in for SB3's replay buffer: hands out the given batches in order."""

    def __init__(self, batches: list[dict[str, np.ndarray]]) -> None:
        self.batches, self.next = batches, 0

    def sample(self, batch_size: int, env: Any = None) -> ReplayBufferSamples:
        b = {k: torch.as_tensor(v) for k, v in self.batches[self.next].items()}
        self.next += 1
        # SB3's target is reward + (1 - done) * discounts * max Q'; janus's discount holds the 0 already
        return ReplayBufferSamples(b["obs"], b["action"][:, None], b["next_obs"], torch.zeros(len(b["obs"]), 1),
                                   b["reward"][:, None], b["discount"][:, None])


def compare_updates(updates: int, every: int) -> None:
    cfg = DQNConfig(double_q=False)  # SB3's DQN takes the target network's max
    env = gym.make("CartPole-v1")
    learner = DQNLearner(cfg, env.observation_space, env.action_space, seed=0)
    batches = random_batches(cfg, updates, seed=1)

    def sb3(**adam: Any) -> DQN:
        model = DQN("MlpPolicy", env, learning_rate=cfg.lr, batch_size=BATCH_SIZE, gamma=cfg.gamma,
                    max_grad_norm=cfg.max_grad_norm, learning_starts=0, device="cpu", seed=0,
                    policy_kwargs={"net_arch": list(cfg.hidden), "activation_fn": nn.ReLU, "optimizer_kwargs": adam})
        with torch.no_grad():
            for net in (model.q_net, model.q_net_target):
                for dst, src in zip(net.parameters(), learner.q.parameters()):
                    dst.copy_(src)
        model.replay_buffer = ReplayOfBatches(batches)  # type: ignore[assignment]
        model.set_logger(configure(None, []))
        return model

    shipped, fused = sb3(), sb3(fused=True)

    def gap(a: nn.Module, b: nn.Module) -> float:
        with torch.no_grad():
            return max(float((p - q).abs().max()) for p, q in zip(a.parameters(), b.parameters()))

    print(f"1. The update: {updates} updates on the same batches from the same weights, target copy every "
          f"{cfg.target_update_interval}; max |parameter difference|")
    print(f"{'updates':>8}  {'janus vs SB3':>13}  {'janus vs SB3 fused Adam':>24}  {'SB3 fused vs SB3':>17}")
    for k, batch in enumerate(batches, 1):
        learner.update({key: torch.as_tensor(v) for key, v in batch.items()})
        for model in (shipped, fused):
            model.train(gradient_steps=1, batch_size=BATCH_SIZE)
            if k % cfg.target_update_interval == 0:
                polyak_update(model.q_net.parameters(), model.q_net_target.parameters(), 1.0)
        if k % every == 0 or k == updates:
            print(f"{k:8d}  {gap(learner.q, shipped.q_net):13.3e}  {gap(learner.q, fused.q_net):24.3e}  "
                  f"{gap(fused.q_net, shipped.q_net):17.3e}")


def compare_transitions(vector_steps: int, num_envs: int, time_limit: int) -> None:
    cfg = DQNConfig(double_q=False, eps_start=1.0, eps_end=1.0)  # random actions: every kind of episode end
    actor = DQNActor(cfg, "CartPole-v1", seed=3, num_envs=num_envs, env_kwargs={"max_episode_steps": time_limit})
    raw: list[tuple[np.ndarray, ...]] = []
    env_step = actor.envs.step

    def recorded_step(action: np.ndarray) -> Any:
        out = env_step(action)
        obs, reward, terminated, truncated, info = out
        raw.append((actor.obs.copy(), action.copy(), reward.copy(), next_obs_of(obs, terminated, truncated, info),
                    terminated.copy(), truncated.copy()))
        return out

    actor.envs.step = recorded_step  # type: ignore[method-assign]
    pieces = [actor.rollout(PIECE_STEPS)[0] for _ in range(vector_steps // PIECE_STEPS)]
    ours = {k: np.concatenate([p[k] for p in pieces]) for k in pieces[0]}  # [windows, env, ...]
    steps, windows = len(raw), len(ours["reward"])  # janus holds back the last n_step - 1 steps
    env = gym.make("CartPole-v1")
    worst: dict[str, float] = {}
    for e in range(num_envs):
        buf = NStepReplayBuffer(steps, env.observation_space, env.action_space, device="cpu", n_envs=1,
                                n_steps=cfg.n_step, gamma=cfg.gamma)
        for obs, action, reward, next_obs, terminated, truncated in raw:
            buf.add(obs[e:e + 1], next_obs[e:e + 1], action[e:e + 1], reward[e:e + 1], (terminated | truncated)[e:e + 1],
                    [{"TimeLimit.truncated": bool(truncated[e] and not terminated[e])}])
        s = buf._get_samples(np.arange(windows))
        theirs = {"obs": s.observations, "action": s.actions[:, 0], "reward": s.rewards[:, 0],
                  "next_obs": s.next_observations, "discount": ((1 - s.dones) * s.discounts)[:, 0]}
        for k, v in theirs.items():
            d = float(np.abs(ours[k][:, e].astype(np.float64) - v.numpy()).max())
            worst[k] = max(worst.get(k, 0.0), d)
    terminated = sum(int((t & ~u).sum()) for *_, t, u in raw)
    truncated = sum(int(u.sum()) for *_, u in raw)
    print(f"\n2. The stored transitions: {steps} vector steps x {num_envs} envs (time limit {time_limit}: "
          f"{terminated} episodes terminated, {truncated} truncated), {windows} {cfg.n_step}-step windows per env")
    print(f"{'field':>9}  {'max |janus - SB3|':>18}")
    for k, d in worst.items():
        print(f"{k:>9}  {d:18.3e}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--updates", type=int, default=3000, help="updates compared (part 1)")
    parser.add_argument("--vector_steps", type=int, default=3200, help="vector-env steps recorded (part 2)")
    parser.add_argument("--envs", type=int, default=4, help="sub-environments (part 2)")
    parser.add_argument("--time_limit", type=int, default=20, help="CartPole's episode step limit (part 2)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    compare_updates(args.updates, every=250)
    compare_transitions(args.vector_steps, args.envs, args.time_limit)


if __name__ == "__main__":
    main()
