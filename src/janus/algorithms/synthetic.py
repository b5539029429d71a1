"""A synthetic workload: simulated actors and a learner that does real torch work.

Its environments are configured by the ``synthetic:`` section (:class:`~janus.config.schema.SyntheticConfig`:
``obs_shape``, ``env_step_ms`` ...), the rest by the workload (actors, envs, rollout, the learner's MLP).

* :class:`SyntheticActor` steps ``envs_per_actor`` simulated environments. Each step costs
  ``env_step_ms`` of wall time spent sleeping — like an environment served by another process or
  machine, it leaves the CPU to the rest of the pipeline — and writes an observation drawn from a
  preallocated pool into the rollout, plus action, reward and done.
* :class:`SyntheticLearner` performs a real update on every batch: forward, backward and Adam step
  of an MLP over the flattened observation (uint8 observations are scaled to [0, 1]).

Both run on the configured devices, so overlap has real work to hide behind.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import torch
from torch import nn

from janus.algorithms.base import Algorithm, register
from janus.algorithms.seeding import stream_seeds
from janus.config.schema import RunConfig, SyntheticConfig, WorkloadConfig

DTYPES = {"float32": torch.float32, "uint8": torch.uint8}


class SyntheticActor:
    """One actor: produces a rollout per iteration, in pieces of ``piece_steps`` steps."""

    def __init__(
        self, cfg: WorkloadConfig, env: SyntheticConfig, device: torch.device, seed: int, off_policy: bool,
        piece_steps: int | None = None
    ) -> None:
        self.cfg, self.env = cfg, env
        self.device = device
        self.off_policy = off_policy
        self.piece_steps = piece_steps or cfg.rollout_length
        gen = torch.Generator().manual_seed(seed)
        dtype = DTYPES[env.obs_dtype]
        pool_shape = (64, cfg.envs_per_actor, *env.obs_shape)
        if dtype == torch.uint8:
            pool = torch.randint(0, 256, pool_shape, generator=gen, dtype=torch.uint8)
        else:
            pool = torch.rand(pool_shape, generator=gen)
        self.pool = pool.to(device)
        self.generator = gen
        self.step_s = 0.0  # time spent stepping environments (the rollout stage)
        self.steps = 0

    def rollout(self) -> Iterator[dict[str, torch.Tensor]]:
        """Yield the pieces of one rollout; fields are shaped ``[steps, envs, ...]``."""
        cfg, env, envs = self.cfg, self.env, self.cfg.envs_per_actor
        done_every = 50
        for first in range(0, cfg.rollout_length, self.piece_steps):
            steps = min(self.piece_steps, cfg.rollout_length - first)
            start = time.perf_counter()
            obs = torch.empty((steps + 1, envs, *env.obs_shape), dtype=self.pool.dtype, device=self.device)
            obs[0].copy_(self.pool[self.steps % len(self.pool)])
            for t in range(steps):
                if env.env_step_ms:
                    time.sleep(env.env_step_ms / 1000.0)
                if env.env_compute_ms:
                    busy_until = time.perf_counter() + env.env_compute_ms / 1000.0
                    while time.perf_counter() < busy_until:  # CPU-bound, GIL held
                        pass
                obs[t + 1].copy_(self.pool[(self.steps + t + 1) % len(self.pool)])
            action = torch.randint(0, env.num_actions, (steps, envs), generator=self.generator).to(self.device)
            reward = torch.rand((steps, envs), generator=self.generator).to(self.device)
            done = ((torch.arange(steps) + self.steps) % done_every == done_every - 1).unsqueeze(1).expand(steps, envs)
            piece = {"obs": obs[:-1], "action": action, "reward": reward, "done": done.to(self.device)}
            if self.off_policy:
                piece["next_obs"] = obs[1:]
            self.steps += steps
            self.step_s += time.perf_counter() - start
            yield piece


def make_mlp(in_features: int, hidden: int, layers: int, out_features: int) -> nn.Module:
    """An MLP with ``layers`` hidden layers of width ``hidden`` and ReLU activations."""
    mods: list[nn.Module] = []
    width = in_features
    for _ in range(layers):
        mods += [nn.Linear(width, hidden), nn.ReLU()]
        width = hidden
    mods.append(nn.Linear(width, out_features))
    return nn.Sequential(*mods)


class SyntheticLearner:
    """A Q-learning-shaped regression on each batch: real forward, backward and optimiser step."""

    def __init__(self, cfg: WorkloadConfig, env: SyntheticConfig, device: torch.device, seed: int) -> None:
        torch.manual_seed(seed)
        in_features = 1
        for d in env.obs_shape:
            in_features *= d
        self.scale = 1.0 / 255.0 if env.obs_dtype == "uint8" else 1.0
        self.device = device
        self.net = make_mlp(in_features, cfg.hidden_size, cfg.num_layers, env.num_actions).to(device)
        self.opt = torch.optim.Adam(self.net.parameters(), lr=1e-4)
        self.updates = 0

    def update(self, batch: dict[str, torch.Tensor]) -> float:
        """One gradient step on ``batch``; returns the loss (which synchronises CUDA work)."""
        obs = batch["obs"].flatten(1).float() * self.scale
        q = self.net(obs).gather(1, batch["action"].long().unsqueeze(1)).squeeze(1)
        loss = nn.functional.mse_loss(q, batch["reward"].float())
        self.opt.zero_grad(set_to_none=True)
        loss.backward()
        self.opt.step()
        self.updates += 1
        return float(loss.item())


class SyntheticActorSide:
    """Runtime adapter: a :class:`SyntheticActor` that returns one numpy piece per call."""

    def __init__(self, cfg: WorkloadConfig, env: SyntheticConfig, device: str, seed: int, off_policy: bool,
                 piece_steps: int) -> None:
        torch.set_num_threads(1)
        self.actor = SyntheticActor(cfg, env, torch.device(device), seed, off_policy, piece_steps)
        self._pieces: Iterator[dict[str, torch.Tensor]] = iter(())
        self.version = -1

    def rollout(self) -> tuple[dict, dict]:
        piece = next(self._pieces, None)
        if piece is None:
            self._pieces = self.actor.rollout()
            piece = next(self._pieces)
        return {k: v.cpu().numpy() for k, v in piece.items()}, {}

    def load_params(self, snapshot) -> None:
        self.version = snapshot.version


class SyntheticLearnerSide:
    """Runtime adapter: a :class:`SyntheticLearner` with parameter snapshots."""

    def __init__(self, cfg: WorkloadConfig, env: SyntheticConfig, device: str, seed: int) -> None:
        torch.set_num_threads(1)
        self.learner = SyntheticLearner(cfg, env, torch.device(device), seed)

    def update(self, batch: dict[str, torch.Tensor]):
        from types import SimpleNamespace

        return SimpleNamespace(priorities=None, metrics={"loss": self.learner.update(batch)})

    def params(self) -> dict:
        return {k: v.detach().cpu().numpy().copy() for k, v in self.learner.net.state_dict().items()}


class Synthetic(Algorithm):
    """Simulated actors and a real torch learner: ``iterations`` rollouts per worker, a fixed amount
    of learner work (the runtime's rates, off-policy ``updates_per_iteration`` per iteration)."""

    name = "synthetic"
    simulates_environments = True

    def is_on_policy(self, cfg: RunConfig) -> bool:
        """As the data-path knob ``is_on_policy`` says (its type is checked with the data-path config)."""
        return cfg.janus.is_on_policy

    def network_widths(self, cfg: RunConfig) -> tuple[int, ...]:
        """``num_layers`` layers of ``hidden_size`` (the workload's own fields)."""
        return (cfg.workload.hidden_size,) * cfg.workload.num_layers

    def observations(self, cfg: RunConfig) -> tuple[tuple[int, ...], int, bool]:
        """``synthetic.obs_shape`` of ``obs_dtype``, never a frame stack."""
        return tuple(cfg.synthetic.obs_shape), (1 if cfg.synthetic.obs_dtype == "uint8" else 4), False

    def actor(self, cfg: RunConfig, index: int, initial_env_steps: int = 0, instance: int = 0,
              session: int = 0) -> SyntheticActorSide:
        j = cfg.janus
        piece_steps = self.pacing(cfg).piece_steps
        seeds = stream_seeds(cfg.seed, index, cfg.workload.envs_per_actor, instance=instance, session=session)
        return SyntheticActorSide(cfg.workload, cfg.synthetic, j.actor_device, seeds.torch_seed, not j.is_on_policy,
                                  piece_steps)

    def learner(self, cfg: RunConfig) -> SyntheticLearnerSide:
        return SyntheticLearnerSide(cfg.workload, cfg.synthetic, cfg.janus.learner_device, cfg.seed)


register(Synthetic())
