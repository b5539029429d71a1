"""``janus.train(...)``: train from Python, as ``janus train`` does, into the same run folder.

    import janus
    run = janus.train("dqn", env="CartPole-v1", total_env_steps=50_000, out="runs/dqn",
                      callbacks=[janus.EarlyStop(mean_return=475), janus.Progress()], seed=0, lr=5e-4)
    run.policy.predict(obs)   # the trained policy (janus.load_policy of the run folder)
    run.result                # the run's RunResult, as results.json records it
    run.out                   # the run folder: config.yaml, results.json, charts, checkpoint/
    runs = janus.train("dqn", env="CartPole-v1", seeds=[0, 1, 2], out="runs/dqn3")  # a run per seed and
    runs.final_return["iqm"]  # their aggregate, as janus train --seeds (janus.api.seeds.SeedRuns)

Every ``janus train --flag`` is a keyword of the same name, read by the same code: the keywords
become the ``janus train`` command's arguments (:func:`train_arguments`), which
:func:`janus.cli.configured` turns into a validated configuration and
:func:`janus.harness.commands.run_command` runs into the run folder, exactly as for the command.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, overload

from janus.api.run import TrainedRun, configured_from, keyword_errors, prepared, reworded, run_one, train_arguments
from janus.callbacks import Callback
from janus.errors import JanusError

if TYPE_CHECKING:
    from janus.api.seeds import SeedRuns

__all__ = ["TrainedRun", "train", "train_arguments"]


@overload
def train(algo: str | None = None, env: str | Callable[[], Any] | Any = None, *, seeds: None = None,
          callbacks: Sequence[Callback] | Callback | None = (), **flags: Any) -> TrainedRun: ...


@overload
def train(algo: str | None = None, env: str | Callable[[], Any] | Any = None, *, seeds: Sequence[int],
          callbacks: Sequence[Callback] | Callback | None = (), **flags: Any) -> SeedRuns: ...


def train(algo: str | None = None, env: str | Callable[[], Any] | Any = None, *, seeds: Sequence[int] | None = None,
          callbacks: Sequence[Callback] | Callback | None = (), **flags: Any) -> TrainedRun | SeedRuns:
    """Train ``algo`` (dqn, ppo, sac, appo, impala in any case, a custom ``package.module:Name``; None: by the env's action
    space) on ``env`` and write the run folder ``out`` as ``janus train`` does.

    ``env``: a Gymnasium id; or a zero-argument callable returning a ``gymnasium.Env``, or an env
    instance (copied for each environment of the run), both registered in this process and run on
    the ``local`` backend, or on ``backend="process"``, whose worker processes get them pickled by
    cloudpickle (a hung ``env.step`` is then cut: :mod:`janus.envs.in_process`). ``callbacks``:
    :class:`~janus.callbacks.Callback` objects (progress, early stop, checkpoint, evaluation), a list or
    a single one; a hook that raises stops the run, which is saved (status ``failed``), then
    :class:`~janus.errors.CallbackError` is raised. ``flags``: any ``janus train`` flag by its name
    (``total_env_steps``, ``out``, ``seed``, ``lr``, ``batch_size``, ``num_workers``, ``backend`` ...),
    validated as the command validates it. Raises :class:`~janus.errors.ConfigError` for an unknown
    keyword (naming close matches) or a bad value; a Ctrl-C stops the run, writes it and re-raises.

    ``seeds=[0, 1, 2]``: one run per seed into OUT/seed-<s> and their aggregate (OUT/aggregate.json
    and .png), as ``janus train --seeds``; returns a :class:`~janus.api.seeds.SeedRuns` (see
    :func:`janus.api.seeds.train_seeds` for where the seeds run and how callbacks see them).
    """
    if seeds is not None:
        from janus.api.seeds import train_seeds

        try:
            return train_seeds(algo, env, seeds, callbacks, flags)
        except JanusError as exc:  # the run folder's errors (out=, force=) in the caller's words
            raise reworded(exc) from None
    hooks, args = prepared(algo, env, callbacks, flags)
    return run_one(args, keyword_errors(configured_from)(args), hooks)
