"""``--backend ray``: connection errors are clear (exit 2 naming the address) and bounded in time.

Every case runs the real CLI in a subprocess. Only loopback addresses are contacted. The cases that
need Ray to hang patch ``ray.init`` inside the subprocess (a real Ray given a non-Ray listener would
try the machine's routable address).
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

ray = pytest.importorskip("ray")

REPO = Path(__file__).resolve().parents[2]


def cli_env(tmp_path: Path, *extra_path: Path) -> dict[str, str]:
    """The environment of a CLI subprocess: this checkout's code first, no inherited Ray address."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([*map(str, extra_path), str(REPO / "src"), env.get("PYTHONPATH", "")])
    env["RAY_ADDRESS"] = ""
    env["RAY_TMPDIR"] = str(tmp_path / "raytmp")  # no ray_current_cluster file of another session
    return env


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def train_args(tmp_path: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "janus.cli", "train", "--backend", "ray", "--quick", "--out", str(tmp_path / "run"), *extra]


def test_address_with_nothing_listening_fails_fast_naming_it(tmp_path: Path) -> None:
    address = f"127.0.0.1:{free_port()}"
    start = time.monotonic()
    proc = subprocess.run(train_args(tmp_path, "--address", address), env=cli_env(tmp_path), capture_output=True,
                          text=True, timeout=60)
    took = time.monotonic() - start
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert f"janus train: error: --address {address}: nothing is listening there" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert took < 20, f"took {took:.1f}s"


def test_address_auto_without_cluster_is_a_clear_error(tmp_path: Path) -> None:
    from ray._private.services import find_gcs_addresses

    if find_gcs_addresses():
        pytest.skip("a Ray instance runs on this machine; --address auto would rightly join it")
    proc = subprocess.run(train_args(tmp_path, "--address", "auto"), env=cli_env(tmp_path), capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "janus train: error: --address auto: no running Ray cluster found" in proc.stderr
    assert "Traceback" not in proc.stderr and "ConnectionError" not in proc.stderr


def test_malformed_address_names_the_flag(tmp_path: Path) -> None:
    proc = subprocess.run(train_args(tmp_path, "--address", "127.0.0.1:99999"), env=cli_env(tmp_path),
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "janus train: error: invalid --address: got '127.0.0.1:99999'" in proc.stderr


def test_backend_ray_without_ray_says_how_to_install(tmp_path: Path) -> None:
    shim = tmp_path / "shim"
    (shim / "ray").mkdir(parents=True)
    (shim / "ray" / "__init__.py").write_text('raise ModuleNotFoundError("No module named \'ray\'", name="ray")\n')
    proc = subprocess.run(train_args(tmp_path), env=cli_env(tmp_path, shim), capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "janus train: error: --backend ray needs Ray, which is not installed here: pip install 'janus-rl[ray]'" in proc.stderr
    assert "ModuleNotFoundError" not in proc.stderr and "Traceback" not in proc.stderr


# A CLI whose ray.init never returns (like Ray retrying a GCS that does not answer), behind a real
# loopback listener that accepts the TCP probe. It prints CONNECTING once ray.init was entered.
HANGING_CLI = textwrap.dedent("""
    import sys, threading
    import ray
    import janus.runtime.backends.ray_cluster as rb
    rb.CONNECT_TIMEOUT_S = float(sys.argv[1])
    rb.connect.__defaults__ = (rb.CONNECT_TIMEOUT_S,)
    def hang(**kwargs):
        print("CONNECTING", flush=True)
        threading.Event().wait()
    ray.init = hang
    from janus.cli import main
    sys.exit(main(sys.argv[2:]))
""")


def _listener() -> socket.socket:
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(8)
    return srv


def test_address_that_never_answers_fails_within_the_connect_timeout(tmp_path: Path) -> None:
    with _listener() as srv:
        address = f"127.0.0.1:{srv.getsockname()[1]}"
        start = time.monotonic()
        # a connect timeout of 1 s (the CLI's is 10 s): the test waits it out
        proc = subprocess.run([sys.executable, "-c", HANGING_CLI, "1", *train_args(tmp_path, "--address", address)[3:]],
                              env=cli_env(tmp_path), capture_output=True, text=True, timeout=60)
    took = time.monotonic() - start
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "CONNECTING" in proc.stdout
    assert f"janus train: error: --address {address}: no Ray cluster answered at {address} within 1s" in proc.stderr
    assert took < 20, f"took {took:.1f}s"


def test_sigterm_while_connecting_stops_promptly(tmp_path: Path) -> None:
    with _listener() as srv:
        address = f"127.0.0.1:{srv.getsockname()[1]}"
        proc = subprocess.Popen([sys.executable, "-c", HANGING_CLI, "600", *train_args(tmp_path, "--address", address)[3:]],
                                env=cli_env(tmp_path), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            assert proc.stdout is not None
            for line in proc.stdout:  # wait until ray.init was entered
                if "CONNECTING" in line:
                    break
            sent = time.monotonic()
            proc.send_signal(signal.SIGTERM)
            rc = proc.wait(timeout=15)
            took = time.monotonic() - sent
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    assert rc == 143, proc.stderr.read()[-2000:] if proc.stderr else rc
    assert took < 5, f"took {took:.1f}s to stop after SIGTERM"
