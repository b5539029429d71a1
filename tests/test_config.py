"""Configuration: defaults, YAML loading, validation messages and placement resolution.

CUDA availability is patched (``janus.config.cuda_available`` and ``janus.buffer.settings``'s) so every test runs on any machine.
"""

from __future__ import annotations

import textwrap
from dataclasses import fields, replace
from pathlib import Path

import pytest

import janus.buffer.settings as datapath
import janus.config as config
from janus.config import JanusConfig, RunConfig, SyntheticConfig, WorkloadConfig
from janus.errors import ConfigError, JanusError, PlacementUnavailableError

REPO = Path(__file__).resolve().parents[1]
CONFIGS = REPO / "configs"


@pytest.fixture
def no_cuda(monkeypatch):
    for module in (config, datapath):
        monkeypatch.setattr(module, "cuda_available", lambda: False)


@pytest.fixture
def with_cuda(monkeypatch):
    for module in (config, datapath):
        monkeypatch.setattr(module, "cuda_available", lambda: True)


@pytest.fixture
def write_yaml(tmp_path):
    def write(text: str, name: str = "cfg.yaml") -> Path:
        path = tmp_path / name
        path.write_text(textwrap.dedent(text))
        return path

    return write


def load_and_resolve(path: Path) -> RunConfig:
    return config.resolve(config.load_yaml(path))


def error_of(text: str, write_yaml) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        load_and_resolve(write_yaml(text))
    assert isinstance(info.value, ValueError) and isinstance(info.value, JanusError)
    return info.value


# ---------------------------------------------------------------------------------------------
# defaults
# ---------------------------------------------------------------------------------------------


def test_defaults_validate(no_cuda):
    cfg = config.validate(RunConfig())
    assert cfg.janus == config.validate_janus(JanusConfig())
    assert cfg.janus.g_collect == 1.0 and cfg.janus.g_select == 1.0
    resolved = config.resolve(RunConfig())
    assert resolved.janus.placement == "cpu_pageable"
    assert resolved.janus.learner_device == "cpu"
    assert resolved.workload == config.validate(RunConfig()).workload


def test_defaults_on_policy_validate(no_cuda):
    cfg = config.resolve(RunConfig(janus=JanusConfig(is_on_policy=True, g_collect="1/4", g_select="1/2")))
    assert cfg.janus.is_on_policy is True
    assert cfg.janus.g_collect == 0.25 and cfg.janus.g_select == 0.5
    assert cfg.minibatch_size == cfg.rollout_transitions // cfg.janus.num_minibatches
    assert cfg.updates_per_iteration == cfg.workload.num_epochs * cfg.janus.num_minibatches


def test_empty_yaml_gives_defaults(write_yaml, no_cuda):
    cfg = load_and_resolve(write_yaml(""))
    assert cfg == config.resolve(RunConfig())


def test_yaml_values_are_loaded(write_yaml, no_cuda):
    cfg = load_and_resolve(
        write_yaml(
            """
            name: my-run
            seed: 7
            placement: auto
            overlap_collect: 1
            overlap_select: 1
            g_collect: 2
            g_select: 4
            batch_size: 64
            buffer_capacity: 5000
            workload:
              num_actors: 3
            synthetic:
              obs_shape: [4, 84, 84]
              obs_dtype: uint8
              env_step_ms: 0
            """
        )
    )
    assert cfg.name == "my-run" and cfg.seed == 7
    j = cfg.janus
    assert (j.overlap_collect, j.overlap_select, j.g_collect, j.g_select) == (1, 1, 2.0, 4.0)
    assert (j.batch_size, j.buffer_capacity, j.placement) == (64, 5000, "cpu_pageable")
    w, env = cfg.workload, cfg.synthetic
    assert w.num_actors == 3 and env.obs_shape == (4, 84, 84) and env.obs_dtype == "uint8"
    assert env.env_step_ms == 0.0 and isinstance(env.env_step_ms, float)
    assert w.rollout_length == WorkloadConfig().rollout_length  # untouched keys keep defaults


def test_obs_shape_scalar_becomes_tuple(write_yaml):
    cfg = config.validate(config.load_yaml(write_yaml("synthetic:\n  obs_shape: 17\n")))
    assert cfg.synthetic.obs_shape == (17,)


