"""The session database schema: the one place that defines tables, and their migrations.

Each migration is a small named function applied in order inside one transaction and
recorded in ``_migrations``; applying them twice is a no-op. The schema is a supported
interface (the dashboard and users' SQL read it); ``python -m engine.store.schema`` prints
the Markdown reference in docs/schema.md, and a test checks that file matches this code.

One concept over ~400 lines: the schema is declared here as data (every table and column with
its meaning), so it stays in one file however many migrations add to it.
"""

from __future__ import annotations

import sqlite3
import sys
from collections.abc import Callable
from dataclasses import dataclass

from engine.store.sqlite_rollups import backfill

#: ``PRAGMA application_id`` of every ctxdesk database ("CTXD").
APPLICATION_ID = 0x43545844


@dataclass(frozen=True)
class Column:
    name: str
    type: str
    doc: str


@dataclass(frozen=True)
class Table:
    name: str
    doc: str
    columns: tuple[Column, ...]
    constraints: tuple[str, ...] = ()
    indexes: tuple[str, ...] = ()

    def create_sql(self) -> str:
        lines = [f"  {c.name} {c.type}" for c in self.columns] + [f"  {c}" for c in self.constraints]
        return f"CREATE TABLE IF NOT EXISTS {self.name} (\n" + ",\n".join(lines) + "\n)"


def _c(name: str, type_: str, doc: str) -> Column:
    return Column(name, type_, doc)


# Per-component token columns shared by events (what a request held, by component).
_COMPONENT_COLUMNS = (
    _c(
        "system_tokens",
        "INTEGER",
        "Tokens of the assembled system prompt (base instructions, rules, memories).",
    ),
    _c("skills_tokens", "INTEGER", "Tokens of skill prompts."),
    _c("tools_tokens", "INTEGER", "Tokens of the tool definitions sent (after deferral)."),
    _c("summary_tokens", "INTEGER", "Tokens of the injected compaction summary."),
    _c("conversation_tokens", "INTEGER", "Tokens of history messages, tool-result content excluded."),
    _c("tool_results_tokens", "INTEGER", "Tokens of tool-result content in the history."),
    _c(
        "offloaded_bytes",
        "INTEGER",
        "Bytes of tool output held in tool_result_blobs instead (reported, not counted).",
    ),
)

