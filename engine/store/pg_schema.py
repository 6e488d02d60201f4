"""The session database's schema on PostgreSQL: its own DDL and migrations, from the same table
declarations as SQLite's (engine/store/schema.py), and the docs section (:mod:`engine.store.pg_types`) says how they map.

The migrations carry SQLite's names (``m001_initial`` ...) and are recorded the same way in
``_migrations``; ``PRAGMA application_id`` / ``user_version`` are rows of ``_pragmas``. Declared
column types map by :data:`TYPE_MAP`. A test checks every SQLite migration has its PostgreSQL one.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from engine.store.pg_types import pg_type
from engine.store.records import utc_now
from engine.store.schema import (
    APPLICATION_ID,
    COST_WRITES_INDEX,
    EXCLUDED_COLUMN,
    RESIDUAL_COLUMNS,
    TABLES_M002,
    TABLES_M003,
    TABLES_V1,
    Table,
)

_REFERENCES_RE = re.compile(
    r"\s+REFERENCES\s+(\w+)\s*\(\s*\w+\s*\)(?:\s+ON\s+DELETE\s+(?:CASCADE|SET\s+NULL))?"
)

PRAGMAS_TABLE_SQL = (
    'CREATE TABLE IF NOT EXISTS _pragmas (name TEXT COLLATE "C" PRIMARY KEY, value BIGINT NOT NULL)'
)
MIGRATIONS_TABLE_SQL = 'CREATE TABLE IF NOT EXISTS _migrations (name TEXT COLLATE "C" PRIMARY KEY, applied_utc TEXT COLLATE "C" NOT NULL)'


def _create_table(conn: Any, table: Table) -> list[str]:
    """CREATE TABLE with the declared columns and indexes; returns the ALTER TABLEs adding the
    references to tables not created yet (SQLite allows them, PostgreSQL does not:
    session_snapshots.event_id), to run once those exist."""
    exists = {r[0] for r in conn.execute(
        "SELECT table_name FROM information_schema.tables WHERE table_schema = current_schema()"
    ).fetchall()}  # fmt: skip
    columns, later = [], []
    for column in table.columns:
        declared = pg_type(column.type)
        ref = _REFERENCES_RE.search(declared)
        if ref and ref.group(1) != table.name and ref.group(1) not in exists:
            later.append(f"ALTER TABLE {table.name} ADD FOREIGN KEY ({column.name}){ref.group(0)}")
            declared = declared[: ref.start()] + declared[ref.end() :]
        columns.append(f"  {column.name} {declared}")
    columns += [f"  {c}" for c in table.constraints]
    conn.execute(f"CREATE TABLE IF NOT EXISTS {table.name} (\n" + ",\n".join(columns) + "\n)")
    for index in table.indexes:
        conn.execute(index)
    return later


def _create_tables(conn: Any, tables: tuple[Table, ...]) -> None:
    later = [alter for table in tables for alter in _create_table(conn, table)]
    for alter in later:  # every table of the migration exists now
        conn.execute(alter)


def m001_initial(conn: Any) -> None:
    _create_tables(conn, TABLES_V1)


def m002_request_payloads(conn: Any) -> None:
    _create_tables(conn, TABLES_M002)


def m003_request_costs(conn: Any) -> None:
    _create_tables(conn, TABLES_M003)


def m004_blob_content_last(conn: Any) -> None:
    """Nothing: PostgreSQL binds bytea as a value wherever the column is (SQLite needed it last)."""


def m005_request_costs_writer_index(conn: Any) -> None:
    conn.execute(COST_WRITES_INDEX)


def m006_component_residual(conn: Any) -> None:
    for column in RESIDUAL_COLUMNS:
        conn.execute(
            f"ALTER TABLE context_events ADD COLUMN IF NOT EXISTS {column.name} {pg_type(column.type)}"
        )


def m007_messages_excluded(conn: Any) -> None:
    column = EXCLUDED_COLUMN
    conn.execute(f"ALTER TABLE context_events ADD COLUMN IF NOT EXISTS {column.name} {pg_type(column.type)}")


def m008_session_rollups(conn: Any) -> None:
    """Nothing: a PostgreSQL server keeps ``_session_rollups`` by its own triggers, created and
    back-filled when a store opens it for writing (engine.store.pg_rollups.ensure_rollups)."""


PG_MIGRATIONS: tuple[tuple[str, Callable[[Any], None]], ...] = (
    ("m001_initial", m001_initial),
    ("m002_request_payloads", m002_request_payloads),
    ("m003_request_costs", m003_request_costs),
    ("m004_blob_content_last", m004_blob_content_last),
    ("m005_request_costs_writer_index", m005_request_costs_writer_index),
    ("m006_component_residual", m006_component_residual),
    ("m007_messages_excluded", m007_messages_excluded),
    ("m008_session_rollups", m008_session_rollups),
)


def apply_pg_migrations(raw: Any) -> list[str]:
    """Apply pending migrations through a psycopg connection (autocommit), each in its own
    transaction with its ``_migrations`` row and ``_pragmas``; return their names. The caller holds
    the migrations' advisory lock."""
    raw.execute(PRAGMAS_TABLE_SQL)
    raw.execute(MIGRATIONS_TABLE_SQL)
    applied: list[str] = []
    for number, (name, migrate) in enumerate(PG_MIGRATIONS, start=1):
        with raw.transaction():
            if raw.execute("SELECT 1 FROM _migrations WHERE name = %s", (name,)).fetchone():
                continue
            migrate(raw)
            raw.execute("INSERT INTO _migrations (name, applied_utc) VALUES (%s, %s)", (name, utc_now()))
            for pragma, value in (("application_id", APPLICATION_ID), ("user_version", number)):
                raw.execute(
                    "INSERT INTO _pragmas (name, value) VALUES (%s, %s)"
                    " ON CONFLICT (name) DO UPDATE SET value = excluded.value",
                    (pragma, value),
                )
        applied.append(name)
    return applied