def test_the_synthetic_keys_under_workload_load_into_their_own_section(write_yaml, no_cuda):
    """A config file or run folder from before ``synthetic:`` had them under ``workload:``: they load into
    the synthetic section (its own keys, set too, win); what a run records has them there only."""
    old = config.validate(config.load_yaml(write_yaml(
        "workload:\n  num_actors: 3\n  obs_shape: [4, 84, 84]\n  obs_dtype: uint8\n  env_step_ms: 0\n"
        "  env_compute_ms: 0.5\n  num_actions: 3\n")))
    assert old.synthetic == SyntheticConfig(obs_shape=(4, 84, 84), obs_dtype="uint8", env_step_ms=0.0,
                                            env_compute_ms=0.5, num_actions=3)
    assert old.workload.num_actors == 3
    both = config.from_dict({"workload": {"env_step_ms": 1}, "synthetic": {"env_step_ms": 2}})
    assert both.synthetic.env_step_ms == 2
    recorded = config.recorded(old)
    assert recorded["synthetic"]["obs_shape"] == [4, 84, 84] and "obs_shape" not in recorded["workload"]
    assert config.from_dict(recorded) == old
    with pytest.raises(ConfigError, match="invalid synthetic.obs_dtype: got 'float16'"):
        config.validate(config.from_dict({"workload": {"obs_dtype": "float16"}}))
    dqn = config.recorded(config.validate(config.from_dict({"workload": {"algo": "dqn"}})))
    assert "synthetic" not in dqn  # a Gymnasium run reads none of it


def test_to_dict_round_trips(no_cuda):
    cfg = RunConfig(
        janus=JanusConfig(is_on_policy=True, g_collect=0.25, overlap_select=1),
        workload=WorkloadConfig(num_actors=4),
        synthetic=SyntheticConfig(obs_shape=(3, 5)),
        name="rt",
        seed=3,
    )
    back = config.from_dict(cfg.to_dict())
    assert back == cfg
    assert config.resolve(back) == config.resolve(cfg)


# ---------------------------------------------------------------------------------------------
# YAML structure errors
# ---------------------------------------------------------------------------------------------


def test_unknown_top_level_key(write_yaml):
    err = error_of("batch_size: 32\nbatchsize: 32\n", write_yaml)
    msg = str(err)
    assert "'batchsize'" in msg
    assert "accepted keys" in msg
    for key in ("batch_size", "buffer_capacity", "placement", "workload", "seed"):
        assert key in msg


def test_unknown_workload_key(write_yaml):
    err = error_of("workload:\n  num_actor: 2\n", write_yaml)
    msg = str(err)
    assert "'num_actor'" in msg and "workload" in msg
    assert "accepted keys" in msg
    for key in ("num_actors", "envs_per_actor", "obs_shape"):
        assert key in msg
    assert "batch_size" not in msg.split("accepted keys")[1]  # lists the workload's keys


def test_workload_key_at_top_level_is_unknown(write_yaml):
    err = error_of("num_actors: 2\n", write_yaml)
    assert "'num_actors'" in str(err)


def test_workload_must_be_a_mapping(write_yaml):
    assert "workload" in str(error_of("workload: 5\n", write_yaml))


def test_non_mapping_yaml(write_yaml):
    assert "mapping" in str(error_of("- 1\n- 2\n", write_yaml))


def test_invalid_yaml_syntax(write_yaml):
    err = error_of("batch_size: [1, 2\n", write_yaml)
    assert "not valid YAML: line 2, column 1: while parsing a flow sequence" in str(err)
    assert "\\n" not in str(err), "the parser's message, not its repr"


def test_a_key_given_twice_is_an_error_naming_both_lines(write_yaml):
    """PyYAML keeps the last value silently; the first was probably meant (or both edited)."""
    err = error_of("workload:\n  total_env_steps: 5\n  total_env_steps: 6\n", write_yaml)
    assert "key 'total_env_steps' is given twice in one mapping (lines 2 and 3)" in str(err)
    assert "key 'algorithm' is given twice" in str(error_of("algorithm:\n  lr: 0.1\nalgorithm:\n  lr: 0.2\n", write_yaml))


def test_missing_file(tmp_path):
    with pytest.raises(ConfigError, match="not found"):
        config.load_yaml(tmp_path / "nope.yaml")
    with pytest.raises(ConfigError, match="is a directory; give the YAML file in it"):
        config.load_yaml(tmp_path)


