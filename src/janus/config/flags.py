"""The settings a run is asked by name: ``janus train --lr 3e-4`` and ``janus.train(lr=3e-4)`` alike.

One table for the command line and the Python API: which names there are (a configuration field
by its own name, every algorithm's hyperparameters, the network widths, Stable-Baselines3's names,
the run's own settings such as ``out``), which run reads each (:func:`reads`), and the kind of
value each takes (:func:`setting_kinds`). The CLI's parser turns text into these kinds; the API
checks Python values against them (:func:`typed_setting`), so a keyword is as strict as its flag.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping, Sequence
from dataclasses import fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

from janus.buffer.settings import JanusConfig
from janus.config import sb3
from janus.config.schema import RuntimeConfig, SyntheticConfig, WorkloadConfig
from janus.errors import ConfigError, shown

if TYPE_CHECKING:
    from janus.config.request import Naming
    from janus.config.schema import RunConfig

BOOL_FIELDS = {"is_on_policy"}
PER_INVOCATION = {"resume", "checkpoint_dir", "best_dir"}  # set by `janus train` itself (RUN_DIR/checkpoint, best, --resume)

JANUS_FLAGS = tuple(f.name for f in fields(JanusConfig))
WORKLOAD_FLAGS = tuple(f.name for f in (*fields(WorkloadConfig), *fields(SyntheticConfig)))  # from_dict moves the latter
RUNTIME_FLAGS = tuple(f.name for f in fields(RuntimeConfig) if f.name not in PER_INVOCATION)
SYNTHETIC_ONLY = {"obs_shape", "obs_dtype", "env_step_ms", "env_compute_ms", "num_actions", "iterations",
                  "updates_per_iteration", "is_on_policy", "samples_per_param_load"}
"""Settings only the synthetic workload reads (a Gymnasium run takes them from the env and its budget;
it publishes parameters once per round of pieces, or per rollout on-policy)."""
GYM_ONLY = {"env", "env_kwargs", "vector_env", "preset", "total_env_steps", "eval_interval_steps", "eval_episodes",
            "target_return"}
"""Settings only the algorithms acting in Gymnasium environments read (``Algorithm.acts_in_gymnasium``)."""
ON_POLICY_ONLY = {"num_epochs", "num_minibatches"}  # of the algorithms acting in Gymnasium environments
OFF_POLICY_ONLY = {"batch_size"}
RAY_ONLY = {"address", "max_calls_in_flight"}
NETWORK_FLAGS = sb3.NETWORK_FLAGS
"""``net_arch``/``critic_net_arch`` -> the ``algorithm:`` key of widths each sets."""
NUM_WORKERS = "num_workers"
"""Another name of ``num_actors`` (workers are actors)."""

RUN_SETTINGS: dict[str, str] = {
    "config": "path", "out": "path", "resume": "path", "quick": "bool", "force": "bool", "name": "str",
    "verbose": "bool", "tensorboard": "bool", "wandb": "bool", "wandb_project": "str", "seeds": "seeds",
}
"""The settings of a run of ``janus train`` that are not its configuration: name -> kind."""

KINDS = ("bool", "int", "float", "number", "str", "mapping", "int_list", "path", "algo", "seeds", "sb3")
"""What a setting takes: ``number`` an int or float (or the text a knob such as ``g_collect: 1/4`` takes),
``int_list`` a list of ints, ``algo`` a registered name or ``package.module:Name``, ``seeds`` a list of
seeds (checked by :func:`janus.harness.seeds.runs.check_seeds`), ``sb3`` a Stable-Baselines3 name
(checked as it is converted, :mod:`janus.config.sb3`)."""


# ---- what the algorithms declare ----------------------------------------------------------------
def hyperparameters() -> dict[str, dict[str, Any]]:
    """Every hyperparameter setting: name -> {algorithm: its default}, from the algorithms' :meth:`flags`
    (every registered one: the built-in ones and the custom ones registered so far)."""
    from janus.algorithms.base import algorithm, names

    out: dict[str, dict[str, Any]] = {}
    for name in names():
        for flag, hp in algorithm(name).flags().items():
            out.setdefault(flag, {})[name] = hp.default
    return out


def hyperparameter_docs() -> dict[str, str]:
    """Each hyperparameter's help text (the first algorithm that documents it)."""
    from janus.algorithms.base import algorithm, names

    docs: dict[str, str] = {}
    for name in names():
        docs = {**{flag: hp.doc for flag, hp in algorithm(name).flags().items() if hp.doc}, **docs}
    return docs


