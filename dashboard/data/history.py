"""One session's timeline: per-turn and per-call requests, events, markers, and what each request
sent (:func:`engine.sent.sent_end`'s rule), with message previews and content."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import duckdb
import pandas as pd

from dashboard.data.connection import parse_details, query_frame, session_rows, sql_string
from engine.limit import LIMIT_SQL
from engine.sent import compaction_removals, sent_end

COMPONENT_COLUMNS = {
    "system": "system_tokens",
    "skills": "skills_tokens",
    "tools": "tools_tokens",
    "summary": "summary_tokens",
    "conversation": "conversation_tokens",
    "tool_results": "tool_results_tokens",
    "unattributed": "unattributed_tokens",
}
USAGE_COLUMNS = (
    "provider_input_tokens",
    "provider_cache_read_tokens",
    "provider_cache_creation_tokens",
    "provider_output_tokens",
)


#: A step's limit by engine.limit's one rule (the recorded limit, else the recorded window less the
#: output reserve and buffer), whether it came from the window, and how its components were known.
LIMIT_COLUMNS = (
    f"{LIMIT_SQL} AS limit_tokens, (limit_tokens IS NULL AND {LIMIT_SQL} IS NOT NULL) AS limit_from_window,"
    " components_basis"
)


def timeline(con: duckdb.DuckDBPyConnection, db: str, session_id: str) -> pd.DataFrame:
    """Per turn: the components of its last request, the limit in force (``LIMIT_COLUMNS``), provider
    usage, call count."""
    src, params = session_rows(
        con, db, "context_events", session_id, "kind = 'request' AND turn_index IS NOT NULL"
    )
    comps = ", ".join(f"coalesce({c}, 0)::BIGINT AS {name}" for name, c in COMPONENT_COLUMNS.items())
    return query_frame(
        con,
        f"""
        SELECT turn_index AS turn, {comps}, projected_tokens, {LIMIT_COLUMNS}, context_window,
            max_output_tokens, buffer_tokens, {", ".join(USAGE_COLUMNS)}, offloaded_bytes,
            message_seq, seq AS event_seq, requests, peak_projected, model, provider
        FROM (
            SELECT *, count(*) OVER w AS requests, max(projected_tokens) OVER w AS peak_projected,
                row_number() OVER (PARTITION BY turn_index ORDER BY seq DESC) AS rn
            FROM {src}
            WINDOW w AS (PARTITION BY turn_index))
        WHERE rn = 1 ORDER BY turn
        """,
        params,
    )


def requests(con: duckdb.DuckDBPyConnection, db: str, session_id: str) -> pd.DataFrame:
    """Every request event (one per model call) in order, with its components and limit."""
    src, params = session_rows(con, db, "context_events", session_id, "kind = 'request'")
    comps = ", ".join(f"coalesce({c}, 0)::BIGINT AS {name}" for name, c in COMPONENT_COLUMNS.items())
    return query_frame(
        con,
        f"""SELECT seq AS event_seq, turn_index AS turn, {comps}, projected_tokens, {LIMIT_COLUMNS},
            context_window, max_output_tokens, buffer_tokens, {", ".join(USAGE_COLUMNS)}, message_seq, model
        FROM {src} ORDER BY seq""",
        params,
    )


def events(
    con: duckdb.DuckDBPyConnection, db: str, session_id: str, kinds: Sequence[str] | None = None
) -> pd.DataFrame:
    """Events of a session (all columns, details parsed into ``details``), optionally by kind."""
    where = f"kind IN ({', '.join(sql_string(k) for k in kinds)})" if kinds else ""
    src, params = session_rows(con, db, "context_events", session_id, where)
    df = query_frame(con, f"SELECT * FROM {src} ORDER BY seq", params)
    df["details"] = [parse_details(t) for t in df["details_json"]]
    return df


def markers(con: duckdb.DuckDBPyConnection, db: str, session_id: str) -> pd.DataFrame:
    """Compactions, restores and guard stops (forced_final, skipped_provider, a refused tool result)
    to mark on the timeline."""
    src, params = session_rows(
        con, db, "context_events", session_id,
        "turn_index IS NOT NULL AND ((kind = 'compaction' AND outcome = 'compacted')"
        " OR (kind = 'guard' AND outcome IN ('forced_final', 'skipped_provider', 'rejected')) OR kind = 'restore')",
        ["seq", "turn_index", "kind", "trigger", "outcome", "reason", "projected_tokens", "limit_tokens", "details_json"],
    )  # fmt: skip
    df = query_frame(
        con,
        f"""SELECT seq AS event_seq, turn_index AS turn, kind, trigger, outcome, reason, projected_tokens,
            limit_tokens, details_json
        FROM {src} ORDER BY seq""",
        params,
    )
    # who compacted (docs/HELPERS.md "Compaction events": agent, user, ctxdesk, proxy), None for other marks
    df["by"] = [parse_details(t).get("by") for t in df.pop("details_json")]
    return df


def removed_seqs_before(con: duckdb.DuckDBPyConnection, db: str, session_id: str, event_seq: int) -> set[int]:
    """Transcript seqs removed or summarized by compactions recorded before an event."""
    src, params = session_rows(
        con, db, "context_events", session_id,
        f"kind = 'compaction' AND outcome = 'compacted' AND seq < {int(event_seq)}", ["seq", "details_json"],
    )  # fmt: skip
    removed: set[int] = set()
    for (details_json,) in con.execute(f"SELECT details_json FROM {src} ORDER BY seq", params).fetchall():
        removed.update(compaction_removals(parse_details(details_json))[0])
    return removed


MESSAGE_LIST_COLUMNS = (
    "seq", "turn_index", "role", "kind", "tokens", "tool_result_tokens", "tool_names", "pinned", "text_preview",
)  # fmt: skip


def sent_messages(
    con: duckdb.DuckDBPyConnection, db: str, session_id: str, turn: int, event_seq: int | None = None
) -> pd.DataFrame:
    """The messages a turn's last request sent, largest first (previews only, no content).

    What a request sent is :func:`engine.sent.sent_end`'s rule (the one findings and reports
    use); what earlier compactions removed or summarized is left out.
    """
    where = f"kind = 'request' AND turn_index = {int(turn)}"
    if event_seq is not None:
        where += f" AND seq = {int(event_seq)}"
    columns = ["seq", "message_seq", "turn_index", "details_json", "messages_excluded"]
    src, params = session_rows(con, db, "context_events", session_id, where, columns)
    row = con.execute(f"SELECT {', '.join(columns)} FROM {src} ORDER BY seq DESC LIMIT 1", params).fetchone()
    removed: set[int] = set()
    end = _turn_end(con, db, session_id, int(turn))
    if row is not None:
        # what earlier compactions removed, and what this request itself left out below its bound
        # (a compaction's summarizer: the segment kept after it; NULL in files of an older schema)
        removed = removed_seqs_before(con, db, session_id, int(row[0])) | _excluded(row[4])
        end = sent_end(
            parse_details(row[3]), row[1], row[2],
            kind_of=lambda seq: _message_kind(con, db, session_id, seq),
            turn_end=lambda t: _turn_end(con, db, session_id, t),
        )  # fmt: skip
    src, params = session_rows(con, db, "messages", session_id, f"seq < {int(end)}", MESSAGE_LIST_COLUMNS)
    df = query_frame(
        con,
        f"""SELECT seq, turn_index AS turn, role, kind, tokens, tool_result_tokens, tool_names, pinned, text_preview
        FROM {src} ORDER BY tokens DESC, seq""",
        params,
    )
    if removed:
        df = df[~df["seq"].isin(removed)].reset_index(drop=True)
    return df


def _excluded(text: Any) -> set[int]:
    """The seqs of a request's ``messages_excluded`` (a JSON list; NULL: none)."""
    try:
        value = json.loads(text) if isinstance(text, str) and text else []
    except ValueError:
        return set()
    return {v for v in value if isinstance(v, int)} if isinstance(value, list) else set()


