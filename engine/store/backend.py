"""The interface the engine needs from a session database, and what a database engine gives the store.

:class:`engine.store.SessionStore` (a SQLite file) and :class:`engine.store.postgres.PostgresSessionStore`
(a server) implement :class:`SessionStoreBackend`, both :class:`engine.store.sql_store.SqlSessionStore`
holding a :class:`SqlDatabase` (:class:`engine.store.sqlite.SqliteFile`,
:class:`engine.store.postgres.PgServer`). A test checks both stay structurally conformant; the store
tests run on both.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from engine.events import ContextEvent, ProviderUsage
from engine.messages import Message
from engine.store.payloads import RequestRecord, StoredRequest
from engine.store.records import (
    BlobRecord,
    ContextState,
    SessionRecord,
    Snapshot,
    StoredEvent,
    StoredMessage,
    ToolRecord,
    WriteMarks,
)
from engine.tokens import Tokenizer


@dataclass(frozen=True)
class ImportSource:
    """What an import batch reads of a stored session (:meth:`SessionStoreBackend.import_sources`): the
    file it came from and these members of its metadata (None when it has none)."""

    session_id: str
    source_path: str | None
    import_state: Any  # the file's state when imported (size, time, format)
    also_from: Any  # other files of the same session: their states by path
    lineage_key: Any
    forked: Any


@runtime_checkable
class SessionStoreBackend(Protocol):
    """What the session manager, compaction, offloading and reports use from a store."""

    #: The driver's parameter marker (``?`` or ``%s``), for SQL run through ``transaction()``.
    P: str

    def close(self) -> None: ...
    def transaction(self) -> AbstractContextManager[Any]: ...
    def tx_rows(self, conn: Any, sql: str, params: Sequence[Any] = ()) -> list[Any]: ...
    def table_names(self) -> set[str]: ...
    def batched_costs(self) -> AbstractContextManager[None]: ...
    def cost_worker(self) -> AbstractContextManager[bool]: ...

    def create_session(self, **fields: Any) -> str: ...
    def update_session(self, session_id: str, **fields: Any) -> None: ...
    def get_session(self, session_id: str) -> SessionRecord: ...
    def list_sessions(self) -> list[SessionRecord]: ...
    def import_sources(self) -> list[ImportSource]: ...
    def delete_session(self, session_id: str) -> None: ...
    def written_since(self, marks: WriteMarks | None) -> tuple[WriteMarks, frozenset[str]]: ...

    def append_messages(
        self,
        session_id: str,
        messages: Iterable[Message],
        *,
        tokenizer: Tokenizer,
        usages: Sequence[ProviderUsage | None] | None = None,
        counts: Sequence[tuple[int, int] | None] | None = None,
    ) -> list[StoredMessage]: ...
    def load_messages(self, session_id: str, *, from_seq: int = 0) -> list[StoredMessage]: ...
    def load_transcript(self, session_id: str) -> list[Message]: ...
    def message_count(self, session_id: str) -> int: ...
    def message_sizes(self, session_id: str) -> list[tuple[int, int, int, int]]: ...
    def truncate_messages(self, session_id: str, from_seq: int, *, event_source: str) -> None: ...

    def record_event(self, session_id: str, event: ContextEvent) -> int: ...
    def list_events(
        self, session_id: str, *, kind: str | None = None, from_seq: int = 0
    ) -> list[StoredEvent]: ...

    def write_snapshot(self, session_id: str, messages: Sequence[Message], **fields: Any) -> int: ...
    def latest_snapshot(self, session_id: str) -> Snapshot | None: ...
    def get_snapshot(self, snapshot_id: int) -> Snapshot: ...
    def list_snapshots(self, session_id: str) -> list[Snapshot]: ...
    def link_snapshot_event(self, snapshot_id: int, event_id: int) -> None: ...
    def load_resume_history(self, session_id: str) -> tuple[list[Message], str | None, int]: ...

    def put_blob(self, session_id: str, content: bytes | str, **fields: Any) -> BlobRecord: ...
    def get_blob(self, ref_id: str, *, with_content: bool = True) -> BlobRecord: ...
    def list_blobs(self, session_id: str | None = None) -> list[BlobRecord]: ...

    def save_context_state(self, session_id: str, **fields: Any) -> int: ...
    def list_context_states(self, session_id: str, *, strategy: str | None = None) -> list[ContextState]: ...
    def latest_context_state(
        self, session_id: str, *, strategy: str, level: int = 0
    ) -> ContextState | None: ...
    def clear_context_states(self, session_id: str, *, keep_strategy: str | None = None) -> int: ...

    def record_request(self, session_id: str, record: RequestRecord) -> int: ...
    def get_request(self, request_id: int, *, with_body: bool = True) -> StoredRequest: ...
    def list_requests(self, session_id: str, *, with_body: bool = False) -> list[StoredRequest]: ...

    def upsert_tools(self, session_id: str, tools: Iterable[ToolRecord]) -> None: ...
    def list_tools(self, session_id: str) -> list[ToolRecord]: ...


@runtime_checkable
class SqlDatabase(Protocol):
    """What one database engine gives :class:`engine.store.sql_store.SqlSessionStore`, which holds it:
    transactions, reads, a session's row numbering, ids, blob I/O. It never calls the store back: the
    store runs what comes before and after each of these (held events, cost rows) itself."""

    #: The driver's parameter marker (``?`` or ``%s``).
    P: str
    #: Where the database is (a file's path, a server's redacted URL), for errors.
    path: Any
    read_only: bool
    #: The driver's integrity violation (a missing session, a duplicate key).
    integrity_errors: tuple[type[BaseException], ...]
    #: Whether a row committed later always has a higher id than every row committed before it
    #: (SQLite: one writer at a time; PostgreSQL: transactions draw ids, then commit in any order).
    ids_in_commit_order: bool

    def json_member(self, column: str, key: str) -> str:
        """SQL for the JSON text of member ``key`` of the JSON object in text ``column`` (NULL: none)."""
        ...

    def close(self) -> None: ...
    def table_names(self) -> set[str]: ...
    def write_lock(self) -> AbstractContextManager[Any]:
        """Held by one thread around its whole write: the transaction and the cost rows written once it
        commits (SQLite: the connection's lock; a server serialises what needs it by its own locks)."""
        ...

    def transaction(self) -> AbstractContextManager[Any]:
        """One write transaction (BEGIN … COMMIT, rolled back on an error) yielding its connection
        (``execute``, ``executemany``); the store calls it only when its thread has none open."""
        ...

    def read(self, sql: str, params: Sequence[Any] = (), conn: Any = None) -> list[Any]:
        """Rows (by index and by column name) of one query: inside ``conn``, the thread's open
        transaction, when given."""
        ...

    def tx_rows(self, conn: Any, sql: str, params: Sequence[Any] = ()) -> list[Any]:
        """Rows by index and by column name of a query inside a transaction (``conn``)."""
        ...

    def lock_session(self, conn: Any, session_id: str) -> None:
        """Hold the session's row numbering (``seq``) until the transaction ends."""
        ...

    def reserve_ids(self, conn: Any, table: str, n: int, *, after: int = 0) -> list[int]:
        """``n`` unused ids of ``table`` (an id column of its own), each greater than ``after`` (ids
        reserved before and not yet inserted), for rows inserted later in the same transaction."""
        ...

    def insert_blob(self, conn: Any, values: Sequence[Any], pieces: Iterator[bytes | memoryview]) -> None:
        """Insert a tool_result_blobs row (``values``: every column but ``content``, in
        :data:`engine.store.blobs.BLOB_COLUMNS` order) with its content, given in pieces."""
        ...
