"""The configuration of a run, as types: :class:`RunConfig` and its sections (dataclasses only).

:mod:`janus.config` loads, validates and records them; this module sits below both it and the
algorithms (:mod:`janus.algorithms.base` annotates its interface with :class:`RunConfig`), so the
two never import each other in a circle.
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import inspect
import itertools
import re
import textwrap
from dataclasses import dataclass, field
from typing import Any

from janus.buffer.settings import JanusConfig


@dataclass
class WorkloadConfig:
    """The synthetic (or RL) workload driving the data path.

    Its defaults are the ``workload:`` section of the packaged default configuration
    (``janus/configs/default.yaml``, what a run without ``--config`` reads); a test keeps the two equal."""

    algo: str = "synthetic"
    """Workload: ``synthetic`` (simulated actors, real torch learner), or a Gymnasium algorithm: ``dqn``, ``ppo``,
    ``sac``, ``appo`` or ``impala``."""
    env: str = "CartPole-v1"
    """Gymnasium environment id (Box, Discrete, Dict, Tuple ... observations; images get a CNN); ``module:EnvId`` imports
    ``module`` first (in every worker), which registers ``EnvId``."""
    env_kwargs: dict[str, Any] = field(default_factory=dict)
    """Keyword arguments of ``gymnasium.make`` for every environment (the Gymnasium algorithms), e.g.
    ``{"max_episode_steps": 50}``."""
    vector_env: str = "auto"
    """Where a worker steps its environments (the Gymnasium algorithms): ``sync`` (in its own thread), ``async``
    (one subprocess each: Gymnasium's AsyncVectorEnv over shared memory) or ``auto`` (async for Atari
    ``ALE/`` games with 2+ envs per worker on a machine with more than 2 CPUs, else sync)."""
    preset: str = "auto"
    """Hyperparameters by environment family (the Gymnasium algorithms), layered over the algorithm's preset and
    under the config file and flags: ``auto`` (the env id's family: atari, classic_control, box2d, mujoco, memory; the
    RL Zoo's tuned values, :mod:`janus.algorithms.presets`), ``none`` (the algorithm's own) or a family name."""
    total_env_steps: int = 100_000
    """The Gymnasium algorithms: environment steps to train for (over all workers)."""
    num_actors: int = 2
    """Actor threads producing rollouts."""
    envs_per_actor: int = 8
    """Environments stepped together by one actor: a step yields this many transitions."""
    rollout_length: int = 32
    """Steps per rollout (per actor)."""
    hidden_size: int = 128
    """Learner MLP width (the synthetic workload's; the Gymnasium algorithms': of ``algorithm.hidden``)."""
    num_layers: int = 2
    """Learner MLP hidden layers."""
    iterations: int = 300
    """Iterations: each actor produces one rollout per iteration; the learner performs
    ``updates_per_iteration`` updates (off-policy) or ``num_epochs`` x M (on-policy) per iteration."""
    updates_per_iteration: int = 4
    """Off-policy learner updates per iteration (the replay ratio)."""
    num_epochs: int = 2
    """On-policy epochs over each rollout."""


@dataclass
class SyntheticConfig:
    """The synthetic workload's simulated environments: the ``synthetic:`` section, read by ``--algo
    synthetic`` alone (its flags keep their names: ``--obs_shape``, ``--env_step_ms`` ...).

    A config file or run folder from before this section has these keys under ``workload:``: they
    are read into it (:func:`janus.config.from_dict`). The defaults are the packaged default
    configuration's ``synthetic:`` section (a test keeps the two equal)."""

    obs_shape: tuple[int, ...] = (1024,)
    """Observation shape."""
    obs_dtype: str = "float32"
    """Observation dtype: ``float32`` or ``uint8`` (uint8 is scaled to [0,1] by the learner)."""
    env_step_ms: float = 0.4
    """Simulated environment cost per actor step, in milliseconds (sleeps, like a remote env)."""
    env_compute_ms: float = 0.0
    """Simulated CPU-bound environment cost per actor step, in milliseconds (a busy Python loop that
    holds the GIL, like a Gymnasium env written in Python); added to ``env_step_ms``."""
    num_actions: int = 8
    """Discrete actions (output width of the learner MLP)."""


SYNTHETIC_FIELDS = tuple(f.name for f in dataclasses.fields(SyntheticConfig))
"""The keys of the ``synthetic:`` section (under ``workload:`` before it had one)."""


