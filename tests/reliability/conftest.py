"""Options for the reliability tests: soak duration (CI runs a bounded version)."""

from __future__ import annotations

import os

import pytest


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--soak-seconds", type=float, default=float(os.environ.get("JANUS_SOAK_SECONDS", "8")),
                     help="how long each soak test runs (default 8 s; e.g. --soak-seconds 3600)")


@pytest.fixture
def soak_seconds(request: pytest.FixtureRequest) -> float:
    return float(request.config.getoption("--soak-seconds"))