# ---------------------------------------------------------------------------------------------
# invalid values: the message names the field, the value and what is accepted
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text,field,given,accepted",
    [
        ("buffer_capacity: 0\n", "buffer_capacity", "0", "integer >= 1"),
        ("buffer_capacity: -5\n", "buffer_capacity", "-5", "integer >= 1"),
        ("buffer_capacity: 100\nbatch_size: 256\n", "buffer_capacity", "100", "at least batch_size=256"),
        ("batch_size: 0\n", "batch_size", "0", "integer >= 1"),
        ("batch_size: 1.5\n", "batch_size", "1.5", "integer >= 1"),
        ("batch_size: '64'\n", "batch_size", "'64'", "integer >= 1"),
        ("overlap_collect: 2\n", "overlap_collect", "2", "0 or 1"),
        ("overlap_select: -1\n", "overlap_select", "-1", "0 or 1"),
        ("overlap_select: 0.5\n", "overlap_select", "0.5", "0 or 1"),
        ("placement: gpu\n", "placement", "'gpu'", "'cpu_pageable', 'cpu_pinned', 'cuda'"),
        ("actor_device: tpu\n", "actor_device", "'tpu'", "'cpu', 'cuda'"),
        ("learner_device: mps\n", "learner_device", "'mps'", "'cpu', 'cuda'"),
        ("g_collect: 2.5\n", "g_collect", "2.5", "integer >= 1"),
        ("g_select: 0.5\n", "g_select", "0.5", "integer >= 1"),
        ("g_select: 1/2\n", "g_select", "0.5", "integer >= 1"),
        ("g_collect: abc\n", "g_collect", "'abc'", "k/M"),
        ("g_collect: 1/0\n", "g_collect", "'1/0'", "k/M"),
        ("g_collect: [1]\n", "g_collect", "[1]", "k/M"),
        ("is_on_policy: maybe\n", "is_on_policy", "'maybe'", "true or false"),
        ("num_minibatches: 0\n", "num_minibatches", "0", "integer >= 1"),
        ("actor_buffer_size: 0\n", "actor_buffer_size", "0", "integer >= 1"),
        ("prefetch: 0\n", "prefetch", "0", "integer >= 1"),
        ("seed: 1.5\n", "seed", "1.5", "integer"),
        ("synthetic:\n  obs_dtype: float16\n", "synthetic.obs_dtype", "'float16'", "'float32', 'uint8'"),
        ("workload:\n  algo: a2c\n", "workload.algo", "'a2c'", "'dqn'"),
        ("synthetic:\n  obs_shape: [4, 0]\n", "synthetic.obs_shape", "[4, 0]", "positive integers"),
        ("synthetic:\n  obs_shape: []\n", "synthetic.obs_shape", "[]", "non-empty"),
        ("synthetic:\n  obs_shape: {a: 1}\n", "synthetic.obs_shape", "{'a': 1}", "list of positive integers"),
        ("workload:\n  num_actors: 0\n", "workload.num_actors", "0", "integer >= 1"),
        ("workload:\n  num_layers: -1\n", "workload.num_layers", "-1", "integer >= 0"),
        ("synthetic:\n  env_step_ms: -1\n", "synthetic.env_step_ms", "-1", "in [0, 60000]"),
        ("workload:\n  iterations: 2.5\n", "workload.iterations", "2.5", "integer >= 1"),
    ],
)
def test_invalid_value_names_field_and_accepted(write_yaml, no_cuda, text, field, given, accepted):
    msg = str(error_of(text, write_yaml))
    assert f"invalid {field}:" in msg
    assert f"got {given}" in msg
    assert accepted in msg


@pytest.mark.parametrize(
    "text,field",
    [
        ("batch_size: true\n", "batch_size"),
        ("buffer_capacity: yes\n", "buffer_capacity"),
        ("num_minibatches: false\n", "num_minibatches"),
        ("seed: true\n", "seed"),
        ("g_collect: true\n", "g_collect"),
        ("workload:\n  num_actors: true\n", "workload.num_actors"),
        ("synthetic:\n  env_step_ms: false\n", "synthetic.env_step_ms"),
        ("synthetic:\n  obs_shape: [true, 4]\n", "synthetic.obs_shape"),
    ],
)
def test_bool_where_number_expected(write_yaml, no_cuda, text, field):
    msg = str(error_of(text, write_yaml))
    assert f"invalid {field}:" in msg
    assert "True" in msg or "False" in msg