TABLES_V1: tuple[Table, ...] = (
    Table(
        "sessions",
        "One agent session (or one sub-agent thread, with parent_session_id set).",
        (
            _c("id", "TEXT PRIMARY KEY", "Session id (uuid, or the source's own id)."),
            _c("title", "TEXT", "Human-readable title."),
            _c("model", "TEXT", "Model name the session ran against."),
            _c("provider", "TEXT", "Provider name (anthropic, openai, ...)."),
            _c("tokenizer", "TEXT", "Tokenizer id used for the per-message counts."),
            _c("tokens_exact", "INTEGER NOT NULL DEFAULT 0", "1 when the tokenizer is exact for this model."),
            _c("source", "TEXT NOT NULL DEFAULT 'engine'", "engine, demo, or import:<format>."),
            _c("source_path", "TEXT", "File the session was imported from."),
            _c(
                "parent_session_id",
                "TEXT REFERENCES sessions(id) ON DELETE CASCADE",
                "Parent of a sub-agent thread.",
            ),
            _c("status", "TEXT NOT NULL DEFAULT 'active'", "active, final (forced final turn), ended."),
            _c("settings_json", "TEXT", "Resolved window settings in force, with their sources (JSON)."),
            _c("metadata_json", "TEXT", "Anything else about the session (JSON)."),
            _c("created_utc", "TEXT NOT NULL", "ISO-8601 UTC creation time."),
            _c("updated_utc", "TEXT NOT NULL", "ISO-8601 UTC time of the last write."),
        ),
    ),
    Table(
        "messages",
        "The full, append-only transcript. Never modified by compaction.",
        (
            _c("id", "INTEGER PRIMARY KEY AUTOINCREMENT", "Row id."),
            _c("session_id", "TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE", "Owning session."),
            _c("seq", "INTEGER NOT NULL", "0-based position in the transcript."),
            _c(
                "turn_index", "INTEGER NOT NULL", "Turn the message belongs to (a turn starts at user input)."
            ),
            _c("role", "TEXT NOT NULL", "user, assistant or tool."),
            _c(
                "kind",
                "TEXT NOT NULL",
                "user_input, assistant, tool_use, tool_result (derived, for queries).",
            ),
            _c("message_uid", "TEXT", "The message's own id when the source has one."),
            _c("content_json", "TEXT NOT NULL", "Canonical content: a JSON string or list of blocks."),
            _c("text_preview", "TEXT", "First 200 characters of the message text."),
            _c("tool_names", "TEXT", "Comma-separated tool names used or answered in the message."),
            _c("pinned", "INTEGER NOT NULL DEFAULT 0", "1 when every compaction must keep the message."),
            _c(
                "tokens",
                "INTEGER NOT NULL",
                "Tokens of the message (framing included) by the session tokenizer.",
            ),
            _c(
                "tool_result_tokens",
                "INTEGER NOT NULL DEFAULT 0",
                "Part of tokens that is tool-result content.",
            ),
            _c("tokenizer", "TEXT NOT NULL", "Tokenizer id that produced tokens."),
            _c(
                "provider_input_tokens",
                "INTEGER",
                "Provider usage of the call that produced this message: input.",
            ),
            _c("provider_output_tokens", "INTEGER", "... output tokens."),
            _c("provider_cache_read_tokens", "INTEGER", "... cache read input tokens."),
            _c("provider_cache_creation_tokens", "INTEGER", "... cache creation input tokens."),
            _c("meta_json", "TEXT", "Provider-specific extras of the message (JSON)."),
            _c("created_utc", "TEXT NOT NULL", "ISO-8601 UTC time the message was stored."),
        ),
        constraints=("UNIQUE (session_id, seq)",),
        indexes=("CREATE INDEX IF NOT EXISTS messages_session_turn ON messages(session_id, turn_index)",),
    ),
    Table(
        "session_snapshots",
        "Compacted histories used for resume; the newest one per session wins.",
        (
            _c("id", "INTEGER PRIMARY KEY AUTOINCREMENT", "Snapshot id."),
            _c("session_id", "TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE", "Owning session."),
            _c(
                "through_seq",
                "INTEGER NOT NULL",
                "Last transcript seq the snapshot covers; later messages follow it.",
            ),
            _c("messages_json", "TEXT NOT NULL", "The compacted history: a JSON list of messages."),
            _c("summary", "TEXT", "Summary injected at request time alongside the snapshot."),
            _c("message_count", "INTEGER NOT NULL", "Messages in messages_json."),
            _c("tokens", "INTEGER NOT NULL", "Tokens of the compacted history (summary included)."),
            _c("strategy", "TEXT NOT NULL", "Strategy (or chain) that produced it, or 'restore'."),
            _c("event_id", "INTEGER REFERENCES context_events(id) ON DELETE SET NULL", "Compaction event."),
            _c("created_utc", "TEXT NOT NULL", "ISO-8601 UTC creation time."),
        ),
        indexes=("CREATE INDEX IF NOT EXISTS snapshots_session ON session_snapshots(session_id, id)",),
    ),
    Table(
        "tool_result_blobs",
        "Offloaded tool outputs, stored whole; the context holds a reference to ref_id.",
        (
            _c("ref_id", "TEXT PRIMARY KEY", "Reference given to the model (read_result ref_id)."),
            _c("session_id", "TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE", "Owning session."),
            _c("tool_use_id", "TEXT", "tool_use id the output answered."),
            _c("tool_name", "TEXT", "Tool that produced the output."),
            _c("size_bytes", "INTEGER NOT NULL", "Size of content in bytes."),
            _c("is_text", "INTEGER NOT NULL", "1 when content is valid UTF-8 text."),
            _c("line_count", "INTEGER", "Lines of text (NULL for binary)."),
            _c("sha256", "TEXT NOT NULL", "sha256 of content."),
            _c("preview", "TEXT", "First 200 characters (text) or a description (binary)."),
            _c(
                "content",
                "BLOB NOT NULL",
                "The exact bytes of the output (not redacted: read_result serves them back to the model).",
            ),
            _c("tokens", "INTEGER", "Tokens the output would have cost inline."),
            _c("created_utc", "TEXT NOT NULL", "ISO-8601 UTC time it was stored."),
        ),
        indexes=("CREATE INDEX IF NOT EXISTS blobs_session ON tool_result_blobs(session_id)",),
    ),
    Table(
        "context_states",
        "Cached summaries with the transcript range they cover (sandwich, rolling, tree nodes).",
        (
            _c("id", "INTEGER PRIMARY KEY AUTOINCREMENT", "Row id."),
            _c("session_id", "TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE", "Owning session."),
            _c("strategy", "TEXT NOT NULL", "Strategy that owns the cached summary."),
            _c("level", "INTEGER NOT NULL DEFAULT 0", "Tree level (0 for flat summaries)."),
            _c("range_start", "INTEGER NOT NULL", "First message index covered (inclusive)."),
            _c("range_end", "INTEGER NOT NULL", "End of the covered range (exclusive)."),
            _c("summary", "TEXT NOT NULL", "The summary text."),
            _c("summary_tokens", "INTEGER NOT NULL", "Tokens of the summary."),
            _c("summarizer", "TEXT NOT NULL", "Summarizer that wrote it (offline, anthropic:<model>)."),
            _c("created_utc", "TEXT NOT NULL", "ISO-8601 UTC time."),
        ),
        indexes=("CREATE INDEX IF NOT EXISTS states_session ON context_states(session_id, strategy)",),
    ),
    Table(
        "context_events",
        "Every decision: guard evaluations, model requests, compactions, offloads, deferrals, degradations.",
        (
            _c("id", "INTEGER PRIMARY KEY AUTOINCREMENT", "Event id."),
            _c("session_id", "TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE", "Owning session."),
            _c("seq", "INTEGER NOT NULL", "Order of the event within the session."),
            _c("turn_index", "INTEGER", "Turn the event belongs to."),
            _c(
                "kind",
                "TEXT NOT NULL",
                "guard, request, compaction, offload, deferral, tool_search, note, degraded, resume.",
            ),
            _c(
                "trigger",
                "TEXT",
                "turn_preflight, tool_preflight, compact_threshold, hard_block, manual, provider_error, ...",
            ),
            _c(
                "outcome",
                "TEXT",
                "ok, note, forced_final, skipped_provider, compacted, noop, rejected, failed, "
                "kept (a proxy policy's earlier edit sent again unchanged), ...",
            ),
            _c("reason", "TEXT", "Why, in words (e.g. context, token_budget_exceeded)."),
            _c("provider", "TEXT", "Provider evaluated or called."),
            _c("model", "TEXT", "Model evaluated or called."),
            _c("context_window", "INTEGER", "Context window in force."),
            _c("max_output_tokens", "INTEGER", "Output reserve in force."),
            _c("buffer_tokens", "INTEGER", "Safety buffer in force."),
            _c("limit_tokens", "INTEGER", "Effective limit the projection was compared with."),
            _c("projected_tokens", "INTEGER", "Projected tokens of the request."),
            _c("remaining_tokens", "INTEGER", "limit_tokens - projected_tokens."),
            *_COMPONENT_COLUMNS,
            _c("provider_input_tokens", "INTEGER", "Provider-reported input tokens (request events)."),
            _c("provider_output_tokens", "INTEGER", "Provider-reported output tokens."),
            _c("provider_cache_read_tokens", "INTEGER", "Provider-reported cache reads."),
            _c("provider_cache_creation_tokens", "INTEGER", "Provider-reported cache writes."),
            _c(
                "message_seq",
                "INTEGER",
                "Transcript seq of the message the event is about (e.g. what tipped it).",
            ),
            _c(
                "details_json",
                "TEXT",
                "Everything else, per kind (JSON): removed ids, strategies, sources, ...",
            ),
            _c("created_utc", "TEXT NOT NULL", "ISO-8601 UTC time."),
        ),
        indexes=(
            "CREATE INDEX IF NOT EXISTS events_session ON context_events(session_id, seq)",
            "CREATE INDEX IF NOT EXISTS events_kind ON context_events(kind, outcome)",
        ),
    ),
    Table(
        "session_tools",
        "Tool definitions a session offered, with their cost and category.",
        (
            _c("session_id", "TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE", "Owning session."),
            _c("name", "TEXT NOT NULL", "Tool name."),
            _c("category", "TEXT NOT NULL", "builtin, mcp or skill."),
            _c("server", "TEXT", "MCP server name for mcp tools."),
            _c("tokens", "INTEGER NOT NULL", "Tokens of the definition."),
            _c("definition_json", "TEXT NOT NULL", "The definition as sent (JSON)."),
        ),
        constraints=("PRIMARY KEY (session_id, name)",),
    ),
)

