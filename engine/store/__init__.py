"""The session database: schema and migrations (schema.py), typed rows (records.py), the reads and
writes of both backends (sql_store.py) with the SQLite store (sqlite.py) and the PostgreSQL one (postgres.py),
copying a database (copy.py) and the per-session totals SQL the dashboard shares (pg_rollups.py)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from engine.lazy import lazy_exports

#: Public name -> the module that owns it. Names load on first use (PEP 562): a command that only
#: asks whether a path is a database URL (``ctxdesk dashboard`` before it starts the server) does not
#: import the store, its rows' models and pydantic.
_OWNERS: dict[str, str] = {
    "SessionStoreBackend": "engine.store.backend",
    "copy_database": "engine.store.copy",
    "RequestRecord": "engine.store.payloads",
    "StoredRequest": "engine.store.payloads",
    "LIMIT_BASE": "engine.store.pg_rollups",
    "ROLLUP_TABLE": "engine.store.pg_rollups",
    "SESSION_TOTALS": "engine.store.pg_rollups",
    "rollup_sql": "engine.store.pg_rollups",
    "totals_sql": "engine.store.pg_rollups",
    "BlobRecord": "engine.store.records",
    "ContextState": "engine.store.records",
    "SessionRecord": "engine.store.records",
    "Snapshot": "engine.store.records",
    "StoredEvent": "engine.store.records",
    "StoredMessage": "engine.store.records",
    "ToolRecord": "engine.store.records",
    "SCHEMA_VERSION": "engine.store.schema",
    "TABLE_NAMES": "engine.store.schema",
    "column_types": "engine.store.schema",
    "describe_schema": "engine.store.schema",
    "SessionStore": "engine.store.sqlite",
    "check_database_file": "engine.store.sqlite",
    "is_sqlite_file": "engine.store.sqlite",
    "message_kind": "engine.store.sqlite",
    "settle_database": "engine.store.sqlite",
}

__getattr__, __dir__ = lazy_exports(__name__, _OWNERS, globals())

if TYPE_CHECKING:  # what type checkers and editors see; at run time these load on first use
    from engine.store.backend import SessionStoreBackend
    from engine.store.copy import copy_database
    from engine.store.payloads import RequestRecord, StoredRequest
    from engine.store.pg_rollups import LIMIT_BASE, ROLLUP_TABLE, SESSION_TOTALS, rollup_sql, totals_sql
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
    "ROLLUP_TABLE",
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
