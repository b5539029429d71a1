"""Reading a configuration file: YAML with clear errors, no aliases, ``1e-3`` a float, and the
packaged default configuration (``janus/configs/default.yaml``)."""

from __future__ import annotations

import re
import sys
from collections.abc import Mapping
from importlib import resources as package_data
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from janus.errors import ConfigError, shown
from janus.fileio import checking_path

if TYPE_CHECKING:
    if sys.version_info >= (3, 11):
        from importlib.resources.abc import Traversable
    else:
        from importlib.abc import Traversable

MAX_CONFIG_BYTES = 1 << 20


class _NoAliasLoader(yaml.SafeLoader):
    """SafeLoader that refuses aliases: an alias bomb (nested ``*refs``) is tiny on disk and
    expands exponentially as soon as the config is copied, printed or validated.

    It also reads ``1e-3`` as a float (YAML 1.2): PyYAML's YAML 1.1 rules want a dot (``1.0e-3``)
    and would hand ``lr: 1e-3`` over as the string ``'1e-3'``.
    """

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()
            raise ConfigError(f"YAML aliases (*{event.anchor}) are not supported in janus configs "
                              f"(line {event.start_mark.line + 1}): write the value out")
        return super().compose_node(parent, index)

    def construct_mapping(self, node: Any, deep: bool = False) -> Any:
        """A key given twice is an error (YAML forbids it; PyYAML would keep the last value silently)."""
        seen: dict[Any, int] = {}
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if not isinstance(key, (str, int, float, bool)):
                continue  # not hashable (a list as a key): PyYAML says so itself
            line = key_node.start_mark.line + 1
            if key in seen:
                raise ConfigError(f"key {key!r} is given twice in one mapping (lines {seen[key]} and {line}): "
                                  "keep one")
            seen[key] = line
        return super().construct_mapping(node, deep=deep)


_NoAliasLoader.add_implicit_resolver(
    "tag:yaml.org,2002:float", re.compile(r"^[-+]?(?:[0-9][0-9_]*)(?:\.[0-9_]*)?[eE][-+]?[0-9]+$"), list("-+0123456789")
)


def read_yaml(path: str | Path) -> dict[str, Any]:
    """The mapping in a YAML config file; clear errors for a missing or malformed file.

    A FIFO or a character device (``--config /dev/stdin``, ``--config <(make_config)``) is read
    like a file, up to :data:`MAX_CONFIG_BYTES`."""
    path = Path(path)
    name = shown(str(path), 300)
    text = _config_text(path, name)
    try:
        data = yaml.load(text, Loader=_NoAliasLoader) or {}
    except ConfigError as exc:  # an alias or a key given twice
        raise ConfigError(f"config file {name}: {exc}") from None
    except yaml.MarkedYAMLError as exc:  # where, then what: "line 3, column 2: expected <block end>, ..."
        mark = exc.problem_mark
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
        what = "; ".join(str(p) for p in (exc.context, exc.problem) if p)
        raise ConfigError(f"config file {name} is not valid YAML: {where}{what[:300]}") from None
    except (yaml.YAMLError, RecursionError) as exc:
        raise ConfigError(f"config file {name} is not valid YAML: {shown(str(exc), 400)}") from None
    except (ValueError, OverflowError) as exc:  # a value PyYAML cannot build: a huge integer, a bad date
        raise ConfigError(f"config file {name} holds a value that cannot be read: {_unreadable_value(exc)}") from None
    if not isinstance(data, Mapping):
        raise ConfigError(f"config file {name} must hold a mapping of keys to values, not {type(data).__name__}")
    return dict(data)


def _config_text(path: Path, name: str) -> str:
    """The text of config file ``path`` (a regular file, FIFO or character device), at most
    :data:`MAX_CONFIG_BYTES`; a ConfigError for a missing, unreadable or oversized one."""
    with checking_path("config file", path):  # a path part too long, no permission, a socket ...
        if path.is_dir():
            raise ConfigError(f"config file {name} is a directory; give the YAML file in it")
        if not path.exists():
            raise ConfigError(f"config file not found: {name}")
        with open(path, "rb") as f:  # not read_text(): a FIFO or /dev/stdin has no size to check first
            raw = f.read(MAX_CONFIG_BYTES + 1)
    if len(raw) > MAX_CONFIG_BYTES:
        raise ConfigError(f"config file {name} is over {MAX_CONFIG_BYTES:,} bytes; a janus config is at most "
                          f"{MAX_CONFIG_BYTES:,}")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"config file {name} is not valid YAML: not UTF-8 text ({exc.reason} at byte "
                          f"{exc.start})") from None


def _unreadable_value(exc: BaseException) -> str:
    """What PyYAML failed to build, in words (Python's int-digit limit named as such)."""
    text = str(exc)
    if "integer string conversion" in text:
        limit = sys.get_int_max_str_digits()
        return (f"an integer of more than {limit:,} digits (Python's limit for reading one); "
                f"no janus setting takes a number that large")
    return shown(text, 300)


def default_config_file() -> Traversable:
    """The default configuration, ``janus/configs/default.yaml``: package data, the same file from
    any working directory (a run without ``--config`` starts from it)."""
    return package_data.files("janus").joinpath("configs").joinpath("default.yaml")


def read_default_config() -> dict[str, Any]:
    """The mapping in :func:`default_config_file` (read as any config file, so with the same checks)."""
    with package_data.as_file(default_config_file()) as path:  # a real file even from a zipped install
        return read_yaml(path)
