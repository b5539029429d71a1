"""IMPALA and APPO: trajectories from the actor, the V-trace learner, and asynchronous runs through
the runtime (real workers, a real learner, CartPole) on the local and process backends."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from janus.algorithms.base import algorithm
from janus.algorithms.impala import ImpalaActor, ImpalaConfig, ImpalaLearner
from janus.config import RunConfig, from_dict, resolve
from janus.errors import ConfigError
from janus.runtime.run import run_runtime

RANDOM_RETURN = 22  # mean CartPole-v1 return of a uniformly random policy




def cfg_of(algo: str, steps: int, seed: int = 0, **overrides: Any) -> RunConfig:
    workload = {"total_env_steps": steps, **overrides.pop("workload", {})}
    return resolve(from_dict({"workload": workload, "seed": seed, **overrides}, base=from_dict(algorithm(algo).preset)))


# ------------------------------------------------------------------------------------------ actor
def test_actor_sends_whole_trajectories_with_version_and_bootstrap() -> None:
    actor = ImpalaActor(ImpalaConfig(), "CartPole-v1", seed=3, num_envs=2)
    piece, _ = actor.rollout(5)
    assert piece["obs"].shape == (1, 2, 5, 4) and piece["bootstrap_obs"].shape == (1, 2, 4)
    for key in ("action", "logprob", "reward", "done"):
        assert piece[key].shape == (1, 2, 5), key
    assert piece["version"].shape == (1, 2) and piece["version"].dtype == np.int64
    # rows are trajectories: row e, step t+1 is what env e saw after step t (unless it ended there)
    actor2 = ImpalaActor(ImpalaConfig(), "CartPole-v1", seed=3, num_envs=2)
    piece2, _ = actor2.rollout(10)
    np.testing.assert_array_equal(piece2["obs"][0, :, :5], piece["obs"][0])  # the same stream, in time order
    np.testing.assert_array_equal(piece2["obs"][0, :, 5], piece["bootstrap_obs"][0])
    actor.close()
    actor2.close()


def test_a_time_limit_bootstraps_from_the_behaviour_critic() -> None:
    """CartPole cut at 3 steps (a random policy never falls that fast): every third step is
    truncated; its reward gains gamma * V(final obs), its discount is 0 (done), and the episode's
    return counts the env's own rewards only."""
    cfg = ImpalaConfig(gamma=0.9)
    actor = ImpalaActor(cfg, "CartPole-v1", seed=0, num_envs=2, env_kwargs={"max_episode_steps": 3})
    with torch.no_grad():  # V(x) = 2 everywhere
        last = actor.agent.critic[-1]
        last.weight.zero_()
        last.bias.fill_(2.0)
    piece, episodes = actor.rollout(9)
    done = piece["done"][0]
    expected_done = np.zeros((2, 9), dtype=np.float32)
    expected_done[:, 2::3] = 1.0
    np.testing.assert_array_equal(done, expected_done)
    np.testing.assert_allclose(piece["reward"][0], np.where(expected_done == 1, 1.0 + 0.9 * 2.0, 1.0), rtol=1e-6)
    assert list(episodes.returns) == [3.0] * 6
    actor.close()


# ---------------------------------------------------------------------------------------- learner
def batch_from(actor: ImpalaActor, steps: int) -> dict[str, torch.Tensor]:
    piece, _ = actor.rollout(steps)
    return {k: torch.as_tensor(v[0]) for k, v in piece.items()}  # [1, E, ...] -> rows [E, ...]


@pytest.mark.parametrize("clip_coef", [0.0, 0.2], ids=["impala", "appo"])
def test_learner_step_on_policy_data(clip_coef: float) -> None:
    cfg = ImpalaConfig(clip_coef=clip_coef)
    actor = ImpalaActor(cfg, "CartPole-v1", seed=1, num_envs=4)
    learner = ImpalaLearner(cfg, actor.envs.single_observation_space, actor.envs.single_action_space, seed=1)
    actor.load_params(learner.params(), 0)  # the behaviour policy is the learner's: rho = 1 exactly
    batch = batch_from(actor, 16)
    before = {k: v.clone() for k, v in learner.agent.state_dict().items()}
    result = learner.update(batch)
    assert result.metrics["rho_mean"] == pytest.approx(1.0, abs=1e-5)
    assert all(np.isfinite(v) for v in result.metrics.values())
    after = learner.agent.state_dict()
    assert any(not torch.equal(before[k], after[k]) for k in before), "the step changed the networks"
    actor.close()


def test_learner_takes_box_actions() -> None:
    cfg = ImpalaConfig(clip_coef=0.2)
    actor = ImpalaActor(cfg, "Pendulum-v1", seed=0, num_envs=2)
    learner = ImpalaLearner(cfg, actor.envs.single_observation_space, actor.envs.single_action_space, seed=0)
    actor.load_params(learner.params(), 0)
    result = learner.update(batch_from(actor, 8))
    assert result.metrics["rho_mean"] == pytest.approx(1.0, abs=1e-4)
    actor.close()