TABLE_NAMES = tuple(t.name for t in TABLES_V1)

#: Tables of migration m002_request_payloads: every model call exactly as sent (proxy, importers).
TABLES_M002: tuple[Table, ...] = (
    Table(
        "payload_parts",
        "Content-addressed pieces of exact requests (a system prompt, a tool list, one message), stored once.",
        (
            _c(
                "hash",
                "TEXT PRIMARY KEY",
                "sha256 (hex) of content_json's UTF-8 bytes (as stored: redacted).",
            ),
            _c("kind", "TEXT NOT NULL", "system, tools or message."),
            _c("size_bytes", "INTEGER NOT NULL", "Bytes of content_json."),
            _c("content_json", "TEXT NOT NULL", "The piece as sent (compact JSON, key order kept)."),
            _c("created_utc", "TEXT NOT NULL", "ISO-8601 UTC time first stored."),
        ),
    ),
    Table(
        "model_requests",
        "One model call exactly as sent and answered (secrets redacted): parts by hash, params, response, "
        "provider usage, timing.",
        (
            _c("id", "INTEGER PRIMARY KEY AUTOINCREMENT", "Request id."),
            _c("session_id", "TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE", "Owning session."),
            _c("seq", "INTEGER NOT NULL", "Order of the call within the session."),
            _c(
                "event_id",
                "INTEGER REFERENCES context_events(id) ON DELETE SET NULL",
                "The `request` (or provider-error) event of this call.",
            ),
            _c(
                "source", "TEXT NOT NULL", "proxy, or import:<format> for requests rebuilt from a transcript."
            ),
            _c(
                "api",
                "TEXT NOT NULL",
                "anthropic_messages, anthropic_count_tokens, openai_chat, openai_responses, passthrough.",
            ),
            _c("method", "TEXT", "HTTP method."),
            _c("path", "TEXT", "Request path and query as the agent sent them."),
            _c(
                "parsed", "INTEGER NOT NULL", "1 when the body was JSON of a known API; 0: raw_body holds it."
            ),
            _c("agent_session_id", "TEXT", "The agent's own session id (header or body), when it sent one."),
            _c("model", "TEXT", "Model requested."),
            _c("stream", "INTEGER", "1 for a streamed response."),
            _c("system_key", "TEXT", "Body key of the system prompt (system, instructions)."),
            _c("system_hash", "TEXT", "payload_parts hash of the system prompt."),
            _c("tools_hash", "TEXT", "payload_parts hash of the tool definitions (the whole list)."),
            _c("messages_key", "TEXT", "Body key of the message list (messages, input, contents)."),
            _c(
                "message_hashes_json", "TEXT", "JSON list of payload_parts hashes, one per message, in order."
            ),
            _c("message_count", "INTEGER", "Messages in the request."),
            _c("body_keys_json", "TEXT", "Top-level body keys in the order sent."),
            _c("params_json", "TEXT", "Every other top-level field of the body (JSON)."),
            _c("max_tokens", "INTEGER", "max_tokens / max_output_tokens / max_completion_tokens."),
            _c("thinking_json", "TEXT", "thinking / reasoning parameter (JSON)."),
            _c("context_management_json", "TEXT", "context_management parameter (JSON)."),
            _c(
                "cache_control_json",
                "TEXT",
                'Cache breakpoints: JSON list of {"path": "messages[3].content[1]", "ttl": "5m"}.',
            ),
            _c("request_bytes", "INTEGER", "Size of the body as sent."),
            _c("request_sha256", "TEXT", "sha256 of the body bytes as sent."),
            _c("raw_body", "BLOB", "The body itself when it was not parsed (parsed = 0)."),
            _c("status_code", "INTEGER", "HTTP status the provider answered (NULL: no answer)."),
            _c(
                "error_type",
                "TEXT",
                "Provider error type (or ctxdesk's: upstream_unreachable, client_disconnected).",
            ),
            _c("error_message", "TEXT", "Provider error message."),
            _c("response_json", "TEXT", "The answer: content blocks / output items, id, model (JSON)."),
            _c("stop_reason", "TEXT", "stop_reason / finish_reason / status of the answer."),
            _c("input_tokens", "INTEGER", "Provider usage: uncached input tokens."),
            _c("output_tokens", "INTEGER", "Provider usage: output tokens."),
            _c("cache_read_input_tokens", "INTEGER", "Provider usage: cache reads."),
            _c("cache_creation_input_tokens", "INTEGER", "Provider usage: cache writes (all TTLs)."),
            _c("cache_creation_5m_tokens", "INTEGER", "Cache writes with a 5-minute TTL, where given."),
            _c("cache_creation_1h_tokens", "INTEGER", "Cache writes with a 1-hour TTL, where given."),
            _c("reasoning_tokens", "INTEGER", "Reasoning tokens (part of output), where given."),
            _c("usage_json", "TEXT", "The provider's usage object as received (JSON)."),
            _c("latency_ms", "REAL", "Time from receiving the request to the end of the answer."),
            _c("ttfb_ms", "REAL", "Time from receiving the request to the first byte of the answer."),
            _c(
                "headers_json",
                "TEXT",
                "Request headers, with keys, Authorization and cookies removed (JSON).",
            ),
            _c("started_utc", "TEXT NOT NULL", "ISO-8601 UTC time the request arrived."),
        ),
        indexes=(
            "CREATE INDEX IF NOT EXISTS model_requests_session ON model_requests(session_id, seq)",
            "CREATE INDEX IF NOT EXISTS model_requests_event ON model_requests(event_id)",
        ),
    ),
)