def acts_in_gymnasium(name: str) -> bool:
    """Whether algorithm ``name`` acts in Gymnasium environments (not the synthetic workload)."""
    from janus.algorithms.base import algorithm

    return algorithm(name).acts_in_gymnasium


def config_settings() -> set[str]:
    """The names of every configuration setting (not SB3's names, not the run's own settings)."""
    return {*JANUS_FLAGS, *WORKLOAD_FLAGS, *RUNTIME_FLAGS, "seed", *hyperparameters(), *NETWORK_FLAGS}


def reads(algo_name: str, flag: str) -> bool:
    """Whether a run of ``algo_name`` reads the config field behind setting ``flag``."""
    from janus.algorithms.base import algorithm

    gym = acts_in_gymnasium(algo_name)
    if flag in SYNTHETIC_ONLY:
        return not gym
    if flag in GYM_ONLY:
        return gym
    if gym and flag in ON_POLICY_ONLY | OFF_POLICY_ONLY:
        return algorithm(algo_name).on_policy == (flag in ON_POLICY_ONLY)
    if flag in hyperparameters():
        return algo_name in hyperparameters()[flag]
    if flag in NETWORK_FLAGS:
        return NETWORK_FLAGS[flag] in algorithm(algo_name).defaults()
    return True


def value_of(cfg: RunConfig, flag: str) -> Any:
    """The value behind setting ``flag`` in ``cfg`` (``hidden_size``/``num_layers``: the network's, for an
    algorithm that sizes it by ``algorithm.hidden``)."""
    from janus.algorithms.base import algorithm

    algo = algorithm(cfg.workload.algo)
    if flag in algo.flags():
        return algo.hyperparameter(cfg, flag)
    if flag in NETWORK_FLAGS:
        return list(algo.hyperparameter(cfg, NETWORK_FLAGS[flag])) or "as --net_arch"
    hidden = algo.hidden_layers(cfg) if flag in ("hidden_size", "num_layers") else None
    if hidden is not None:
        if flag == "hidden_size":
            return hidden[0] if hidden else 0
        return len(hidden)
    if flag == "seed":
        return cfg.seed
    for section in (cfg.janus, cfg.workload, cfg.runtime, cfg.synthetic):
        if flag in {f.name for f in fields(section)}:
            return getattr(section, flag)
    raise KeyError(flag)


def close_names(name: str, known: Sequence[str], n: int = 3) -> list[str]:
    """Up to ``n`` of ``known`` names a mistyped ``name`` may have meant: those that hold it (``--steps``:
    ``--total_env_steps``), shortest first, then spelling look-alikes. ``--name=value``: the name only."""
    name = name.split("=", 1)[0]
    word = name.lstrip("-")
    holding = sorted((k for k in known if len(word) >= 3 and word in k.lstrip("-") and k != name), key=len)
    alike = difflib.get_close_matches(name, known, n=n, cutoff=0.7)
    return list(dict.fromkeys(holding + alike))[:n]



# ---- the kind of value each setting takes --------------------------------------------------------
def _field_kind(type_name: Any) -> str:
    return "str" if type_name in ("str", "str | None") else "bool" if type_name == "bool" else "number"


