"""The DuckDB connection over the session databases and the query helpers every reader uses.

:func:`connect` attaches every SQLite file READ_ONLY with the sqlite scanner loaded offline
from the ``duckdb-extension-sqlite-scanner`` package (or a PostgreSQL server, dashboard.data.postgres),
and defines one view per schema table that unions the files with a ``db`` label column.
:func:`table_rows` builds a typed subquery filtered inside SQLite, so its indexes serve per-session reads."""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
import threading
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import duckdb
import duckdb_extensions
import pandas as pd

from dashboard.data import postgres
from dashboard.data.files import db_labels
from engine.errors import NotADatabaseError, NotFoundError
from engine.store import TABLE_NAMES, column_types
from engine.store.factory import hide_password, redact_url

#: Tables every attached file must have (docs/schema.md).
TABLES = TABLE_NAMES

#: Every dashboard read of DuckDB holds this lock, and a connection with a SQLite file attached runs one
#: DuckDB thread. The sqlite scanner is not safe to use from two threads at once within one process
#: (duckdb/duckdb-sqlite#82, #176): with browser sessions reading while an agent wrote, the dashboard
#: process died of a segfault in SQLite's allocator (sqlite3DbMallocRawNN) inside the scanner. The reads
#: are short; one at a time is the price of never crashing.
QUERY_LOCK = threading.RLock()


def read(con: duckdb.DuckDBPyConnection, function: Callable[..., Any], *args: Any) -> Any:
    """``function(cursor, *args)`` on a cursor of its own of ``con``, alone in the process (QUERY_LOCK):
    how every dashboard page reads the shared connection."""
    with QUERY_LOCK:
        cursor = con.cursor()
        try:
            return function(cursor, *args)
        finally:
            cursor.close()