#: Tables of migration m003_request_costs: what each model call cost and why it rebuilt the prompt cache.
#: The calls of a session that wrote the prompt cache: the cost writer's "last cache writer" (whose
#: TTL the next call is judged by) is one index step, not a walk back over every call (m005).
COST_WRITES_INDEX = (
    "CREATE INDEX IF NOT EXISTS request_costs_cache_writes ON request_costs(session_id, call_index)"
    " WHERE cache_write_5m_tokens + cache_write_1h_tokens > 0"
)

TABLES_M003: tuple[Table, ...] = (
    Table(
        "request_costs",
        "Per model call (one row per request event with provider usage): cost by part at the model table's "
        "prices, and the prompt-cache analysis (engine.cost, engine.cache_analysis). Written once the "
        "transaction that recorded the request event commits (in one of its own: a pricing failure loses "
        "no event); recomputed by `ctxdesk costs DB --refresh`.",
        (
            _c(
                "event_id",
                "INTEGER PRIMARY KEY REFERENCES context_events(id) ON DELETE CASCADE",
                "The request event.",
            ),
            _c("session_id", "TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE", "Owning session."),
            _c("call_index", "INTEGER NOT NULL", "0-based position among the session's calls."),
            _c("call_utc", "TEXT", "ISO-8601 UTC time of the call (transcript time for imports)."),
            _c("day", "TEXT", "UTC day of the call (YYYY-MM-DD), for roll-ups."),
            _c("model", "TEXT", "Model the call ran on."),
            _c(
                "priced_as", "TEXT", "Model table entry the prices came from; NULL when the model is unknown."
            ),
            _c("price_source", "TEXT", "Table the prices came from (models.dev, litellm-<version>, ...)."),
            _c("input_tokens", "INTEGER NOT NULL", "Uncached input tokens."),
            _c("output_tokens", "INTEGER NOT NULL", "Output tokens, reasoning included."),
            _c("reasoning_tokens", "INTEGER NOT NULL", "Part of output_tokens that was reasoning."),
            _c("cache_read_tokens", "INTEGER NOT NULL", "Input tokens read from the prompt cache."),
            _c("cache_write_5m_tokens", "INTEGER NOT NULL", "Input tokens written to a 5-minute cache."),
            _c("cache_write_1h_tokens", "INTEGER NOT NULL", "Input tokens written to a 1-hour cache."),
            _c(
                "ttl_split_known",
                "INTEGER NOT NULL",
                "0 when writes were priced as 5-minute for lack of a split.",
            ),
            _c("input_usd", "REAL NOT NULL", "USD of uncached input."),
            _c("output_usd", "REAL NOT NULL", "USD of output."),
            _c("cache_read_usd", "REAL NOT NULL", "USD of cache reads."),
            _c("cache_write_5m_usd", "REAL NOT NULL", "USD of 5-minute cache writes."),
            _c("cache_write_1h_usd", "REAL NOT NULL", "USD of 1-hour cache writes."),
            _c("total_usd", "REAL NOT NULL", "Sum of the five parts."),
            _c("uncached_usd", "REAL NOT NULL", "What the call would have cost with no prompt cache."),
            _c(
                "cache_cause",
                "TEXT",
                "Why the call rebuilt cached tokens: cold_start, compaction, model_switch, ttl_expired, "
                "system_changed, tools_changed, tools_reordered, history_edited, tool_results_cleared, "
                "prefix_changed, breakpoint, uncached_prefix; NULL for a normal, growing prefix.",
            ),
            _c(
                "rebuilt_tokens",
                "INTEGER NOT NULL",
                "Tokens the previous call had sent that were written again.",
            ),
            _c(
                "lost_usd", "REAL NOT NULL", "What the rebuild cost over cache reads (0 for expected causes)."
            ),
            _c("gap_s", "REAL", "Seconds since the previous call."),
            _c("cache_explanation", "TEXT", "The evidence, in words."),
            _c("computed_utc", "TEXT NOT NULL", "ISO-8601 UTC time the row was computed."),
        ),
        indexes=(
            "CREATE INDEX IF NOT EXISTS request_costs_session ON request_costs(session_id, call_index)",
            "CREATE INDEX IF NOT EXISTS request_costs_day ON request_costs(day, model)",
            COST_WRITES_INDEX,
        ),
    ),
)