def test_on_policy_fraction_granularity_lists_accepted_fractions(write_yaml, no_cuda):
    msg = str(error_of("is_on_policy: true\nnum_minibatches: 4\ng_select: 0.3\n", write_yaml))
    assert "invalid g_select:" in msg and "got 0.3" in msg
    assert "1/4, 2/4, 3/4, 4/4" in msg
    assert "num_minibatches=4" in msg


@pytest.mark.parametrize("g", ["2", "1.5", "0", "-1/4", "1/3", "5/4"])
def test_on_policy_granularity_outside_k_over_m_rejected(write_yaml, no_cuda, g):
    msg = str(error_of(f"is_on_policy: true\nnum_minibatches: 4\ng_collect: {g}\n", write_yaml))
    assert "invalid g_collect:" in msg and "1/4, 2/4, 3/4, 4/4" in msg


@pytest.mark.parametrize("g,expected", [("1/4", 0.25), ("2/4", 0.5), ("3/4", 0.75), ("1", 1), ("4/4", 1), ("0.5", 0.5), (" 1/2 ", 0.5)])
def test_on_policy_fraction_strings_parsed(write_yaml, no_cuda, g, expected):
    cfg = load_and_resolve(write_yaml(f"is_on_policy: true\nnum_minibatches: 4\ng_collect: '{g}'\ng_select: {g}\n"))
    assert cfg.janus.g_collect == expected and cfg.janus.g_select == expected
    # a whole number is an int (config.yaml says 1, not 1.0), a fraction a float
    assert type(cfg.janus.g_collect) is type(expected) and type(cfg.janus.g_select) is type(expected)


def test_on_policy_other_minibatch_counts(write_yaml, no_cuda):
    cfg = load_and_resolve(write_yaml("is_on_policy: true\nnum_minibatches: 8\ng_select: 3/8\n"))
    assert cfg.janus.g_select == 0.375
    msg = str(error_of("is_on_policy: true\nnum_minibatches: 8\ng_select: 1/4\ng_collect: 1/3\n", write_yaml))
    assert "1/8, 2/8" in msg and "8/8" in msg


def test_num_minibatches_must_divide_rollout(write_yaml, no_cuda):
    # rollout = num_actors * envs_per_actor * rollout_length = 2 * 3 * 5 = 30
    text = """
        is_on_policy: true
        num_minibatches: 4
        workload:
          num_actors: 2
          envs_per_actor: 3
          rollout_length: 5
        """
    msg = str(error_of(text, write_yaml))
    assert "invalid num_minibatches:" in msg and "got 4" in msg and "30" in msg
    ok = load_and_resolve(write_yaml(text.replace("num_minibatches: 4", "num_minibatches: 5")))
    assert ok.minibatch_size == 6


def test_num_minibatches_not_checked_off_policy(write_yaml, no_cuda):
    cfg = load_and_resolve(write_yaml("num_minibatches: 7\nworkload:\n  rollout_length: 5\n"))
    assert cfg.janus.num_minibatches == 7


def test_on_policy_collect_granularity_splits_rollout_steps(write_yaml, no_cuda):
    text = "is_on_policy: true\nnum_minibatches: 4\ng_collect: 1/4\nworkload:\n  rollout_length: 6\n  envs_per_actor: 4\n"
    msg = str(error_of(text, write_yaml))
    assert "invalid g_collect:" in msg and "rollout_length=6" in msg


def test_on_policy_capacity_holds_a_rollout(write_yaml, no_cuda):
    text = "is_on_policy: true\nbuffer_capacity: 100\nbatch_size: 8\n"  # default rollout = 2*8*32 = 512
    msg = str(error_of(text, write_yaml))
    assert "invalid buffer_capacity:" in msg and "512" in msg


def test_off_policy_granularity_integers_accepted(write_yaml, no_cuda):
    cfg = load_and_resolve(write_yaml("g_collect: 8\ng_select: 2.0\n"))
    assert cfg.janus.g_collect == 8.0 and cfg.janus.g_select == 2.0


def test_validate_returns_copy_and_does_not_mutate(no_cuda):
    j = JanusConfig(g_collect="2", overlap_collect=1)
    out = config.validate_janus(j)
    assert out.g_collect == 2.0 and j.g_collect == "2"


