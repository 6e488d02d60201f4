"""Exact requests (model_requests, payload_parts) read through DuckDB for the Requests page.

No streamlit here: plain functions over the dashboard's DuckDB connection, tested directly.
A session's calls come with our per-component count (from the call's ``request`` event) beside
the provider's; one call opens whole: system prompt, tools and messages as sent, rebuilt from
their content-addressed parts.
"""

from __future__ import annotations

import json
from typing import Any

import duckdb
import pandas as pd

from dashboard.data.connection import SCHEMA_TYPES, session_rows, sql_string, table_rows
from engine.errors import NotFoundError

CALL_COLUMNS = (
    "id", "seq", "event_id", "source", "api", "path", "parsed", "model", "stream", "message_count", "max_tokens",
    "status_code", "error_type", "error_message", "stop_reason", "input_tokens", "output_tokens",
    "cache_read_input_tokens", "cache_creation_input_tokens", "cache_creation_5m_tokens", "cache_creation_1h_tokens",
    "reasoning_tokens", "latency_ms", "ttfb_ms", "request_bytes", "started_utc",
)  # fmt: skip
OUR_COMPONENTS = ("system_tokens", "tools_tokens", "conversation_tokens", "tool_results_tokens")
#: model_requests.source of the agent's own request when a policy edited what was sent.
ORIGINAL_SOURCE = "proxy:original"


def has_requests(con: duckdb.DuckDBPyConnection, db: str) -> bool:
    """True when the database has the exact-request tables (migration m002)."""
    return "model_requests" in SCHEMA_TYPES and _table_exists(con, db, "model_requests")


def _table_exists(con: duckdb.DuckDBPyConnection, db: str, table: str) -> bool:
    try:
        src, params = table_rows(con, db, table, "0 = 1", ["id"] if table == "model_requests" else None)
        con.execute(f"SELECT count(*) FROM {src}", params).fetchone()
    except duckdb.Error:
        return False
    return True


def session_calls(con: duckdb.DuckDBPyConnection, db: str, session_id: str) -> pd.DataFrame:
    """A session's calls in order, the provider's prompt count beside ours."""
    src, params = session_rows(con, db, "model_requests", session_id, columns=CALL_COLUMNS)
    every = con.execute(f"SELECT * FROM {src} ORDER BY seq", params).df()
    # a policy's edit keeps the agent's own request right after what the model received
    originals = every[every["source"] == ORIGINAL_SOURCE]
    by_seq = dict(zip(originals["seq"] - 1, originals["id"], strict=True))
    calls = every[every["source"] != ORIGINAL_SOURCE].copy()
    calls["original_id"] = [by_seq.get(seq) for seq in calls["seq"]]
    events = session_rows(
        con, db, "context_events", session_id, "kind = 'request'", ["id", "seq", *OUR_COMPONENTS]
    )
    ours = con.execute(f"SELECT * FROM {events[0]} ORDER BY seq", events[1]).df()
    # the call's number on every other page: its place among the session's request events, from 1
    ours = (
        ours.assign(call_number=range(1, len(ours) + 1))
        .drop(columns="seq")
        .rename(columns={"id": "event_id"})
    )
    merged = calls.merge(ours, on="event_id", how="left")
    merged["our_prompt_tokens"] = merged[list(OUR_COMPONENTS)].sum(axis=1, min_count=1)
    merged["provider_prompt_tokens"] = merged[
        ["input_tokens", "cache_read_input_tokens", "cache_creation_input_tokens"]
    ].sum(axis=1, min_count=1)
    return merged


def call_detail(con: duckdb.DuckDBPyConnection, db: str, request_id: int) -> dict[str, Any]:
    """One call whole: its row, and the system prompt, tools and messages exactly as sent."""
    src, params = table_rows(con, db, "model_requests", f"id = {int(request_id)}")
    df = con.execute(f"SELECT * FROM {src}", params).df()
    if df.empty:
        raise NotFoundError(f"no request {request_id} in {db}")
    row = {k: (None if _is_missing(v) else v) for k, v in df.iloc[0].to_dict().items()}
    hashes = _loads(row.get("message_hashes_json")) or []
    wanted = [h for h in (row.get("system_hash"), row.get("tools_hash"), *hashes) if h]
    parts: dict[str, Any] = {}
    if wanted:
        literal = ", ".join(sql_string(h) for h in dict.fromkeys(wanted))
        psrc, pparams = table_rows(con, db, "payload_parts", f"hash IN ({literal})", ["hash", "content_json"])
        parts = {
            h: json.loads(t)
            for h, t in con.execute(f"SELECT hash, content_json FROM {psrc}", pparams).fetchall()
        }
    return {
        "row": row,
        "system": parts.get(row["system_hash"]) if row.get("system_hash") else None,
        "tools": parts.get(row["tools_hash"]) if row.get("tools_hash") else None,
        "messages": [parts.get(h) for h in hashes],
        "params": _loads(row.get("params_json")) or {},
        "cache_control": _loads(row.get("cache_control_json")) or [],
        "response": _loads(row.get("response_json")),
        "usage": _loads(row.get("usage_json")),
    }


def _loads(text: Any) -> Any:
    if not isinstance(text, str):
        return None
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return None


def _is_missing(value: Any) -> bool:
    try:
        return bool(pd.isna(value))
    except (TypeError, ValueError):
        return False


def edited_calls(con: duckdb.DuckDBPyConnection, db: str, session_id: str) -> pd.DataFrame:
    """The session's proxied calls a policy or a live compaction edited: the call (what the model
    received) with ``original_id`` (what the agent sent); empty when none (or no exact requests)."""
    if not has_requests(con, db):
        return pd.DataFrame(columns=["id", "seq", "original_id", "request_bytes"])
    calls = session_calls(con, db, session_id)
    return calls[calls["original_id"].notna()].reset_index(drop=True)