def _message_kind(con: duckdb.DuckDBPyConnection, db: str, session_id: str, seq: int) -> str | None:
    src, params = session_rows(con, db, "messages", session_id, f"seq = {int(seq)}", ["kind"])
    row = con.execute(f"SELECT kind FROM {src}", params).fetchone()
    return None if row is None else str(row[0])


def _turn_end(con: duckdb.DuckDBPyConnection, db: str, session_id: str, turn: int) -> int:
    """One past the last seq of ``turn`` (the transcript's length when the turn has no messages)."""
    src, params = session_rows(con, db, "messages", session_id, "", ["seq", "turn_index"])
    row = con.execute(
        f"SELECT max(seq) FILTER (WHERE turn_index = {int(turn)}), count(*) FROM {src}", params
    ).fetchone()
    return int(row[0]) + 1 if row[0] is not None else int(row[1])


def message(con: duckdb.DuckDBPyConnection, db: str, session_id: str, seq: int) -> dict[str, Any] | None:
    """One transcript message with its content (``content_json``) and text, or None."""
    src, params = session_rows(
        con, db, "messages", session_id, f"seq = {int(seq)}",
        ["seq", "turn_index", "role", "kind", "tokens", "tool_result_tokens", "tool_names", "content_json", "text_preview"],
    )  # fmt: skip
    df = query_frame(con, f"SELECT * EXCLUDE (turn_index), turn_index AS turn FROM {src}", params)
    if df.empty:
        return None
    out = df.iloc[0].to_dict()
    out["text"] = content_text(out["content_json"])
    return out


def content_text(content_json: str) -> str:
    """The readable text of stored content: text, tool calls and tool results, one per line."""
    try:
        content = json.loads(content_json)
    except json.JSONDecodeError:
        return content_json
    if isinstance(content, str):
        return content
    parts: list[str] = []
    for block in content if isinstance(content, list) else [content]:
        if not isinstance(block, dict):
            parts.append(str(block))
            continue
        kind = block.get("type")
        if kind == "text":
            parts.append(str(block.get("text", "")))
        elif kind == "thinking":
            parts.append("[thinking] " + str(block.get("thinking", "")))
        elif kind == "tool_use":
            parts.append(
                f"[tool_use {block.get('name')}] " + json.dumps(block.get("input", {}), ensure_ascii=False)
            )
        elif kind == "tool_result":
            inner = block.get("content", "")
            if isinstance(inner, list):
                inner = "\n".join(
                    str(b.get("text", f"[{b.get('type')}]")) for b in inner if isinstance(b, dict)
                )
            parts.append(f"[tool_result {block.get('tool_use_id')}] {inner}")
        else:
            parts.append(f"[{kind}]")
    return "\n".join(parts)


def messages_by_seq(
    con: duckdb.DuckDBPyConnection, db: str, session_id: str, seqs: Sequence[int]
) -> pd.DataFrame:
    """Previews (no content) of the given transcript messages, in transcript order."""
    if not seqs:
        return pd.DataFrame(columns=["seq", "turn", "role", "kind", "tokens", "tool_names", "text_preview"])
    src, params = session_rows(
        con, db, "messages", session_id, f"seq IN ({', '.join(str(int(s)) for s in seqs)})",
        ["seq", "turn_index", "role", "kind", "tokens", "tool_names", "text_preview"],
    )  # fmt: skip
    return query_frame(
        con,
        f"SELECT seq, turn_index AS turn, role, kind, tokens, tool_names, text_preview FROM {src} ORDER BY seq",
        params,
    )
