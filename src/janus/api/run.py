"""The one run of :func:`janus.train`: its request, validated as the command validates it, run into the
run folder by the command's code, returned as a :class:`TrainedRun`.

Shared by :mod:`janus.api.train` (one seed) and :mod:`janus.api.seeds` (a run per seed).
"""

from __future__ import annotations

import copy
import re
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING

from janus import stopping
from janus.callbacks import Callback, CallbackHooks, merged_settings
from janus.config.request import RunRequest
from janus.errors import CallbackError, JanusError
from janus.stopping import StopRequested

if TYPE_CHECKING:
    from janus.config import RunConfig
    from janus.policy import Policy
    from janus.result import RunResult


@dataclass
class TrainedRun:
    """What :func:`janus.train` returns for one seed: the run folder, its result and (loaded on first use) its policy."""

    out: Path
    """The run folder, with the files ``janus train`` writes."""
    result: RunResult
    """The run's result (``status`` finished, or stopped when a callback stopped it)."""
    stopped_by: Callback | None = None
    """The callback that stopped the run early, if one did."""
    _policy: Policy | None = field(default=None, repr=False)

    @property
    def status(self) -> str:
        return self.result.status

    @property
    def policy(self) -> Policy:
        """The trained policy (:func:`janus.load_policy` of :attr:`out`: the last checkpoint)."""
        if self._policy is None:
            from janus.policy import load_policy

            self._policy = load_policy(self.out, trust=True)  # the run this process trained: its own modules
        return self._policy


def prepared(request: RunRequest, callbacks: Sequence[Callback] | Callback | None) -> tuple[CallbackHooks, RunRequest]:
    """The callbacks' hooks and the request of a call, typed (:func:`janus.api.keywords.typed_request`):
    with the settings the callbacks stand for, an env object registered in this process (its settings
    checked); ``callbacks``: a list of them or a single one."""
    from janus.api.keywords import typed_request

    hooks = CallbackHooks(callbacks)
    settings = merged_settings(hooks.callbacks, dict(request.settings))
    env = settings.get("env")
    if env is not None:
        from janus.envs.in_process import check_in_process_settings, is_in_process, register_in_process, shipment

        if is_in_process(env):
            settings = check_in_process_settings(settings)
            env = register_in_process(env)
            if settings["backend"] == "process":  # its worker processes get it pickled: a clear error now if it cannot be
                shipment(env)
            settings["env"] = env
    return hooks, typed_request(replace(request, settings=settings))


def configured_from(request: RunRequest) -> RunConfig:
    """The validated configuration of ``request``, as ``janus train`` builds it, its errors in the caller's
    words (:func:`reworded`)."""
    from janus.config.build import in_callers_words
    from janus.harness.configured import configured

    try:
        return configured(request)
    except JanusError as exc:
        raise reworded(in_callers_words(exc, request), request) from None


def reworded(exc: JanusError, request: RunRequest) -> JanusError:
    """``exc`` (same type and attributes) with a message the run folder wrote in flags (``--out 'x'``,
    ``--force``) in keywords (:func:`as_keywords`), for a request made of keywords; else ``exc``."""
    if request.naming.style != "keyword":
        return exc
    text = str(exc)
    new = as_keywords(text)
    if new == text:
        return exc
    copied = copy.copy(exc)
    copied.args = (new,)
    return copied


def as_keywords(text: str) -> str:
    """A message that names ``janus train`` flags, in :func:`janus.train`'s words: ``--out 'x'`` is
    ``out='x'``, an on/off flag ``--force`` is ``force=True``, any other ``--name`` is ``name``, and a
    configuration key with a keyword of its name (``workload.total_env_steps``) is that keyword.

    For the messages of the run folder and the runtime, which speak to the command line; what the
    configuration's build says is in the caller's words already (:class:`~janus.config.request.Naming`)."""
    from janus.config.flags import RUN_SETTINGS, setting_kinds

    known = setting_kinds()
    switches = {name for name, kind in RUN_SETTINGS.items() if kind == "bool"}

    def keyword(m: re.Match[str]) -> str:
        name, value = m.group(1), m.group(2)
        if name not in known:
            return m.group(0)
        if value:
            return f"{name}={value.strip()}"
        return f"{name}=True" if name in switches else name

    text = re.sub(r"--(\w+)( '[^']*'| \"[^\"]*\")?", keyword, text)
    # a configuration key (workload.total_env_steps, runtime.min_inserts) is the keyword of the same name
    return re.sub(r"\b(?:workload|runtime|algorithm|janus)\.(\w+)\b",
                  lambda m: m.group(1) if m.group(1) in known else m.group(0), text)


def run_one(request: RunRequest, cfg: RunConfig, hooks: CallbackHooks) -> TrainedRun:
    """Run one configured run into its folder; a stop signal as for the command (the run stops,
    is written, then it is raised)."""
    from janus.harness.commands import run_command
    from janus.runtime.command_clock import command_started_here

    with stopping.handled() as signals, command_started_here():  # solved_at_s counts from this call
        try:
            run_command(request, cfg, hooks)
        except StopRequested:
            pass  # the run is written (status stopped, or failed by a callback); the hooks hold its result
        except CallbackError:
            raise  # names the callback and its hook, the user's exception chained
        except JanusError as exc:  # the run folder's and the runtime's errors, in the caller's words
            raise reworded(exc, request) from None
        late = signals.late() if signals is not None else None
    if hooks.failure is not None:  # a hook raised: the run is saved (status failed), the error reaches the caller
        raise hooks.failure
    if late is not None:  # it came as the run ended: the run is saved as finished, the stop still reaches the caller
        raise KeyboardInterrupt(late)
    if hooks.out is None or hooks.result is None:  # resume= of a run at its budget: results written, nothing run
        raise JanusError("janus.train: nothing was trained (see the messages above); the run folder's results.json "
                         "holds its result")
    return TrainedRun(hooks.out, hooks.result, hooks.stopped_by)