def sql_string(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def load_sqlite_scanner(con: duckdb.DuckDBPyConnection) -> None:
    """Install the scanner from the local wheel (no download) and load it."""
    _ensure_home_directory(con)
    duckdb_extensions.import_extension("sqlite_scanner", con=con)
    con.execute("LOAD sqlite_scanner")


def _ensure_home_directory(con: duckdb.DuckDBPyConnection) -> None:
    """DuckDB installs extensions under the user's home directory and fails when it does not exist
    (a service or container with HOME=/nonexistent): such a process gets a private folder instead."""
    if os.path.isdir(os.path.expanduser("~")):
        return
    home = Path(tempfile.gettempdir()) / f"ctxdesk-duckdb-{os.getuid()}"
    home.mkdir(mode=0o700, exist_ok=True)
    con.execute(f"SET home_directory = {sql_string(str(home))}")


def connect(
    paths: Sequence[str | os.PathLike[str]], *, skip_invalid: bool = False
) -> duckdb.DuckDBPyConnection:
    """An in-memory DuckDB with each file attached READ_ONLY and a union view per table.

    A file lacking ctxdesk tables raises NotADatabaseError naming it; with ``skip_invalid`` it
    is left out instead and listed in the ``skipped`` table (path, reason), so one junk file in
    a folder does not hide the others. ``databases`` lists (db, alias, path). Read it through
    :func:`read` (a cursor per call, under QUERY_LOCK).
    """
    # a server's password goes to a passfile, never into DuckDB's catalog or the databases view
    resolved = [
        hide_password(str(p)) if postgres.is_database_url(str(p)) else Path(p).resolve() for p in paths
    ]
    with QUERY_LOCK:
        return _connect(resolved, skip_invalid=skip_invalid)


def _connect(resolved: Sequence[str | Path], *, skip_invalid: bool) -> duckdb.DuckDBPyConnection:
    labels = db_labels(resolved)  # type: ignore[arg-type]
    con = duckdb.connect(":memory:")
    if any(isinstance(p, Path) for p in resolved):
        con.execute("SET threads = 1")  # no two scanner pipelines at once in one query (QUERY_LOCK)
    load_sqlite_scanner(con)
    if any(isinstance(p, str) for p in resolved):
        postgres.load_postgres_extension(con)
    con.execute("CREATE TABLE databases (db VARCHAR, alias VARCHAR, path VARCHAR)")
    con.execute("CREATE TABLE skipped (path VARCHAR, reason VARCHAR)")
    attached: list[tuple[str, str]] = []
    for i, (label, path) in enumerate(zip(labels, resolved, strict=True)):
        alias = f"db_{i}"
        try:
            _attach(con, path, alias)
        except (NotADatabaseError, NotFoundError) as exc:
            if not skip_invalid:
                raise
            with contextlib.suppress(duckdb.Error):
                con.execute(f"DETACH DATABASE IF EXISTS {alias}")
            con.execute("INSERT INTO skipped VALUES (?, ?)", [redact_url(str(path)), str(exc)])
            continue
        con.execute("INSERT INTO databases VALUES (?, ?, ?)", [label, alias, str(path)])
        attached.append((label, alias))
    for table in TABLES:
        if not attached:
            continue
        parts = [f"SELECT {sql_string(label)} AS db, * FROM {alias}.{table}" for label, alias in attached]
        con.execute(f"CREATE VIEW {table} AS " + " UNION ALL BY NAME ".join(parts))
    return con


def _attach(con: duckdb.DuckDBPyConnection, path: str | Path, alias: str) -> None:
    """Attach one SQLite file (or postgresql:// URL) as ``alias``; NotADatabaseError when it is
    not a ctxdesk session database."""
    if isinstance(path, Path) and not path.is_file():
        raise NotFoundError("database file does not exist", path=str(path))
    try:
        if isinstance(path, str):  # a postgresql:// URL
            postgres.attach_postgres(con, path, alias)
        else:
            con.execute(f"ATTACH {sql_string(str(path))} AS {alias} (TYPE sqlite, READ_ONLY)")
        present = {
            r[0]
            for r in con.execute(
                "SELECT table_name FROM duckdb_tables() WHERE database_name = ?", [alias]
            ).fetchall()
        }
    except duckdb.Error as exc:
        kind = "PostgreSQL" if isinstance(path, str) else "SQLite"
        raise NotADatabaseError(
            f"cannot attach as {kind} ({redact_url(str(exc))})", path=redact_url(str(path))
        ) from exc
    missing = set(TABLES) - present
    if missing:
        raise NotADatabaseError(f"missing ctxdesk tables {sorted(missing)}", path=str(path))


def skipped_files(con: duckdb.DuckDBPyConnection) -> list[tuple[str, str]]:
    """(path, reason) of each file :func:`connect` left out (``skip_invalid``)."""
    return [(str(p), str(r)) for p, r in con.execute("SELECT path, reason FROM skipped").fetchall()]


def database_paths(con: duckdb.DuckDBPyConnection) -> dict[str, Path]:
    """db label -> file path (or postgresql:// URL, a str) of every attached database."""
    return {
        db: path if postgres.is_database_url(path) else Path(path)
        for db, path in con.execute("SELECT db, path FROM databases").fetchall()
    }


def query_frame(con: duckdb.DuckDBPyConnection, sql: str, params: Sequence[Any] = ()) -> pd.DataFrame:
    return plain_nulls(con.execute(sql, list(params)).df())


def plain_nulls(df: pd.DataFrame) -> pd.DataFrame:
    """Nullable integer columns (DuckDB gives ``Int64`` when a column holds NULL) as float64 with
    NaN: ``pd.NA`` raises on ``bool()``, so ``x == x`` tests and chart arithmetic crash on it
    (imported sessions record no limit, no provider usage on some calls)."""
    nullable = [c for c, t in df.dtypes.items() if isinstance(t, pd.api.extensions.ExtensionDtype)
                and t.kind in "iuf"]  # fmt: skip
    return df.astype(dict.fromkeys(nullable, "float64")) if nullable else df


def has_databases(con: duckdb.DuckDBPyConnection) -> bool:
    return bool(con.execute("SELECT count(*) FROM databases").fetchone()[0])


def _duck_type(sqlite_type: str) -> str:
    return {"INTEGER": "BIGINT", "TEXT": "VARCHAR", "BLOB": "BLOB", "REAL": "DOUBLE"}[sqlite_type.split()[0]]


#: table -> column -> DuckDB type, from the documented schema.
SCHEMA_TYPES = {t: {c: _duck_type(kind) for c, kind in cols.items()} for t, cols in column_types().items()}


def alias_of(con: duckdb.DuckDBPyConnection, db: str) -> str:
    return attached_database(con, db)[0]


def attached_database(con: duckdb.DuckDBPyConnection, db: str) -> tuple[str, str]:
    """(alias, path or URL) of a loaded database."""
    row = con.execute("SELECT alias, path FROM databases WHERE db = ?", [db]).fetchone()
    if row is None:
        raise NotFoundError(f"no database labelled {db!r} is loaded")
    return str(row[0]), str(row[1])


def table_rows(
    con: duckdb.DuckDBPyConnection,
    db: str,
    table: str,
    where: str,
    columns: Sequence[str] | None = None,
) -> tuple[str, list[Any]]:
    """A typed subquery over one table of one file, filtered inside SQLite (so its indexes serve
    per-session lookups; the scanner alone would read the whole table). ``where`` is SQLite SQL
    built only from quoted literals and integers; returns (sql, params)."""
    types = SCHEMA_TYPES[table]
    cols = list(columns or types)
    alias, path = attached_database(con, db)  # SQLite file or PostgreSQL (postgres): same SQL inside
    # A file of an older schema, attached read-only (never migrated), lacks later columns: NULL there.
    present = {r[0] for r in con.execute(
        "SELECT column_name FROM duckdb_columns() WHERE database_name = ? AND table_name = ?", [alias, table]
    ).fetchall()} or set(cols)  # fmt: skip
    inner = ", ".join(
        (f"{postgres.blob_hex_sql(path, c)} AS {c}" if types[c] == "BLOB" else c)
        if c in present
        else f"NULL AS {c}"
        for c in cols
    )
    outer = ", ".join(
        f"from_hex({c}) AS {c}" if types[c] == "BLOB" else f"CAST({c} AS {types[c]}) AS {c}" for c in cols
    )
    return f"(SELECT {outer} FROM {postgres.query_function(path)}(?, ?))", [
        alias,
        f"SELECT {inner} FROM {table} WHERE {where}",
    ]


def each_db(
    con: duckdb.DuckDBPyConnection, sql: str, types: Mapping[str, str], *, postgres_sql: str | None = None
) -> tuple[str, list[Any]]:
    """``sql`` run inside every attached database (``postgres_sql`` instead in a PostgreSQL one, when
    given), unioned with a ``db`` label; (subquery, params)."""
    casts = ", ".join(f"CAST({c} AS {t}) AS {c}" for c, t in types.items())
    parts, params = [], []
    for db, alias, path in con.execute("SELECT db, alias, path FROM databases ORDER BY alias").fetchall():
        parts.append(f"SELECT {sql_string(db)} AS db, {casts} FROM {postgres.query_function(path)}(?, ?)")
        params += [alias, postgres_sql if postgres_sql and postgres.is_database_url(path) else sql]
    return "(" + " UNION ALL ".join(parts) + ")", params


def session_rows(
    con: duckdb.DuckDBPyConnection,
    db: str,
    table: str,
    session_id: str,
    where: str = "",
    columns: Sequence[str] | None = None,
) -> tuple[str, list[Any]]:
    condition = f"session_id = {sql_string(session_id)}" + (f" AND ({where})" if where else "")
    return table_rows(con, db, table, condition, columns)


def parse_details(text: Any) -> dict[str, Any]:
    if not isinstance(text, str) or not text:
        return {}
    try:
        value = json.loads(text)
    except json.JSONDecodeError:
        return {"unparsed": text}
    return value if isinstance(value, dict) else {"value": value}
