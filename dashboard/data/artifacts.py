"""What a session left besides its timeline: compactions and snapshots, offloaded results (blobs),
the tools it offered with their costs, deferral states and tool searches."""

from __future__ import annotations

from typing import Any

import duckdb
import pandas as pd

from dashboard.data.connection import parse_details, query_frame, session_rows, sql_string, table_rows
from dashboard.data.history import events
from engine.errors import NotFoundError


def compactions(con: duckdb.DuckDBPyConnection, db: str, session_id: str) -> pd.DataFrame:
    """Compaction events with their details parsed and ``when_utc``: when it happened
    (:func:`happened_utc`)."""
    df = events(con, db, session_id, ["compaction"])
    df = df[["seq", "turn_index", "trigger", "outcome", "reason", "created_utc", "details", "message_seq"]]
    df = df.reset_index(drop=True)
    imported = [str(d.get("source") or "").startswith("import") for d in df["details"]]
    seqs = {
        int(m) for m, i in zip(df["message_seq"], imported, strict=True) if i and m == m and m is not None
    }
    times = transcript_times(con, db, session_id, seqs)
    df["when_utc"] = [
        happened_utc(created, times.get(int(m)) if m == m and m is not None else None, is_imported)
        for created, m, is_imported in zip(df["created_utc"], df["message_seq"], imported, strict=True)
    ]
    return df.drop(columns=["message_seq"])


def happened_utc(created_utc: Any, transcript_utc: str | None, imported: bool) -> str | None:
    """When a compaction (or the snapshot it wrote) happened: for one an import recorded, the time the
    agent's transcript tells (the row's own ``created_utc`` is the import's); else when it was written."""
    if imported:
        return transcript_utc
    return str(created_utc) if created_utc == created_utc and created_utc is not None else None


def transcript_times(
    con: duckdb.DuckDBPyConnection, db: str, session_id: str, message_seqs: set[int]
) -> dict[int, str]:
    """The time the transcript gives each of ``message_seqs`` (an imported compaction's message): the
    ``timestamp`` its message keeps, else the start of the first call made at or after it (the call
    the compaction preceded, ``details.call_utc``); a seq the source gave no time is left out."""
    if not message_seqs:
        return {}
    wanted = ", ".join(str(int(s)) for s in sorted(message_seqs))
    src, params = session_rows(con, db, "messages", session_id, f"seq IN ({wanted})", ["seq", "meta_json"])
    times: dict[int, str] = {}
    for seq, meta_json in con.execute(f"SELECT seq, meta_json FROM {src}", params).fetchall():
        stamp = _utc(parse_details(meta_json).get("timestamp"))
        if stamp is not None:
            times[int(seq)] = stamp
    for seq in sorted(message_seqs - set(times)):
        src, params = session_rows(
            con, db, "context_events", session_id,
            f"kind = 'request' AND message_seq >= {int(seq)}", ["seq", "message_seq", "details_json"],
        )  # fmt: skip
        first = con.execute(
            f"SELECT details_json FROM {src} ORDER BY message_seq, seq LIMIT 1", params
        ).fetchone()
        stamp = _utc(parse_details(first[0]).get("call_utc")) if first else None
        if stamp is not None:
            times[seq] = stamp
    return times


def _utc(value: Any) -> str | None:
    """An ISO 8601 time as UTC text (``2026-01-02T03:04:05.678Z``), None when ``value`` is none."""
    if not isinstance(value, str) or not value:
        return None
    try:
        stamp = pd.Timestamp(value)
    except ValueError:
        return None
    stamp = stamp.tz_localize("UTC") if stamp.tzinfo is None else stamp.tz_convert("UTC")
    return stamp.strftime("%Y-%m-%dT%H:%M:%S.") + f"{stamp.microsecond // 1000:03d}Z"


def snapshots(con: duckdb.DuckDBPyConnection, db: str, session_id: str) -> pd.DataFrame:
    """Snapshots of a session, newest first, without their message payloads."""
    src, params = session_rows(
        con, db, "session_snapshots", session_id, "",
        ["id", "through_seq", "message_count", "tokens", "strategy", "event_id", "summary", "created_utc"],
    )  # fmt: skip
    snaps = query_frame(con, f"SELECT * FROM {src} ORDER BY id DESC", params)
    # The event is shown by its number within the session (``seq``), as every other page does.
    ids = sorted({int(i) for i in snaps["event_id"].dropna()})
    seqs: dict[int, int] = {}
    message_seqs: dict[int, int | None] = {}
    if ids:
        ev, ev_params = session_rows(
            con,
            db,
            "context_events",
            session_id,
            f"id IN ({', '.join(map(str, ids))})",
            ["id", "seq", "message_seq"],
        )
        found = con.execute(f"SELECT id, seq, message_seq FROM {ev}", ev_params).fetchall()
        seqs = {int(i): seq for i, seq, _ in found}
        message_seqs = {int(i): (int(m) if m is not None else None) for i, _, m in found}
    snaps["event"] = [seqs.get(int(i)) if i == i and i is not None else None for i in snaps["event_id"]]
    snaps["event"] = snaps["event"].astype("float64")
    # an agent's own compaction (imported, strategy "harness:<agent>"): when the agent made it
    times = transcript_times(con, db, session_id, {m for m in message_seqs.values() if m is not None})
    snaps["when_utc"] = [
        happened_utc(created, times.get(message_seqs.get(int(e))) if e == e and e is not None else None,
                     str(strategy).startswith("harness:"))
        for created, e, strategy in zip(snaps["created_utc"], snaps["event_id"], snaps["strategy"], strict=True)
    ]  # fmt: skip
    return snaps


