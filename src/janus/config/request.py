"""What a caller asks of janus for one run: a :class:`RunRequest`, typed, from keywords or from flags.

``janus.train(...)`` builds one from its keywords (:func:`janus.api.keywords.keyword_request`), ``janus
train|compare|eval|tune`` from its flags (:mod:`janus.cli`); :func:`janus.harness.configured.configured` turns it
into the run's validated configuration and :func:`janus.harness.commands.run_command` runs it. A request
also says how its caller names settings (:class:`Naming`: ``--lr`` or ``lr``), so an error speaks the
caller's words.

Plain dataclasses, no validation library: the checks are janus's own (:mod:`janus.config.flags`, the
configuration's validation), with the messages its tests assert; pydantic would add a dependency and its
import time to every ``janus`` command (docs/design.md, "Why dataclasses, not pydantic").
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from janus.errors import ConfigError


@dataclass(frozen=True)
class Naming:
    """How a caller names a setting: as a flag of ``janus`` (``--lr``) or a keyword of ``janus.train`` (``lr``)."""

    style: Literal["flag", "keyword"]

    def __call__(self, name: str) -> str:
        """``name`` as the caller writes it: ``--name`` or ``name``."""
        return f"--{name}" if self.style == "flag" else name

    def given(self, name: str, flag_value: str, keyword_value: str) -> str:
        """A setting with its value: ``--net_arch 64 64`` or ``net_arch=[64, 64]``."""
        return f"--{name} {flag_value}" if self.style == "flag" else f"{name}={keyword_value}"

    def render(self, template: str) -> str:
        """``template`` with each ``{setting}`` named as the caller names it."""
        return template.format_map(_Named(self))


class _Named(dict[str, str]):
    def __init__(self, naming: Naming) -> None:
        super().__init__()
        self.naming = naming

    def __missing__(self, key: str) -> str:
        return self.naming(key)


FLAGS = Naming("flag")
"""The command line's naming."""
KEYWORDS = Naming("keyword")
"""The Python API's naming."""

COMMANDS = ("train", "compare", "eval", "tune")
"""The commands a request runs (``janus rollout`` plays a saved policy: no run is configured)."""


@dataclass(frozen=True)
class RunRequest:
    """One run of ``janus train`` (or of ``compare``, ``eval``, ``tune``) as its caller asked for it.

    ``settings`` holds the configuration settings given, by the name the caller used (a field of the
    configuration such as ``total_env_steps``, a hyperparameter such as ``lr``, ``seed``, ``num_workers``,
    a Stable-Baselines3 name such as ``learning_rate``) with typed values; a setting not given is absent.
    The rest is the run's own: where its configuration starts (``algo``, ``config``, ``resume``), where it
    writes (``out``, ``force``) and what it reports.
    """

    command: str = "train"
    """train, compare, eval or tune."""
    algo: str | None = None
    """The algorithm (its preset is the first layer); None: the ``config`` file's, or picked by the env."""
    settings: Mapping[str, Any] = field(default_factory=dict)
    """The configuration settings given: name -> value (:func:`janus.config.flags.setting_kinds`)."""
    config: Path | None = None
    """A YAML configuration file, over the presets."""
    resume: Path | None = None
    """A run folder to continue (its config.yaml is the base)."""
    out: Path | None = None
    """The run folder (None: runs/<command>-<time>)."""
    force: bool = False
    """Move a run already in ``out`` aside."""
    quick: bool = False
    """A tiny workload that finishes in seconds."""
    name: str | None = None
    """The run's name in reports."""
    verbose: bool = False
    tensorboard: bool = False
    wandb: bool = False
    wandb_project: str | None = None
    seeds: Sequence[int] | None = None
    """A run per seed (``janus train --seeds``); checked by :func:`janus.harness.seeds.runs.check_seeds`."""
    repeats: int | None = None
    """compare, eval: runs of each configuration."""
    sweep: str | None = None
    """eval: the knob swept."""
    budget_s: float = 600.0
    """tune: its wall time."""
    search: str | None = None
    """tune: halving, plain or tpe (time_to_solve only); None: the objective's default (halving; tpe)."""
    objective: str = "throughput"
    """tune: what it optimises: throughput (env steps/s) or time_to_solve (seconds to ``target_return``)."""
    confirm_seeds: int = 3
    """tune, time_to_solve: seeds the best setting and the defaults are run on, interleaved, at the end."""
    backends: str = "local,process"
    """tune: the backends tried, comma-separated."""
    invocation: str | None = None
    """The call as results.json records it (a :func:`janus.train` call); None: the command line."""
    naming: Naming = KEYWORDS
    """How the caller names settings, for its errors: keywords (a Python caller), or flags (the command line)."""

    def __post_init__(self) -> None:
        if self.command not in COMMANDS:
            raise ConfigError(f"invalid command: got {self.command!r}; accepted: one of {', '.join(COMMANDS)}")

    @property
    def seed(self) -> Any:
        """The ``seed`` setting given, else None."""
        return self.settings.get("seed")
