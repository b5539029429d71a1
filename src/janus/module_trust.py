"""Which modules a run folder's config.yaml may make janus import when the folder is loaded.

``workload.env: module:EnvId`` and ``workload.algo: package.module:Name`` name modules that janus
imports to rebuild a run. Loading someone else's run folder (:func:`janus.load_policy`, ``janus
rollout``, :func:`janus.evaluate` of a folder) must not run code the folder brought with it, so a
module named there is imported only when it is *installed*: found, without importing anything, on
the import path less the places a downloaded folder can put code:

* ``''`` and the current folder (``python -c``, the REPL and ``python -m`` put them first);
* the run folder itself, every folder inside it and every folder above it (a run folder beside
  the current one makes its neighbours importable, e.g. ``evilrun/evil.py`` as the namespace
  package ``evilrun``);

and found there as the same file the ordinary import would load (nothing in those places shadows
it). A package without an ``__init__.py`` (a namespace package) qualifies only when the ordinary
import path gives it no folder of those places. Site-packages, the standard library, janus itself,
a path-based editable install and a ``PYTHONPATH`` entry elsewhere qualify. Anything else is
refused with one line saying how to allow it: ``trust=True`` (``janus rollout --trust``), which
imports as before.

Training is not loading: ``janus train --env mymod:Env`` from the folder that holds ``mymod.py``,
``--resume`` of one's own run folder and :attr:`janus.train(...).policy <janus.api.run.TrainedRun.policy>`
(the run this process just trained) import as they always did.
"""

from __future__ import annotations

import importlib.machinery
import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from janus.errors import ConfigError, shown

#: The configuration keys whose ``module:`` part janus imports, and how each names the module.
MODULE_KEYS = ("env", "algo")


def named_modules(raw: Mapping[str, Any]) -> list[tuple[str, str]]:
    """``(key, module)`` for every module a config.yaml's ``workload`` section names (``module:Name``)."""
    workload = raw.get("workload") if isinstance(raw, Mapping) else None
    if not isinstance(workload, Mapping):
        return []
    found = []
    for key in MODULE_KEYS:
        value = workload.get(key)
        if isinstance(value, str) and ":" in value:
            module = value.partition(":")[0]
            if module:
                found.append((f"workload.{key}", module))
    return found


def check_run_folder_modules(raw: Mapping[str, Any], run_dir: Path, trust: bool) -> None:
    """Refuse (one line, :class:`~janus.errors.ConfigError`) a module ``raw`` (the folder's
    config.yaml) names that is not installed, unless ``trust``; imports nothing."""
    if trust:
        return
    for key, module in named_modules(raw):
        why = not_installed(module, run_dir)
        if why is not None:
            raise ConfigError(
                f"{str(run_dir / 'config.yaml')!r} names module {shown(module, 120)} ({key}), which {why}; "
                f"janus did not import it: a run folder's own code runs only if you trust it: "
                f"load_policy(folder, trust=True) / evaluate(folder, trust=True) / janus rollout --trust")


def not_installed(module: str, run_dir: Path) -> str | None:
    """Why ``module`` is not an installed module (see the module doc), or None when it is."""
    parts = module.split(".")
    if not all(p.isidentifier() for p in parts):
        return "is not a module name"
    if module in sys.builtin_module_names:
        return None  # compiled into the interpreter: no file anywhere
    refused = _refused_places(run_dir)
    safe_path = [p for p in sys.path if not _is_refused(p, refused)]
    found = _walk(parts, safe_path, imported=False)
    ordinary = _walk(parts, list(sys.path), imported=True)
    if found is None and ordinary is None:
        return "is not installed here (no folder on the import path holds it; install it or put it on PYTHONPATH)"
    if found is None:
        return ("is not an installed package (janus finds it only through the current folder or the run folder's "
                "own folders, or through an import hook it does not follow)")
    if ordinary != found:
        return ("is not the installed module an import would load (the current folder or a folder near the run "
                "folder provides it)")
    return None


def _walk(parts: list[str], path: list[str], imported: bool) -> list[tuple[str | None, tuple[str, ...]]] | None:
    """Each level's ``(file, package folders)``, real paths, as the path finder finds ``parts`` on
    ``path`` (``imported``: a level already imported is its module's own, as an import would
    give it), or None where a level is not found."""
    levels: list[tuple[str | None, tuple[str, ...]]] = []
    search: list[str] = path
    for i in range(len(parts)):
        name = ".".join(parts[: i + 1])
        loaded = sys.modules.get(name) if imported else None
        if loaded is not None:
            origin = getattr(loaded, "__file__", None)
            folders = list(getattr(loaded, "__path__", None) or ())
        else:
            spec = importlib.machinery.PathFinder.find_spec(name, search)
            if spec is None and i == 0:
                spec = _editable_spec(name)
            if spec is None:
                return None
            origin = spec.origin if spec.has_location else None
            folders = list(spec.submodule_search_locations or ())
        real = tuple(os.path.realpath(f) for f in folders)
        levels.append((os.path.realpath(origin) if origin else None, real))
        search = list(real)
        if i < len(parts) - 1 and not search:
            return None  # a module, not a package: it has no submodules
    return levels


def _editable_spec(name: str) -> importlib.machinery.ModuleSpec | None:
    """The spec of a top-level package an editable install's own finder maps (setuptools'
    ``__editable___*_finder``: installed code, which maps names to fixed folders)."""
    for finder in sys.meta_path:
        if type(finder).__module__.startswith("__editable__") or getattr(finder, "__module__", "").startswith("__editable__"):
            find = getattr(finder, "find_spec", None)
            spec = find(name, None) if find is not None else None
            if spec is not None:
                return spec
    return None


def _refused_places(run_dir: Path) -> tuple[Path, Path]:
    """The current folder and the run folder, resolved."""
    return Path(os.getcwd()).resolve(), run_dir.resolve()


def _is_refused(entry: str, refused: tuple[Path, Path]) -> bool:
    """Whether import path ``entry`` is ``''``, the current folder, or the run folder, inside it or above it."""
    cwd, run_dir = refused
    if not isinstance(entry, str) or entry in ("", "."):
        return True
    try:
        place = Path(entry).resolve()
    except (OSError, RuntimeError):
        return True
    return place in (cwd, run_dir) or place in run_dir.parents or run_dir in place.parents
