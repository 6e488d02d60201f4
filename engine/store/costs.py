"""Per-call costs in a session database: read a session's calls, write and read ``request_costs``.

The numbers come from the pure modules (engine.cost, engine.cache_analysis, engine.rollup);
this module only holds the SQL. The rows written once request events are recorded come from
:mod:`engine.store.cost_writer` (re-exported here). ``session_costs`` works on any database (read-only, or made
before migration m003): it computes from ``context_events``. ``refresh_request_costs`` stores
the rows (one transaction per call of it), so SQL users and the dashboard can read them.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from engine.cache_analysis import (
    analyze_cache,
    call_records,
    event_time_is_call_time,
)
from engine.model_table import ModelTable
from engine.rollup import SessionCosts, cost_rows
from engine.store.cost_writer import COST_TABLE, insert_cost_rows, record_request_cost, record_request_costs
from engine.store.records import utc_now
from engine.store.sql_store import SqlSessionStore


def _tables(store: SqlSessionStore) -> set[str]:
    return store.table_names()


def message_times(store: SqlSessionStore, session_id: str) -> dict[int, str]:
    """seq -> the ``timestamp`` a source recorded in the message's meta (imports keep it)."""
    rows = store._read(
        f"SELECT seq, meta_json FROM messages WHERE session_id = {store.P} AND meta_json LIKE {store.P}",
        (session_id, "%timestamp%"),
    )
    out: dict[int, str] = {}
    for r in rows:
        try:
            meta = json.loads(r["meta_json"])
        except (TypeError, ValueError):
            continue
        if isinstance(meta, dict) and isinstance(meta.get("timestamp"), str):
            out[int(r["seq"])] = meta["timestamp"]
    return out


def exact_requests(store: SqlSessionStore, session_id: str) -> dict[int, dict[str, Any]]:
    """event id -> the ``model_requests`` row of that call (migration m002), when recorded."""
    if "model_requests" not in _tables(store):
        return {}
    rows = store._read(
        "SELECT event_id, system_hash, tools_hash, cache_creation_5m_tokens, cache_creation_1h_tokens,"
        f" reasoning_tokens, started_utc FROM model_requests WHERE session_id = {store.P} AND event_id IS NOT NULL",
        (session_id,),
    )
    return {int(r["event_id"]): dict(r) for r in rows}


def session_costs(
    store: SqlSessionStore, session_id: str, *, table: ModelTable | None = None
) -> SessionCosts:
    """One session's calls priced and analysed (computed now from its events)."""
    session = store.get_session(session_id)
    calls = call_records(
        store.list_events(session_id),  # compaction/restore events mark the call after them
        message_times=message_times(store, session_id),
        default_model=session.model,
        exact_requests=exact_requests(store, session_id),
        table=table,
        event_time_is_call_time=event_time_is_call_time(session.source),
    )
    rows = cost_rows(calls, analyze_cache(calls))
    return SessionCosts(
        session_id=session.id,
        title=session.title,
        parent_session_id=session.parent_session_id,
        source=session.source,
        model=session.model,
        rows=tuple(rows),
        created_utc=session.created_utc,
    )


def project_costs(store: SqlSessionStore, *, table: ModelTable | None = None) -> list[SessionCosts]:
    """Every session of the database, priced and analysed."""
    return [session_costs(store, s.id, table=table) for s in store.list_sessions()]


def refresh_request_costs(
    store: SqlSessionStore, session_ids: Iterable[str] | None = None, *, table: ModelTable | None = None
) -> int:
    """Recompute and store ``request_costs`` for these sessions (all by default); rows written."""
    ids = list(session_ids) if session_ids is not None else [s.id for s in store.list_sessions()]
    computed = [session_costs(store, sid, table=table) for sid in ids]
    now = utc_now()
    written = 0
    with store.transaction() as conn:
        for s in computed:
            conn.execute(f"DELETE FROM {COST_TABLE} WHERE session_id = {store.P}", (s.session_id,))
            written += insert_cost_rows(
                conn, store.P, [r for r in s.rows if r["event_id"] is not None], s.session_id, now
            )
    return written


def stored_request_costs(store: SqlSessionStore, session_id: str) -> list[dict[str, Any]]:
    """The stored ``request_costs`` rows of a session, in call order ([] before m003 or a refresh)."""
    if COST_TABLE not in _tables(store):
        return []
    rows = store._read(
        f"SELECT * FROM {COST_TABLE} WHERE session_id = {store.P} ORDER BY call_index", (session_id,)
    )
    return [dict(r) for r in rows]


__all__ = [
    "COST_TABLE",
    "exact_requests",
    "message_times",
    "project_costs",
    "record_request_cost",
    "record_request_costs",
    "refresh_request_costs",
    "session_costs",
    "stored_request_costs",
]