def _content_last(table: Table) -> Table:
    """``table`` with its ``content`` column moved to the end."""
    columns = tuple(c for c in table.columns if c.name != "content")
    return Table(
        table.name,
        table.doc,
        columns + tuple(c for c in table.columns if c.name == "content"),
        table.constraints,
        table.indexes,
    )


#: tool_result_blobs as m004 leaves it: ``content`` last, so a row inserted with ``zeroblob(n)``
#: is not materialized (SQLite only defers a zeroblob at the end of a record) and is then filled
#: in pieces through incremental blob I/O.
TABLES_M004 = tuple(_content_last(t) for t in TABLES_V1 if t.name == "tool_result_blobs")


def m001_initial(conn: sqlite3.Connection) -> None:
    """Create every table of schema version 1."""
    for table in TABLES_V1:
        conn.execute(table.create_sql())
        for index in table.indexes:
            conn.execute(index)


def m002_request_payloads(conn: sqlite3.Connection) -> None:
    """Create payload_parts and model_requests (exact requests, content-addressed)."""
    for table in TABLES_M002:
        conn.execute(table.create_sql())
        for index in table.indexes:
            conn.execute(index)


def m003_request_costs(conn: sqlite3.Connection) -> None:
    """Create request_costs (per-call cost and cache analysis)."""
    for table in TABLES_M003:
        conn.execute(table.create_sql())
        for index in table.indexes:
            conn.execute(index)


