"""What every command shares: exit codes, the usage error, opening a database, progress lines.

Session lookup is the report's (:func:`engine.report.find_session`), imported when a command runs.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, TextIO

from engine.locations import SAMPLE_DATA_DIR

PROG = "ctxdesk"
EXIT_OK = 0
EXIT_ERROR = 1
EXIT_USAGE = 2
#: Stopped by ^C (128 + SIGINT, as a shell reports it).
EXIT_INTERRUPTED = 130
REPO_ROOT = Path(__file__).resolve().parent.parent.parent

__all__ = [
    "EXIT_ERROR",
    "EXIT_OK",
    "EXIT_USAGE",
    "PROG",
    "REPO_ROOT",
    "SAMPLE_DATA_DIR",
    "ProgressPrinter",
    "UsageError",
    "database_or_default",
    "find_session",
    "open_read_only",
    "port_number",
    "session_in",
]


class UsageError(Exception):
    """A command line that parses but asks for something impossible (exit 2)."""


def session_in(target: str | None, session: str | None, db: str | None) -> tuple[str | None, str | None]:
    """(target, db) of a command taking ``DB[:SESSION]`` or ``SESSION --db DB`` when it is also given
    ``DB SESSION``, as ``ctxdesk inspect`` is: a second positional names a session of the first."""
    if session is None:
        return target, db
    if db is not None:
        raise UsageError(
            f"name the database once: `DB SESSION` or `SESSION --db DB`, not both (session {session!r})"
        )
    return session, target


def open_read_only(path: str) -> Any:
    """A read-only store on an existing database file, a ``postgresql://`` URL or a key=value DSN
    (UsageError when there is no such file)."""
    from engine.store.factory import is_database_url, open_store, redact_url

    if not is_database_url(path) and not Path(path).is_file():
        raise UsageError(f"no such database file: {redact_url(path)}")
    return open_store(path, read_only=True)


def database_or_default(given: str | None, settings_path: str | None = None) -> str:
    """The database a command writes or reads: ``given``, else $CTXDESK_DB, else the settings'
    ``database`` (a file path or a team's ``postgresql://`` URL)."""
    from engine.store.factory import DB_ENV_VAR, configured_database

    if given:
        return given
    found = configured_database(settings_path)
    if found is None:
        raise UsageError(f"name a database (--db), or set ${DB_ENV_VAR} or `database` in the settings")
    return found


def find_session(store: Any, wanted: str) -> Any:
    """A session by id, or by a unique id prefix (:func:`engine.report.find_session`)."""
    from engine.report import find_session as find

    return find(store, wanted)


def port_number(text: str) -> int:
    """argparse type for a TCP port."""
    import argparse

    try:
        port = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a port number: {text!r}") from None
    if not 1 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"port must be 1..65535, got {port}")
    return port


class ProgressPrinter:
    """on_progress(done, total, label) for stderr: one updating line on a terminal, else a line each."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream
        self.tty = stream.isatty()
        self._wrote = False

    def __call__(self, done: int, total: int, label: str) -> None:
        self.write(f"[{done}/{total}] imported {label}")

    def write(self, text: str) -> None:
        """One progress line (replacing the last one on a terminal)."""
        self.stream.write(("\r\x1b[K" + text) if self.tty else text + "\n")
        self.stream.flush()
        self._wrote = True

    def finish(self) -> None:
        if self.tty and self._wrote:
            self.stream.write("\n")
            self.stream.flush()
