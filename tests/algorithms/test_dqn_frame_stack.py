"""DQN with stacked uint8 frame observations: the replay stores each frame once, and changes nothing.

A tiny pixel environment (random 8x8 uint8 frames, Gymnasium's ``FrameStackObservation`` of 4,
terminations and time-limit truncations) stands in for Atari.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.wrappers import FrameStackObservation

from janus.algorithms.base import algorithm
from janus.buffer.frames.replay import FrameStackReplay
from janus.buffer.replay.experience import ExperienceBuffer
from janus.config import RunConfig, from_dict, resolve
from janus.runtime.plan import RunPlan
from janus.runtime.run import run_runtime
from janus.runtime.wiring import make_buffer

ENV_ID = "JanusTinyPixels-v0"


class TinyPixels(gym.Env):
    """Random 8x8 frames; reward 1 for the action equal to the parity of the frame's first pixel."""

    observation_space = gym.spaces.Box(0, 255, (8, 8), np.uint8)
    action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed: int | None = None, options: Any = None) -> tuple[np.ndarray, dict]:
        super().reset(seed=seed)
        self.frame = self.np_random.integers(0, 256, (8, 8), dtype=np.uint8)
        return self.frame, {}

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict]:
        reward = float(int(action) == self.frame[0, 0] % 2)
        self.frame = self.np_random.integers(0, 256, (8, 8), dtype=np.uint8)
        return self.frame, reward, bool(self.np_random.random() < 0.05), False, {}


if ENV_ID not in gym.registry:
    gym.register(ENV_ID, entry_point=lambda: FrameStackObservation(TinyPixels(), 4), max_episode_steps=30)


def cfg_of(steps: int, seed: int = 0, **algorithm_keys: Any) -> RunConfig:
    return resolve(from_dict({
        "seed": seed, "batch_size": 32, "buffer_capacity": 2_000, "overlap_collect": 0, "overlap_select": 0,
        "workload": {"env": ENV_ID, "total_env_steps": steps, "num_actors": 2, "envs_per_actor": 2, "rollout_length": 8},
        "algorithm": {"learning_starts": 128, "n_step": 3, "exploration_steps": 500, **algorithm_keys},
    }, base=from_dict(algorithm("dqn").preset)))


def test_frame_stacks_turn_the_frame_replay_on_and_the_knob_turns_it_off() -> None:
    dqn = algorithm("dqn")
    assert dqn.buffer_spec(cfg_of(1000)).frame_stack
    assert not dqn.buffer_spec(cfg_of(1000, frame_stack_dedup=False)).frame_stack
    cartpole = resolve(from_dict({"workload": {"total_env_steps": 1000}}, base=from_dict(dqn.preset)))
    assert not dqn.buffer_spec(cartpole).frame_stack  # float observations: stored as they are
    spec = dqn.buffer_spec(cfg_of(1000, prioritized=True))
    assert spec.frame_stack and spec.sampler == "prioritized"
    buffer = make_buffer(RunPlan.of(cfg_of(1000)))
    try:
        assert isinstance(buffer.experience, FrameStackReplay)
    finally:
        buffer.close()
    buffer = make_buffer(RunPlan.of(cfg_of(1000, frame_stack_dedup=False)))
    try:
        assert isinstance(buffer.experience, ExperienceBuffer)
    finally:
        buffer.close()


def test_actor_pieces_name_their_env_streams() -> None:
    cfg = cfg_of(1000)
    side = algorithm("dqn").actor(cfg, 1)
    try:
        piece, _ = side.rollout()
        first = piece["stream"]
        assert first.dtype == np.int64 and first.shape == piece["reward"].shape
        assert (first == np.array([2, 3])).all()  # worker 1 of 2-env workers: streams 2 and 3
        replay = FrameStackReplay(1000, seed=0)
        for _ in range(5):
            replay.extend({k: v.reshape(-1, *v.shape[2:]) for k, v in piece.items()})
            piece, _ = side.rollout()
        assert replay.frames_written < 1.25 * replay.total_written  # ~1 frame per transition
    finally:
        side.actor.close()


def test_a_run_is_the_same_with_and_without_the_frame_replay() -> None:
    """Serial runs (deterministic): the replay returns the same batches, so the same run."""
    runs = [run_runtime(cfg_of(1024, frame_stack_dedup=dedup), timeout_s=120) for dedup in (True, False)]
    assert runs[0]["counts"]["updates"] == runs[1]["counts"]["updates"] > 0
    assert runs[0]["learning_curve"]["return"] == runs[1]["learning_curve"]["return"]
    assert len(runs[0]["learning_curve"]["return"]) > 10



def test_train_checkpoints_the_frame_replay_and_resume_restores_it(tmp_path: Any) -> None:
    import torch

    from janus.buffer.storage.state_file import load_state
    from janus.cli import main

    run = tmp_path / "run"
    # local: ENV_ID is registered in this process only, which spawned worker processes would not have
    argv = ["--backend", "local", "--batch_size", "32", "--buffer_capacity", "2000", "--learning_starts", "128",
            "--num_actors", "2", "--envs_per_actor", "2", "--rollout_length", "8"]
    assert main(["train", "--algo", "dqn", "--env", ENV_ID, "--total_env_steps", "800", "--out", str(run), *argv]) == 0
    saved = load_state(run / "checkpoint" / "trajectory_manager.pt", fmt="janus.trajectory_manager")["buffer"]
    assert saved["kind"] == "frame_stack_replay" and saved["stack"]["shape"] == [4, 8, 8]
    assert saved["stack"]["dtype"] == "uint8"  # the actor keeps uint8 images as they are
    assert saved["meta"][0] < 1.3 * saved["written"]  # frames stored, ~1 per transition
    assert main(["train", "--resume", str(run), "--total_env_steps", "1200"]) == 0
    again = load_state(run / "checkpoint" / "trajectory_manager.pt", fmt="janus.trajectory_manager")["buffer"]
    n = int(saved["meta"][0])
    assert again["written"] > saved["written"] and torch.equal(again["frames"][:n], saved["frames"])  # restored, then continued