def m004_blob_content_last(conn: sqlite3.Connection) -> None:
    """Rebuild tool_result_blobs with ``content`` as its last column (rows and rowids kept).

    With ``content`` before other columns, inserting ``zeroblob(n)`` built the whole n bytes in
    memory: offloading a 200 MB output peaked at 2x its size. PostgreSQL binds bytea as a value
    whatever its position, so there the migration changes nothing.
    """
    if not isinstance(conn, sqlite3.Connection):
        return
    (table,) = TABLES_M004
    current = [r[1] for r in conn.execute(f"PRAGMA table_info({table.name})")]
    if current[-1:] == ["content"]:
        return
    staging = f"_{table.name}_m004"
    conn.execute(table.create_sql().replace(f"EXISTS {table.name} (", f"EXISTS {staging} (", 1))
    names = ", ".join(c.name for c in table.columns)
    conn.execute(f"INSERT INTO {staging} (rowid, {names}) SELECT rowid, {names} FROM {table.name}")
    conn.execute(f"DROP TABLE {table.name}")
    conn.execute(f"ALTER TABLE {staging} RENAME TO {table.name}")
    for index in table.indexes:
        conn.execute(index)


def m005_request_costs_writer_index(conn: sqlite3.Connection) -> None:
    """Index the calls that wrote the prompt cache (request_costs made by m003 before it had it)."""
    conn.execute(COST_WRITES_INDEX)


#: Columns of migration m006_component_residual: what reconciling a call's components to the
#: provider's own count left unattributed, and how the components were known (engine.components).
RESIDUAL_COLUMNS = (
    _c(
        "unattributed_tokens",
        "INTEGER",
        "Prompt tokens the provider counted that no component accounts for (harness text, framing): "
        '"Harness, unattributed". Part of the components\' total; NULL where components are.',
    ),
    _c(
        "components_basis",
        "TEXT",
        "How the component columns were known: exact (the provider's tokenizer, adding up to its count), "
        "reconciled (our measure made to add up to the provider's count), estimate (no provider count); "
        "NULL for events recorded before m006 or that carry no components.",
    ),
)


def _with_columns(table: Table, columns: tuple[Column, ...]) -> Table:
    """``table`` with ``columns`` appended (as ``ALTER TABLE ... ADD COLUMN`` leaves it)."""
    return Table(table.name, table.doc, table.columns + columns, table.constraints, table.indexes)


#: context_events as m006 leaves it: the residual columns after the others.
TABLES_M006 = tuple(_with_columns(t, RESIDUAL_COLUMNS) for t in TABLES_V1 if t.name == "context_events")


def m006_component_residual(conn: sqlite3.Connection) -> None:
    """Add context_events.unattributed_tokens and .components_basis (NULL on rows already there)."""
    for column in RESIDUAL_COLUMNS:
        conn.execute(f"ALTER TABLE context_events ADD COLUMN {column.name} {column.type}")


#: Column of migration m007_messages_excluded: what a call left out below its ``messages_sent`` bound.
EXCLUDED_COLUMN = _c(
    "messages_excluded",
    "TEXT",
    "JSON list of the transcript seqs below the request's details.messages_sent that it did not send "
    "(a compaction's summarizer leaves out the segment kept after it, or the prompt typed just before); "
    "NULL when the request sent every message below the bound (engine.sent).",
)

#: context_events as m007 leaves it: ``messages_excluded`` after the residual columns.
TABLES_M007 = tuple(_with_columns(t, (EXCLUDED_COLUMN,)) for t in TABLES_M006)


def m007_messages_excluded(conn: sqlite3.Connection) -> None:
    """Add context_events.messages_excluded (NULL on rows already there: they sent a prefix)."""
    conn.execute(f"ALTER TABLE context_events ADD COLUMN {EXCLUDED_COLUMN.name} {EXCLUDED_COLUMN.type}")


