"""``net_arch`` and ``activation``: the networks each algorithm builds from ``algorithm.hidden``,
``critic_hidden`` and ``activation``; load_policy of a run with them, and of an older run without."""

from __future__ import annotations

from pathlib import Path

import gymnasium as gym
import pytest
import torch
import yaml
from torch import nn

import janus
from janus.algorithms.dqn_agent import DQNConfig, q_network
from janus.algorithms.impala import ImpalaConfig, agent_config
from janus.algorithms.networks import activation_name
from janus.algorithms.ppo_acting import FusedPolicyValue, TorsoPolicyValue, policy_value
from janus.algorithms.ppo_agent import PPOAgent, PPOConfig
from janus.algorithms.sac import SACConfig, SACLearner
from janus.cli import main

BOX = gym.spaces.Box(-1.0, 1.0, (5,))


def widths(net: nn.Module) -> list[int]:
    return [m.out_features for m in net.modules() if isinstance(m, nn.Linear)]


def activations(net: nn.Module) -> set[type]:
    return {type(m) for m in net.modules() if not list(m.children()) and not isinstance(m, (nn.Linear, nn.Flatten))}


def test_ppo_builds_policy_and_value_networks_of_their_own_widths_and_activation() -> None:
    agent = PPOAgent(PPOConfig(hidden=(32,), critic_hidden=(16, 8), activation="relu"), BOX, gym.spaces.Discrete(3))
    assert widths(agent.actor) == [32, 3] and widths(agent.critic) == [16, 8, 1]
    assert activations(agent.actor) == activations(agent.critic) == {nn.ReLU}
    assert isinstance(policy_value(agent), TorsoPolicyValue), "different depths do not stack"


def test_fused_acting_path_computes_the_networks_with_their_activation() -> None:
    torch.manual_seed(0)
    agent = PPOAgent(PPOConfig(hidden=(32, 32), critic_hidden=(8, 4), activation="elu"), BOX, gym.spaces.Discrete(3))
    fused = policy_value(agent)
    assert isinstance(fused, FusedPolicyValue)
    obs = torch.randn(6, 5)
    _, logprob, value = fused(obs, torch.Generator().manual_seed(1))
    torch.testing.assert_close(value, agent.value(obs))
    action, _, _ = fused(obs, torch.Generator().manual_seed(1))
    torch.testing.assert_close(logprob, agent.dist(obs).log_prob(action))


def test_default_networks_are_unchanged() -> None:
    agent = PPOAgent(PPOConfig(), BOX, gym.spaces.Discrete(2))
    assert widths(agent.actor) == [64, 64, 2] and widths(agent.critic) == [64, 64, 1]
    assert activations(agent.actor) == {nn.Tanh}
    assert activations(q_network(DQNConfig(), BOX, gym.spaces.Discrete(2))) == {nn.ReLU}


def test_impala_passes_its_network_to_the_agent() -> None:
    config = agent_config(ImpalaConfig(hidden=(16,), critic_hidden=(24,), activation="gelu"))
    assert (config.hidden, config.critic_hidden, config.activation) == ((16,), (24,), "gelu")


def test_dqn_q_network_takes_widths_and_activation() -> None:
    net = q_network(DQNConfig(hidden=(40, 20), activation="tanh"), BOX, gym.spaces.Discrete(4))
    assert widths(net) == [40, 20, 4] and activations(net) == {nn.Tanh}


def test_sac_policy_and_q_networks_take_their_widths_and_activation() -> None:
    learner = SACLearner(SACConfig(hidden=(32, 16), critic_hidden=(64,), activation="silu"), BOX,
                         gym.spaces.Box(-2.0, 2.0, (2,)), seed=0)
    assert widths(learner.policy) == [32, 16, 2, 2]  # torso, then the mean and log-std heads
    assert widths(learner.critic.q1) == widths(learner.target.q2) == [64, 1]
    assert activations(learner.critic) == {nn.SiLU}
    assert learner.policy.activation is torch.nn.functional.silu


def test_activation_names_and_sb3_classes() -> None:
    assert activation_name(nn.Tanh) == "tanh" and activation_name("ReLU") == "relu"
    assert activation_name(nn.Softmax) is nn.Softmax, "left for the configuration's check to refuse"


def train(out: Path, *flags: str) -> Path:
    argv = ["train", "--algo", "ppo", "--env", "CartPole-v1", "--total_env_steps", "64", "--envs_per_actor", "2",
            "--rollout_length", "16", "--out", str(out), *flags]
    assert main(argv) == 0
    return out


def test_load_policy_restores_the_network_a_run_trained(tmp_path: Path) -> None:
    out = train(tmp_path / "run", "--net_arch", "24", "--critic_net_arch", "12", "12", "--activation", "elu")
    algorithm = yaml.safe_load((out / "config.yaml").read_text())["algorithm"]
    assert (algorithm["hidden"], algorithm["critic_hidden"], algorithm["activation"]) == ([24], [12, 12], "elu")
    policy = janus.load_policy(out)
    agent = policy.learner.learner.agent
    assert widths(agent.actor) == [24, 2] and widths(agent.critic) == [12, 12, 1]
    assert activations(agent.actor) == {nn.ELU}
    assert policy.predict([0.0, 0.0, 0.0, 0.0]) in (0, 1)


def test_a_run_saved_before_critic_hidden_and_activation_still_loads(tmp_path: Path) -> None:
    out = train(tmp_path / "old")
    path = out / "config.yaml"
    cfg = yaml.safe_load(path.read_text())
    for key in ("critic_hidden", "activation"):
        del cfg["algorithm"][key]  # as an older janus wrote it
    path.write_text(yaml.safe_dump(cfg))
    agent = janus.load_policy(out).learner.learner.agent
    assert widths(agent.critic) == [64, 64, 1] and activations(agent.critic) == {nn.Tanh}


@pytest.mark.parametrize("flags, message", [
    (["--activation", "softmax"], "invalid --activation: got 'softmax'; accepted: one of 'relu'"),
    (["--net_arch", "0"], "invalid --net_arch: got [0]"),
    (["--net_arch", "32", "--hidden_size", "8"], "--net_arch with --hidden_size/--num_layers"),
])
def test_bad_network_flags_are_clear_errors(tmp_path: Path, flags: list[str], message: str,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["train", "--algo", "ppo", "--out", str(tmp_path / "run"), *flags]) == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "run").exists()


def test_network_flags_a_run_does_not_read_are_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["train", "--algo", "dqn", "--critic_net_arch", "32", "--out", str(tmp_path / "a")]) == 2
    assert "--critic_net_arch does not apply to --algo dqn" in capsys.readouterr().err
    with pytest.raises(janus.ConfigError, match="dqn has one network"):
        janus.train("dqn", env="CartPole-v1", net_arch={"pi": [32], "vf": [32]}, out=tmp_path / "b")


def test_dqn_differentiates_by_hand_only_the_activations_it_knows() -> None:
    from janus.algorithms.dqn_agent import DQNLearner

    tanh = DQNLearner(DQNConfig(hidden=(8,), activation="tanh"), BOX, gym.spaces.Discrete(2), 0)
    elu = DQNLearner(DQNConfig(hidden=(8,), activation="elu"), BOX, gym.spaces.Discrete(2), 0)
    assert tanh._chains[0] is not None and elu._chains == (None, None), "elu: autograd, never a wrong gradient"
