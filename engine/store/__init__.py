"""The session database: schema and migrations (schema.py), typed rows (records.py), SQLite store."""

from engine.store.backend import SessionStoreBackend
from engine.store.payloads import RequestRecord, StoredRequest
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
    "SCHEMA_VERSION",
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
    "describe_schema",
    "is_sqlite_file",
    "message_kind",
    "settle_database",
]
