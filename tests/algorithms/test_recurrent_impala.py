"""Recurrent IMPALA and APPO: trajectories with their start states, a learner that unrolls them with the
bootstrap step in the same pass, and runs through the runtime (real workers and learner)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch

from janus.algorithms.base import algorithm
from janus.algorithms.impala import ImpalaConfig, RecurrentImpalaActor, RecurrentImpalaLearner
from janus.algorithms.recurrent_agent import step_core
from janus.config import RunConfig, from_dict, resolve
from janus.errors import ConfigError
from janus.runtime.run import run_runtime

NOVEL = "janus/CartPoleNoVel-v1"


def appo_cfg(steps: int, **overrides: Any) -> RunConfig:
    """An appo run on CartPoleNoVel with its memory preset."""
    base = from_dict(algorithm("appo").family_presets["memory"].values, base=from_dict(algorithm("appo").preset))
    workload = {"env": NOVEL, "total_env_steps": steps, **overrides.pop("workload", {})}
    return resolve(from_dict({"workload": workload, "seed": 0, **overrides}, base=base))


def as_batch(piece: dict[str, np.ndarray]) -> dict[str, torch.Tensor]:
    return {k: torch.from_numpy(v.reshape(-1, *v.shape[2:])) for k, v in piece.items()}


@pytest.mark.parametrize("kind", ["lstm", "gru"])
def test_trajectories_carry_start_states_and_the_learner_recomputes_them(kind: str) -> None:
    """Rows are trajectories with ``state`` and ``first``; the learner, with the actor's weights, unrolls
    them to the behaviour log-probabilities, and evaluates the bootstrap observation under the state the
    actor carries on with (reset where the episode ended at the last step)."""
    cfg = ImpalaConfig(recurrent=kind, recurrent_size=8, hidden=(16,), clip_coef=0.2)
    actor = RecurrentImpalaActor(cfg, NOVEL, seed=2, num_envs=3, env_kwargs={"max_episode_steps": 7})
    learner = RecurrentImpalaLearner(cfg, actor.envs.single_observation_space, actor.envs.single_action_space, seed=0)
    actor.load_params(learner.params(), 0)
    actor.rollout(5)  # a carried state
    piece, _ = actor.rollout(7)
    size = 16 if kind == "lstm" else 8
    assert piece["obs"].shape == (1, 3, 7, 2) and piece["state"].shape == (1, 3, size)
    assert piece["first"].shape == piece["done"].shape == (1, 3, 7) and piece["bootstrap_obs"].shape == (1, 3, 2)
    np.testing.assert_array_equal(piece["first"][0, :, 1:], piece["done"][0, :, :-1])  # an episode begins after one ends
    assert piece["state"].any() and piece["first"][0, :, 2].all()  # step 5 + 2 of every 7-step episode
    batch = as_batch(piece)
    with torch.no_grad():
        value, bootstrap_value, logprob, entropy = learner.evaluate_trajectories(batch)
        torch.testing.assert_close(logprob, batch["logprob"].t())
        carried = step_core(actor.agent, torch.as_tensor(actor.obs, dtype=torch.float32), actor.state)[1]
        torch.testing.assert_close(bootstrap_value, carried)
    assert value.shape == (7, 3) and entropy.shape == (21,)
    result = learner.update(batch)
    assert result.metrics["rho_mean"] == pytest.approx(1.0, abs=1e-5)
    assert all(np.isfinite(v) for v in result.metrics.values())
    actor.close()


def test_the_appo_memory_preset_is_recurrent_and_bad_settings_are_refused() -> None:
    a = algorithm("appo").config(appo_cfg(2048))
    assert (a.recurrent, a.recurrent_size) == ("lstm", 64)
    with pytest.raises(ConfigError, match="algorithm.recurrent"):
        appo_cfg(2048, algorithm={"recurrent": "transformer"})
    with pytest.raises(ConfigError, match="algorithm.recurrent_size"):
        appo_cfg(2048, algorithm={"recurrent_size": 0})


def test_impala_on_a_memory_task_gets_a_recurrent_preset_too() -> None:
    from janus.algorithms.presets import preset_for

    choice = preset_for("impala", NOVEL)
    assert choice.name == "impala/memory"
    base = from_dict(choice.preset.values, base=from_dict(algorithm("impala").preset))
    cfg = resolve(from_dict({"workload": {"env": NOVEL, "algo": "impala"}, "seed": 0}, base=base))
    a = algorithm("impala").config(cfg)
    assert (a.recurrent, a.recurrent_size, a.clip_coef) == ("lstm", 64, 0.0)  # impala's own objective, recurrent


@pytest.mark.parametrize("backend", ["local", "process"])
def test_recurrent_appo_runs_through_the_runtime(backend: str) -> None:
    cfg = appo_cfg(4096, runtime={"backend": backend})
    run = run_runtime(cfg, timeout_s=300)
    assert run["counts"]["env_steps"] == algorithm("appo").budget(cfg).env_steps
    assert run["counts"]["updates"] > 0 and np.isfinite(run["final_mean_return"])


@pytest.mark.slow  # a Ray start when no earlier test made one; the recurrent path is the same on every backend
def test_recurrent_appo_on_ray_with_two_workers(ray_session: Any) -> None:
    cfg = appo_cfg(2048, workload={"num_actors": 2, "envs_per_actor": 4}, runtime={"backend": "ray"})
    run = run_runtime(cfg, timeout_s=240)
    assert run["runtime"]["backend"] == "ray"
    assert sorted(n for n in run["runtime"]["nodes"] if n.startswith("worker-")) == ["worker-0", "worker-1"]
    assert run["counts"]["env_steps"] == algorithm("appo").budget(cfg).env_steps and run["counts"]["updates"] > 0
