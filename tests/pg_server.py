"""A throwaway PostgreSQL server for tests and benchmarks: initdb + pg_ctl in a temp folder.

Debian's ``postgresql`` package provides the binaries (/usr/lib/postgresql/<v>/bin). The server
refuses to run as root, so under root it runs as the ``postgres`` OS user. :func:`shared_server`
starts one per process, stopped at exit; :func:`fresh_url` gives each caller its own schema.
"""

from __future__ import annotations

import atexit
import glob
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import uuid
from contextlib import suppress
from dataclasses import dataclass, field
from pathlib import Path

#: Where the server binaries are, else None (the PostgreSQL tests are skipped).
PG_BIN: Path | None = next(
    (Path(p).parent for p in sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), reverse=True)),
    Path(shutil.which("initdb")).parent if shutil.which("initdb") else None,  # type: ignore[arg-type]
)
PG_AVAILABLE = PG_BIN is not None and (os.geteuid() != 0 or shutil.which("runuser") is not None)
PG_MISSING_REASON = "PostgreSQL server binaries not found: apt-get install -y postgresql"
IN_CI = os.environ.get("CI", "").lower() in {"1", "true", "yes"}
#: Skips a test only where the binaries are absent, never under CI (.ci/run installs them).
SKIP_UNLESS_PG = not PG_AVAILABLE and not IN_CI
#: Fast settings for tests (a crash of the test server loses nothing we care about).
TEST_SETTINGS = {
    "fsync": "off",
    "synchronous_commit": "off",
    "full_page_writes": "off",
    "max_connections": "200",
}


def _as_server_user(args: list[str]) -> list[str]:
    return ["runuser", "-u", "postgres", "--", *args] if os.geteuid() == 0 else args


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class PostgresServer:
    """One server in its own data folder; ``url`` reaches its ``postgres`` database."""

    settings: dict[str, str] = field(default_factory=lambda: dict(TEST_SETTINGS))
    folder: Path = field(init=False)
    port: int = field(init=False)

    def __post_init__(self) -> None:
        if PG_BIN is None:
            raise RuntimeError(PG_MISSING_REASON)
        self.folder = Path(tempfile.mkdtemp(prefix="ctxdesk-pg-"))
        self.port = _free_port()
        if os.geteuid() == 0:
            shutil.chown(self.folder, "postgres", "postgres")
        self._run(
            "initdb", "-D", str(self.data), "-A", "trust", "-U", "postgres", "-E", "UTF8",
            "--locale=C", "--no-sync",
        )  # fmt: skip
        self.start()
        self._watch_owner()

    def _watch_owner(self) -> None:
        """A watchdog (its own session, so a killed test run's group takes it along only once it has
        done its job) that stops the server and removes its folder when this process is gone."""
        stop = _as_server_user([str(PG_BIN / "pg_ctl"), "-D", str(self.data), "-m", "immediate", "stop"])  # type: ignore[operator]
        # Started through sh, which backgrounds it and exits: nothing here waits on it.
        subprocess.run(
            ["sh", "-c", 'exec "$@" </dev/null >/dev/null 2>&1 &', "sh",
             sys.executable, "-c", _WATCHDOG, str(os.getpid()), str(self.folder), *stop],
            check=True, start_new_session=True,
        )  # fmt: skip

    @property
    def data(self) -> Path:
        return self.folder / "data"

    @property
    def url(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def _run(self, tool: str, *args: str) -> None:
        assert PG_BIN is not None
        subprocess.run(
            _as_server_user([str(PG_BIN / tool), *args]),
            check=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            cwd=self.folder,
        )

    def _options(self) -> str:
        opts = [f"-p {self.port}", "-c listen_addresses=127.0.0.1", f"-k {self.folder}"]
        return " ".join(opts + [f"-c {k}={v}" for k, v in self.settings.items()])

    def start(self) -> None:
        self._run(
            "pg_ctl",
            "-D",
            str(self.data),
            "-l",
            str(self.folder / "log"),
            "-o",
            self._options(),
            "-w",
            "start",
        )

    def stop(self, mode: str = "fast") -> None:
        self._run("pg_ctl", "-D", str(self.data), "-m", mode, "-w", "stop")

    def restart(self) -> None:
        self._run("pg_ctl", "-D", str(self.data), "-m", "fast", "-o", self._options(), "-w", "restart")

    def destroy(self) -> None:
        with suppress(subprocess.CalledProcessError):  # already stopped
            self.stop("immediate")
        shutil.rmtree(self.folder, ignore_errors=True)


#: Run by the watchdog: wait for the owner process to end, then stop the server and clean up.
_WATCHDOG = """
import os, shutil, subprocess, sys, time
owner, folder, stop = int(sys.argv[1]), sys.argv[2], sys.argv[3:]
while os.path.exists(f"/proc/{owner}") and os.path.isdir(folder):
    time.sleep(1)
if os.path.isdir(folder):
    subprocess.run(stop, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    shutil.rmtree(folder, ignore_errors=True)
"""

_shared: PostgresServer | None = None
_lock = threading.Lock()


def shared_server() -> PostgresServer:
    """The process's test server, started on first use and stopped when the process exits."""
    global _shared
    with _lock:
        if _shared is None:
            _shared = PostgresServer()
            atexit.register(_shared.destroy)
        return _shared


def fresh_url(server: PostgresServer | None = None) -> str:
    """A URL to an empty schema of its own on the (shared) server: one per test."""
    import psycopg

    server = server or shared_server()
    schema = f"t_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(server.url, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
    return f"{server.url}?options=-csearch_path%3D{schema}"
