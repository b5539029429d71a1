"""TensorBoard scalars without the tensorboard package: a small tfevents writer and reader.

A tfevents file is a sequence of records, each ``uint64 length, uint32 masked-crc32c(length),
data, uint32 masked-crc32c(data)`` (little-endian), where ``data`` is a serialised ``Event``
protobuf. Only the few fields scalars need are written, encoded here by hand::

    Event   { double wall_time = 1; int64 step = 2; string file_version = 3; Summary summary = 5; }
    Summary { repeated Value value = 1; }
    Value   { string tag = 1; float simple_value = 2; }

:class:`EventWriter` appends and flushes records as they come, so TensorBoard shows a run while it
trains (a crash leaves at most one torn last record, which readers skip). :func:`read_scalars` reads
them back (tests, tools). :func:`write_scalars` writes a finished run dict at once (tags below).

Tags: ``episode/return`` and ``episode/return_mean20`` (each episode at the env step it finished),
``throughput/env_steps_per_s``, ``train/<metric>`` (the learner's scalars: loss, q_mean, epsilon,
lr, policy_loss, value_loss, entropy, approx_kl, clipfrac...), ``eval/mean_return`` and
``eval/std_return`` (periodic greedy evaluations), and once at the end ``run/env_steps_per_s``,
``run/samples_per_s``, ``run/wall_s`` and ``stage_s/<stage>``.
"""

from __future__ import annotations

import os
import socket
import struct
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO, Protocol

WINDOW = 20
"""Episodes in the moving mean of ``episode/return_mean20``."""


def _crc32c_table() -> list[int]:
    table = []
    for n in range(256):
        c = n
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        table.append(c)
    return table


_TABLE = _crc32c_table()


