"""``janus.evaluate``: a trained policy's returns over whole episodes (SB3's ``evaluate_policy``).

It plays the episodes with the code ``janus rollout`` and the runs' evaluations use
(:func:`janus.policy.play_episodes`): one environment, real rewards, observations as the
environment emits them.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from janus.errors import ConfigError, invalid, shown


@dataclass(frozen=True)
class EvaluationResult:
    """What :func:`evaluate` measured: each episode's return and length, and their mean and std."""

    returns: list[float]
    """The return of each episode, in order."""
    lengths: list[int]
    """The length of each episode (env steps), in order."""

    @property
    def mean(self) -> float:
        """Mean return over the episodes."""
        return sum(self.returns) / len(self.returns)

    @property
    def std(self) -> float:
        """Standard deviation of the returns (population, as numpy's ``std`` and SB3's ``evaluate_policy``)."""
        mean = self.mean
        return math.sqrt(sum((r - mean) ** 2 for r in self.returns) / len(self.returns))

    def as_dict(self) -> dict[str, Any]:
        """``{"mean", "std", "returns", "lengths"}``."""
        return {"mean": self.mean, "std": self.std, "returns": list(self.returns), "lengths": list(self.lengths)}

    def __getitem__(self, key: str) -> Any:
        """``result["mean"]`` as ``result.mean`` (also ``std``, ``returns``, ``lengths``)."""
        return self.as_dict()[key]


def evaluate(policy: Any, env: str | Callable[[], Any] | Any | None = None, episodes: int = 10, seed: int = 0,
             deterministic: bool = True, *, trust: bool = False) -> EvaluationResult:
    """Play ``episodes`` whole episodes of ``policy`` and return their returns and lengths.

    ``policy``: a :class:`~janus.policy.Policy` (``janus.load_policy(...)``, ``janus.train(...).policy``)
    or a run folder (its last checkpoint; ``RUN_DIR/best`` for the best evaluated policy).
    ``env``: the run's own environment when None; else a Gymnasium id, a zero-argument factory
    returning a ``gymnasium.Env``, or an instance (copied), whose spaces must match the policy's.
    A run folder trained on a factory is loaded with ``env`` when it is that factory (see
    :func:`janus.load_policy`). ``seed`` seeds the environment (episode ``i`` continues from the
    reset of episode ``i - 1``); ``deterministic``: the policy's most likely action (else sampled, as in training). ``trust``: a
    run folder's own modules may be imported (:func:`janus.load_policy`'s ``trust``).
    """
    from janus.config import SEED_LIMIT
    from janus.policy import Policy, checked_bool, load_policy, play_episodes

    if isinstance(episodes, bool) or not isinstance(episodes, int) or episodes < 1:
        raise invalid("episodes", episodes, "an integer >= 1")
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < SEED_LIMIT:
        raise invalid("seed", seed, f"an integer in [0, {SEED_LIMIT - 1:,}]")
    deterministic = checked_bool("deterministic", deterministic)
    trust = checked_bool("trust", trust)
    if isinstance(policy, (str, Path)):
        policy = load_policy(policy, trust=trust, env=env if _trained_on_an_env_object(policy, env) else None)
    if not isinstance(policy, Policy):
        raise invalid("policy", shown(policy), "a janus Policy (janus.load_policy) or a janus train run folder")
    env_id, env_kwargs = _environment(policy, env)
    returns, lengths = play_episodes(policy, episodes, seed, deterministic, env_id=env_id, env_kwargs=env_kwargs)
    return EvaluationResult(returns, lengths)


def _trained_on_an_env_object(folder: str | Path, env: Any) -> bool:
    """Whether ``env`` is a factory or instance and the run at ``folder`` was trained on one: then
    ``env`` is what rebuilds it (:func:`janus.load_policy`'s ``env``, checked to be the run's)."""
    from janus.config import read_yaml
    from janus.envs.in_process import NAMESPACE, is_in_process
    from janus.policy import locate

    if not is_in_process(env):
        return False
    workload = read_yaml(locate(folder)[0] / "config.yaml").get("workload")
    run_env = workload.get("env") if isinstance(workload, dict) else None
    return isinstance(run_env, str) and run_env.startswith(f"{NAMESPACE}/")


def _environment(policy: Any, env: Any) -> tuple[str, dict[str, Any]]:
    """The id and ``env_kwargs`` to play ``policy`` in: its run's, or ``env``'s, checked to fit the policy."""
    from janus.envs.in_process import is_in_process, register_in_process
    from janus.envs.vector import env_spaces

    run_env, run_kwargs = policy.cfg.workload.env, dict(policy.cfg.workload.env_kwargs or {})
    if env is None or env == run_env:
        return run_env, run_kwargs
    env_id = register_in_process(env) if is_in_process(env) else env
    obs_space, action_space = env_spaces(env_id, {})
    run_obs, run_actions = env_spaces(run_env, run_kwargs)
    if obs_space.shape != run_obs.shape or action_space != run_actions:
        raise ConfigError(f"env {shown(env)} does not fit the policy: observations {obs_space.shape} and actions "
                          f"{action_space}, where the policy (trained on {run_env!r}) takes {run_obs.shape} and acts in "
                          f"{run_actions}")
    return env_id, {}
