"""Atari through ale-py: the preprocessing chain, and how training and evaluation envs differ.

Fast on purpose (an ALE frame is ~0.07 ms here, an agent step ~0.4 ms): a few hundred steps each.
Life loss is tested on Breakout (5 lives, random play loses one every ~40 steps); reward clipping
on Space Invaders (5 to 30 points an invader).
"""

from __future__ import annotations

import sys
from typing import Any

import gymnasium as gym
import numpy as np
import pytest

pytest.importorskip("ale_py")

from janus.envs import atari
from janus.envs.vector import EpisodeTracker, make_vector_env
from janus.errors import ConfigError


def random_actions(n_actions: int, steps: int, num_envs: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, n_actions, (steps, num_envs))


# ---- shapes, dtypes, spaces ----------------------------------------------------------------------
def test_vector_env_of_pong_steps_with_stacked_84x84_uint8_frames() -> None:
    envs = make_vector_env("ALE/Pong-v5", 2, 0, training=True)
    try:
        assert envs.single_observation_space == gym.spaces.Box(0, 255, (4, 84, 84), np.uint8)
        assert envs.single_action_space == gym.spaces.Discrete(6)  # v5: the minimal action set
        obs, _ = envs.reset(seed=0)
        assert obs.shape == (2, 4, 84, 84) and obs.dtype == np.uint8
        assert (obs[:, 0] == obs[:, 3]).all(), "a reset fills the stack with its first frame"
        for action in random_actions(6, 300, 2):
            obs, reward, term, trunc, info = envs.step(action)
            assert obs.shape == (2, 4, 84, 84) and obs.dtype == np.uint8
            assert set(np.unique(reward)) <= {-1.0, 0.0, 1.0}
        assert (obs[:, :3] != obs[:, 1:]).any(), "frames move"
        assert obs.max() > obs.min()
    finally:
        envs.close()


def test_the_base_game_is_v5_with_frameskip_1_and_grayscale() -> None:
    env = atari.make_atari_env("ALE/Pong-v5", training=True)
    ale_env = env.unwrapped
    assert ale_env._frameskip == 1 and ale_env._obs_type == "grayscale"
    assert ale_env.ale.getFloat("repeat_action_probability") == pytest.approx(0.25)  # the v5 default, kept
    sticky_off = atari.make_atari_env("ALE/Pong-v5", {"repeat_action_probability": 0.0})
    assert sticky_off.unwrapped.ale.getFloat("repeat_action_probability") == 0.0
    names = [type(w).__name__ for w in _chain(env)]
    assert names[:3] == ["FrameStackObservation", "EpisodicLife", "AtariFrames"]
    assert "EpisodicLife" not in [type(w).__name__ for w in _chain(atari.make_atari_env("ALE/Pong-v5"))]
    env.close(), sticky_off.close()


def _chain(env: gym.Env) -> list[gym.Env]:
    out = []
    while isinstance(env, gym.Wrapper):
        out.append(env)
        env = env.env
    return out


@pytest.mark.parametrize("kwargs", [{"frameskip": 4}, {"obs_type": "rgb"}])
def test_env_kwargs_the_preprocessing_owns_are_refused(kwargs: dict) -> None:
    with pytest.raises(ConfigError, match="env_kwargs.*skips 4 frames itself"):
        make_vector_env("ALE/Pong-v5", 1, env_kwargs=kwargs)


def test_missing_ale_py_says_how_to_install_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "ale_py", None)  # `import ale_py` raises ImportError
    with pytest.raises(ConfigError, match=r"pip install janus-rl\[atari\]"):
        make_vector_env("ALE/Pong-v5", 1)


# ---- the frame pipeline ----------------------------------------------------------------------------
def test_area_resize_is_the_block_mean_for_whole_factors_and_keeps_constants() -> None:
    frame = np.random.default_rng(0).integers(0, 256, (168, 168), dtype=np.uint8)
    block_mean = np.floor(frame.reshape(84, 2, 84, 2).astype(np.float64).mean((1, 3)) + 0.5)
    assert np.array_equal(atari.area_resize(frame, 84, 84), block_mean)
    assert (atari.area_resize(np.full((210, 160), 200, np.uint8), 84, 84) == 200).all()
    weights = atari.area_weights(210, 84)
    assert np.allclose(weights.sum(1), 1.0) and np.allclose(weights.sum(0), 84 / 210)
    ale_frame = np.random.default_rng(1).integers(0, 256, (210, 160), dtype=np.uint8)
    exact = atari.area_weights(210, 84).astype(np.float64) @ ale_frame @ atari.area_weights(160, 84).T.astype(np.float64)
    assert np.abs(atari.area_resize(ale_frame, 84, 84) - exact).max() <= 0.51  # rounded to the nearest


