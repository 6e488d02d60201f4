"""The sessions list: one row per session across every database (aggregated in SQL), the links,
filters and parent/sub-agent tree of the Sessions page, a session's settings and findings."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import duckdb
import pandas as pd

from dashboard.data import postgres
from dashboard.data.connection import (
    has_databases,
    parse_details,
    query_frame,
    sql_string,
    table_rows,
)
from engine.errors import ValidationError
from engine.store import LIMIT_BASE, ROLLUP_TABLE, SESSION_TOTALS, rollup_sql, totals_sql

if TYPE_CHECKING:  # annotations only: the findings load in a child process (dashboard.actions)
    from engine.findings import Finding

#: DuckDB types of the per-session totals that are not BIGINT.
ROLLUP_TYPES = {"peak_usage_pct": "DOUBLE"}


# -- sessions ---------------------------------------------------------------------------------

SESSION_COLUMNS = (
    "db", "session_id", "title", "model", "provider", "status", "source", "turns", "messages",
    "peak_usage_pct", "peak_tokens", "limit_tokens", "compactions", "forced_final", "skipped_provider",
    "offloaded_bytes", "blobs", "created_utc", "updated_utc", "last_active_utc", "parent_session_id",
)  # fmt: skip

#: When a session was last active, as UTC text of one width (sorts as it reads): the last message's
#: time in the agent's own transcript (``ended_utc``, which an importer records in the metadata; the
#: session's start where that is the transcript's only time: Aider's chat log, Continue CLI);
#: for a session ctxdesk ran or recorded, its last update. An imported session whose transcript
#: carries no times has none (NULL, listed last): its ``updated_utc`` is only the time of the import.
LAST_ACTIVE_SQL = """strftime(coalesce(
        try_cast(CASE WHEN json_valid(s.metadata_json) THEN json_extract_string(s.metadata_json, '$.ended_utc') END
            AS TIMESTAMP),
        CASE WHEN s.source IS NULL OR s.source NOT LIKE 'import:%' THEN try_cast(s.updated_utc AS TIMESTAMP) END),
        '%Y-%m-%dT%H:%M:%S.%fZ')"""


def sessions_overview(con: duckdb.DuckDBPyConnection) -> pd.DataFrame:
    """One row per session across every database, aggregated in SQL (no message content read)."""
    if not has_databases(con):
        return pd.DataFrame(columns=list(SESSION_COLUMNS))
    # Per-session totals (engine.store.pg_rollups): read from the totals the store keeps
    # (_session_rollups: 10,000 rows, not millions), kept by a PostgreSQL server and by the SQLite
    # store since m008; grouped inside a SQLite file an older ctxdesk wrote, where indexes cover them.
    parts, params = [], []
    kept = _kept_totals(con)
    for table in SESSION_TOTALS:
        sql, p = _totals_of(con, table, kept)
        parts.append(sql)
        params += p
    m, e, b = parts
    return query_frame(
        con,
        f"""
        WITH m AS (
            SELECT db, session_id, messages, last_turn + 1 AS turns FROM {m}),
        e AS (
            SELECT db, session_id, peak_usage_pct, peak_tokens, last_limit % {LIMIT_BASE} AS limit_tokens,
                compactions, forced_final, skipped_provider FROM {e}),
        b AS (SELECT db, session_id, offloaded_bytes, blobs FROM {b})
        SELECT s.db, s.id AS session_id, s.title, s.model, s.provider, s.status, s.source,
            coalesce(m.turns, 0)::BIGINT AS turns, coalesce(m.messages, 0)::BIGINT AS messages,
            round(e.peak_usage_pct, 1) AS peak_usage_pct, e.peak_tokens, e.limit_tokens,
            coalesce(e.compactions, 0)::BIGINT AS compactions,
            coalesce(e.forced_final, 0)::BIGINT AS forced_final,
            coalesce(e.skipped_provider, 0)::BIGINT AS skipped_provider,
            coalesce(b.offloaded_bytes, 0)::BIGINT AS offloaded_bytes, coalesce(b.blobs, 0)::BIGINT AS blobs,
            s.created_utc, s.updated_utc, {LAST_ACTIVE_SQL} AS last_active_utc, s.parent_session_id
        FROM sessions s
        LEFT JOIN m ON m.db = s.db AND m.session_id = s.id
        LEFT JOIN e ON e.db = s.db AND e.session_id = s.id
        LEFT JOIN b ON b.db = s.db AND b.session_id = s.id
        ORDER BY last_active_utc DESC NULLS LAST, s.db, s.id
        """,
        params,
    )


def _kept_totals(con: duckdb.DuckDBPyConnection) -> set[str]:
    """Aliases of the attached databases whose store keeps ``_session_rollups``: a PostgreSQL
    server, a SQLite file written since migration m008."""
    kept = set()
    for alias, path in con.execute("SELECT alias, path FROM databases").fetchall():
        if (
            postgres.is_database_url(path)
            or con.execute(
                "SELECT count(*) FROM sqlite_query(?, ?)",
                [alias, f"SELECT 1 FROM sqlite_master WHERE name = '{ROLLUP_TABLE}'"],
            ).fetchone()[0]
        ):
            kept.add(alias)
    return kept


def _totals_of(con: duckdb.DuckDBPyConnection, table: str, kept: set[str]) -> tuple[str, list[Any]]:
    """The totals of ``table``, one row per session of every database (with its ``db``): the kept
    rows (:func:`engine.store.rollup_sql`) where there are, else grouped inside the file."""
    types = {"session_id": "VARCHAR"} | {c: ROLLUP_TYPES.get(c, "BIGINT") for c in SESSION_TOTALS[table]}
    casts = ", ".join(f"CAST({c} AS {t}) AS {c}" for c, t in types.items())
    parts, params = [], []
    for db, alias, path in con.execute("SELECT db, alias, path FROM databases ORDER BY alias").fetchall():
        parts.append(f"SELECT {sql_string(db)} AS db, {casts} FROM {postgres.query_function(path)}(?, ?)")
        params += [alias, rollup_sql(table) if alias in kept else totals_sql(table)]
    return "(" + " UNION ALL ".join(parts) + ")", params


def resolve_session_link(link: str, overview: pd.DataFrame) -> tuple[str, str] | None:
    """The (db, session_id) a ``?session=`` link names: ``db::id``, or a plain id that is unique
    across the loaded databases. None when nothing (or more than one session) matches."""
    db, sep, sid = link.partition("::")
    if sep:
        match = overview[(overview["db"] == db) & (overview["session_id"] == sid)]
    else:
        match = overview[overview["session_id"] == link]
    if len(match) != 1:
        return None
    return str(match.iloc[0]["db"]), str(match.iloc[0]["session_id"])


def session_settings(con: duckdb.DuckDBPyConnection, db: str, session_id: str) -> dict[str, Any]:
    """The resolved settings a session recorded when it was created (``sessions.settings_json``)."""
    src, params = table_rows(con, db, "sessions", f"id = {sql_string(session_id)}", ["settings_json"])
    row = con.execute(f"SELECT settings_json FROM {src}", params).fetchone()
    return parse_details(row[0]) if row is not None else {}


def agent_context(con: duckdb.DuckDBPyConnection, db: str, session_id: str) -> dict[str, Any]:
    """What names an imported agent's own compaction rule: the session's ``source``, the settings its
    importer read beside the transcript (``agent_settings``) and the agent's version (``cli_version``);
    and what the importer noted of the file (``import_notes``: what it does not keep, what was measured
    how)."""
    src, params = table_rows(
        con, db, "sessions", f"id = {sql_string(session_id)}", ["source", "metadata_json"]
    )
    row = con.execute(f"SELECT source, metadata_json FROM {src}", params).fetchone()
    if row is None:
        return {}
    metadata = parse_details(row[1])
    settings = metadata.get("agent_settings")
    version = metadata.get("cli_version")
    notes = metadata.get("import_notes")
    return {
        "source": row[0],
        "agent_settings": settings if isinstance(settings, dict) else {},
        "cli_version": version if isinstance(version, str) else None,
        "import_notes": [str(n) for n in notes] if isinstance(notes, list) else [],
    }


def session_findings(
    db_path: str | os.PathLike[str], session_id: str, settings_file: str | os.PathLike[str] | None = None
) -> list[Finding]:
    """``engine.findings.find_waste`` over one session, its database opened read-only.

    ``settings_file`` is the user's settings (what the fixes are phrased against); a path that
    does not exist yet means no user settings. Runs in a child process (dashboard.actions): the
    store's sqlite3 must not share a process with DuckDB's bundled SQLite.
    """
    from dashboard import actions

    return actions.findings(db_path, session_id, settings_file)


def session_replay(
    db_path: str | os.PathLike[str], session_id: str, variants: list[Any], resolved: Any = None
) -> Any:
    """``engine.replay.replay_session`` of one session under ``variants`` (the what-if), its database
    opened read-only in a child process (dashboard.actions), as :func:`session_findings`."""
    from dashboard import actions

    return actions.replay(db_path, session_id, variants, resolved)


@dataclass(frozen=True)
class SessionFilter:
    """What the Sessions page filters on; empty fields match everything."""

    text: str = ""
    models: tuple[str, ...] = ()
    statuses: tuple[str, ...] = ()
    dbs: tuple[str, ...] = ()
    only_stopped: bool = False


def filter_sessions(
    df: pd.DataFrame, f: SessionFilter, sort_by: str = "last_active_utc", descending: bool = True
) -> pd.DataFrame:
    """Filter and sort the overview frame (pure; the frame is small: one row per session)."""
    if sort_by not in df.columns:
        raise ValidationError(f"cannot sort by {sort_by!r}", field="sort_by", value=sort_by)
    out = df
    if f.text:
        needle = f.text.lower()
        hay = (out["title"].fillna("") + " " + out["session_id"].fillna("")).str.lower()
        out = out[hay.str.contains(needle, regex=False)]
    if f.models:
        out = out[out["model"].isin(f.models)]
    if f.statuses:
        out = out[out["status"].isin(f.statuses)]
    if f.dbs:
        out = out[out["db"].isin(f.dbs)]
    if f.only_stopped:
        out = out[(out["forced_final"] > 0) | (out["skipped_provider"] > 0)]
    return out.sort_values(sort_by, ascending=not descending, na_position="last", kind="stable").reset_index(
        drop=True
    )


def as_tree(df: pd.DataFrame) -> pd.DataFrame:
    """The (filtered, sorted) overview with each sub-agent session right under its parent (in the
    order given) and ``depth`` set (0 for a top-level session); a sub-agent whose parent is not in
    the frame stays where it is, at depth 0. Pure; the frame has one row per session."""
    if df.empty or "parent_session_id" not in df:
        return df.assign(depth=0)
    keys = list(zip(df["db"], df["session_id"], strict=True))
    present = set(keys)
    children: dict[tuple[str, str], list[int]] = {}
    roots: list[int] = []
    for i, (db, parent) in enumerate(zip(df["db"], df["parent_session_id"], strict=True)):
        if isinstance(parent, str) and parent and (db, parent) in present and (db, parent) != keys[i]:
            children.setdefault((db, parent), []).append(i)
        else:
            roots.append(i)
    order: list[int] = []
    depth: list[int] = []
    seen: set[int] = set()

    def visit(i: int, level: int) -> None:
        if i in seen:  # a cycle in recorded parents: show each session once
            return
        seen.add(i)
        order.append(i)
        depth.append(level)
        for child in children.get(keys[i], []):
            visit(child, level + 1)

    for i in roots:
        visit(i, 0)
    for i in range(len(df)):  # rows only reachable through a cycle
        visit(i, 0)
    return df.iloc[order].assign(depth=depth).reset_index(drop=True)
