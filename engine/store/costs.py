"""Per-call costs in a session database: read a session's calls, write and read ``request_costs``.

The numbers come from the pure modules (engine.cost, engine.cache_analysis, engine.rollup);
this module only holds the SQL. ``session_costs`` works on any database (read-only, or made
before migration m003): it computes from ``context_events``. ``refresh_request_costs`` stores
the rows (one transaction per call of it), so SQL users and the dashboard can read them.
"""

from __future__ import annotations

import dataclasses
import json
import sqlite3
from collections.abc import Iterable, Sequence
from typing import Any

from engine.cache_analysis import (
    PREFIX_RESET_EVENTS,
    TTL_1H_S,
    TTL_5M_S,
    analyze_cache,
    call_records,
    classify_call,
    summarize,
)
from engine.model_table import ModelTable
from engine.rollup import SessionCosts, cost_rows
from engine.store.sqlite import SessionStore, _event, utc_now

COST_TABLE = "request_costs"
_COLUMNS = (
    "event_id", "session_id", "call_index", "call_utc", "day", "model", "priced_as", "price_source",
    "input_tokens", "output_tokens", "reasoning_tokens", "cache_read_tokens", "cache_write_5m_tokens",
    "cache_write_1h_tokens", "ttl_split_known", "input_usd", "output_usd", "cache_read_usd",
    "cache_write_5m_usd", "cache_write_1h_usd", "total_usd", "uncached_usd", "cache_cause", "rebuilt_tokens",
    "lost_usd", "gap_s", "cache_explanation", "computed_utc",
)  # fmt: skip


#: Ids per ``IN (...)`` list (SQLite allows 32,766 variables; PostgreSQL more).
_IN_CHUNK = 500

_INSERT = f"INSERT INTO {COST_TABLE} ({', '.join(_COLUMNS)}) VALUES ({', '.join('?' for _ in _COLUMNS)})"


def _tables(store: SessionStore) -> set[str]:
    return {r[0] for r in store._read("SELECT name FROM sqlite_master WHERE type = 'table'")}