#: Table of migration m008_session_rollups: the Sessions page's per-session totals, kept by the store
#: (engine/store/sqlite_rollups.py; a PostgreSQL server keeps the same table: engine/store/pg_rollups.py).
TABLES_M008 = (
    Table(
        "_session_rollups",
        "Per-session totals the Sessions page reads (derived data, like an index: kept by the store's write "
        "transaction from the rows it inserts and deletes; each total defined once in "
        "engine.store.pg_rollups.SESSION_TOTALS). No row for a session with no messages, events or blobs.",
        (
            _c(
                "session_id",
                "TEXT PRIMARY KEY REFERENCES sessions(id) ON DELETE CASCADE",
                "The session (its row goes with it).",
            ),
            _c("messages", "INTEGER NOT NULL DEFAULT 0", "Messages in the transcript."),
            _c("last_turn", "INTEGER", "Highest turn_index of its messages (turns = last_turn + 1)."),
            _c(
                "peak_usage_pct",
                "REAL",
                "Highest projected_tokens * 100 / limit of its request events (limit: engine.limit.LIMIT_SQL).",
            ),
            _c("peak_tokens", "INTEGER", "Highest projected_tokens of its request events."),
            _c(
                "last_limit",
                "INTEGER",
                "seq * 10,000,000,000 + limit of its latest request event with a limit (limit = last_limit % that).",
            ),
            _c("compactions", "INTEGER NOT NULL DEFAULT 0", "Compaction events with outcome compacted."),
            _c("forced_final", "INTEGER NOT NULL DEFAULT 0", "Guard events with outcome forced_final."),
            _c(
                "skipped_provider",
                "INTEGER NOT NULL DEFAULT 0",
                "Guard events with outcome skipped_provider.",
            ),
            _c("offloaded_bytes", "INTEGER NOT NULL DEFAULT 0", "Bytes of its offloaded tool outputs."),
            _c("blobs", "INTEGER NOT NULL DEFAULT 0", "Offloaded tool outputs (tool_result_blobs rows)."),
        ),
    ),
)


def m008_session_rollups(conn: sqlite3.Connection) -> None:
    """Create _session_rollups and back-fill it from the rows already there."""
    for table in TABLES_M008:
        conn.execute(table.create_sql())
    backfill(conn)


Migration = Callable[[sqlite3.Connection], None]
MIGRATIONS: tuple[tuple[str, Migration], ...] = (
    ("m001_initial", m001_initial),
    ("m002_request_payloads", m002_request_payloads),
    ("m003_request_costs", m003_request_costs),
    ("m004_blob_content_last", m004_blob_content_last),
    ("m005_request_costs_writer_index", m005_request_costs_writer_index),
    ("m006_component_residual", m006_component_residual),
    ("m007_messages_excluded", m007_messages_excluded),
    ("m008_session_rollups", m008_session_rollups),
)
SCHEMA_VERSION = len(MIGRATIONS)


def apply_migrations(conn: sqlite3.Connection) -> list[str]:
    """Apply pending migrations in order, each in its own transaction; return their names.

    ``conn`` must be in autocommit mode (isolation_level=None). Safe to call again.
    """
    conn.execute("CREATE TABLE IF NOT EXISTS _migrations (name TEXT PRIMARY KEY, applied_utc TEXT NOT NULL)")
    applied: list[str] = []
    for number, (name, migrate) in enumerate(MIGRATIONS, start=1):
        conn.execute("BEGIN IMMEDIATE")
        try:
            if conn.execute("SELECT 1 FROM _migrations WHERE name = ?", (name,)).fetchone():
                conn.execute("COMMIT")
                continue
            migrate(conn)
            conn.execute(
                "INSERT INTO _migrations (name, applied_utc) VALUES (?, strftime('%Y-%m-%dT%H:%M:%fZ','now'))",
                (name,),
            )
            conn.execute(f"PRAGMA application_id = {APPLICATION_ID}")
            conn.execute(f"PRAGMA user_version = {number}")
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        applied.append(name)
    return applied


@dataclass(frozen=True)
class ColumnInfo:
    """A column as a freshly migrated database has it (``PRAGMA table_info``), with its meaning."""

    name: str
    type: str
    not_null: bool
    default: str | None
    primary_key: int
    doc: str

    @property
    def declaration(self) -> str:
        text = self.type + (" NOT NULL" if self.not_null else "")
        return text + (f" DEFAULT {self.default}" if self.default is not None else "")


@dataclass(frozen=True)
class TableInfo:
    """A table as a freshly migrated database has it, with the meaning kept in this module."""

    name: str
    doc: str
    columns: tuple[ColumnInfo, ...]
    foreign_keys: tuple[str, ...]
    indexes: tuple[str, ...]


def documented_tables() -> dict[str, Table]:
    """Every :class:`Table` declared in this module (each migration's ``TABLES_*``), by name."""
    declared: dict[str, Table] = {}
    for value in list(globals().values()):
        if isinstance(value, tuple) and value and all(isinstance(t, Table) for t in value):
            declared.update((t.name, t) for t in value)
    return declared


