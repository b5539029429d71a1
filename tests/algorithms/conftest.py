"""Shared fixtures of the algorithm tests."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import pytest
import torch


def _runtime_conftest() -> Any:
    """tests/runtime/conftest.py, loaded by path (tests/ is not a package): its fixtures, shared."""
    path = Path(__file__).resolve().parents[1] / "runtime" / "conftest.py"
    spec = importlib.util.spec_from_file_location("janus_tests_runtime_conftest", path)
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module


# One local Ray per session: reused if tests/runtime started it already (then it is left alone).
ray_session = _runtime_conftest().ray_session


@pytest.fixture(autouse=True)
def one_thread():
    """One torch thread, as Workers and the Trainer run (results are then reproducible)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
