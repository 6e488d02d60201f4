"""The session database: schema and migrations (schema.py), typed rows (records.py), the reads and
writes of both backends (sql_store.py) with the SQLite store (sqlite.py) and the PostgreSQL one (postgres.py),
copying a database (copy.py) and the per-session totals SQL the dashboard shares (pg_rollups.py)."""

from engine.store.backend import SessionStoreBackend
from engine.store.copy import copy_database
from engine.store.payloads import RequestRecord, StoredRequest
from engine.store.pg_rollups import LIMIT_BASE, SESSION_TOTALS, rollup_sql, totals_sql
from engine.store.records import (
    BlobRecord,
    ContextState,
    SessionRecord,
    Snapshot,
    StoredEvent,
    StoredMessage,
    ToolRecord,
)
from engine.store.schema import SCHEMA_VERSION, TABLE_NAMES, column_types, describe_schema
from engine.store.sqlite import (
    SessionStore,
    check_database_file,
    is_sqlite_file,
    message_kind,
    settle_database,
)

__all__ = [
    "LIMIT_BASE",
    "SCHEMA_VERSION",
    "SESSION_TOTALS",
    "TABLE_NAMES",
    "BlobRecord",
    "ContextState",
    "RequestRecord",
    "SessionRecord",
    "SessionStore",
    "SessionStoreBackend",
    "Snapshot",
    "StoredEvent",
    "StoredMessage",
    "StoredRequest",
    "ToolRecord",
    "check_database_file",
    "column_types",
    "copy_database",
    "describe_schema",
    "is_sqlite_file",
    "message_kind",
    "rollup_sql",
    "settle_database",
    "totals_sql",
]
