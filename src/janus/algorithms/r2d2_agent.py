"""R2D2's recurrent Q network and actor (Kapturowski et al., 2019): what a Worker runs.

* :class:`R2D2Config`: the ``algorithm:`` section of ``--algo r2d2``.
* :class:`RecurrentQNetwork`: features (a flattening MLP, or the CNN torso of images and Dict/Tuple
  spaces with images) -> :class:`~janus.algorithms.recurrent.RecurrentCore` (LSTM or GRU) -> a Q head
  (dueling by default), stepped by an actor and unrolled by the learner over stored sequences.
* :class:`R2D2Actor`: acts epsilon-greedily with DQN's schedule (linear from ``eps_start`` to
  ``eps_end`` over ``exploration_steps`` global env steps; not Ape-X's fixed per-actor epsilons,
  which need many actors to cover the range), carrying each env's recurrent state and zeroing it
  after an episode ends. A truncated step (a time limit) bootstraps in the actor, as IMPALA's do: its
  reward gains ``gamma * h^-1(max_a Q(final obs | the state after the step))`` and it is stored as
  terminal. Its steps go through a :class:`~janus.buffer.sequence_writer.SequenceWriter`: every piece
  is one sequence per env, a row ``[seq_len, ...]`` of ``obs, action, reward, terminal`` with
  ``state``, ``mask`` and ``first``.

The learner (burn-in, double-Q n-step targets with value rescaling, the mixed priority) is
:mod:`janus.algorithms.r2d2_learner`; the runtime's view (preset, budget, replay) :mod:`janus.algorithms.r2d2`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from torch import nn

from janus.algorithms.networks import activation_class, check_mlp_size, flat_size, make_torso, obs_dtype
from janus.algorithms.recurrent import RecurrentCore
from janus.algorithms.returns import RESCALE_EPS, inverse_value_rescale
from janus.algorithms.seeding import StreamSeeds, as_stream_seeds
from janus.algorithms.shared import ReplaySchedules, check_action_space, load_snapshot
from janus.buffer.sequence_writer import SequenceWriter
from janus.envs.vector import Episodes, EpisodeTracker, make_vector_env, next_obs_of, observation_box

SEQUENCE_FIELDS = ("obs", "action", "reward", "terminal")
"""The step fields of a stored sequence (the writer adds ``state``, ``mask`` and ``first``)."""


@dataclass
class R2D2Config(ReplaySchedules):
    """R2D2 hyperparameters (the preset's values learn janus/CartPoleNoVel-v1: docs/benchmarks.md)."""

    hidden: tuple[int, ...] = (64,)
    """Widths of the feature MLP's layers before the recurrent core (vector observations); ``--net_arch``."""
    activation: str = "relu"
    """Activation of the feature MLP (relu, tanh, elu, leaky_relu, gelu or silu)."""
    recurrent: str = "lstm"
    """The recurrent core: lstm or gru."""
    recurrent_size: int = 64
    """Units of the recurrent core."""
    dueling: bool = True
    """A dueling Q head (Wang et al., 2016): ``V(s) + A(s, a) - mean_a A(s, a)``; false: one linear layer."""
    seq_len: int = 20
    """Steps per stored sequence; consecutive sequences of an env overlap by ``seq_len - workload.rollout_length``."""
    burn_in: int = 5
    """Steps at a sequence's start that only warm the recurrent state from the stored one (no loss, no gradient)."""
    gamma: float = 0.99
    """Discount factor."""
    n_step: int = 3
    """Rewards summed per target."""
    lr: float = 1e-3
    """Adam learning rate."""
    learning_starts: int = 1_000
    """Env steps collected before the first update."""
    train_frequency: float = 8.0
    """Env steps per gradient update (each update trains ``batch_size`` sequences)."""
    target_update_interval: int = 200
    """Updates between copies of the online network into the target network."""
    eps_start: float = 1.0
    """Initial exploration epsilon."""
    eps_end: float = 0.02
    """Final exploration epsilon."""
    exploration_steps: int = 20_000
    """Global env steps over which epsilon decays linearly from ``eps_start`` to ``eps_end``."""
    max_grad_norm: float = 10.0
    """Gradient-norm clip."""
    value_rescaling: bool = True
    """Targets through ``h(x) = sign(x)(sqrt(|x|+1)-1) + 1e-3 x`` and Q values through its inverse (R2D2)."""
    prioritized: bool = True
    """Prioritized replay of sequences, each by ``priority_eta * max|td| + (1 - priority_eta) * mean|td|``."""
    priority_eta: float = 0.9
    """The weight of a sequence's largest TD error in its priority (R2D2: 0.9)."""
    per_alpha: float = 0.9
    """Priority exponent of prioritized replay (R2D2: 0.9)."""
    per_beta: float = 0.6
    """Importance-weight exponent at the first update (R2D2: 0.6), annealed linearly to ``per_beta_final``."""
    per_beta_final: float = 0.6
    """Importance-weight exponent at the run's last update (equal to ``per_beta``: fixed, as R2D2)."""



    def q_values(self, q: torch.Tensor) -> torch.Tensor:
        """The network's output as values: ``h^-1(q)`` with ``value_rescaling``, else ``q``."""
        return inverse_value_rescale(q, RESCALE_EPS) if self.value_rescaling else q


class FeatureMLP(nn.Module):
    """Observations of any dtype, flattened, through linear layers each followed by ``activation``."""

    def __init__(self, in_features: int, hidden: tuple[int, ...], activation: type[nn.Module]) -> None:
        super().__init__()
        check_mlp_size(in_features, hidden[:-1], hidden[-1])
        layers: list[nn.Module] = []
        width = in_features
        for h in hidden:
            layers += [nn.Linear(width, h), activation()]
            width = h
        self.layers = nn.Sequential(*layers)
        self.features = width

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return self.layers(obs.float().flatten(1))


class RecurrentQNetwork(nn.Module):
    """Observation and recurrent state -> one value per action and the next state (see the module doc)."""

    def __init__(self, cfg: R2D2Config, obs_space: gym.spaces.Box, action_space: gym.spaces.Discrete) -> None:
        super().__init__()
        torso = make_torso(obs_space)
        if torso is None:
            features = FeatureMLP(flat_size(obs_space), tuple(cfg.hidden), activation_class(cfg.activation))
            self.torso: nn.Module = features
            width = features.features
        else:
            self.torso, width = torso, int(torso.features)
        self.core = RecurrentCore(cfg.recurrent, width, cfg.recurrent_size)
        actions = int(action_space.n)
        self.head = nn.Linear(cfg.recurrent_size, actions)
        self.value = nn.Linear(cfg.recurrent_size, 1) if cfg.dueling else None

    @property
    def state_size(self) -> int:
        """Floats of recurrent state per env."""
        return self.core.state_size

    def q(self, out: torch.Tensor) -> torch.Tensor:
        """The Q head over the core's outputs ``[..., hidden]``."""
        advantage = self.head(out)
        if self.value is None:
            return advantage
        return self.value(out) + advantage - advantage.mean(-1, keepdim=True)

    def step(self, obs: torch.Tensor, state: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``obs [B, ...]``, ``state [B, S]`` -> ``(Q [B, actions], next state [B, S])``."""
        out, state = self.core.step(self.torso(obs), state)
        return self.q(out), state

    def unroll(self, obs: torch.Tensor, state: torch.Tensor, first: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``obs [T, B, ...]`` from ``state [B, S]``, the state zeroed where ``first [T, B]``:
        ``(Q [T, B, actions], state after the last step)``."""
        steps, batch = obs.shape[0], obs.shape[1]
        features = self.torso(obs.flatten(0, 1)).reshape(steps, batch, -1)
        out, state = self.core.unroll(features, state, first)
        return self.q(out), state


class R2D2Actor:
    """Actor side: epsilon-greedy rollouts in ``num_envs`` envs carrying the recurrent state; pieces
    of one sequence per env (see the module doc)."""

    def __init__(self, cfg: R2D2Config, env_id: str, seed: int | StreamSeeds, num_envs: int, period: int,
                 env_kwargs: dict[str, Any] | None = None, vector_env: str = "sync") -> None:
        self.cfg = cfg
        seeds = as_stream_seeds(seed, num_envs)
        self.envs = make_vector_env(env_id, num_envs, seeds.spaces, env_kwargs, training=True, vector_env=vector_env)
        action_space, obs_space = self.envs.single_action_space, observation_box(self.envs)
        check_action_space("r2d2", action_space, (gym.spaces.Discrete,))
        assert isinstance(action_space, gym.spaces.Discrete)  # what check_action_space accepted
        self.num_envs = self.envs.num_envs
        self.num_actions, self.action_start = int(action_space.n), int(action_space.start)
        self.obs_dtype = obs_dtype(obs_space)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seeds.torch_seed)
            self.net = RecurrentQNetwork(cfg, obs_space, action_space)
        self.net.eval()
        self.rng = seeds.numpy()
        self.obs, _ = self.envs.reset(seed=list(seeds.envs))  # type: ignore[arg-type]  # one seed per sub-env
        self.state = np.zeros((self.num_envs, self.net.state_size), dtype=np.float32)
        self.writer = SequenceWriter(self.num_envs, cfg.seq_len, period, self.net.state_size)
        self.episodes = EpisodeTracker(self.num_envs)
        self.version = -1
        self.env_steps = 0

    def load_params(self, params: dict[str, np.ndarray], version: int) -> None:
        """Act with a learner snapshot from now on (the carried states stay)."""
        load_snapshot(self.net, params)
        self.version = int(version)

    @torch.no_grad()
    def act(self, obs: np.ndarray, state: np.ndarray, epsilon: float) -> tuple[np.ndarray, np.ndarray]:
        """Epsilon-greedy actions and the next states (every env steps its core, exploring or not)."""
        q, next_state = self.net.step(torch.as_tensor(obs), torch.from_numpy(state))
        explore = self.rng.random(self.num_envs) < epsilon
        action = np.where(explore, self.rng.integers(0, self.num_actions, self.num_envs), q.argmax(1).numpy())
        return action.astype(np.int64), next_state.numpy()

    @torch.no_grad()
    def rollout(self, num_steps: int, global_step: int | None = None) -> tuple[dict[str, np.ndarray], Episodes]:
        """Step ``num_steps`` (the writer's period) times: one sequence per env, shaped ``[1, E, seq_len, ...]``."""
        step0 = self.env_steps if global_step is None else int(global_step)
        columns: dict[str, list[np.ndarray]] = {k: [] for k in SEQUENCE_FIELDS}
        states = []
        for t in range(num_steps):
            action, next_state = self.act(self.obs, self.state, self.cfg.epsilon(step0 + t * self.num_envs))
            obs, reward, term, trunc, info = self.envs.step(action + self.action_start)
            term, trunc = np.asarray(term, dtype=bool), np.asarray(trunc, dtype=bool)
            train_reward = np.asarray(reward, dtype=np.float32).copy()
            cut = trunc & ~term
            if cut.any():  # a time limit: bootstrap from the final observation, then treat it as terminal
                final = torch.as_tensor(next_obs_of(obs, term, trunc, info)[cut])
                q, _ = self.net.step(final, torch.from_numpy(next_state[cut]))
                train_reward[cut] += self.cfg.gamma * self.cfg.q_values(q.max(1).values).numpy()
            done = term | trunc
            for key, value in zip(SEQUENCE_FIELDS, (self.obs, action, train_reward, done), strict=True):
                columns[key].append(np.asarray(value))
            states.append(self.state)
            self.episodes.step(reward, done, info)
            next_state[done] = 0.0  # an episode's start acts from the zero state
            self.state, self.obs = next_state, obs
        self.env_steps += num_steps * self.num_envs
        steps = {k: np.stack(v) for k, v in columns.items()}
        steps["obs"] = steps["obs"].astype(self.obs_dtype)
        sequences = self.writer.write(steps, np.stack(states), steps["terminal"])  # terminal: the step ended its episode
        return {k: v[None] for k, v in sequences.items()}, self.episodes.pop()

    def close(self) -> None:
        self.envs.close()
