"""``janus.load_policy(path)``: a trained DQN, PPO or SAC policy as an object with ``predict(obs)``.

``path`` is a ``janus train`` run folder (its last checkpoint), its ``best/`` folder (the best
policy periodic evaluation kept), its ``checkpoint/`` folder, or one of those files. ``janus
rollout`` uses the same code, and :func:`episode_returns` plays a policy's episodes for it and for
the runtime's Evaluator.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import numpy as np
import torch

from janus.config import RunConfig, from_dict, read_yaml, resolve
from janus.errors import CheckpointError, ConfigError, shown
from janus.fileio import checking_path

if TYPE_CHECKING:
    from janus.algorithms.base import RecurrentActingPolicy

TRAINER_FILE = "trainer.pt"
BEST_FILE = "policy.pt"
BEST_FORMAT = "janus.best_policy"


def locate(path: str | Path) -> tuple[Path, Path]:
    """``(run_dir, policy file)`` from a run folder, its ``checkpoint/`` or ``best/`` folder, or a file."""
    path = Path(path)
    candidates = [path / "checkpoint" / TRAINER_FILE, path / TRAINER_FILE, path / BEST_FILE, path]
    with checking_path("--checkpoint", path, CheckpointError):
        found = next((c for c in candidates if c.is_file()), None)
        exists = path.exists()
    if found is None:
        why = "it does not exist" if not exists else "no checkpoint/trainer.pt, trainer.pt or policy.pt in it"
        raise CheckpointError(f"no policy checkpoint at {str(path)!r} ({why}): expected a janus train RUN_DIR, RUN_DIR/best, "
                              f"RUN_DIR/checkpoint or one of their files")
    run_dir = found.parent.parent if found.parent.name in ("checkpoint", "best") else found.parent
    if not (run_dir / "config.yaml").is_file():
        raise CheckpointError(f"{str(run_dir)!r} is not a janus train run folder (no config.yaml next to "
                              f"{found.name}): the policy must sit in one")
    return run_dir, found


class Policy:
    """A trained policy: :meth:`predict` maps observations to actions of the run's environment.

    It acts through its algorithm's :meth:`~janus.algorithms.base.Algorithm.policy`; no algorithm is
    named here."""

    def __init__(self, cfg: RunConfig, learner: Any, source: Path, info: dict[str, Any] | None = None) -> None:
        """``learner``: a learner side of the run's algorithm (:meth:`~janus.algorithms.base.Algorithm.learner`)."""
        from janus.algorithms.base import algorithm
        from janus.envs.vector import env_spaces

        self.cfg = cfg
        self.learner = learner
        self.source = source
        self.info = dict(info or {})
        """What the file says about itself (``best/``: ``env_steps`` and ``eval_return``)."""
        self.acting = algorithm(cfg.workload.algo).policy(cfg, learner)
        network_space, self.action_space = env_spaces(cfg.workload.env, cfg.workload.env_kwargs)
        self.encoder = getattr(network_space, "encoder", None)
        """Discrete, Dict, Tuple, ... observations: what turns them into the network's vector."""
        self.observation_space = network_space if self.encoder is None else self.encoder.space
        """The environment's observation space: what :meth:`predict` takes."""

    @property
    def algo(self) -> str:
        return self.cfg.workload.algo

    def load_params(self, params: Mapping[str, Any]) -> None:
        """Act with ``params`` as the learner published them (a snapshot, or ``best/policy.pt``'s)."""
        self.acting.load_params(params)

    @property
    def recurrent(self) -> bool:
        """Whether it carries a recurrent state (``--recurrent lstm|gru``): :meth:`predict` then takes and returns it."""
        from janus.algorithms.base import is_recurrent

        return is_recurrent(self.acting)

    def initial_state(self, n: int = 1) -> np.ndarray:
        """The recurrent state of ``n`` envs at an episode's start: zeros ``[n, state_size]`` (float32)."""
        if not self.recurrent:
            raise ConfigError(f"initial_state: this {self.algo} policy is feed-forward; it has no recurrent state")
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise ConfigError(f"invalid n: got {shown(n)}; accepted: an integer >= 1")
        return np.zeros((n, self._recurrent().state_size), dtype=np.float32)

    @torch.no_grad()
    def predict(self, obs: Any, state: Any = None, episode_start: Any = None,
                deterministic: bool = True) -> Any:
        """Actions for one observation (shaped like the env's) or a batch of them (one more leading axis).

        ``deterministic``: the most likely action (DQN: argmax Q; PPO: the mode of its distribution;
        SAC: the squashed mean); ``False`` samples from PPO's or SAC's distribution (DQN stays greedy). Actions are numpy, in the
        environment's action space (Box actions clipped to its bounds). Observations go in as the env
        emits them: images of a ``uint8`` space as pixel values 0-255 (any dtype; the network scales them);
        Discrete observations as integers, Dict and Tuple ones as dicts and tuples (a batch: each leaf
        stacked on a leading axis), encoded here as in training (:mod:`janus.envs.observations`).
        With ``normalize_obs`` the network normalises them by the statistics saved with it.
        An observation holding NaN or an infinity is a :class:`ConfigError` naming it (the same for
        every algorithm: no action is made up from it).

        A recurrent policy (:attr:`recurrent`) returns ``(actions, next_state)``: ``state`` is the one
        :meth:`predict` returned last (``[batch, state_size]``, ``[state_size]`` for one observation;
        None: zeros, an episode's start) and ``episode_start`` (a bool, or one per observation) zeroes
        the state of those that begin an episode, as sb3-contrib's ``RecurrentPPO.predict`` takes them.
        A feed-forward policy returns the actions and takes no state.
        """
        if self.encoder is not None:
            x, single = self.encoder.encode_any(obs)
        else:
            shape = tuple(self.observation_space.shape or ())
            x = np.asarray(obs, dtype=np.float32)
            single = x.shape == shape
            if not single and x.shape[1:] != shape:
                raise ConfigError(f"predict: observation of shape {x.shape}; expected {shape} or (batch, *{shape})")
            x = x[None] if single else x
        deterministic = checked_bool("deterministic", deterministic)
        check_finite(x)
        if self.recurrent:
            acting = self._recurrent()
            states = recurrent_state(state, episode_start, len(x), single, acting.state_size)
            action, next_state = acting.act_with_state(x, states, deterministic)
            action = self._fitted(np.asarray(action))
            next_state = np.asarray(next_state, dtype=np.float32)
            return (action[0], next_state[0]) if single else (action, next_state)
        if state is not None or episode_start is not None:
            raise ConfigError(f"predict: this {self.algo} policy is feed-forward; it takes no state or episode_start "
                              f"(pass deterministic= by name)")
        action = self._fitted(np.asarray(self.acting.act(x, deterministic)))
        return action[0] if single else action

    def _recurrent(self) -> RecurrentActingPolicy:
        return cast("RecurrentActingPolicy", self.acting)

    def _fitted(self, action: np.ndarray) -> np.ndarray:
        """``action`` in the environment's action space: a Box's clipped, a Discrete's offset by its start."""
        space: Any = self.action_space  # a Box (low, high) or a Discrete (start), told apart by attribute
        if hasattr(space, "low"):
            return np.clip(action, space.low, space.high).astype(space.dtype)
        if hasattr(space, "start"):
            return action.astype(np.int64) + int(space.start)
        return action