def message_times(store: SessionStore, session_id: str) -> dict[int, str]:
    """seq -> the ``timestamp`` a source recorded in the message's meta (imports keep it)."""
    rows = store._read(
        "SELECT seq, meta_json FROM messages WHERE session_id = ? AND meta_json LIKE '%timestamp%'",
        (session_id,),
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


def exact_requests(store: SessionStore, session_id: str) -> dict[int, dict[str, Any]]:
    """event id -> the ``model_requests`` row of that call (migration m002), when recorded."""
    if "model_requests" not in _tables(store):
        return {}
    rows = store._read(
        "SELECT event_id, system_hash, tools_hash, cache_creation_5m_tokens, cache_creation_1h_tokens,"
        " reasoning_tokens, started_utc FROM model_requests WHERE session_id = ? AND event_id IS NOT NULL",
        (session_id,),
    )
    return {int(r["event_id"]): dict(r) for r in rows}


def session_costs(store: SessionStore, session_id: str, *, table: ModelTable | None = None) -> SessionCosts:
    """One session's calls priced and analysed (computed now from its events)."""
    session = store.get_session(session_id)
    calls = call_records(
        store.list_events(session_id),  # compaction/restore events mark the call after them
        message_times=message_times(store, session_id),
        default_model=session.model,
        exact_requests=exact_requests(store, session_id),
        table=table,
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


def project_costs(store: SessionStore, *, table: ModelTable | None = None) -> list[SessionCosts]:
    """Every session of the database, priced and analysed."""
    return [session_costs(store, s.id, table=table) for s in store.list_sessions()]


def record_request_cost(conn: sqlite3.Connection, session_id: str, event_id: int) -> bool:
    """Price and analyse the request event just inserted, inside the writer's transaction.

    Incremental: it reads the session's previous call (its event and stored row), the compactions
    since, and the two calls' message times. When earlier calls have no row (a database made
    before migration m003), nothing is written and ``refresh_request_costs`` fills the gap.
    Returns True when a row was written.
    """
    return record_request_costs(conn, session_id, [event_id]) > 0


def record_request_costs(conn: sqlite3.Connection, session_id: str, event_ids: Sequence[int]) -> int:
    """``record_request_cost`` for several request events just inserted into one session, in one
    pass (an import's calls): the rows are those one call per event, in seq order, would write.
    Returns the number of rows written."""
    cur = conn.cursor()
    cur.row_factory = sqlite3.Row
    if (
        not event_ids
        or not cur.execute(
            "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (COST_TABLE,)
        ).fetchone()
    ):
        return 0
    new: list[Any] = []
    for chunk in range(0, len(event_ids), _IN_CHUNK):
        ids = event_ids[chunk : chunk + _IN_CHUNK]
        rows = cur.execute(
            f"SELECT * FROM context_events WHERE id IN ({', '.join('?' for _ in ids)})", tuple(ids)
        ).fetchall()
        new += [e for e in map(_event, rows) if e.kind == "request" and e.usage is not None]
    if not new:
        return 0
    new.sort(key=lambda e: e.seq)
    last = cur.execute(
        f"SELECT * FROM {COST_TABLE} WHERE session_id = ? ORDER BY call_index DESC LIMIT 1", (session_id,)
    ).fetchone()
    before = cur.execute(
        "SELECT id FROM context_events WHERE session_id = ? AND seq < ? AND kind = 'request'"
        " AND provider_input_tokens IS NOT NULL ORDER BY seq DESC LIMIT 1",
        (session_id, new[0].seq),
    ).fetchone()
    if (last["event_id"] if last is not None else None) != (before["id"] if before is not None else None):
        return 0  # earlier calls have no rows (made before m003): refresh_request_costs fills them
    # the previous call (when it has a row), then the compactions between calls: a compaction
    # before the session's first call does not mark it
    events = list(new)
    prev = None
    if last is not None:
        prev = _event(
            cur.execute("SELECT * FROM context_events WHERE id = ?", (last["event_id"],)).fetchone()
        )
        events.append(prev)
    kinds = sorted(PREFIX_RESET_EVENTS)
    events += map(
        _event,
        cur.execute(
            "SELECT * FROM context_events WHERE session_id = ? AND seq > ? AND seq < ?"
            f" AND kind IN ({', '.join('?' for _ in kinds)})",
            (session_id, prev.seq if prev is not None else new[0].seq, new[-1].seq, *kinds),
        ).fetchall(),
    )
    seqs = sorted({e.message_seq for e in events if e.kind == "request" and e.message_seq is not None})
    times: dict[int, str] = {}
    for chunk in range(0, len(seqs), _IN_CHUNK):
        part = seqs[chunk : chunk + _IN_CHUNK]
        for r in cur.execute(
            f"SELECT seq, meta_json FROM messages WHERE session_id = ? AND seq IN ({', '.join('?' for _ in part)})",
            (session_id, *part),
        ).fetchall():
            meta = json.loads(r["meta_json"]) if r["meta_json"] else {}
            if isinstance(meta, dict) and isinstance(meta.get("timestamp"), str):
                times[int(r["seq"])] = meta["timestamp"]
    model = cur.execute("SELECT model FROM sessions WHERE id = ?", (session_id,)).fetchone()
    calls = call_records(events, message_times=times, default_model=model["model"] if model else None)
    index = last["call_index"] + 1 if last is not None else 0
    previous = dataclasses.replace(calls[0], index=index - 1) if prev is not None else None
    if prev is not None:
        calls = calls[1:]
    writer = cur.execute(
        f"SELECT cache_write_1h_tokens FROM {COST_TABLE} WHERE session_id = ?"
        " AND cache_write_5m_tokens + cache_write_1h_tokens > 0 ORDER BY call_index DESC LIMIT 1",
        (session_id,),
    ).fetchone()
    ttl = TTL_1H_S if writer is not None and writer["cache_write_1h_tokens"] else TTL_5M_S
    currents, classified = [], []
    for offset, call in enumerate(calls):
        current = dataclasses.replace(call, index=index + offset)
        classified.append(classify_call(previous, current, ttl=ttl))
        currents.append(current)
        if current.cost.cache_write_5m_tokens + current.cost.cache_write_1h_tokens > 0:
            ttl = TTL_1H_S if current.cost.cache_write_1h_tokens else TTL_5M_S
        previous = current
    now = utc_now()
    values = []
    for row in cost_rows(currents, summarize(classified, sum(c.cost.total_usd for c in currents))):
        row = {**row, "session_id": session_id, "computed_utc": now}
        row["ttl_split_known"] = int(bool(row["ttl_split_known"]))
        values.append([row[c] for c in _COLUMNS])
    conn.executemany(_INSERT, values)
    return len(values)


def refresh_request_costs(
    store: SessionStore, session_ids: Iterable[str] | None = None, *, table: ModelTable | None = None
) -> int:
    """Recompute and store ``request_costs`` for these sessions (all by default); rows written."""
    ids = list(session_ids) if session_ids is not None else [s.id for s in store.list_sessions()]
    computed = [session_costs(store, sid, table=table) for sid in ids]
    now = utc_now()
    written = 0
    with store.transaction() as conn:
        for s in computed:
            conn.execute(f"DELETE FROM {COST_TABLE} WHERE session_id = ?", (s.session_id,))
            for row in s.rows:
                if row["event_id"] is None:
                    continue
                values = {**row, "session_id": s.session_id, "computed_utc": now}
                values["ttl_split_known"] = int(bool(values["ttl_split_known"]))
                conn.execute(_INSERT, [values[c] for c in _COLUMNS])
                written += 1
    return written


def stored_request_costs(store: SessionStore, session_id: str) -> list[dict[str, Any]]:
    """The stored ``request_costs`` rows of a session, in call order ([] before m003 or a refresh)."""
    if COST_TABLE not in _tables(store):
        return []
    rows = store._read(f"SELECT * FROM {COST_TABLE} WHERE session_id = ? ORDER BY call_index", (session_id,))
    return [dict(r) for r in rows]
