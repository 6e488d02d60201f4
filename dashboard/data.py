"""Read-only access to one or many session databases through DuckDB (no streamlit here): the
names the pages use, re-exported from the modules that own them.

``data_files`` (which databases), ``data_connect`` (:func:`connect`: every file attached READ_ONLY
with one union view per schema table, and the query helpers), ``data_sessions`` (the sessions list),
``data_timeline`` (one session's requests, events and what each sent), ``data_artifacts``
(compactions, snapshots, offloaded results, tools). Query functions aggregate in SQL and return
pandas frames; list queries never read message content.
"""

from dashboard.data_artifacts import (
    blob_content,
    blobs,
    compactions,
    deferral_matrix,
    server_costs,
    snapshots,
    tool_costs,
    tool_searches,
)
from dashboard.data_connect import (
    QUERY_LOCK,
    SCHEMA_TYPES,
    TABLES,
    connect,
    database_paths,
    load_sqlite_scanner,
    plain_nulls,
    read,
    skipped_files,
)

# The query helpers dashboard.blob_pages and tests use by name.
from dashboard.data_connect import _alias as _alias
from dashboard.data_connect import _attached as _attached
from dashboard.data_connect import _rows as _rows
from dashboard.data_connect import _session_rows as _session_rows
from dashboard.data_connect import _sql_string as _sql_string
from dashboard.data_files import (
    DEFAULT_DATA_DIR,
    db_labels,
    expand_path,
    files_identity,
    files_signature,
    loaded_paths,
    script_args,
)
from dashboard.data_sessions import (
    ROLLUP_TYPES,
    SESSION_COLUMNS,
    SessionFilter,
    as_tree,
    filter_sessions,
    resolve_session_link,
    session_findings,
    session_settings,
    sessions_overview,
)
from dashboard.data_timeline import (
    COMPONENT_COLUMNS,
    MESSAGE_LIST_COLUMNS,
    USAGE_COLUMNS,
    content_text,
    events,
    markers,
    message,
    messages_by_seq,
    removed_seqs_before,
    requests,
    sent_messages,
    timeline,
)
from engine.locations import DB_PATHS_ENV_VAR as DB_PATHS_ENV_VAR

__all__ = [
    "COMPONENT_COLUMNS",
    "DB_PATHS_ENV_VAR",
    "DEFAULT_DATA_DIR",
    "MESSAGE_LIST_COLUMNS",
    "QUERY_LOCK",
    "ROLLUP_TYPES",
    "SCHEMA_TYPES",
    "SESSION_COLUMNS",
    "TABLES",
    "USAGE_COLUMNS",
    "SessionFilter",
    "as_tree",
    "blob_content",
    "blobs",
    "compactions",
    "connect",
    "content_text",
    "database_paths",
    "db_labels",
    "deferral_matrix",
    "events",
    "expand_path",
    "files_identity",
    "files_signature",
    "filter_sessions",
    "load_sqlite_scanner",
    "loaded_paths",
    "markers",
    "message",
    "messages_by_seq",
    "plain_nulls",
    "read",
    "removed_seqs_before",
    "requests",
    "resolve_session_link",
    "script_args",
    "sent_messages",
    "server_costs",
    "session_findings",
    "session_settings",
    "sessions_overview",
    "skipped_files",
    "snapshots",
    "timeline",
    "tool_costs",
    "tool_searches",
]