def test_constructor_values_validated_like_yaml(no_cuda):
    with pytest.raises(ConfigError, match="invalid batch_size"):
        config.resolve_janus(JanusConfig(batch_size=0))
    with pytest.raises(ConfigError, match="invalid g_select"):
        config.resolve_janus(JanusConfig(is_on_policy=True, g_select=0.3))


# ---------------------------------------------------------------------------------------------
# placements
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text,option,suggestion",
    [
        ("placement: cuda\n", "placement='cuda'", "cpu_pageable"),
        ("placement: cpu_pinned\n", "placement='cpu_pinned'", "cpu_pageable"),
        ("learner_device: cuda\n", "learner_device='cuda'", "learner_device: cpu"),
        # An actor device has no "pageable" variant: the suggestion is the CPU device.
        ("actor_device: cuda\n", "actor_device='cuda'", "actor_device: cpu"),
    ],
)
def test_cuda_options_without_cuda(write_yaml, no_cuda, text, option, suggestion):
    with pytest.raises(PlacementUnavailableError) as info:
        load_and_resolve(write_yaml(text))
    msg = str(info.value)
    assert isinstance(info.value, ConfigError)
    assert option in msg
    assert "CUDA is not available" in msg
    assert suggestion in msg


def test_placement_unavailable_raised_before_any_work(no_cuda):
    # validate() alone does not look at the machine; resolve() does.
    cfg = RunConfig(janus=JanusConfig(placement="cuda"))
    config.validate(cfg)
    with pytest.raises(PlacementUnavailableError):
        config.resolve(cfg)


def test_auto_resolves_to_cpu_pageable_without_cuda(write_yaml, no_cuda):
    cfg = load_and_resolve(write_yaml("placement: auto\nlearner_device: auto\n"))
    assert cfg.janus.placement == "cpu_pageable"
    assert cfg.janus.learner_device == "cpu"
    assert config.available_placements() == {
        "cpu_pageable": None,
        "cpu_pinned": "CUDA is not available on this machine",
        "cuda": "CUDA is not available on this machine",
    }


def test_auto_resolves_to_cuda_with_cuda(write_yaml, with_cuda):
    cfg = load_and_resolve(write_yaml("placement: auto\n"))
    assert cfg.janus.placement == "cuda"
    assert cfg.janus.learner_device == "cuda"
    # Explicit choices are kept.
    cfg = load_and_resolve(write_yaml("placement: cpu_pinned\nactor_device: cuda\nlearner_device: cpu\n"))
    assert (cfg.janus.placement, cfg.janus.actor_device, cfg.janus.learner_device) == ("cpu_pinned", "cuda", "cpu")
    assert set(config.available_placements().values()) == {None}


def test_explicit_cpu_pageable_never_needs_cuda(write_yaml, no_cuda):
    cfg = load_and_resolve(write_yaml("placement: cpu_pageable\nlearner_device: cpu\nactor_device: cpu\n"))
    assert cfg.janus.placement == "cpu_pageable"


# ---------------------------------------------------------------------------------------------
# shipped configs
# ---------------------------------------------------------------------------------------------


@pytest.mark.skipif(not (CONFIGS / "default.yaml").is_file(), reason="configs/default.yaml does not exist (yet)")
def test_default_yaml_loads_and_resolves_here():
    cfg = load_and_resolve(CONFIGS / "default.yaml")
    assert cfg.janus.placement in config.PLACEMENTS
    assert cfg.janus.learner_device in config.DEVICES
    assert cfg == config.resolve(replace(cfg))  # resolving is idempotent


@pytest.mark.parametrize(
    "path", sorted(CONFIGS.glob("*.yaml")) if CONFIGS.is_dir() else [], ids=lambda p: p.name
)
def test_shipped_configs_load_and_validate(path):
    config.validate(config.load_yaml(path))


# ---------------------------------------------------------------------------------------------
# issue 12: YAML exponent floats, env kwargs
# ---------------------------------------------------------------------------------------------


def test_yaml_exponent_without_a_dot_is_a_float(write_yaml, no_cuda):
    """PyYAML (YAML 1.1) reads `1e-3` as a string; janus configs read it as the number it is."""
    path = write_yaml("workload:\n  algo: ppo\n  env_step_ms: 5e-1\nalgorithm:\n  lr: 1e-3\n  ent_coef: 2E-2\n")
    cfg = config.load_yaml(path)
    assert cfg.algorithm == {"lr": 0.001, "ent_coef": 0.02} and cfg.synthetic.env_step_ms == 0.5
    config.validate(config.from_dict({"is_on_policy": True, "g_select": 0.25}, base=cfg))  # accepted by ppo's checks
    assert config.read_yaml(write_yaml("name: abc1e3\n"))["name"] == "abc1e3", "only whole numbers become floats"


