"""Issue 13, items 1, 2, 5, 6, 7 and 8 (crafted sizes): run folders and buffer files that are not
what janus committed are refused with a message naming the file, never loaded as a mix, a
different set of numbers, a hang or a fresh start; writes never go through a planted symlink."""

from __future__ import annotations

import json
import shutil
import time
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from ckpt_helpers import assert_resumed_identically, captured, committed, janus, janus_env

from janus.buffer.replay.experience import ExperienceBuffer
from janus.buffer.storage.state_file import save_atomic
from janus.cli import main
from janus.errors import CheckpointError
from janus.runtime import checkpoints

STEPS = 1500  # the env steps of finished_dqn_run (tests/conftest.py)


@pytest.fixture
def run(finished_dqn_run: Path, tmp_path: Path) -> Path:
    """A private copy of the session's finished DQN run (its final checkpoint committed; tests/conftest.py)."""
    copy = tmp_path / "run"
    shutil.copytree(finished_dqn_run, copy)
    return copy


def _flip_in_largest_record(path: Path) -> None:
    """Flip one bit in the middle of the largest tensor record of a torch checkpoint (its numbers)."""
    with zipfile.ZipFile(path) as z:
        info = max((i for i in z.infolist() if "/data/" in i.filename), key=lambda i: i.file_size)
    raw = bytearray(path.read_bytes())
    header_len = 30 + int.from_bytes(raw[info.header_offset + 26:info.header_offset + 28], "little") \
        + int.from_bytes(raw[info.header_offset + 28:info.header_offset + 30], "little")
    raw[info.header_offset + header_len + info.file_size // 2] ^= 0x10
    path.write_bytes(bytes(raw))


# ---- 1. a failed resumed run does not poison the next resume ------------------------------------
def test_a_failed_resume_does_not_poison_the_next_resume(run: Path, tmp_path: Path) -> None:
    """Resume a finished run with a larger budget and a learner that fails after 50 updates: the
    TrajectoryManager stages its stop-time part, the Trainer does not. The next --resume must start
    from the earlier run's final commit, not from that run's replay beside the older trainer."""
    expected = committed(run)
    assert expected is not None and expected["state"]["tag"] == checkpoints.FINAL
    failed = janus("train", "--resume", str(run), "--total_env_steps", "200000", "--checkpoint_interval_s", "600",
                   env=janus_env(fail_after=50))
    assert failed.returncode == 2 and "injected learner failure" in failed.stderr, failed.stderr[-2000:]
    resumed = janus("train", "--resume", str(run), "--total_env_steps", str(STEPS + 500), env=janus_env(capture=tmp_path / "seen"))
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    seen = captured(tmp_path / "seen")
    assert seen is not None
    assert_resumed_identically(expected, seen)


# ---- 2. a committed checkpoint missing a file is a clear error, not a hang -----------------------
def test_resume_with_a_component_file_missing_is_a_clear_error(run: Path) -> None:
    (run / "checkpoint" / "trajectory_manager.pt").unlink()
    try:
        proc = janus("train", "--resume", str(run), "--total_env_steps", "6000", timeout=120)
    except Exception as exc:  # noqa: BLE001  the old behaviour: stuck at a fixed update count
        pytest.fail(f"--resume did not end: {exc!r}")
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "trajectory_manager.pt is missing but run_state.json records it" in proc.stderr


# ---- 5. flipped bytes fail loudly through load, --resume and rollout -----------------------------
def test_a_flipped_byte_in_a_buffer_save_fails_load(tmp_path: Path) -> None:
    buf = ExperienceBuffer(64, "cpu_pageable", "prioritized", 0)
    buf.extend({"obs": torch.arange(40 * 8, dtype=torch.float32).reshape(40, 8), "rew": torch.ones(40)})
    path = tmp_path / "buf.pt"
    buf.save(path)
    assert torch.equal(ExperienceBuffer.load(path).state_dict()["data"]["obs"], buf.state_dict()["data"]["obs"])
    _flip_in_largest_record(path)
    with pytest.raises(CheckpointError, match="fails its checksum"):
        ExperienceBuffer.load(path)


def test_a_flipped_byte_in_trainer_pt_fails_resume_and_rollout(run: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _flip_in_largest_record(run / "checkpoint" / "trainer.pt")
    # in this process, as the inconsistent folders below: both commands are refused before any work
    capsys.readouterr()
    code = main(["train", "--resume", str(run), "--total_env_steps", "4500"])  # past the budget spent
    resume = capsys.readouterr()
    assert code == 2, resume.err[-2000:]
    assert "trainer.pt does not match run_state.json (sha256 differs)" in resume.err
    assert "start a new run with --out" in resume.err
    assert "resuming from" not in resume.out  # refused before it says where it would resume from
    code = main(["rollout", "--checkpoint", str(run), "--episodes", "1"])
    rollout = capsys.readouterr()
    assert code == 2 and "fails its checksum" in rollout.err, rollout.err[-2000:]


# ---- 6. a folder that is not a consistent run is a clear error -----------------------------------
def _edit_state(change: Callable[[dict[str, Any]], Any], reseal: bool = False) -> Callable[[Path], None]:
    """Edit run_state.json; ``reseal``: also recompute its record_sha256 (a deliberate forgery)."""
    def edit(ckpt: Path) -> None:
        state = json.loads((ckpt / "run_state.json").read_text())
        change(state)
        if reseal:
            state["record_sha256"] = checkpoints.record_digest(state)
        (ckpt / "run_state.json").write_text(json.dumps(state))
    return edit


def _write_state(text: str) -> Callable[[Path], None]:
    return lambda ckpt: (ckpt / "run_state.json").write_text(text) and None


def _replace_with_dir(name: str) -> Callable[[Path], None]:
    def edit(ckpt: Path) -> None:
        (ckpt / name).unlink()
        (ckpt / name).mkdir()
    return edit


INCONSISTENT: dict[str, tuple[Callable[[Path], None], str]] = {
    "not json": (_write_state("{not json"), "is not valid JSON"),
    "a list": (_write_state("[1, 2]"), "a JSON list, not an object"),
    "empty object": (_write_state("{}"), "not a janus commit record"),
    "missing field": (_edit_state(lambda s: s.pop("trained")), "missing or mistyped: trained"),
    "mistyped field": (_edit_state(lambda s: s.update(env_steps="12")), "missing or mistyped: env_steps"),
    "a tag no file has": (_edit_state(lambda s: s.update(tag=999)), "record_sha256 does not match its contents"),
    "counters disagree": (_edit_state(lambda s: s.update(trained=s["trained"] + 7)), "record_sha256 does not match"),
    "a tag no file has, resealed": (_edit_state(lambda s: s.update(tag=999), reseal=True),
                                    ".pt does not match run_state.json (tag 'final' in the file, 999 in the record)"),
    "counters disagree, resealed": (_edit_state(lambda s: s.update(trained=s["trained"] + 7), reseal=True),
                                    "trainer.pt does not match run_state.json (trained "),
    "no run_state.json": (lambda c: (c / "run_state.json").unlink(), "but no run_state.json"),
    "a directory for a file": (_replace_with_dir("trainer.pt"), "trainer.pt': it is not a regular file"),
    "a directory for run_state.json": (_replace_with_dir("run_state.json"), "run_state.json is not a regular file"),
}


@pytest.mark.parametrize("case", list(INCONSISTENT))
def test_an_inconsistent_run_folder_is_a_clear_error(run: Path, case: str, capsys: pytest.CaptureFixture[str]) -> None:
    edit, said = INCONSISTENT[case]
    edit(run / "checkpoint")
    capsys.readouterr()
    code = main(["train", "--resume", str(run), "--total_env_steps", "4500"])  # a little past the budget spent
    err = capsys.readouterr()
    assert code == 2, err.out[-1000:] + err.err[-2000:]
    assert said in err.err, err.err[-2000:]
    assert "starting from scratch" not in err.out
    if "resealed" not in case:  # refused by the driver before any component starts, not by a failing component
        assert "failed; the run was stopped" not in err.err and "Traceback" not in err.err
        assert "resuming from" not in err.out


def test_a_checkpoint_is_hashed_once_per_resume_but_a_change_is_still_caught(
        run: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """A resume checks every file before it starts, when it recovers and when it loads: each file
    is read once while it is unchanged, and a write after the first check is still found."""
    monkeypatch.setattr(checkpoints, "RACY_S", 0.05)
    time.sleep(0.1)  # the copied files are now "settled"
    read: list[str] = []
    real = checkpoints.file_digest
    monkeypatch.setattr(checkpoints, "file_digest", lambda p, *a: read.append(Path(p).name) or real(p, *a))
    ckpt = run / "checkpoint"
    record = checkpoints.read_run_state(ckpt)
    checkpoints.verify_committed(ckpt, record)
    assert record and sorted(read) == ["trainer.pt", "trajectory_manager.pt"]
    checkpoints.recover(ckpt)
    assert sorted(read) == ["trainer.pt", "trajectory_manager.pt"]  # remembered, not read again
    time.sleep(0.1)
    with open(ckpt / "trainer.pt", "r+b") as f:  # same size, same inode, one byte different
        first = f.read(1)
        f.seek(0)
        f.write(bytes([first[0] ^ 0x01]))
    with pytest.raises(CheckpointError, match="trainer.pt does not match run_state.json"):
        checkpoints.verify_committed(ckpt, record)
    assert read.count("trainer.pt") == 2
    capsys.readouterr()
    assert main(["train", "--resume", str(run), "--total_env_steps", "4500"]) == 2
    assert "resuming from" not in capsys.readouterr().out


# ---- 7. writes never follow symlinks --------------------------------------------------------------
def test_planted_symlinks_and_temp_names_do_not_redirect_writes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A new run refuses a folder holding planted links (and --force moves it aside, links and all);
    a resumed run replaces the links planted in its folder and never writes through them."""
    victims = tmp_path / "victims"
    victims.mkdir()
    out = tmp_path / "run"
    (out / "checkpoint").mkdir(parents=True)
    planted = ["results.json", "results.csv", "chart.png", "config.yaml", "checkpoint/run_state.json.tmp",
               "checkpoint/run_state.json"]
    for i, name in enumerate(planted):
        victim = victims / f"victim{i}"
        victim.write_text(f"precious {i}")
        (out / name).symlink_to(victim)
    # --backend local (the resume keeps it): every file it writes is written by this process on the
    # process backend too, whose worker processes write none and would only add their start-up
    train = ["train", "--algo", "dqn", "--backend", "local", "--total_env_steps", "1500", "--out", str(out)]
    code = main(train)  # refused before any work: in this process
    err = capsys.readouterr().err
    assert code == 2 and "--force" in err, err[-3000:]
    proc = janus(*train, "--force")
    assert proc.returncode == 0, proc.stderr[-3000:]
    for i, name in enumerate(planted):
        assert (victims / f"victim{i}").read_text() == f"precious {i}", f"a write through {name} reached its target"

    # a resume: links at every file it rewrites (config.yaml's target holds the run's own config,
    # which the resume reads; run_state.json is read without following links, so it cannot be one)
    rewritten = ["results.json", "results.csv", "chart.png", "learning_curve.png", "config.yaml",
                 "checkpoint/run_state.json.tmp"]
    for i, name in enumerate(rewritten):
        victim = victims / f"resume{i}"
        victim.write_bytes((out / name).read_bytes() if name == "config.yaml" else f"precious {i}".encode())
        (out / name).unlink(missing_ok=True)
        (out / name).symlink_to(victim)
    config = (victims / f"resume{rewritten.index('config.yaml')}").read_text()
    proc = janus("train", "--resume", str(out), "--total_env_steps", "2500")
    assert proc.returncode == 0, proc.stderr[-3000:]
    for i, name in enumerate(rewritten):
        expected = config if name == "config.yaml" else f"precious {i}"
        assert (victims / f"resume{i}").read_text() == expected, f"a write through {name} reached its target"
    for name in ("results.json", "results.csv", "chart.png", "config.yaml", "checkpoint/run_state.json"):
        assert (out / name).is_file() and not (out / name).is_symlink(), name
    assert "total_env_steps: 2500" in (out / "config.yaml").read_text()
    assert checkpoints.read_run_state(out / "checkpoint")["tag"] == checkpoints.FINAL


def test_atomic_writes_replace_a_symlink_and_refuse_a_directory(tmp_path: Path) -> None:
    from janus.fileio import UnsafePathError, write_text

    victim = tmp_path / "victim"
    victim.write_text("precious")
    (tmp_path / "link").symlink_to(victim)
    write_text(tmp_path / "link", "new")
    assert victim.read_text() == "precious" and not (tmp_path / "link").is_symlink()
    (tmp_path / "dir").mkdir()
    with pytest.raises(UnsafePathError, match="is a directory"):
        write_text(tmp_path / "dir", "x")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dir", "link", "victim"]  # no temp file left


# ---- 8. crafted checkpoints that declare huge sizes fail before allocating ------------------------
def _small_state(sampler: str = "prioritized") -> dict[str, Any]:
    buf = ExperienceBuffer(16, "cpu_pageable", sampler, 0)
    buf.extend({"obs": torch.zeros(4, 8)})
    return buf.state_dict()


@pytest.mark.parametrize("declare", ["capacity", "field shape", "astronomical"])
def test_a_crafted_checkpoint_declaring_huge_sizes_fails_before_allocating(tmp_path: Path, declare: str) -> None:
    state = _small_state()
    if declare == "capacity":  # allocatable by an overcommitting kernel, far more than this machine has
        state["capacity"] = 2**36
    elif declare == "field shape":
        state["fields"]["obs"][0] = [2**40]
    else:
        state["capacity"] = 10**400
    save_atomic(state, tmp_path / "crafted.pt")
    with pytest.raises(CheckpointError, match="nothing was allocated") as err:
        ExperienceBuffer.load(tmp_path / "crafted.pt")
    assert len(str(err.value)) < 400


def test_a_crafted_state_declaring_a_huge_row_fails_load_state_dict_before_allocating() -> None:
    buf = ExperienceBuffer(16, "cpu_pageable", "prioritized", 0)
    state = _small_state()
    state["fields"]["obs"][0] = [2**34]
    with pytest.raises(CheckpointError, match="nothing was allocated"):
        buf.load_state_dict(state)
    assert len(buf) == 0