def recurrent_state(state: Any, episode_start: Any, batch: int, single: bool, size: int) -> np.ndarray:
    """The ``[batch, size]`` float32 state :meth:`Policy.predict` acts from: ``state`` (None: zeros) with the
    rows where ``episode_start`` zeroed; a clear error for a state or flags of another shape."""
    want = (size,) if single else (batch, size)
    if state is None:
        states = np.zeros((batch, size), dtype=np.float32)
    else:
        states = np.array(state, dtype=np.float32)  # a copy: the caller's stays as it was
        if states.shape != want:
            raise ConfigError(f"predict: state of shape {states.shape}; expected {want} (what predict returned last, "
                              f"or None at an episode's start)")
        states = states.reshape(batch, size)
        if not np.isfinite(states).all():
            raise ConfigError("predict: the state holds NaN or an infinity; pass what predict returned last")
    if episode_start is not None:
        starts = np.asarray(episode_start)
        if starts.dtype.kind not in "bui" or starts.size != batch:
            raise ConfigError(f"predict: episode_start {shown(episode_start)}; expected a bool per observation ({batch})")
        states[starts.reshape(batch).astype(bool)] = 0.0
    return states


def load_policy(path: str | Path, *, trust: bool = False, env: Any = None) -> Policy:
    """The policy saved at ``path`` (a run folder, ``RUN_DIR/best``, ``RUN_DIR/checkpoint`` or a file).

    ``trust``: import the modules the folder's config.yaml names (``workload.env: module:EnvId``,
    ``workload.algo: package.module:Name``) even when they are not installed packages; by default
    such a module is refused before anything is imported (:mod:`janus.module_trust`): a folder
    from elsewhere must not run its own code. ``env``: for a run trained on a Python factory or
    instance (``janus.train(env=make_env)``), that factory again, checked to be the run's
    (:func:`janus.envs.in_process.loadable_env_id`); a network larger than
    :data:`janus.algorithms.networks.MAX_NETWORK_PARAMS` allows is refused before it is built.
    """
    from janus.algorithms.base import CheckpointedLearnerSide, algorithm, names
    from janus.buffer.storage.state_file import load_state
    from janus.envs.in_process import loadable_env_id
    from janus.module_trust import check_run_folder_modules

    trust = checked_bool("trust", trust)
    run_dir, found = locate(path)
    raw = read_yaml(run_dir / "config.yaml")
    check_run_folder_modules(raw, run_dir, trust)
    workload = raw.get("workload")
    run_env = workload.get("env") if isinstance(workload, dict) else None
    if isinstance(run_env, str) or env is not None:  # before validation builds the env: never a different one
        env_id = loadable_env_id(run_env, env)
        if env_id != run_env and isinstance(workload, dict):
            raw = {**raw, "workload": {**workload, "env": env_id}}
    cfg = resolve(from_dict(raw))
    algo = algorithm(cfg.workload.algo)
    if not algo.has_policy:
        with_policy = [n for n in names() if algorithm(n).has_policy]
        raise ConfigError(f"{str(run_dir)!r} is a run of the {algo.name} workload, which has no policy; "
                          f"policies come from --algo {' or '.join(with_policy)}")
    learner = algo.learner(cfg)
    if found.name == BEST_FILE:
        state = load_state(found, fmt=BEST_FORMAT)
        policy = Policy(cfg, learner, found, {k: state[k] for k in ("env_steps", "eval_return", "version") if k in state})
        policy.load_params(state["params"])
        return policy
    state = load_state(found, fmt="janus.trainer")
    cast(CheckpointedLearnerSide, learner).load_state_dict(state["learner"])
    return Policy(cfg, learner, found)