def describe_schema() -> list[TableInfo]:
    """The schema as the migrations actually leave it: a fresh in-memory database, migrated, read
    back through ``PRAGMA table_info`` / ``foreign_key_list`` / ``index_list``; descriptions come
    from the declarations here ("" where a table or column has none: the docs test fails on it)."""
    conn = sqlite3.connect(":memory:", isolation_level=None)
    try:
        apply_migrations(conn)
        names = [r[0] for r in conn.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' ORDER BY rowid"
        )]  # fmt: skip
        names = [n for n in names if n != "_migrations"] + [n for n in names if n == "_migrations"]
        declared = documented_tables()
        tables = []
        for name in names:
            table = declared.get(name)
            docs = {c.name: c.doc for c in table.columns} if table else {}
            columns = tuple(
                ColumnInfo(r[1], r[2], bool(r[3]), r[4], r[5], docs.get(r[1], ""))
                for r in conn.execute(f"PRAGMA table_info({name})")
            )
            keys = tuple(
                f"{r[3]} -> {r[2]}({r[4]})" + (f" ON DELETE {r[6]}" if r[6] != "NO ACTION" else "")
                for r in conn.execute(f"PRAGMA foreign_key_list({name})")
            )
            indexes = tuple(
                f"{r[1]}{' UNIQUE' if r[2] else ''} ({', '.join(c[2] for c in conn.execute(f'PRAGMA index_info({r[1]})'))})"
                for r in conn.execute(f"PRAGMA index_list({name})")
                if r[3] == "c"  # created by CREATE INDEX (not a key's automatic index)
            )
            tables.append(
                TableInfo(name, table.doc if table else _MIGRATIONS_DOC.get(name, ""), columns, keys, indexes)
            )
        return tables
    finally:
        conn.close()


#: Tables that apply_migrations itself creates (not declared by a migration).
_MIGRATIONS_DOC = {"_migrations": "Migrations applied to this file, by name, with when (UTC)."}
_MIGRATIONS_COLUMN_DOCS = {
    "name": "Migration name (m001_initial, ...).",
    "applied_utc": "When it was applied.",
}


def column_types() -> dict[str, dict[str, str]]:
    """table -> column -> declared SQLite type, as a freshly migrated database has them."""
    return {t.name: {c.name: c.type for c in t.columns} for t in describe_schema()}


def schema_markdown() -> str:
    """The Markdown reference of the schema (docs/schema.md is this text)."""
    out = [
        "# Session database schema",
        "",
        "<!-- generated by `python -m engine.store.schema > docs/schema.md` from a freshly migrated",
        "     database; a test checks it is current -->",
        "",
        f"Schema version {SCHEMA_VERSION} (`PRAGMA user_version`), `PRAGMA application_id` = {APPLICATION_ID}.",
        "SQLite in WAL mode. Tables and columns below are a supported interface: the dashboard and",
        "your own SQL may rely on them. Migrations: "
        + ", ".join(f"`{name}`" for name, _ in MIGRATIONS)
        + ".",
        "",
        "**Secrets at rest.** Every text the store writes, in every table, passes through one redaction",
        "(`engine.redact.redact_secrets`, applied at the store's write boundary): API keys, bearer tokens,",
        "passwords and other named credentials (`x-api-key`, `Authorization`, `api_key`, `client_secret`,",
        "`refresh_token`, a URL's password, ...) are stored as `[REDACTED]`, the name kept. Transcripts,",
        "snapshots and exact requests (`payload_parts`, `model_requests`, a raw body included) are otherwise",
        "kept exactly as sent: a rebuilt request equals the one sent apart from its secrets. Only an",
        "offloaded output (`tool_result_blobs.content`) is kept byte for byte, being what `read_result`",
        "serves back to the model. Token counts are of what the model saw.",
        "",
    ]
    for table in describe_schema():
        keys = [c.name for c in sorted(table.columns, key=lambda c: c.primary_key) if c.primary_key]
        out += [f"## `{table.name}`", "", table.doc, "", "| column | type | meaning |", "|---|---|---|"]
        docs = _MIGRATIONS_COLUMN_DOCS if table.name == "_migrations" else {}
        out += [
            f"| `{c.name}` | `{c.declaration}` | {c.doc or docs.get(c.name, '')} |" for c in table.columns
        ]
        notes = [f"Primary key: `({', '.join(keys)})`"] if keys else []
        notes += [f"Foreign key: `{k}`" for k in table.foreign_keys]
        notes += [f"Index: `{i}`" for i in table.indexes]
        if notes:
            out += ["", *(f"- {n}" for n in notes)]
        out.append("")
    from engine.store.pg_types import postgres_markdown  # the same tables on a PostgreSQL server

    out.append(postgres_markdown())
    return "\n".join(out)


if __name__ == "__main__":
    sys.stdout.write(schema_markdown())