# -- offloaded results ------------------------------------------------------------------------


def blobs(
    con: duckdb.DuckDBPyConnection,
    *,
    db: str | None = None,
    session_id: str | None = None,
    tool: str | None = None,
    min_bytes: int = 0,
) -> pd.DataFrame:
    """Offloaded outputs (no content), largest first."""
    where, params = ["size_bytes >= ?"], [min_bytes]
    for column, value in (("db", db), ("session_id", session_id), ("tool_name", tool)):
        if value:
            where.append(f"{column} = ?")
            params.append(value)
    return query_frame(
        con,
        f"""SELECT db, session_id, ref_id, tool_name, tool_use_id, size_bytes, is_text::BOOLEAN AS is_text, line_count, tokens,
            preview, created_utc FROM tool_result_blobs WHERE {" AND ".join(where)}
        ORDER BY size_bytes DESC, ref_id""",
        params,
    )


def blob_content(con: duckdb.DuckDBPyConnection, db: str, ref_id: str) -> bytes:
    """The exact bytes of one offloaded output (looked up by its primary key inside SQLite)."""
    src, params = table_rows(con, db, "tool_result_blobs", f"ref_id = {sql_string(ref_id)}", ["content"])
    row = con.execute(f"SELECT content FROM {src}", params).fetchone()
    if row is None:
        raise NotFoundError(f"no stored result {ref_id!r} in {db}")
    return bytes(row[0])


# -- tools ------------------------------------------------------------------------------------


def tool_costs(con: duckdb.DuckDBPyConnection, db: str, session_id: str) -> pd.DataFrame:
    """Each tool offered: its definition tokens, category, server, and how often it was called."""
    uses, p1 = session_rows(
        con, db, "messages", session_id, "kind = 'tool_use' AND tool_names IS NOT NULL", ["tool_names"]
    )
    tools, p2 = session_rows(
        con, db, "session_tools", session_id, "", ["name", "category", "server", "tokens"]
    )
    return query_frame(
        con,
        f"""WITH uses AS (
            SELECT trim(name) AS name, count(*) AS calls
            FROM (SELECT unnest(string_split(tool_names, ',')) AS name FROM {uses})
            GROUP BY 1)
        SELECT t.name, t.category, t.server, t.tokens, coalesce(u.calls, 0)::BIGINT AS calls,
            CASE WHEN coalesce(u.calls, 0) = 0 THEN NULL ELSE round(t.tokens / u.calls, 1) END AS tokens_per_call
        FROM {tools} t LEFT JOIN uses u ON u.name = t.name
        ORDER BY t.tokens DESC, t.name""",
        [*p1, *p2],
    )


def server_costs(tools: pd.DataFrame) -> pd.DataFrame:
    """Tokens per MCP server (builtin and skill tools grouped by their category)."""
    if tools.empty:
        return pd.DataFrame(columns=["server", "tools", "tokens", "calls"])
    key = tools["server"].where(tools["server"].notna(), "(" + tools["category"] + ")")
    out = (
        tools.assign(server=key)
        .groupby("server", as_index=False)
        .agg(tools=("name", "count"), tokens=("tokens", "sum"), calls=("calls", "sum"))
    )
    return out.sort_values("tokens", ascending=False).reset_index(drop=True)


def deferral_matrix(con: duckdb.DuckDBPyConnection, db: str, session_id: str) -> pd.DataFrame:
    """Turn by turn, per tool: 'loaded' or 'deferred' as of the latest deferral event of that turn.

    Columns: turn, tool, state. States carry forward to later turns until the next deferral event.
    """
    ev = events(con, db, session_id, ["deferral"])
    src, params = session_rows(con, db, "messages", session_id, "", ["turn_index"])
    last_turn = con.execute(f"SELECT max(turn_index) FROM {src}", params).fetchone()[0]
    if ev.empty:
        return pd.DataFrame(columns=["turn", "tool", "state"])
    by_turn: dict[int, dict[str, str]] = {}
    for turn, details in zip(ev["turn_index"].fillna(0).astype(int), ev["details"], strict=True):
        states = {_tool_name(t): "deferred" for t in details.get("deferred", [])}
        states.update({_tool_name(t): "loaded" for t in details.get("loaded", details.get("active", []))})
        by_turn[turn] = states
    rows, current = [], {}
    for turn in range(min(by_turn), max(max(by_turn), int(last_turn or 0)) + 1):
        current = by_turn.get(turn, current)
        rows += [(turn, tool, state) for tool, state in sorted(current.items())]
    return pd.DataFrame(rows, columns=["turn", "tool", "state"])


def _tool_name(item: Any) -> str:
    """A tool named in event details: a plain name, or a dict with ``name`` (search hits)."""
    return str(item.get("name")) if isinstance(item, dict) else str(item)


def tool_searches(con: duckdb.DuckDBPyConnection, db: str, session_id: str) -> pd.DataFrame:
    """tool_search queries with their hits; ``hit`` is False for a search that found nothing."""
    ev = events(con, db, session_id, ["tool_search"])
    rows = []
    for turn, details in zip(ev["turn_index"], ev["details"], strict=True):
        hits = [_tool_name(h) for h in details.get("hits", [])]
        rows.append((turn, str(details.get("query", "")), ", ".join(hits), len(hits), bool(hits)))
    return pd.DataFrame(rows, columns=["turn", "query", "hits", "hit_count", "hit"])
