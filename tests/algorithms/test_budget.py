"""Env-step budgets are exact: a DQN/PPO run takes ``total_env_steps`` env steps, rounded up to whole
rounds of one piece from every worker (``num_actors x envs_per_actor x rollout_length``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from janus.algorithms.base import algorithm
from janus.config import from_dict, resolve
from janus.runtime.run import run_runtime


def dqn_cfg(total: int, backend: str) -> object:
    return resolve(from_dict(
        {"workload": {"env": "CartPole-v1", "num_actors": 2, "envs_per_actor": 4, "rollout_length": 8, "total_env_steps": total},
         "batch_size": 32, "algorithm": {"learning_starts": 200, "train_frequency": 4.0},
         "runtime": {"backend": backend}},
        base=from_dict(algorithm("dqn").preset)))


# A round is 2 x 4 x 8 = 64 env steps. On the process backend only the rounded-up case runs by default
# (it checks the exact stop there too); the aligned one is slow-only: the local backend covers it.
@pytest.mark.parametrize("backend,total,expected", [
    ("local", 1024, 1024), ("local", 1000, 1024),
    pytest.param("process", 1024, 1024, marks=pytest.mark.slow), ("process", 1000, 1024),
])
def test_dqn_takes_exactly_the_env_steps_asked(backend: str, total: int, expected: int) -> None:
    cfg = dqn_cfg(total, backend)
    result = run_runtime(cfg, timeout_s=120)
    assert result["counts"]["env_steps"] == expected
    assert result["counts"]["updates"] == algorithm("dqn").budget(cfg).total_updates


def test_ppo_takes_exactly_the_env_steps_asked() -> None:
    cfg = resolve(from_dict(
        {"workload": {"env": "CartPole-v1", "num_actors": 2, "envs_per_actor": 4, "rollout_length": 16, "total_env_steps": 300,
                      "num_epochs": 1}},
        base=from_dict(algorithm("ppo").preset)))
    result = run_runtime(cfg, timeout_s=120)
    assert result["counts"]["env_steps"] == 384  # ceil(300 / 128) = 3 rollouts of 2 x 4 x 16; was 256 (rounded down)


def test_the_update_budget_follows_the_ratio_that_paces_it() -> None:
    """``runtime.samples_per_insert`` / ``min_inserts`` replace DQN's ratio: the update count follows,
    so the run trains at the ratio asked for (not a burst of the rest once every piece is in)."""
    dqn = algorithm("dqn")
    cfg = dqn_cfg(6000, "local")  # batch 32, learning_starts 200, train_frequency 4
    assert dqn.budget(cfg).total_updates == (6000 - 200) // 4
    lower = resolve(from_dict({"runtime": {"samples_per_insert": 2.0}}, base=cfg))
    assert dqn.budget(lower).total_updates == int(2.0 * (6000 - 200) / 32)
    later = resolve(from_dict({"runtime": {"min_inserts": 1000}}, base=cfg))
    assert dqn.budget(later).total_updates == (6000 - 1000) // 4


def test_a_run_with_its_ratio_overridden_trains_at_that_ratio() -> None:
    cfg = resolve(from_dict({"runtime": {"samples_per_insert": 2.0}}, base=dqn_cfg(2048, "local")))
    result = run_runtime(cfg, timeout_s=120)
    pacing = result["runtime"]["pacing"]
    assert pacing["samples_per_insert"] == 2.0
    ratio = result["counts"]["updates"] * 32 / (result["counts"]["transitions_inserted"] - pacing["min_size_to_sample"])
    assert ratio == pytest.approx(2.0, rel=0.02)  # was 8.0: the budget of train_frequency 4, trained in a burst
    assert result["counts"]["updates"] == algorithm("dqn").budget(cfg).total_updates  # the budget follows the ratio


@pytest.mark.parametrize("g_collect", [1, 0.5])
def test_a_resumed_on_policy_worker_acts_only_the_rollouts_left_to_train(monkeypatch: pytest.MonkeyPatch,
                                                                        g_collect: float) -> None:
    """It was allowed the whole budget's rollouts, and acted one or two past the budget before the
    stop reached it (a flaky count in CI). A rollout acted but not yet trained at the commit is
    lost with the resume, so it counts as not done."""
    from janus.runtime.plan import pieces_per_worker

    cfg = resolve(from_dict({"g_collect": g_collect, "workload": {"algo": "ppo", "total_env_steps": 8192,
                                                                  "env": "CartPole-v1", "num_actors": 2}},
                            base=from_dict(algorithm("ppo").preset)))
    pacing = algorithm("ppo").pacing(cfg)
    rounds = algorithm("ppo").budget(cfg).iterations
    budget = algorithm("ppo").budget(cfg)
    assert pieces_per_worker(cfg, pacing, budget, {}) == pacing.max_pieces == rounds * pacing.pieces_per_rollout
    rollout = cfg.workload.rollout_length * cfg.workload.envs_per_actor * cfg.workload.num_actors
    acted = {"trained": 3 * cfg.updates_per_iteration, "env_steps": 4 * rollout}  # round 4 acted, not trained
    assert pieces_per_worker(cfg, pacing, budget, acted) == (rounds - 3) * pacing.pieces_per_rollout
    beyond = {"trained": 10**9, "env_steps": 10**9}
    assert pieces_per_worker(cfg, pacing, budget, beyond) == pacing.pieces_per_rollout  # at least one whole rollout


def test_a_resumed_on_policy_run_counts_only_the_env_steps_of_the_rollouts_trained(monkeypatch: pytest.MonkeyPatch,
                                                                                 tmp_path: Path) -> None:
    """A commit inside a rollout's minibatches (or after a rollout was acted and before it was
    trained) holds that rollout's env steps and episodes, but the rollout is acted again after the
    resume: counted twice, a resumed PPO run ended one rollout past its env-step budget."""
    from janus.runtime import plan as planmod
    from janus.runtime.plan import RunPlan

    cfg = resolve(from_dict({"workload": {"algo": "ppo", "total_env_steps": 8192, "env": "CartPole-v1", "num_actors": 2},
                             "runtime": {"checkpoint_dir": str(tmp_path), "resume": True}},
                            base=from_dict(algorithm("ppo").preset)))
    rollout = cfg.workload.rollout_length * cfg.workload.envs_per_actor * cfg.workload.num_actors
    upi = cfg.updates_per_iteration
    curve = [[1.0, rollout, 20.0], [2.0, 3 * rollout, 30.0], [3.0, 3 * rollout + 5, 40.0], [4.0, 4 * rollout, 50.0]]
    committed = {"trained": 3 * upi + upi // 2, "env_steps": 4 * rollout, "curve": curve, "inserted": 7}
    monkeypatch.setattr(planmod.checkpoints, "read_run_state", lambda folder: dict(committed))
    plan = RunPlan.of(cfg)
    state = plan.resumed
    assert state["env_steps"] == 3 * rollout and state["curve"] == curve[:2]  # the 4th rollout is acted again
    assert state["trained"] == committed["trained"] and state["inserted"] == 7
    assert plan.pieces_per_worker == (algorithm("ppo").budget(cfg).iterations - 3) * algorithm("ppo").pacing(cfg).pieces_per_rollout
    committed.update(trained=4 * upi, env_steps=4 * rollout)  # a commit between rollouts: nothing to drop
    assert RunPlan.of(cfg).resumed == committed
    dqn = resolve(from_dict({"workload": {"total_env_steps": 8192, "env": "CartPole-v1"},
                             "runtime": {"checkpoint_dir": str(tmp_path), "resume": True}},
                            base=from_dict(algorithm("dqn").preset)))
    committed.update(trained=5, env_steps=999)  # off-policy: every step acted is in the replay buffer
    assert RunPlan.of(dqn).resumed == committed