class Frames(gym.Env):
    """A stand-in for the ALE: frame ``t`` is all ``t``, except one pixel that flickers."""

    observation_space = gym.spaces.Box(0, 255, (210, 160), np.uint8)
    action_space = gym.spaces.Discrete(3)

    def __init__(self, end_at: int = 10_000) -> None:
        self.t, self.end_at, self.actions = 0, end_at, []

    def get_action_meanings(self) -> list[str]:
        return ["NOOP", "FIRE", "UP"]

    def frame(self) -> np.ndarray:
        out = np.full((210, 160), self.t % 200, np.uint8)
        out[:5, :5] = 250 if self.t % 2 else 0  # drawn on odd frames only
        return out

    def reset(self, *, seed: int | None = None, options: Any = None) -> tuple[np.ndarray, dict]:
        super().reset(seed=seed)
        self.t, self.actions = 0, []
        return self.frame(), {}

    def step(self, action: int) -> tuple[np.ndarray, float, bool, bool, dict]:
        self.t += 1
        self.actions.append(int(action))
        return self.frame(), float(self.t), self.t >= self.end_at, False, {}


def test_frame_skip_sums_rewards_and_max_pools_the_last_two_frames() -> None:
    env = atari.AtariFrames(Frames())
    obs, _ = env.reset(seed=3)
    noops = env.unwrapped.t
    assert 1 <= noops <= 30 and env.unwrapped.actions == [0] * noops
    obs, reward, term, trunc, _ = env.step(2)
    t = env.unwrapped.t
    assert t == noops + 4 and env.unwrapped.actions[-4:] == [2] * 4
    assert reward == sum(range(noops + 1, t + 1))
    assert obs.shape == (84, 84) and obs[0, 0] == 250, "the flickering sprite survives the max over two frames"
    assert obs[40, 40] == t % 200, "the rest is the later frame (brighter than the one before)"


def test_a_game_ending_mid_skip_ends_the_step_there() -> None:
    env = atari.AtariFrames(Frames(end_at=38), noop_max=0)
    env.reset(seed=0)
    for _ in range(9):
        env.step(1)
    _, reward, term, _, _ = env.step(1)
    assert term and env.unwrapped.t == 38 and reward == 37 + 38


def test_noop_starts_vary_with_the_seed_and_repeat_with_it() -> None:
    env = atari.AtariFrames(Frames())
    counts = []
    for seed in range(20):
        env.reset(seed=seed)
        counts.append(env.unwrapped.t)
    env.reset(seed=7)
    assert env.unwrapped.t == counts[7]
    assert len(set(counts)) > 5 and all(1 <= c <= 30 for c in counts)


# ---- training vs evaluation ----------------------------------------------------------------------
def test_a_lost_life_ends_the_training_episode_but_not_the_game() -> None:
    train, evaluate = (atari.make_atari_env("ALE/Breakout-v5", training=t) for t in (True, False))
    train.reset(seed=5), evaluate.reset(seed=5)
    life_losses = 0
    for action in random_actions(4, 2000, 1, seed=1)[:, 0]:
        obs, reward, term, trunc, info = train.step(action)
        _, raw, eval_term, eval_trunc, eval_info = evaluate.step(action)
        assert info["raw_reward"] == raw and reward == np.sign(raw), "clipped in training, the same game underneath"
        assert info["lives"] == eval_info["lives"], "one game, two views"
        if term and not info["game_over"]:
            life_losses += 1
            assert not eval_term, "evaluation plays on: a lost life is not its episode's end"
            frame_number = info["episode_frame_number"]
            reset_obs, reset_info = train.reset()
            assert reset_info["lives"] == info["lives"] > 0
            assert (reset_obs == obs[-1]).all(), "the stack restarts from the current frame"
            train.step(0), evaluate.step(0)
            assert train.unwrapped.ale.getEpisodeFrameNumber() == frame_number + 4, "the game was not reset"
        elif term or trunc:
            assert info["game_over"] and (eval_term or eval_trunc) and info["lives"] == 0
            break
    assert life_losses == 4, "Breakout: 5 lives, so 4 training episodes end before the game does"


def test_training_rewards_are_clipped_and_raw_ones_ride_in_info() -> None:
    env = atari.make_atari_env("ALE/SpaceInvaders-v5", training=True)
    env.reset(seed=0)
    raw_seen = set()
    for action in random_actions(6, 400, 1)[:, 0]:
        _, reward, term, trunc, info = env.step(action)
        assert reward == np.sign(info["raw_reward"])
        raw_seen.add(info["raw_reward"])
        if term or trunc:
            env.reset()
    assert max(raw_seen) > 1, f"Space Invaders pays 5-30 an invader: {sorted(raw_seen)}"


