"""Per-session totals kept in a SQLite file, by the store's own write transaction: the same
``_session_rollups`` rows a PostgreSQL server keeps, from the same definitions
(:data:`engine.store.pg_rollups.SESSION_TOTALS`), so the Sessions page reads 10,000 rows, not
2,000,000 messages and 500,000 events.

When a write transaction begins (:func:`begin`) the highest ``messages`` and ``context_events`` ids
are noted; before it commits (:func:`merge`) the rows past them (ids are AUTOINCREMENT: never
reused) are aggregated per session and merged in with the same merge expressions PostgreSQL's
triggers use. Offloaded blobs (rare, and their rowids may be reused) and every deleted row mark
their session in a per-connection temporary table, through temporary triggers (so a session
deleted by a cascade counts too); those sessions are recounted from the rows left. Measured on
200,000 messages inserted in one transaction (1.05 s of CPU): a per-row upsert trigger added
~1.5 s (7.5 us a row), the delta at commit under 0.2 s. Migration ``m008_session_rollups``
creates the table and back-fills it.
"""

from __future__ import annotations

import re
import sqlite3

from engine.store.pg_rollups import ROLLUP_TABLE, SESSION_TOTALS, upsert_sql

#: Source tables whose inserted rows are merged as a delta past the ids noted when the
#: transaction began (their ids are AUTOINCREMENT).
DELTA_TABLES = ("messages", "context_events")
#: Sessions whose totals are recounted before the transaction commits (temporary: per connection).
TOUCHED = "_session_rollups_touched"

_GREATEST = re.compile(r"greatest\(([\w.]+), ([\w.]+)\)")


def sqlite_merge(how: str) -> str:
    """A merge expression in SQLite's spelling: ``greatest(a, b)`` (NULLs ignored, as PostgreSQL
    does) is ``coalesce(max(a, b), a, b)`` (SQLite's two-argument ``max`` is NULL if either is)."""
    return _GREATEST.sub(r"coalesce(max(\1, \2), \1, \2)", how)


def merge_sql(table: str, rows: str) -> str:
    """Merge the totals of ``table`` over ``rows`` (a table or a parenthesised subquery) into
    ``_session_rollups``, in SQLite."""
    merges = {name: sqlite_merge(how) for name, (_, how) in SESSION_TOTALS[table].items()}
    return upsert_sql(table, rows, merges=merges)


def backfill(conn: sqlite3.Connection) -> None:
    """Totals of every session from the rows already there (the table empty: migration m008)."""
    for table in SESSION_TOTALS:
        conn.execute(merge_sql(table, table))


def watch(conn: sqlite3.Connection) -> None:
    """Create this connection's temporary table of touched sessions and the temporary triggers
    that fill it (a writing connection, once migrated: the triggers name the source tables)."""
    conn.execute(f"CREATE TEMP TABLE IF NOT EXISTS {TOUCHED} (session_id TEXT PRIMARY KEY)")
    touch = f"INSERT OR IGNORE INTO {TOUCHED} (session_id) VALUES"
    for table in SESSION_TOTALS:
        conn.execute(
            f"CREATE TEMP TRIGGER IF NOT EXISTS {ROLLUP_TABLE}_{table}_deleted AFTER DELETE ON main.{table}"
            f" BEGIN {touch} (old.session_id); END"
        )
    conn.execute(  # blob rows: few, and not numbered by AUTOINCREMENT
        f"CREATE TEMP TRIGGER IF NOT EXISTS {ROLLUP_TABLE}_tool_result_blobs_inserted"
        f" AFTER INSERT ON main.tool_result_blobs BEGIN {touch} (new.session_id); END"
    )


def begin(conn: sqlite3.Connection) -> tuple[int, ...]:
    """The highest id of each of :data:`DELTA_TABLES`, as a write transaction begins."""
    row = conn.execute(
        "SELECT " + ", ".join(f"coalesce((SELECT max(id) FROM {t}), 0)" for t in DELTA_TABLES)
    ).fetchone()
    return tuple(int(v) for v in row)


def delta_rows(table: str, mark: int) -> str:
    """The rows of ``table`` past ``mark``, read by their id range. NOT INDEXED: grouped by session,
    SQLite otherwise walked the whole (session, turn) covering index to find them (1.7 s at every
    commit into a store of 2,000,000 messages, 0.1 ms by the range)."""
    return f"(SELECT * FROM {table} NOT INDEXED WHERE id > {int(mark)})"


def merge(conn: sqlite3.Connection, marks: tuple[int, ...]) -> None:
    """Before the transaction that began at ``marks`` commits: merge the rows it inserted, then
    recount the sessions it touched (rows deleted, blobs inserted) from the rows they have."""
    for table, mark in zip(DELTA_TABLES, marks, strict=True):
        conn.execute(merge_sql(table, delta_rows(table, mark)))
    if conn.execute(f"SELECT 1 FROM temp.{TOUCHED} LIMIT 1").fetchone() is None:
        return
    touched = f"session_id IN (SELECT session_id FROM temp.{TOUCHED})"
    conn.execute(f"DELETE FROM {ROLLUP_TABLE} WHERE {touched}")
    for table in SESSION_TOTALS:
        conn.execute(merge_sql(table, f"(SELECT * FROM {table} WHERE {touched})"))
    conn.execute(f"DELETE FROM temp.{TOUCHED}")
