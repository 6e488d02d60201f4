"""Per-session totals for the Sessions page, defined once: kept in ``_session_rollups`` by PostgreSQL
itself and by the SQLite store's write transaction (engine/store/sqlite_rollups.py), aggregated on the
fly from a file an older ctxdesk wrote (so the page reads 10,000 rows, not 2,000,000 messages and
500,000 events).

``_session_rollups`` is derived data, like an index: statement-level triggers on ``messages``,
``context_events`` and ``tool_result_blobs`` merge each inserted batch's totals in, and recount the
sessions whose rows a statement deleted (a re-import's replaced tail); deleting a session deletes
its row. A PostgreSQL store opened for writing creates it and back-fills it from
the rows already there, in one transaction, and rebuilds it when its SQL here has changed. The SQL
here is valid in both SQLite and PostgreSQL.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any

from engine.limit import LIMIT_SQL

ROLLUP_TABLE = "_session_rollups"
#: ``last_limit`` packs (seq, limit) of a session's latest request with a limit: seq * LIMIT_BASE + limit.
#: A request's limit is :data:`engine.limit.LIMIT_SQL` (NULL where none is known: such requests count
#: neither for the peak share nor for the last limit).
LIMIT_BASE = 10_000_000_000

#: source table -> rollup column -> (aggregate over that table's rows of a session, how a new batch merges)
SESSION_TOTALS: dict[str, dict[str, tuple[str, str]]] = {
    "messages": {
        "messages": ("count(*)", "r.messages + excluded.messages"),
        "last_turn": ("max(turn_index)", "greatest(r.last_turn, excluded.last_turn)"),
    },
    "context_events": {
        "peak_usage_pct": (
            f"max(CASE WHEN kind = 'request' THEN CAST(projected_tokens AS DOUBLE PRECISION) * 100 / {LIMIT_SQL} END)",
            "greatest(r.peak_usage_pct, excluded.peak_usage_pct)",
        ),
        "peak_tokens": (
            "max(CASE WHEN kind = 'request' THEN projected_tokens END)",
            "greatest(r.peak_tokens, excluded.peak_tokens)",
        ),
        "last_limit": (
            f"max(CASE WHEN kind = 'request' THEN seq * {LIMIT_BASE} + {LIMIT_SQL} END)",
            "greatest(r.last_limit, excluded.last_limit)",
        ),
        "compactions": (
            "sum(CASE WHEN kind = 'compaction' AND outcome = 'compacted' THEN 1 ELSE 0 END)",
            "r.compactions + excluded.compactions",
        ),
        "forced_final": (
            "sum(CASE WHEN kind = 'guard' AND outcome = 'forced_final' THEN 1 ELSE 0 END)",
            "r.forced_final + excluded.forced_final",
        ),
        "skipped_provider": (
            "sum(CASE WHEN kind = 'guard' AND outcome = 'skipped_provider' THEN 1 ELSE 0 END)",
            "r.skipped_provider + excluded.skipped_provider",
        ),
    },
    "tool_result_blobs": {
        "offloaded_bytes": ("sum(size_bytes)", "r.offloaded_bytes + excluded.offloaded_bytes"),
        "blobs": ("count(*)", "r.blobs + excluded.blobs"),
    },
}


def totals_sql(table: str, *, rows: str | None = None) -> str:
    """One row per session: the totals of ``table`` (aggregated over ``rows``, default the table)."""
    columns = ", ".join(f"{agg} AS {name}" for name, (agg, _) in SESSION_TOTALS[table].items())
    return f"SELECT session_id, {columns} FROM {rows or table} GROUP BY session_id"


def rollup_sql(table: str) -> str:
    """The same rows as :func:`totals_sql`, read from ``_session_rollups`` (PostgreSQL)."""
    names = list(SESSION_TOTALS[table])
    present = {"messages": "messages > 0", "context_events": "last_limit IS NOT NULL OR compactions > 0"
               " OR forced_final > 0 OR skipped_provider > 0 OR peak_tokens IS NOT NULL",
               "tool_result_blobs": "blobs > 0"}[table]  # fmt: skip
    return f"SELECT session_id, {', '.join(names)} FROM {ROLLUP_TABLE} WHERE {present}"


def upsert_sql(table: str, rows: str, *, merges: Mapping[str, str] | None = None) -> str:
    """Merge the totals of ``table`` over ``rows`` into ``_session_rollups`` (an upsert by session);
    ``merges``: each column's merge expression as another database spells it (SQLite), else
    :data:`SESSION_TOTALS`' own."""
    names = list(SESSION_TOTALS[table])
    spelled = (
        merges if merges is not None else {name: how for name, (_, how) in SESSION_TOTALS[table].items()}
    )
    merge = ", ".join(f"{name} = {spelled[name]}" for name in names)
    return (
        f"INSERT INTO {ROLLUP_TABLE} AS r (session_id, {', '.join(names)}) {totals_sql(table, rows=rows)}"
        f" ON CONFLICT (session_id) DO UPDATE SET {merge}"
    )