@dataclass
class RuntimeConfig:
    """The actor-model runtime hosting a training run (``janus train``).

    The number of workers is ``workload.num_actors`` (flag ``--num_workers``).
    """

    backend: str = "local"
    """``local`` (threads in this process), ``process`` (worker OS processes over shared memory),
    ``ray`` (one process per component) or ``auto`` (``process`` when an overlap is on and two CPUs
    or more are usable, else ``local``)."""
    workers_per_node: int = 0
    """Workers per node, one WorkerProxy each (0: all workers on one node). Local: simulated nodes."""
    address: str | None = None
    """Ray: ``auto`` or ``HOST:PORT`` of a running cluster; none starts a local Ray on 127.0.0.1."""
    min_inserts: int = 0
    """Transitions stored before the first batch is sampled (0: one batch)."""
    samples_per_insert: float = 0.0
    """Sampled transitions per inserted transition, enforced by the replay's rate limiter (0: no ratio)."""
    samples_per_param_load: int = 8
    """Off-policy: trained batches between parameter versions (on-policy: one per rollout)."""
    max_in_flight: int = 4
    """Ray: batches a remote learner keeps requested from the replay host; everywhere: the Trainer
    reports every max_in_flight / 2 batches."""
    max_calls_in_flight: int = 4
    """Ray: insert calls a worker may have in flight before it waits."""
    ping_interval_s: float = 0.5
    """Health check period."""
    pong_timeout_s: float = 10.0
    """A component that does not answer a ping for this long is restarted (worker) or fails the run."""
    stall_timeout_s: float = 60.0
    """No transition inserted and no batch trained for this long (outside a checkpoint) fails the run
    with a message naming the starved stage and the knob to change (0: never)."""
    eval_interval_steps: int = 0
    """Env steps between evaluations of the greedy policy on a separate environment, the best kept
    in RUN_DIR/best (0: no evaluation)."""
    eval_episodes: int = 10
    """Episodes per evaluation (the same environment seeds every time)."""
    target_return: float | None = None
    """Stop the run at the first evaluation whose mean return reaches this (results.json: ``solved``,
    ``solved_at_s`` from the command's start, ``solved_at_env_steps``); None: run the whole budget. With
    no ``eval_interval_steps`` given, the run evaluates every ``total_env_steps / 50`` env steps (1,000 at least)."""
    best_dir: str | None = None
    """Where periodic evaluation keeps the best policy; ``janus train`` sets RUN_DIR/best."""
    checkpoint_dir: str | None = None
    """Where the Trainer (policy, optimiser, counters) and TrajectoryManager (DQN replay buffer)
    save checkpoints, on stop and every ``checkpoint_interval_s``; ``janus train`` sets RUN_DIR/checkpoint."""
    checkpoint_interval_s: float = 60.0
    """Seconds between periodic checkpoints."""
    results_interval_s: float = 30.0
    """Seconds between rewrites of results.json/csv and the curves while a run goes (also on Ctrl-C)."""
    resume: bool = False
    """Restore from ``checkpoint_dir`` at start (``janus train --resume RUN_DIR``)."""
    allow_oversubscribe: bool = False
    """Start the run even past this machine's bounds (more workers, environments or processes than its
    CPUs take, a replay larger than its free memory: :mod:`janus.config.resources`), which are refused otherwise."""


@dataclass
class RunConfig:
    """One run: data-path knobs, workload, runtime, name and seed."""

    janus: JanusConfig = field(default_factory=JanusConfig)
    workload: WorkloadConfig = field(default_factory=WorkloadConfig)
    runtime: RuntimeConfig = field(default_factory=RuntimeConfig)
    algorithm: dict[str, Any] = field(default_factory=dict)
    """Overrides of the algorithm's hyperparameters (``DQNConfig`` / ``PPOConfig`` field names)."""
    name: str = "run"
    seed: int = 0
    synthetic: SyntheticConfig = field(default_factory=SyntheticConfig)
    """The synthetic workload's simulated environments (read by ``--algo synthetic`` only)."""

    # ---- derived quantities -------------------------------------------------------------------
    @property
    def rollout_transitions(self) -> int:
        """Transitions produced by all actors in one iteration."""
        w = self.workload
        return w.num_actors * w.envs_per_actor * w.rollout_length

    @property
    def minibatch_size(self) -> int:
        """Transitions per learner batch."""
        if self.janus.is_on_policy:
            return self.rollout_transitions // self.janus.num_minibatches
        return self.janus.batch_size

    @property
    def updates_per_iteration(self) -> int:
        """Learner batches consumed per iteration."""
        if self.janus.is_on_policy:
            return self.workload.num_epochs * self.janus.num_minibatches
        return self.workload.updates_per_iteration

    def to_dict(self) -> dict[str, Any]:
        """Flat dict as written to YAML / results.json (janus knobs at the top level)."""
        out: dict[str, Any] = {"name": self.name, "seed": self.seed}
        out.update(dataclasses.asdict(self.janus))
        out["workload"] = dataclasses.asdict(self.workload)
        out["synthetic"] = {**dataclasses.asdict(self.synthetic), "obs_shape": list(self.synthetic.obs_shape)}
        out["runtime"] = dataclasses.asdict(self.runtime)
        if self.algorithm:
            out["algorithm"] = dict(self.algorithm)
        return out


@functools.cache
def field_docs(cls: type) -> dict[str, str]:
    """Each dataclass field's docstring (the string literal under it), on one line (parsed once per class)."""
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(cls)))
    except (OSError, TypeError, SyntaxError):  # no source shipped
        return {}
    body = tree.body[0].body if tree.body and isinstance(tree.body[0], ast.ClassDef) else []
    docs = {}
    for node, after in itertools.pairwise(body):
        if (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and isinstance(after, ast.Expr)
                and isinstance(after.value, ast.Constant) and isinstance(after.value.value, str)):
            docs[node.target.id] = " ".join(re.sub(r":\w+:|``", "", after.value.value).split())
    return docs