# ----------------------------------------------------------------------------------------- config
@pytest.mark.parametrize("overrides,match", [
    ({"num_minibatches": 3}, "num_minibatches.*trajectories per item"),
    ({"algorithm": {"clip_coef": 1.5}}, "clip_coef"),
    ({"algorithm": {"queue_depth": 0}}, "queue_depth"),
    ({"algorithm": {"rho_bar": 0.0}}, "rho_bar"),
])
def test_bad_settings_are_refused_before_any_work(overrides: dict, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        cfg_of("appo", 4096, **overrides)


def test_appo_and_impala_differ_only_in_the_objective() -> None:
    appo, impala = (algorithm(a).config(cfg_of(a, 4096)) for a in ("appo", "impala"))
    assert (appo.clip_coef, appo.norm_adv) == (0.2, True)
    assert (impala.clip_coef, impala.norm_adv) == (0.0, False)
    assert algorithm("appo").flags()["clip_coef"].default == 0.2  # --help shows the variant's default


# ---------------------------------------------------------------------------------------- runtime
def check_async_run(run: dict[str, Any], cfg: RunConfig) -> None:
    counts, rt = run["counts"], run["runtime"]
    budget = algorithm(cfg.workload.algo).budget(cfg)
    lag = rt["policy_lag"]
    # every item acted is trained whole or dropped whole as too stale (in the queue, or batch by batch at the learner)
    dropped = lag["items_dropped_stale"] * cfg.updates_per_iteration + lag["batches_dropped_stale"]
    assert counts["updates"] + dropped == budget.total_updates
    # the workers act the budget in whole items, no more: within one item (a piece per worker) of total_env_steps
    assert counts["env_steps"] == budget.env_steps and 0 <= budget.env_steps - cfg.workload.total_env_steps < cfg.rollout_transitions
    assert counts["transitions_produced"] == counts["env_steps"]  # rows of T steps, counted in steps
    bound = algorithm(cfg.workload.algo).config(cfg).max_policy_lag
    assert lag["batches"] == counts["updates"] and 0 <= lag["mean"] <= lag["max"] <= bound
    assert 0 < rt["actor_utilization"] <= 1
    assert "policy_lag_mean" in run["train_metrics"]


# local: slow-only (the lag-bound test below runs the local backend; process is APPO's default)
@pytest.mark.parametrize("backend", [pytest.param("local", marks=pytest.mark.slow), "process"])
def test_appo_learns_cartpole(backend: str) -> None:
    cfg = cfg_of("appo", 40_000, runtime={"backend": backend})
    run = run_runtime(cfg, timeout_s=300)
    check_async_run(run, cfg)
    assert run["final_mean_return"] > 4 * RANDOM_RETURN, run["final_mean_return"]


def test_policy_lag_bound_is_honoured_under_a_deep_queue(tmp_path: Path) -> None:
    """A queue four items deep with a bound of 1 version: items and batches that age past it are
    dropped and counted, and no trained row lags more."""
    cfg = cfg_of("impala", 6_000, algorithm={"queue_depth": 4, "max_policy_lag": 1},
                 workload={"num_actors": 2, "envs_per_actor": 4, "rollout_length": 16}, num_minibatches=2,
                 runtime={"backend": "local"})
    run = run_runtime(cfg, timeout_s=300)
    check_async_run(run, cfg)
    assert run["runtime"]["policy_lag"]["max"] <= 1


@pytest.mark.slow  # the async queue is the replay's (same on every backend: test_async_queue.py); the remote
# replay client's sample/version calls run in tests/runtime/test_ray_backend.py's default cases
def test_appo_on_ray_with_two_workers(ray_session: Any) -> None:
    """Ray: the Trainer samples through the remote replay client, and tells it each version."""
    cfg = cfg_of("appo", 8192, workload={"num_actors": 2, "envs_per_actor": 4}, num_minibatches=2,
                 runtime={"backend": "ray"})
    run = run_runtime(cfg, timeout_s=240)
    assert run["runtime"]["backend"] == "ray"
    assert sorted(n for n in run["runtime"]["nodes"] if n.startswith("worker-")) == ["worker-0", "worker-1"]
    check_async_run(run, cfg)


def test_the_budget_is_whole_items_and_a_resume_acts_only_those_left() -> None:
    """Each worker acts the budget's items and stops (60,000 asked acted 62,976 when the workers ran
    ahead until the learner finished); a resumed run continues from the items trained (those in the
    queue at the commit are lost with it, as a PPO rollout not yet trained is)."""
    from janus.runtime.plan import pieces_per_worker, resumed_counts

    cfg = cfg_of("appo", 6000)
    algo = algorithm("appo")
    pacing, budget = algo.pacing(cfg), algo.budget(cfg)
    assert cfg.rollout_transitions == 512 and budget.env_steps == 12 * 512 and pacing.max_pieces == 12
    state = {"trained": 3 * cfg.updates_per_iteration, "env_steps": 5 * 512, "curve": [(0.1, 100, 9.0), (0.2, 2000, 9.0)]}
    resumed = resumed_counts(cfg, pacing, state)
    assert resumed["env_steps"] == 3 * 512 and resumed["curve"] == [(0.1, 100, 9.0)]
    assert pieces_per_worker(cfg, pacing, budget, state) == 12 - 3