def test_non_numeric_hyperparameter_string_names_the_key(write_yaml, no_cuda):
    cfg = config.load_yaml(write_yaml("is_on_policy: true\ng_select: 0.25\nworkload:\n  algo: ppo\nalgorithm:\n  lr: fast\n"))
    with pytest.raises(ConfigError, match="algorithm.lr"):
        config.validate(cfg)


def test_env_kwargs_round_trip_and_validation(write_yaml, no_cuda):
    cfg = config.load_yaml(write_yaml("workload:\n  env_kwargs: {max_episode_steps: 50}\n"))
    assert cfg.workload.env_kwargs == {"max_episode_steps": 50}
    assert config.from_dict(cfg.to_dict()).workload.env_kwargs == {"max_episode_steps": 50}
    with pytest.raises(ConfigError, match="workload.env_kwargs"):
        config.validate(config.load_yaml(write_yaml("workload:\n  env_kwargs: [1, 2]\n")))


# ---- issue 35 item 6: records that say what ran ----------------------------------------------------
RECORDED_RUNS = {
    "synthetic off-policy": ["train"], "synthetic on-policy": ["train", "--is_on_policy", "1", "--g_collect", "1", "--g_select", "1"],
    "dqn": ["train", "--algo", "dqn", "--gamma", "0.9"], "ppo": ["train", "--algo", "ppo"],
    "sac": ["train", "--algo", "sac"], "dqn image": ["train", "--algo", "dqn", "--env", "janus/ImageCatch-v0"],
}


@pytest.mark.parametrize("argv", RECORDED_RUNS.values(), ids=RECORDED_RUNS.keys())
def test_recorded_config_is_resolved_holds_only_what_the_run_reads_and_loads_back(argv: list[str]) -> None:
    """config.yaml and results.json recorded PPO's unread batch_size (256, its minibatches being 128),
    the synthetic workload's obs_shape/num_actions/iterations for RL runs, and of the hyperparameters
    only those set by flag. The record now holds every hyperparameter of the algorithm that ran and no
    field the run does not read; it loads back (as --resume loads config.yaml) as the same run."""
    import yaml

    from janus.algorithms.base import algorithm
    from janus.algorithms.gym_algorithm import MAPPED, GymAlgorithm
    from janus.cli import config_from_args, parse_args
    from janus.result import reported_config

    cfg = config.resolve(config_from_args(parse_args(argv)))
    rec = config.recorded(cfg)
    flat = {f"{s}.{k}" if isinstance(v, dict) and s != "algorithm" else s: None
            for s, v in rec.items() for k in (v if isinstance(v, dict) else [None])}
    flat = {p.removesuffix(".None") for p in flat}
    assert not flat & config.unread_fields(cfg), flat & config.unread_fields(cfg)
    algo = algorithm(cfg.workload.algo)
    if isinstance(algo, GymAlgorithm):
        assert not {"synthetic.obs_shape", "synthetic.num_actions", "workload.iterations"} & flat
        names = {f.name for f in fields(algo.config_class)} - set(MAPPED)
        image = cfg.workload.env.startswith("janus/Image")
        network = {"hidden", "critic_hidden", "activation"}  # the MLP's: images get a fixed CNN torso
        assert set(rec["algorithm"]) == names - (network if image else set())  # every one, defaults too
    else:
        assert "algorithm" not in rec and "workload.env" not in flat
    if cfg.janus.is_on_policy:  # a learner batch is a minibatch: rollout / num_minibatches
        assert "batch_size" not in rec and reported_config(cfg)["minibatch_size"] == cfg.rollout_transitions // cfg.janus.num_minibatches
    else:
        assert "num_minibatches" not in rec and reported_config(cfg)["minibatch_size"] == rec["batch_size"]
    text = yaml.safe_dump(rec, sort_keys=False)
    preset = algorithm(cfg.workload.algo).preset
    back = config.from_dict(yaml.safe_load(text), base=config.from_dict(preset) if preset else None)
    assert config.recorded(config.resolve(back)) == rec