def check_finite(x: np.ndarray) -> None:
    """Refuse (one line, :class:`ConfigError`) observations ``x`` (a batch, encoded) holding NaN or an infinity."""
    if np.issubdtype(x.dtype, np.floating) and not np.isfinite(x).all():
        bad = np.flatnonzero(~np.isfinite(x.reshape(len(x), -1)).all(axis=1))
        raise ConfigError(f"predict: observation {int(bad[0])} of {len(x)} holds NaN or an infinity (or a value past float32's range) "
                          f"({shown(x[bad[0]].tolist(), 120)}); a policy acts on finite observations only")


def checked_bool(name: str, value: Any) -> bool:
    """``value`` as a bool: True, False or a numpy bool; anything else (``"no"``, 1, None) is a
    :class:`ConfigError` naming ``name``."""
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    raise ConfigError(f"invalid {name}: got {shown(value)} ({type(value).__name__}); accepted: True or False (a bool)")


def episode_returns(policy: Policy, episodes: int, seed: int = 0, deterministic: bool = True, *,
                    env_kwargs: Mapping[str, Any] | None = None, wrap: Callable[[Any], Any] | None = None,
                    on_episode_end: Callable[[], None] | None = None) -> list[float]:
    """Returns of ``episodes`` episodes of ``policy`` in a fresh copy of its run's environment.

    ``env_kwargs`` replace the run's ``workload.env_kwargs``; ``wrap`` replaces the vector env's
    first environment by what it returns, and ``on_episode_end`` is called as each episode ends
    (``janus rollout --video`` records frames through both).
    """
    return play_episodes(policy, episodes, seed, deterministic, env_kwargs=env_kwargs, wrap=wrap,
                         on_episode_end=on_episode_end)[0]


def play_episodes(policy: Policy, episodes: int, seed: int = 0, deterministic: bool = True, *,
                  env_id: str | None = None, env_kwargs: Mapping[str, Any] | None = None,
                  wrap: Callable[[Any], Any] | None = None,
                  on_episode_end: Callable[[], None] | None = None) -> tuple[list[float], list[int]]:
    """:func:`episode_returns` and each episode's length (env steps), in ``env_id`` (default: the run's env)."""
    from janus.envs.vector import make_vector_env

    kwargs = dict(policy.cfg.workload.env_kwargs or {}) if env_kwargs is None else dict(env_kwargs)
    # whole games, real rewards; observations as the env emits them (predict encodes them)
    env = make_vector_env(env_id or policy.cfg.workload.env, 1, seed, kwargs, training=False, encode_observations=False)
    returns: list[float] = []
    lengths: list[int] = []
    try:
        if wrap is not None:
            # inside the vector env (sync, make_vector_env's default: it has .envs): sees each last frame
            env.envs[0] = wrap(env.envs[0])  # type: ignore[attr-defined]
        obs, _ = env.reset(seed=seed)
        total, steps = 0.0, 0
        recurrent = getattr(policy, "recurrent", False)  # a policy-like object without the attribute acts feed-forward
        state = policy.initial_state(1) if recurrent else None  # carried per env, zeroed as episodes end
        while len(returns) < episodes:
            if state is None:
                action = policy.predict(obs, deterministic=deterministic)
            else:
                action, state = policy.predict(obs, state, deterministic=deterministic)
            obs, reward, term, trunc, _ = env.step(action)
            total += float(reward[0])
            steps += 1
            if term[0] or trunc[0]:
                if state is not None:
                    state[0] = 0.0
                returns.append(total)
                lengths.append(steps)
                total, steps = 0.0, 0
                if on_episode_end is not None:
                    on_episode_end()
    finally:
        env.close()
    return returns, lengths
