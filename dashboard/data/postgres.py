"""PostgreSQL session databases in the dashboard: attached READ_ONLY through DuckDB's postgres
extension (loaded offline from the ``duckdb-extension-postgres`` package, like the sqlite scanner).

A ``postgresql://`` URL stands wherever the dashboard takes a database file. The URL's
``search_path`` option, when given, names the schema holding the tables. Writes (compaction,
restore) never go through DuckDB: dashboard.actions runs them in the engine.
"""

from __future__ import annotations

import hashlib
from urllib.parse import parse_qs, urlsplit

import duckdb
import duckdb_extensions

from engine.store.factory import database_name, is_database_url, redact_url

__all__ = [
    "attach_postgres",
    "blob_hex_sql",
    "is_database_url",
    "label",
    "load_postgres_extension",
    "query_function",
    "schema_of",
    "signature",
]


def _sql_string(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def load_postgres_extension(con: duckdb.DuckDBPyConnection) -> None:
    """Install the extension from the local wheel (no download) and load it."""
    duckdb_extensions.import_extension("postgres", con=con)
    con.execute("LOAD postgres")


def schema_of(url: str) -> str | None:
    """The schema a URL's ``options=-csearch_path=...`` names (the first one), else None."""
    for option in parse_qs(urlsplit(url).query).get("options", []):
        for part in option.replace("-c ", "-c").split():
            if part.startswith("-csearch_path="):
                return part.split("=", 1)[1].split(",")[0].strip() or None
    return None


def attach_postgres(con: duckdb.DuckDBPyConnection, url: str, alias: str) -> None:
    """ATTACH the database at ``url`` as ``alias`` (TYPE postgres, READ_ONLY). libpq keeps the
    URL's options (a search_path for SQL run inside it); DuckDB's catalog gets the schema too."""
    schema = schema_of(url)
    extra = f", SCHEMA {_sql_string(schema)}" if schema else ""
    try:
        con.execute(f"ATTACH {_sql_string(url)} AS {alias} (TYPE postgres, READ_ONLY{extra})")
    except duckdb.Error as exc:  # DuckDB's message quotes the URL: never pass a password on
        text = str(exc).replace(url, redact_url(url))
        password = urlsplit(url).password
        raise duckdb.Error(text.replace(password, "***") if password else text) from None


def query_function(path: str) -> str:
    """The DuckDB table function that runs SQL inside an attached database of this kind."""
    return "postgres_query" if is_database_url(path) else "sqlite_query"


def blob_hex_sql(path: str, column: str) -> str:
    """``column`` (a blob) as hex text, in the attached database's own SQL."""
    return f"encode({column}, 'hex')" if is_database_url(path) else f"hex({column})"


def label(url: str) -> str:
    """A short label: the database name, with the schema when one is named."""
    name = database_name(url)  # a key=value DSN too (its whole text would show the password)
    schema = schema_of(url)
    return f"{name}.{schema}" if schema else name


def signature(url: str) -> tuple[str, int, int]:
    """(url, newest row ids, sessions' newest update): changes whenever a writer commits."""
    import psycopg

    sql = (
        "SELECT coalesce((SELECT max(id) FROM messages), 0) + coalesce((SELECT max(id) FROM context_events), 0)"
        " + coalesce((SELECT max(id) FROM session_snapshots), 0),"
        " (SELECT count(*) FROM sessions), (SELECT max(updated_utc) FROM sessions)"
    )
    try:
        with psycopg.connect(url, connect_timeout=5) as conn:
            ids, sessions, newest = conn.execute(sql).fetchone() or (0, 0, None)
    except psycopg.Error:
        return (redact_url(url), -1, -1)  # unreachable now: the page shows the store's own error
    digest = int(hashlib.sha1(f"{sessions}|{newest}".encode()).hexdigest()[:12], 16)
    return (redact_url(url), int(ids or 0), digest)
