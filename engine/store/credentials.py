"""Database passwords kept out of connection strings: in a passfile only this process can read.

A connection string is shown in places a password must never be: DuckDB's catalog
(``duckdb_databases()``), the dashboard's ``databases`` view and labels, a child's argv.
:func:`hide_password` takes a URL or key=value DSN holding one and returns it without, having put
the password in a libpq passfile (``PGPASSFILE``, mode 0600 in a 0700 folder, removed at exit) that
every libpq connection of this process reads: psycopg's and DuckDB's postgres extension alike.
Entries the user's own passfile held are kept in it.
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
import threading
from pathlib import Path

from engine.store.urls import is_database_url, without_password

PASSFILE_ENV_VAR = "PGPASSFILE"

_lock = threading.Lock()
_passfile: Path | None = None
_entries: list[str] = []


def _field(value: object) -> str:
    """A passfile field: ``*`` when the connection does not name it; ``:`` and ``\\`` escaped."""
    if value in (None, ""):
        return "*"
    return str(value).replace("\\", "\\\\").replace(":", "\\:")


def passfile_line(target: str) -> str | None:
    """The passfile line (host:port:database:user:password) of a URL or DSN with a password."""
    import psycopg  # only a server's connection string gets here

    try:
        params = psycopg.conninfo.conninfo_to_dict(target)
    except psycopg.ProgrammingError:
        return None
    password = params.get("password")
    if not password:
        return None
    fields = [params.get(k) for k in ("host", "port", "dbname", "user")]
    return ":".join([*map(_field, fields), _field(password)])


def hide_password(target: str) -> str:
    """``target`` without its password, the password now in this process's passfile; a target
    without one (or a file path) is returned as it is."""
    if not is_database_url(target):
        return target
    line = passfile_line(target)
    if line is None:
        return target
    with _lock:
        if line not in _entries:
            _entries.insert(0, line)  # first: a later password for the same server wins
            _write()
    return without_password(target)


def _write() -> None:
    global _passfile
    if _passfile is None:
        previous = os.environ.get(PASSFILE_ENV_VAR) or str(Path.home() / ".pgpass")
        theirs = Path(previous).read_text(encoding="utf-8") if Path(previous).is_file() else ""
        folder = Path(tempfile.mkdtemp(prefix="ctxdesk-pgpass-"))  # 0700
        atexit.register(shutil.rmtree, folder, ignore_errors=True)
        _passfile = folder / "pgpass"
        _entries.extend(line for line in theirs.splitlines() if line.strip())
    fd = os.open(_passfile.with_suffix(".new"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write("\n".join(_entries) + "\n")
    os.replace(_passfile.with_suffix(".new"), _passfile)
    os.environ[PASSFILE_ENV_VAR] = str(_passfile)


__all__ = ["PASSFILE_ENV_VAR", "hide_password", "passfile_line"]