def crc32c(data: bytes) -> int:
    """CRC-32C (Castagnoli), as tfevents records use."""
    crc = 0xFFFFFFFF
    for byte in data:
        crc = _TABLE[(crc ^ byte) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def masked_crc32c(data: bytes) -> int:
    """The CRC as TFRecord stores it: rotated right by 15 bits plus a constant."""
    crc = crc32c(data)
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def _varint(value: int) -> bytes:
    value &= (1 << 64) - 1  # int64 fields encode negatives as 10-byte two's complement
    out = bytearray()
    while True:
        bits, value = value & 0x7F, value >> 7
        out.append(bits | (0x80 if value else 0))
        if not value:
            return bytes(out)


def _field_bytes(number: int, payload: bytes) -> bytes:
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def scalar_event(tag: str, value: float, step: int, wall_time: float) -> bytes:
    """One serialised ``Event`` holding the scalar ``tag = value`` at ``step``."""
    summary_value = _field_bytes(1, tag.encode()) + b"\x15" + struct.pack("<f", float(value))
    summary = _field_bytes(1, summary_value)
    return b"\x09" + struct.pack("<d", float(wall_time)) + b"\x10" + _varint(int(step)) + _field_bytes(5, summary)


def _record(data: bytes) -> bytes:
    length = struct.pack("<Q", len(data))
    return length + struct.pack("<I", masked_crc32c(length)) + data + struct.pack("<I", masked_crc32c(data))


class ScalarWriter(Protocol):
    """Where the run's scalars go: an :class:`EventWriter`, or another tracker written the same way
    (:class:`janus.harness.reports.wandb_log.WandbWriter`)."""

    def add_scalar(self, tag: str, value: float, step: int, walltime: float | None = None) -> None: ...

    def flush(self) -> None: ...

    def close(self) -> None: ...


class EventWriter:
    """Appends scalar events to a new ``events.out.tfevents.*`` file in ``logdir``.

    Every :meth:`flush` (and :meth:`close`) makes what was added readable by TensorBoard.
    """

    def __init__(self, logdir: str | Path) -> None:
        self.logdir = Path(logdir)
        self.logdir.mkdir(parents=True, exist_ok=True)
        name = f"events.out.tfevents.{int(time.time())}.{socket.gethostname()}.{os.getpid()}.janus"
        self.path = self.logdir / name
        n = 2
        while self.path.exists():  # two writers in one second in one process: a new file each
            self.path, n = self.logdir / f"{name}.{n}", n + 1
        self._fh: BinaryIO | None = open(self.path, "xb")  # noqa: SIM115  open until close()
        version = b"\x09" + struct.pack("<d", time.time()) + _field_bytes(3, b"brain.Event:2")
        self._fh.write(_record(version))
        self.flush()

    def add_scalar(self, tag: str, value: float, step: int, walltime: float | None = None) -> None:
        """Append ``tag = value`` at ``step`` (``walltime``: seconds since the epoch, default now)."""
        assert self._fh is not None, "the writer is closed"
        self._fh.write(_record(scalar_event(tag, value, step, time.time() if walltime is None else walltime)))

    def flush(self) -> None:
        if self._fh is not None:
            self._fh.flush()

    def close(self) -> None:
        if self._fh is not None:
            self._fh.close()
            self._fh = None

    def __enter__(self) -> EventWriter:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


# ---- reading (tests and tools; TensorBoard itself reads these files) --------------------------------
def _read_varint(data: bytes, pos: int) -> tuple[int, int]:
    shift = value = 0
    while True:
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return value, pos


def _fields(data: bytes) -> Iterator[tuple[int, Any]]:
    """(field number, value) of a protobuf message: ints, 8/4-byte raw values, or bytes."""
    pos = 0
    value: int | bytes
    while pos < len(data):
        key, pos = _read_varint(data, pos)
        number, kind = key >> 3, key & 7
        if kind == 0:
            value, pos = _read_varint(data, pos)
        elif kind == 1:
            value, pos = data[pos:pos + 8], pos + 8
        elif kind == 5:
            value, pos = data[pos:pos + 4], pos + 4
        elif kind == 2:
            size, pos = _read_varint(data, pos)
            value, pos = data[pos:pos + size], pos + size
        else:
            raise ValueError(f"unsupported protobuf wire type {kind}")
        yield number, value


def read_records(path: str | Path) -> Iterator[bytes]:
    """The records of one tfevents file, checking both CRCs; a torn last record ends the file."""
    data = Path(path).read_bytes()
    pos = 0
    while pos + 12 <= len(data):
        header = data[pos:pos + 8]
        (length,) = struct.unpack("<Q", header)
        end = pos + 12 + length + 4
        if end > len(data):
            return  # a record still being written (or cut by a crash)
        if struct.unpack("<I", data[pos + 8:pos + 12])[0] != masked_crc32c(header):
            raise ValueError(f"{path}: bad length CRC at byte {pos}")
        body = data[pos + 12:pos + 12 + length]
        if struct.unpack("<I", data[end - 4:end])[0] != masked_crc32c(body):
            raise ValueError(f"{path}: bad data CRC at byte {pos}")
        yield body
        pos = end


def read_scalars(logdir: str | Path) -> dict[str, list[tuple[int, float, float]]]:
    """Every scalar under ``logdir`` (all event files, in name order): tag -> [(step, value, wall_time)]."""
    out: dict[str, list[tuple[int, float, float]]] = {}
    for path in sorted(Path(logdir).glob("events.out.tfevents.*")):
        for record in read_records(path):
            wall, step, summary = 0.0, 0, None
            for number, value in _fields(record):
                if number == 1:
                    wall = struct.unpack("<d", value)[0]
                elif number == 2:
                    step = value - (1 << 64) if value >= 1 << 63 else value
                elif number == 5:
                    summary = value
            if summary is None:
                continue
            for _, item in _fields(summary):
                tag, scalar = "", None
                for number, value in _fields(item):
                    if number == 1:
                        tag = value.decode()
                    elif number == 2:
                        scalar = struct.unpack("<f", value)[0]
                if scalar is not None:
                    out.setdefault(tag, []).append((step, scalar, wall))
    return out


# ---- what a run dict holds, as scalars ---------------------------------------------------------------
def write_episodes(writer: ScalarWriter, curve: dict[str, list[float]], start: int, run_start: float) -> int:
    """Episode scalars of ``curve`` (a run's ``learning_curve``) from index ``start`` on; event wall
    times are ``run_start + the episode's wall_s``. Returns the number of episodes written in all."""
    steps, returns, walls = curve.get("env_steps", []), curve.get("return", []), curve.get("wall_s", [])
    n = min(len(steps), len(returns), len(walls))
    for i in range(start, n):
        window = returns[max(0, i + 1 - WINDOW):i + 1]
        step, t = int(steps[i]), float(walls[i])
        when = run_start + t
        writer.add_scalar("episode/return", float(returns[i]), step, walltime=when)
        writer.add_scalar(f"episode/return_mean{WINDOW}", sum(window) / len(window), step, walltime=when)
        if t > 0:
            writer.add_scalar("throughput/env_steps_per_s", step / t, step, walltime=when)
    return max(n, start)


def write_train_metrics(writer: ScalarWriter, series: dict[str, list[float]], start: int, run_start: float) -> int:
    """``train/<name>`` scalars of a run's ``train_metrics`` columns from row ``start`` on (at each
    row's ``env_steps``). Returns the number of rows written in all."""
    steps, walls = series.get("env_steps", []), series.get("wall_s", [])
    n = min(len(steps), len(walls))
    for i in range(start, n):
        for name, column in series.items():
            if name in ("env_steps", "wall_s") or i >= len(column) or column[i] is None:
                continue
            writer.add_scalar(f"train/{name}", float(column[i]), int(steps[i]), walltime=run_start + float(walls[i]))
    return max(n, start)


def write_evaluations(writer: ScalarWriter, evaluations: list[dict[str, Any]], start: int, run_start: float) -> int:
    """``eval/mean_return`` and ``eval/std_return`` of a run's periodic evaluations from index
    ``start`` on (at each one's ``env_steps``). Returns the number written in all."""
    for e in evaluations[start:]:
        when = run_start + float(e.get("wall_s", 0.0))
        for key in ("mean_return", "std_return"):
            if e.get(key) is not None:
                writer.add_scalar(f"eval/{key}", float(e[key]), int(e["env_steps"]), walltime=when)
    return max(len(evaluations), start)


def write_run_totals(writer: ScalarWriter, run: dict[str, Any], when: float) -> None:
    """The run's overall rates, wall time and stage seconds, once, at its last env step."""
    curve = run.get("learning_curve") or {}
    last_step = int(curve["env_steps"][-1]) if curve.get("env_steps") else 0
    for key in ("env_steps_per_s", "samples_per_s"):
        if key in run:
            writer.add_scalar(f"run/{key}", float(run[key]), last_step, walltime=when)
    writer.add_scalar("run/wall_s", float(run.get("wall_s", 0.0)), last_step, walltime=when)
    for stage, seconds in (run.get("stage_s") or {}).items():
        writer.add_scalar(f"stage_s/{stage}", float(seconds), last_step, walltime=when)


def write_scalars(logdir: str | Path, run: dict[str, Any]) -> Path:
    """Write every scalar of a finished ``run`` (a run dict or :class:`~janus.result.RunResult`)
    under ``logdir`` in one new event file, event wall times ending now. Returns ``logdir``."""
    curve = run.get("learning_curve") or {}
    wall = float(run.get("wall_s", 0.0))
    span = max([wall, *map(float, curve.get("wall_s", [])[-1:])])  # a resumed run's curve counts earlier sessions
    start = time.time() - span
    with EventWriter(logdir) as writer:
        write_episodes(writer, curve, 0, start)
        write_train_metrics(writer, run.get("train_metrics") or {}, 0, start)
        write_evaluations(writer, run.get("evaluations") or [], 0, start)
        write_run_totals(writer, run, start + span)
    return Path(logdir)
