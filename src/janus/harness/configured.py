"""A request's configuration, checked as a run needs it: built (:mod:`janus.config.build`), a resumed run's
against its folder, then validated."""

from __future__ import annotations

from janus.config import RunConfig, validate
from janus.config.build import build_config
from janus.config.request import RunRequest


def configured(request: RunRequest) -> RunConfig:
    """The configuration of ``request`` (:func:`janus.config.build.build_config`), checked: a resumed run
    against its folder (before validation: a refused change is named as such), then
    :func:`janus.config.validate` (placements resolve per run). What ``janus`` and :func:`janus.train` run."""
    cfg = build_config(request)
    if request.resume is not None:
        from janus.harness.resume_checks import check_resume_request

        check_resume_request(request, cfg)
    validate(cfg)  # fail on a bad config before any work starts
    return cfg
