"""``janus.train(...)``: train from Python, as ``janus train`` does, into the same run folder.

    import janus
    run = janus.train("dqn", env="CartPole-v1", total_env_steps=50_000, out="runs/dqn",
                      callbacks=[janus.EarlyStop(mean_return=475), janus.Progress()], seed=0, lr=5e-4)
    run.policy.predict(obs)   # the trained policy (janus.load_policy of the run folder)
    run.result                # the run's RunResult, as results.json records it
    run.out                   # the run folder: config.yaml, results.json, charts, checkpoint/
    runs = janus.train("dqn", env="CartPole-v1", seeds=[0, 1, 2], out="runs/dqn3")  # a run per seed and
    runs.final_return["iqm"]  # their aggregate, as janus train --seeds (janus.api.seeds.SeedRuns)

    request = janus.RunRequest(algo="ppo", settings={"env": "CartPole-v1", "lr": 3e-4}, out=Path("runs/ppo"))
    run = janus.train(request)  # the same run as janus.train("ppo", env="CartPole-v1", lr=3e-4, out="runs/ppo")

Every ``janus train --flag`` is a keyword of the same name: the keywords become a typed
:class:`~janus.config.request.RunRequest` (:func:`janus.api.keywords.keyword_request`), the one the
command line builds from its flags; :func:`janus.harness.configured.configured` turns it into a validated
configuration and :func:`janus.harness.commands.run_command` runs it into the run folder, exactly as
for the command.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any, overload

from janus.api.keywords import invocation_of, keyword_request, request_call
from janus.api.run import TrainedRun, configured_from, prepared, reworded, run_one
from janus.callbacks import Callback, CallbackHooks, merged_settings
from janus.config.request import KEYWORDS, RunRequest
from janus.errors import ConfigError, JanusError

if TYPE_CHECKING:
    from janus.api.seeds import SeedRuns

__all__ = ["RunRequest", "TrainedRun", "train"]


@overload
def train(algo: RunRequest, *, callbacks: Sequence[Callback] | Callback | None = ()) -> TrainedRun | SeedRuns: ...


@overload
def train(algo: str | None = None, env: str | Callable[[], Any] | Any = None, *, seeds: None = None,
          callbacks: Sequence[Callback] | Callback | None = (), **flags: Any) -> TrainedRun: ...


@overload
def train(algo: str | None = None, env: str | Callable[[], Any] | Any = None, *, seeds: Sequence[int],
          callbacks: Sequence[Callback] | Callback | None = (), **flags: Any) -> SeedRuns: ...


def train(algo: str | RunRequest | None = None, env: str | Callable[[], Any] | Any = None, *,
          seeds: Sequence[int] | None = None, callbacks: Sequence[Callback] | Callback | None = (),
          **flags: Any) -> TrainedRun | SeedRuns:
    """Train ``algo`` (dqn, ppo, sac, appo, impala, r2d2 in any case, a custom ``package.module:Name``; None: by the env's action
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

    ``algo`` may instead be a :class:`~janus.config.request.RunRequest` (``janus.train(request)``): the run
    it asks for, with only ``callbacks`` beside it; its values are checked as keywords are (errors name
    settings by the request's :class:`~janus.config.request.Naming`: keywords unless it says flags).
    """
    if isinstance(algo, RunRequest):
        if env is not None or seeds is not None or flags:
            raise ConfigError("janus.train(request): the request holds the run's settings; give only callbacks "
                              "beside it (env, seeds and every other setting are fields of the request)")
        request = algo if algo.invocation is not None else replace(algo, invocation=request_call(algo))
    else:
        request = keyword_request(algo, {**({"env": env} if env is not None else {}), **flags,
                                         **({"seeds": seeds} if seeds is not None else {})})
        given = merged_settings(CallbackHooks(callbacks).callbacks, flags)  # with what the callbacks stand for
        request = replace(request, invocation=invocation_of(algo, env, given), naming=KEYWORDS)
    if request.command != "train":
        raise ConfigError(f"janus.train: a request of command {request.command!r}; janus.train runs train requests "
                          f"(the other commands: janus {request.command} on the command line)")
    if request.seeds is not None:
        from janus.api.seeds import train_seeds

        try:
            return train_seeds(request, callbacks)
        except JanusError as exc:  # the run folder's errors (out=, force=) in the caller's words
            raise reworded(exc, request) from None
    hooks, request = prepared(request, callbacks)
    return run_one(request, configured_from(request), hooks)