def setting_kinds() -> dict[str, str]:
    """Every setting of ``janus train`` (:data:`KINDS`): name -> kind, the one table the parser's types
    and the keywords' checks follow."""
    kinds = {name: "bool" if name in BOOL_FIELDS else "number" for name in JANUS_FLAGS}
    special = {"obs_shape": "int_list", "env_kwargs": "mapping", "algo": "algo"}
    wtypes = {f.name: f.type for f in (*fields(WorkloadConfig), *fields(SyntheticConfig))}
    kinds |= {name: special.get(name, "str" if wtypes[name] == "str" else "number") for name in WORKLOAD_FLAGS}
    kinds[NUM_WORKERS] = "number"
    rtypes = {f.name: f.type for f in fields(RuntimeConfig)}
    kinds |= {name: _field_kind(rtypes[name]) for name in RUNTIME_FLAGS}
    kinds["seed"] = "int"
    for name, by_algo in hyperparameters().items():
        example = next(iter(by_algo.values()))
        kinds[name] = ("bool" if isinstance(example, bool) else "str" if isinstance(example, str)
                       else "int" if isinstance(example, int) else "float")
    kinds |= dict.fromkeys(NETWORK_FLAGS, "int_list")
    kinds |= {name: "bool" if sb3.ALIASES.get(name) == "norm_adv" else "sb3" for name in sb3.NAMES}
    return kinds | RUN_SETTINGS


def typed_setting(name: str, kind: str, value: Any, naming: Naming) -> Any:
    """``value`` of setting ``name`` checked against its ``kind``, as strictly as the flag parses text:
    a bool takes a bool (numpy's too), never ``"no"`` or 1; an int an int (not a bool, nor a float); a float
    a real number (not a bool); text a str; a mapping a dict; a path a str or :class:`~pathlib.Path`, not
    empty. numpy scalars become Python ones. Values of the configuration are validated further by it
    (ranges, choices); None is "not given". Raises :class:`ConfigError` naming the setting as ``naming`` does."""
    if value is None or kind in ("algo", "seeds"):  # their own code checks them (the registry, the seeds' check)
        return value
    import numpy as np

    if isinstance(value, np.generic):  # numpy's bool_, int64, float32 ...: the Python value
        value = value.item()
    said = naming(name)
    if kind == "bool":
        if not isinstance(value, bool):
            raise _wrong_type(said, value, "True or False (a bool)")
        return value
    if kind == "path":
        if not isinstance(value, (str, Path)) or (isinstance(value, str) and not value.strip()):
            # Path("") is the current folder: out="" wrote the run there
            raise ConfigError(f"invalid {said}: got {shown(value)}; accepted: a path (str or pathlib.Path), not empty")
        return Path(value)
    if kind == "sb3":
        return value  # Stable-Baselines3's names: janus.config.sb3 checks them, naming janus's equivalent
    if kind == "int_list":
        if isinstance(value, (list, tuple)):
            try:
                return type(value)(typed_setting(name, "int", v, naming) for v in value)
            except ConfigError as exc:
                accepted = str(exc).rpartition("accepted: ")[2]
                raise ConfigError(f"invalid {said}: got {shown(value)}; accepted: a list, each item {accepted}") from None
        return value  # e.g. net_arch as SB3's dict: the configuration checks it
    if kind == "int" and (isinstance(value, bool) or not isinstance(value, int)):
        raise _wrong_type(said, value, "an int")
    if kind == "float" and (isinstance(value, bool) or not isinstance(value, (int, float))):
        raise _wrong_type(said, value, "a number (int or float)")
    if kind == "number" and (isinstance(value, bool) or not isinstance(value, (int, float, str))):
        raise _wrong_type(said, value, f"a number (or the text {said} takes)")
    if kind == "str" and not isinstance(value, str):
        raise _wrong_type(said, value, "a str")
    if kind == "mapping" and not isinstance(value, Mapping):
        raise _wrong_type(said, value, "a dict")
    return value


def _wrong_type(said: str, value: Any, accepted: str) -> ConfigError:
    return ConfigError(f"invalid {said}: got {shown(value)} ({type(value).__name__}); accepted: {accepted}")
