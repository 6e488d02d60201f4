"""`ctxdesk dashboard` owns its server: it stops with SIGTERM, refuses foreign Host headers, and runs
with ctxdesk's Streamlit settings wherever it is started."""

from __future__ import annotations

import base64
import itertools
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
DEMO_DB = REPO / "data" / "demo-guard-limits.db"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_healthy(proc: subprocess.Popen[bytes], port: int, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/_stcore/health", timeout=2) as response:
                if response.read().decode().strip() == "ok":
                    return
        except OSError:
            pass
        assert proc.poll() is None, "dashboard exited"
        assert time.monotonic() < deadline, f"dashboard did not come up within {timeout:.0f} s"
        time.sleep(0.3)


def _is_listening(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0


def _websocket_status(port: int, host: str) -> int:
    key = base64.b64encode(os.urandom(16)).decode()
    request = (
        f"GET /_stcore/stream HTTP/1.1\r\nHost: {host}\r\nOrigin: http://{host}\r\nUpgrade: websocket\r\n"
        f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n"
    )
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        s.sendall(request.encode())
        status_line = s.recv(200).split(b"\r\n", 1)[0].decode()
    return int(status_line.split()[1])


@contextmanager
def _dashboard(cwd: Path) -> Iterator[tuple[subprocess.Popen[bytes], int]]:
    """`ctxdesk dashboard` started from ``cwd``, outside the repository (its own process group)."""
    port = _free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "engine.cli", "dashboard", str(DEMO_DB), "--port", str(port), "--no-browser"],
        cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        env={**os.environ, "PYTHONPATH": str(REPO)}, start_new_session=True,
    )  # fmt: skip
    try:
        _wait_healthy(proc, port)
        yield proc, port
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


@pytest.fixture(scope="module")
def dashboard(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[subprocess.Popen[bytes], int]]:
    """One server for the tests that only look at it (started once: a start takes seconds)."""
    with _dashboard(tmp_path_factory.mktemp("outside")) as started:
        yield started


def test_sigterm_stops_the_server_it_started(tmp_path: Path) -> None:
    with _dashboard(tmp_path) as (proc, port):  # its own server: this test stops it
        os.kill(proc.pid, signal.SIGTERM)  # the ctxdesk process only, as a service manager would
        proc.wait(timeout=20)
        deadline = time.monotonic() + 15
        while _is_listening(port):
            assert time.monotonic() < deadline, "the Streamlit server is still listening after ctxdesk exited"
            time.sleep(0.2)


def test_only_loopback_host_names_reach_the_app(dashboard):
    _, port = dashboard
    assert _websocket_status(port, f"127.0.0.1:{port}") == 101
    assert _websocket_status(port, f"localhost:{port}") == 101
    assert _websocket_status(port, f"evil.example:{port}") == 403


def test_started_outside_the_repository_the_settings_still_apply(dashboard):
    proc, _ = dashboard
    command = Path(f"/proc/{proc.pid}/task/{proc.pid}/children").read_text().split()
    (child,) = command
    argv = Path(f"/proc/{child}/cmdline").read_bytes().split(b"\0")
    pairs = dict(itertools.pairwise(argv))
    assert pairs[b"--client.showErrorDetails"] == b"type"
    assert pairs[b"--server.address"] == b"127.0.0.1"
    assert pairs[b"--browser.gatherUsageStats"] == b"false"