def rollup_statements() -> list[str]:
    """The table, one trigger function and trigger per source table, and the back-fill, in order."""
    out = [
        "LOCK TABLE messages, context_events, tool_result_blobs IN SHARE ROW EXCLUSIVE MODE",
        f"""CREATE TABLE {ROLLUP_TABLE} (
            session_id TEXT COLLATE "C" PRIMARY KEY REFERENCES sessions(id) ON DELETE CASCADE,
            messages BIGINT NOT NULL DEFAULT 0, last_turn BIGINT,
            peak_usage_pct DOUBLE PRECISION, peak_tokens BIGINT, last_limit BIGINT,
            compactions BIGINT NOT NULL DEFAULT 0, forced_final BIGINT NOT NULL DEFAULT 0,
            skipped_provider BIGINT NOT NULL DEFAULT 0,
            offloaded_bytes BIGINT NOT NULL DEFAULT 0, blobs BIGINT NOT NULL DEFAULT 0)""",
    ]
    for table in SESSION_TOTALS:
        function = f"{ROLLUP_TABLE}_{table}"
        out += [
            f"CREATE OR REPLACE FUNCTION {function}() RETURNS trigger LANGUAGE plpgsql AS $$"
            f" BEGIN {upsert_sql(table, 'new_rows')}; RETURN NULL; END $$",
            f"CREATE TRIGGER {function} AFTER INSERT ON {table} REFERENCING NEW TABLE AS new_rows"
            f" FOR EACH STATEMENT EXECUTE FUNCTION {function}()",
            f"CREATE OR REPLACE FUNCTION {function}_deleted() RETURNS trigger LANGUAGE plpgsql AS $$"
            f" BEGIN {_recount_sql(table)}; RETURN NULL; END $$",
            f"CREATE TRIGGER {function}_deleted AFTER DELETE ON {table} REFERENCING OLD TABLE AS old_rows"
            f" FOR EACH STATEMENT EXECUTE FUNCTION {function}_deleted()",
            upsert_sql(table, table),  # back-fill the rows already there
        ]
    return out


def _recount_sql(table: str) -> str:
    """After rows of ``table`` were deleted (a transcript tail replaced on re-import): the totals of
    the sessions they belonged to, recounted from the rows left (a maximum cannot be taken back)."""
    touched = "session_id IN (SELECT session_id FROM old_rows)"
    reset = ", ".join(
        f"{name} = {'0' if agg.startswith(('count', 'sum')) else 'NULL'}"
        for name, (agg, _) in SESSION_TOTALS[table].items()
    )
    left = f"(SELECT * FROM {table} WHERE {touched}) AS left_rows"
    return f"UPDATE {ROLLUP_TABLE} SET {reset} WHERE {touched}; {upsert_sql(table, left)}"


def rollup_version() -> str:
    """A digest of the rollups' SQL: a store whose rollups were built by other SQL rebuilds them."""
    return "v:" + hashlib.sha256("\n".join(rollup_statements()).encode()).hexdigest()[:16]


def ensure_rollups(raw: Any) -> bool:
    """Create the rollups through a psycopg connection unless present and built by this SQL
    (the table's comment holds :func:`rollup_version`); True when (re)built. Rebuilding drops the
    derived table and its triggers and back-fills it from the rows, in one transaction."""
    version = rollup_version()
    with raw.transaction():
        present, comment = raw.execute(
            "SELECT to_regclass(%s) IS NOT NULL, obj_description(to_regclass(%s), 'pg_class')",
            [ROLLUP_TABLE, ROLLUP_TABLE],
        ).fetchone()
        if present and comment == version:
            return False
        for table in SESSION_TOTALS:
            for trigger in (f"{ROLLUP_TABLE}_{table}", f"{ROLLUP_TABLE}_{table}_deleted"):
                raw.execute(f"DROP TRIGGER IF EXISTS {trigger} ON {table}")
        raw.execute(f"DROP TABLE IF EXISTS {ROLLUP_TABLE}")
        for statement in rollup_statements():
            raw.execute(statement)
        raw.execute(f"COMMENT ON TABLE {ROLLUP_TABLE} IS '{version}'")
    return True