def test_tracked_training_returns_are_the_real_full_game_returns() -> None:
    """The same seeds and actions in a training and an evaluation vector env (SAME_STEP autoreset):
    EpisodeTracker, given the training env's info, records exactly the evaluation env's games."""
    steps, n = 700, 2
    train = make_vector_env("ALE/Breakout-v5", n, 0, training=True)
    evaluate = make_vector_env("ALE/Breakout-v5", n, 0, training=False)
    train.reset(seed=11), evaluate.reset(seed=11)
    games, clipped_lives, real = EpisodeTracker(n), EpisodeTracker(n), EpisodeTracker(n)
    life_ends = 0
    try:
        for action in random_actions(4, steps, n, seed=2):
            obs, reward, term, trunc, info = train.step(action)
            eval_obs, eval_reward, eval_term, eval_trunc, _ = evaluate.step(action)
            games.step(reward, term | trunc, info)
            clipped_lives.step(reward, term | trunc)
            real.step(eval_reward, eval_term | eval_trunc)
            life_ends += int((term & ~(eval_term | eval_trunc)).sum())
            for i in np.flatnonzero(term & ~eval_term):  # a life lost: the final frame, then a fresh stack of it
                assert (info["final_obs"][i][-1] == obs[i][0]).all() and (obs[i][0] == obs[i][3]).all()
            assert (obs[:, -1] == eval_obs[:, -1]).all(), "the same game: the newest frames agree (older ones differ after a lost life)"
        ours, theirs, per_life = games.pop(), real.pop(), clipped_lives.pop()
    finally:
        train.close(), evaluate.close()
    assert len(theirs.returns) >= 3, "random Breakout ends a game every ~200 steps"
    assert np.array_equal(ours.returns, theirs.returns) and np.array_equal(ours.lengths, theirs.lengths)
    assert life_ends > len(theirs.returns) and len(per_life.returns) > len(theirs.returns)


def test_evaluation_plays_whole_games_with_real_rewards(monkeypatch: pytest.MonkeyPatch) -> None:
    """``janus rollout``, the Evaluator and ``load_policy`` share ``episode_returns``: it asks for
    the evaluation env (no life loss, no clipping)."""
    from janus.envs import vector as envs
    from janus.harness import rollout

    asked = []
    real = envs.make_vector_env

    def spy(*args: Any, **kwargs: Any) -> Any:
        asked.append(kwargs.get("training", False))
        return real(*args, **kwargs)

    monkeypatch.setattr(envs, "make_vector_env", spy)

    class RandomPolicy:
        class cfg:
            class workload:
                env, env_kwargs = "ALE/Breakout-v5", {}

        rng = np.random.default_rng(0)

        def predict(self, obs: np.ndarray, deterministic: bool = True) -> np.ndarray:
            assert obs.shape == (1, 4, 84, 84) and obs.dtype == np.uint8
            return self.rng.integers(0, 4, 1)

    returns = rollout.episode_returns(RandomPolicy(), 1, seed=3)  # type: ignore[arg-type]
    assert asked == [False] and len(returns) == 1 and returns[0] >= 0


# ---- janus train -----------------------------------------------------------------------------------
@pytest.mark.parametrize("algo,flags", [
    ("dqn", ["--learning_starts", "512", "--train_frequency", "16", "--batch_size", "32", "--buffer_capacity", "512"]),
    pytest.param("ppo", ["--rollout_length", "64"], marks=pytest.mark.slow),  # the same path as dqn's: slow-only
])
def test_janus_train_on_atari_logs_whole_games(tmp_path: Any, algo: str, flags: list[str]) -> None:
    """Breakout, 1,024 steps: the learning curve holds whole games (5 lives, ~200 steps each at
    random), not the ~5x more training episodes lost lives end; the Evaluator plays whole games.

    Games are cut at 3,000 frames (750 steps; random games last 500-1,100 frames): an untrained
    greedy policy may never press FIRE, and Breakout waits for it up to v5's 108,000 frames."""
    import json

    from janus.cli import main

    argv = ["train", "--algo", algo, "--env", "ALE/Breakout-v5", "--total_env_steps", "1024", "--envs_per_actor", "4",
            "--eval_interval_steps", "1024", "--eval_episodes", "1", "--env_kwargs", '{"max_num_frames_per_episode": 3000}',
            "--out", str(tmp_path), *flags]
    assert main(argv) == 0
    (run,) = json.loads((tmp_path / "results.json").read_text())["runs"]
    returns = run["learning_curve"]["return"]
    assert 1 <= len(returns) <= 1024 // 100, "games, not lives"
    assert all(r >= 0 and r == int(r) for r in returns)
    (evaluation,) = run["evaluations"]
    assert evaluation["episodes"] == 1 and evaluation["mean_return"] >= 0


def test_a_game_whose_action_0_is_not_noop_is_refused_naming_env() -> None:
    """Backgammon's action 0 is not NOOP, which the no-op starts need: a ConfigError naming --env and
    the game (found by the fuzz test of environment ids; before, the message named neither the flag
    nor what to do)."""
    with pytest.raises(ConfigError, match=r"invalid --env: got 'ALE/Backgammon-v5', whose action 0 is not NOOP"):
        make_vector_env("ALE/Backgammon-v5", 1)
