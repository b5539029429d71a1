""":func:`janus.train`'s keywords as a typed :class:`~janus.config.request.RunRequest`.

Every ``janus train`` flag is a keyword of the same name, its value checked against the kind the
settings' table gives it (:func:`janus.config.flags.setting_kinds`: the table the command line's
parser follows too), as strictly as the flag: an on/off keyword takes a bool, never ``"no"`` or 1.
Errors name keywords (``invalid lr``), never flags.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import fields, replace
from typing import Any

from janus.config.flags import RUN_SETTINGS, close_names, setting_kinds, typed_setting
from janus.config.request import KEYWORDS, RunRequest
from janus.errors import ConfigError, shown


def keyword_request(algo: str | None, keywords: Mapping[str, Any]) -> RunRequest:
    """The request of ``janus.train(algo, **keywords)`` (``env`` among the keywords), not yet typed
    (:func:`typed_request` checks the values, once an env object is registered in this process). An
    unknown keyword is a :class:`ConfigError` naming close matches (janus's names only, not
    Stable-Baselines3's)."""
    if algo is not None and "algo" in keywords:
        raise ConfigError(f"algo given twice: {algo!r} and algo={keywords['algo']!r}")
    given = dict(keywords)
    if algo is not None:
        given["algo"] = algo
    kinds = setting_kinds()
    for name in given:
        if name not in kinds:
            from janus.config.sb3 import NAMES

            close = close_names(f"--{name}", [f"--{n}" for n in kinds if n not in NAMES])
            hint = f" (did you mean {' or '.join(c.lstrip('-') for c in close)}?)" if close else ""
            raise ConfigError(f"janus.train: unknown keyword {name!r}{hint}; accepted: the flags of janus train "
                              f"(janus train --help), as keywords")
    run = {k: v for k, v in given.items() if k in RUN_SETTINGS and v is not None}
    settings = {k: v for k, v in given.items() if k not in RUN_SETTINGS and k != "algo"}
    return RunRequest(algo=given.get("algo"), settings=settings, naming=KEYWORDS, **run)


def typed_request(request: RunRequest) -> RunRequest:
    """``request`` with every value checked against its setting's kind (:func:`janus.config.flags.typed_setting`,
    errors in the request's naming), numpy scalars as Python values, paths as :class:`~pathlib.Path`;
    a setting given as None is left out. ``algo`` in the registry's spelling (``PPO`` is ppo)."""
    kinds = setting_kinds()
    own = {"algo", *RUN_SETTINGS}  # the request's own fields
    unknown = sorted(name for name in request.settings if name not in kinds or name in own)
    if unknown:
        raise ConfigError(f"invalid settings: {', '.join(map(repr, unknown))} not a setting of a run's "
                          f"configuration; accepted: the flags of janus train (janus train --help) but "
                          f"{', '.join(sorted(own))}, which are fields of the request")
    settings = {name: typed_setting(name, kinds[name], value, request.naming) for name, value in request.settings.items()
                if value is not None}
    run = {f.name: typed_setting(f.name, RUN_SETTINGS[f.name], getattr(request, f.name), request.naming)
           for f in fields(request) if f.name in RUN_SETTINGS and getattr(request, f.name) is not None}
    algo = request.algo
    if isinstance(algo, str):
        from janus.algorithms.base import canonical_name

        algo = canonical_name(algo)  # "PPO" is ppo; a custom package.module:Name keeps its case
    elif algo is not None:
        raise ConfigError(f"invalid {request.naming('algo')}: got {shown(algo)}; accepted: an algorithm's name "
                          f"(dqn, ppo ...) or package.module:Name")
    return replace(request, algo=algo, settings=settings, **run)


def invocation_of(algo: str | None, env: Any, keywords: Mapping[str, Any]) -> str:
    """The call as results.json records it: ``janus.train('dqn', env='CartPole-v1', ...)``."""
    parts = [repr(algo)] if algo is not None else []
    if env is not None:
        parts.append(f"env={env!r}" if isinstance(env, str) else f"env={shown(env, 80)}")
    parts += [f"{k}={shown(v, 80)}" for k, v in keywords.items()]
    return f"janus.train({', '.join(parts)})"


def request_call(request: RunRequest) -> str:
    """A request passed to :func:`janus.train` as results.json records it: its fields other than the defaults."""
    default = RunRequest(command=request.command)
    parts = [f"{f.name}={shown(getattr(request, f.name), 80)}" for f in fields(request)
             if f.name not in ("naming", "invocation") and getattr(request, f.name) != getattr(default, f.name)]
    return f"janus.train(RunRequest({', '.join(parts)}))"
