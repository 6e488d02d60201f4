"""The session database's reads and writes, once, in portable SQL: :class:`SqlSessionStore`, holding
the database it runs them on (:class:`engine.store.backend.SqlDatabase`: a SQLite file,
engine/store/sqlite.py, or a PostgreSQL server, engine/store/postgres.py).

Every statement here is plain SQL both servers run as written (``RETURNING id``, ``ON CONFLICT``),
with the driver's own parameter marker (``self.P``: ``?`` for sqlite3, ``%s`` for psycopg). What
differs is each database's own code: opening, migrations (their own DDL), BEGIN and COMMIT,
locking a session's row numbering, ids, blob I/O, errors; it never calls the store back. Nothing is
translated. Every text written passes the redaction boundary (``engine.redact``). A request event's
cost row is written after its transaction commits (``engine.store.cost_writer``), never inside it:
pricing holds no write lock and a pricing failure loses no event.

One concept over ~400 lines: the store owns all SQL of the session database, so every query
and write lives here (row converters beside them).
"""

from __future__ import annotations

import functools
import json
import logging
import threading
import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from engine.errors import NotFoundError, StoreError
from engine.events import ContextEvent, ProviderUsage
from engine.messages import Message, ToolResultBlock, is_tool_result_only, is_user_input
from engine.redact import redact_row
from engine.store.backend import ImportSource, SqlDatabase
from engine.store.blobs import blob_pieces, blob_stats
from engine.store.event_batch import EVENT_COLUMNS, HELD_ROWS, EventBatch, event_row
from engine.store.payloads import (
    RequestRecord,
    StoredRequest,
    insert_request,
    load_parts,
    request_hashes,
    stored_request,
)
from engine.store.records import (
    BlobRecord,
    ContextState,
    SessionRecord,
    Snapshot,
    StoredEvent,
    StoredMessage,
    ToolRecord,
    WriteMarks,
    constructed,
    content_from_json,
    event_from_row,
    intern_columns,
    json_text,
    loads_json,
    message_to_json,
    messages_from_json_text,
    share_fields_set,
    stored_row_texts,
    usage_from_row,
    utc_now,
)
from engine.tokens import Tokenizer

logger = logging.getLogger(__name__)

PREVIEW_CHARS = 200


def message_kind(message: Message) -> str:
    if message.role == "assistant":
        return "tool_use" if message.tool_use_ids else "assistant"
    if is_tool_result_only(message):
        return "tool_result"
    return "user_input" if is_user_input(message) else message.role


#: Rows per query when a session's messages or events are read whole.
READ_PAGE_ROWS = 5_000
#: messages' columns as :meth:`SqlSessionStore.append_messages` writes them.
MESSAGE_COLUMNS = (
    "id", "session_id", "seq", "turn_index", "role", "kind", "message_uid", "content_json", "text_preview",
    "tool_names", "pinned", "tokens", "tool_result_tokens", "tokenizer", "provider_input_tokens",
    "provider_output_tokens", "provider_cache_read_tokens", "provider_cache_creation_tokens", "meta_json",
    "created_utc",
)  # fmt: skip


class SqlSessionStore:
    """Every read and write of the session database, on the :class:`SqlDatabase` it holds (a SQLite
    file, a PostgreSQL server): the database runs statements, this class decides them.

    One concept over ~300 lines: one method per read or write of each table (the whole SQL
    surface), so nothing outside the store writes SQL. The transaction around them is this class's
    too: per thread, nested calls join the outer one; what a batch holds is inserted before any
    other statement runs; once the outermost commits, the cost rows of its request events.
    """

    #: The driver's parameter marker (the database's).
    P = "?"

    def __init__(self, db: SqlDatabase) -> None:
        self._db = db
        self.P = db.P
        #: The driver's integrity violation (a missing session, a duplicate key).
        self._integrity_errors = db.integrity_errors
        self.path: Any = db.path
        self.read_only = db.read_only
        #: Per thread: the open transaction's connection, its event batch, the request events (by
        #: session) whose cost rows are written once it commits.
        self._local = threading.local()

    def _marks(self, n: int) -> str:
        return ", ".join([self.P] * n)

    def __enter__(self) -> Any:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._db.close()

    def table_names(self) -> set[str]:
        """The tables the database holds."""
        return self._db.table_names()

    # -- transactions ----------------------------------------------------------------------------
    @contextmanager
    def transaction(self) -> Iterator[Any]:
        """One write transaction yielding its connection (``execute``, ``executemany``); nested calls
        (in the same thread) join the outer one. Once the outermost commits, the cost rows of the
        request events it recorded are written (:meth:`_after_commit`), under the same write lock:
        no other writer of this store comes between a call and its cost row."""
        if self.read_only:
            raise StoreError("the session database was opened read-only", path=str(self.path))
        current = getattr(self._local, "conn", None)
        if current is not None:
            self._flush_events()  # what a batch holds is seen by this statement
            yield current
            return
        with self._db.write_lock():
            try:
                with self._db.transaction() as conn:
                    self._local.conn = conn
                    try:
                        yield conn
                    finally:
                        self._local.conn = None
            except BaseException:
                self._discard_pending_costs()
                raise
            self._after_commit()

    def _read(self, sql: str, params: Sequence[Any] = ()) -> list[Any]:
        """Rows (by index and by column name) of one query; inside the thread's transaction, after
        the events its batch holds are inserted."""
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            self._flush_events()
        return self._db.read(sql, params, conn)

    def _reader(self) -> Callable[[str, Sequence[Any]], list[Any]]:
        """:meth:`_read` for a module this store calls (``payloads``): the database's own reader, so
        that it never calls the store back."""
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            self._flush_events()
        return functools.partial(self._db.read, conn=conn)

    def tx_rows(self, conn: Any, sql: str, params: Sequence[Any] = ()) -> list[Any]:
        """Rows by index and by column name of a query inside a transaction (``conn``)."""
        return self._db.tx_rows(conn, sql, params)

    # -- cost rows, after the commit -------------------------------------------------------------
    @property
    def _pending_costs(self) -> dict[str, list[int]]:
        pending = getattr(self._local, "pending_costs", None)
        if pending is None:
            pending = self._local.pending_costs = {}
        return pending

    def _pending_cost(self, session_id: str, event_id: int, row: tuple[Any, ...] | None = None) -> None:
        """Price the request event once the transaction commits (``row``: its row as written, ``id``
        then EVENT_COLUMNS, not read back)."""
        self._pending_costs.setdefault(session_id, []).append(event_id)
        if row is not None:
            self._written_events[event_id] = row

    @property
    def _written_events(self) -> dict[int, tuple[Any, ...]]:
        written = getattr(self._local, "written_events", None)
        if written is None:
            written = self._local.written_events = {}
        return written

    def _discard_pending_costs(self) -> None:
        self._local.pending_costs = {}
        self._local.written_events = {}
        self._local.event_batch = None
        if (feed := self._cost_feed) is not None:
            feed.end_transaction()

    @property
    def _cost_feed(self) -> Any:
        return getattr(self._local, "cost_feed", None)

    @contextmanager
    def cost_worker(self) -> Iterator[bool]:
        """Until the block ends, this thread's request events are priced in a worker process while it
        goes on writing (:mod:`engine.store.cost_feed`; the rows are the same); yields whether one
        started (not where this process may not fork). For an import: a worker costs a fork."""
        from engine.store.cost_feed import CostFeed

        if self._cost_feed is not None:  # nested: the outer one prices
            yield True
            return
        feed = self._local.cost_feed = CostFeed.start(chunk=HELD_ROWS)
        try:
            yield feed is not None
        except BaseException:
            if feed is not None:  # what was committed before the error (or ^C) gets its rows
                try:
                    self._settle_all(feed)
                except BaseException:  # a second ^C: not waited for (`ctxdesk costs --refresh` prices them)
                    feed.abandon()
                    raise
            raise
        else:
            if feed is not None:
                self._settle_all(feed)
        finally:
            self._local.cost_feed = None
            if feed is not None:
                feed.close()

    def _after_commit(self) -> None:
        """Write the cost rows of the request events the committed transaction recorded (one pass
        per session, in their own transaction): pricing is not part of the write it follows."""
        pending, self._local.pending_costs = self._pending_costs, {}
        written, self._local.written_events = self._written_events, {}
        feed = self._cost_feed
        if not pending:
            if feed is not None:
                feed.end_transaction()
            return
        from engine.store.cost_lanes import record_session_costs  # cost analysis loaded on first use

        try:
            with self.transaction() as conn:
                if feed is not None:  # what the cost worker priced meanwhile; all earlier ones of these
                    self._settle(feed, conn, wait_for=pending)
                for session_id, event_ids in pending.items():
                    # priced by the cost worker while the transaction wrote (engine.store.cost_feed)
                    if feed is not None and feed.finish(session_id, event_ids):
                        continue
                    # a chunk at a time (each one continues from the rows of the last): the calls, cost
                    # rows and verdicts of half a million calls are never all in memory at once; a big
                    # session's second half priced in a worker meanwhile (engine.store.cost_lanes)
                    record_session_costs(self._db, conn, session_id, event_ids, written, chunk=HELD_ROWS)
        except StoreError as exc:  # the events are in: `ctxdesk costs DB --refresh` prices them later
            logger.warning("cost rows not written (%s); `ctxdesk costs --refresh` writes them", exc)
        finally:
            if feed is not None:
                feed.end_transaction()

    def _settle_all(self, feed: Any) -> None:
        try:
            with self.transaction() as conn:
                self._settle(feed, conn, wait_for=None)
        except StoreError as exc:  # the events are in
            logger.warning("cost rows not written (%s); `ctxdesk costs --refresh` writes them", exc)

    def _settle(self, feed: Any, conn: Any, *, wait_for: Any) -> None:
        """Write the cost rows of the sessions the cost worker was asked for: those answered, and all
        of those in ``wait_for`` (None: every one); each one it did not price, priced here."""
        from engine.store.cost_lanes import record_session_costs
        from engine.store.cost_writer import insert_cost_values

        for session_id, event_ids, chunks in feed.settled(self._db, conn, wait_for):
            if chunks is not None:
                for values in chunks:
                    insert_cost_values(conn, self.P, values)
            else:
                # events not held while a cost worker runs: read back
                record_session_costs(self._db, conn, session_id, event_ids, {}, chunk=HELD_ROWS)

    # -- batched events --------------------------------------------------------------------------
    @property
    def _event_batch(self) -> EventBatch | None:
        return getattr(self._local, "event_batch", None)

    @contextmanager
    def batched_costs(self) -> Iterator[None]:
        """One write transaction for many request events (an import's calls); their ``request_costs``
        rows are written together once it commits, one pass per session. Nested calls join the
        outer one. Its events are held and inserted together (:class:`EventBatch`), their ids known
        when recorded; their cost rows priced from them as written, not read back."""
        with self.transaction() as conn:
            if self._event_batch is not None:  # nested: the outer batch writes them
                yield
                return
            batch = self._local.event_batch = EventBatch(self, conn)
            try:
                yield
                self._insert_held(conn, batch.flush())
            finally:
                self._local.event_batch = None

    def _flush_events(self) -> None:
        """Insert the events a batch holds: run before any other statement of the transaction (a
        read, a nested write), so that it sees them."""
        batch = self._event_batch
        if batch is not None and batch.rows:
            self._insert_held(batch.conn, batch.flush())

    def _hold_event(self, batch: EventBatch, session_id: str, event: ContextEvent) -> int:
        """Hold ``event`` in ``batch`` with its seq and id (read and reserved here, once per session
        and block of ids); its cost row once the transaction commits, from the row as held."""
        conn = batch.conn
        if not batch.knows(session_id):
            self._db.lock_session(conn, session_id)
            batch.start(session_id, self._next_event_seq(conn, session_id))
        if wanted := batch.ids_wanted():
            # past what this batch reserved and holds (SQLite's next id counts inserted rows only)
            batch.give_ids(self._db.reserve_ids(conn, "context_events", wanted, after=batch.last_id))
        row = batch.add(session_id, event)
        if event.kind == "request" and event.usage is not None:
            # held as its row (a third of the memory of the event it reads as: :func:`stored_event`);
            # not while a cost worker prices the calls (what it did not price is read back instead)
            self._pending_cost(session_id, row[0], row if self._cost_feed is None else None)
        if batch.full:
            self._insert_held(conn, batch.take())
        return row[0]

    def _insert_held(self, conn: Any, rows: list[tuple[Any, ...]]) -> None:
        if not rows:
            return
        try:
            self._insert_events(conn, rows)
        except self._integrity_errors as exc:
            sessions = sorted({r[1] for r in rows})
            raise NotFoundError(f"cannot record events for session(s) {sessions} ({exc})") from exc
        if (feed := self._cost_feed) is not None:
            feed.send(self._db, conn, rows)

    # -- sessions ------------------------------------------------------------------------
    def create_session(
        self,
        *,
        session_id: str | None = None,
        title: str | None = None,
        model: str | None = None,
        provider: str | None = None,
        tokenizer: str | None = None,
        tokens_exact: bool = False,
        source: str = "engine",
        source_path: str | None = None,
        parent_session_id: str | None = None,
        settings: dict[str, Any] | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> str:
        session_id = session_id or uuid.uuid4().hex
        now = utc_now()
        with self.transaction() as conn:
            try:
                conn.execute(
                    "INSERT INTO sessions (id, title, model, provider, tokenizer, tokens_exact, source, source_path,"
                    " parent_session_id, status, settings_json, metadata_json, created_utc, updated_utc)"
                    f" VALUES ({self._marks(9)}, 'active', {self._marks(4)})",
                    redact_row((
                        session_id, title, model, provider, tokenizer, int(tokens_exact), source, source_path,
                        parent_session_id, _dumps(settings), _dumps(metadata), now, now,
                    ), keys=(0, 8)),
                )  # fmt: skip
            except self._integrity_errors as exc:
                raise StoreError(
                    f"cannot create session {session_id!r} ({exc})", path=str(self.path)
                ) from exc
        return session_id

    def update_session(self, session_id: str, **fields: Any) -> None:
        """Update status, title, model, provider, settings, metadata or parent of a session."""
        allowed = {
            "status",
            "title",
            "model",
            "provider",
            "tokenizer",
            "settings",
            "metadata",
            "parent_session_id",
        }
        unknown = set(fields) - allowed
        if unknown:
            raise StoreError(f"cannot update session fields {sorted(unknown)}")
        columns = {
            ("settings_json" if k == "settings" else "metadata_json" if k == "metadata" else k): v
            for k, v in fields.items()
        }
        values = [_dumps(v) if k.endswith("_json") else v for k, v in columns.items()]
        values = redact_row(values, keys=[i for i, k in enumerate(columns) if k == "parent_session_id"])
        sets = ", ".join(f"{k} = {self.P}" for k in columns)
        with self.transaction() as conn:
            cur = conn.execute(
                f"UPDATE sessions SET {sets}{', ' if sets else ''}updated_utc = {self.P} WHERE id = {self.P}",
                (*values, utc_now(), session_id),
            )
            if cur.rowcount == 0:
                raise NotFoundError(f"no session {session_id!r}", path=str(self.path))

    def get_session(self, session_id: str) -> SessionRecord:
        rows = self._read(f"SELECT * FROM sessions WHERE id = {self.P}", (session_id,))
        if not rows:
            raise NotFoundError(f"no session {session_id!r}", path=str(self.path))
        return _session(rows[0])

    def list_sessions(self) -> list[SessionRecord]:
        return [_session(r) for r in self._read("SELECT * FROM sessions ORDER BY created_utc, id")]

    def import_sources(self) -> list[ImportSource]:
        """What an import batch reads of every session (:class:`ImportSource`), in :meth:`list_sessions`
        order: the members picked out by the database, not the whole metadata decoded here (29 MB of
        it at 8,500 sessions, Codex's system prompts: 0.3 s, read twice per batch)."""
        keys = ("import_state", "also_from", "lineage_key", "forked")
        members = ", ".join(self._db.json_member("metadata_json", key) for key in keys)
        rows = self._read(f"SELECT id, source_path, {members} FROM sessions ORDER BY created_utc, id")
        return [
            ImportSource(
                r[0], r[1], *(None if v is None else loads_json(v, f"metadata of {r[0]}") for v in r[2:])
            )
            for r in rows
        ]

    def delete_session(self, session_id: str) -> None:
        with self.transaction() as conn:
            conn.execute(f"DELETE FROM sessions WHERE id = {self.P}", (session_id,))

    def written_since(self, marks: WriteMarks | None) -> tuple[WriteMarks, frozenset[str]]:
        """Where the rows written so far end (the highest message and event ids: ids are never
        reused, so on SQLite rows past them are exactly the rows written since), and the sessions
        that have message or event rows past ``marks`` (none asked for when ``marks`` is None).
        Where ids are not drawn in commit order (PostgreSQL) a row committed later can hide under
        the marks: every session is reported."""
        rows = self._read(
            "SELECT (SELECT coalesce(max(id), 0) FROM messages), (SELECT coalesce(max(id), 0) FROM context_events)"
        )
        now = WriteMarks(messages=int(rows[0][0]), events=int(rows[0][1]))
        if marks is None or (marks == now and self._db.ids_in_commit_order):
            return now, frozenset()
        if not self._db.ids_in_commit_order:
            return now, frozenset(str(r[0]) for r in self._read("SELECT id FROM sessions"))
        touched = self._read(
            f"SELECT DISTINCT session_id FROM messages WHERE id > {self.P}"
            f" UNION SELECT DISTINCT session_id FROM context_events WHERE id > {self.P}",
            (marks.messages, marks.events),
        )
        return now, frozenset(str(r[0]) for r in touched)

    # -- transcript ----------------------------------------------------------------------
    def append_messages(
        self,
        session_id: str,
        messages: Iterable[Message],
        *,
        tokenizer: Tokenizer,
        usages: Sequence[ProviderUsage | None] | None = None,
        counts: Sequence[tuple[int, int] | None] | None = None,
    ) -> list[StoredMessage]:
        """Append messages to the transcript, counting their tokens; returns the stored rows.
        ``counts``: each message's (conversation, tool-result) tokens by ``tokenizer``
        (``Tokenizer.count_message_parts``) where the caller counted it already (None: counted here)."""
        messages = list(messages)
        usages = list(usages) if usages is not None else [None] * len(messages)
        counted = list(counts) if counts is not None else [None] * len(messages)
        if len(usages) != len(messages) or len(counted) != len(messages):
            raise StoreError("usages and counts must match messages one to one")
        rows: list[StoredMessage] = []
        now = utc_now()
        with self.transaction() as conn:
            self._db.lock_session(conn, session_id)
            last = conn.execute(
                f"SELECT seq, turn_index FROM messages WHERE session_id = {self.P} ORDER BY seq DESC LIMIT 1",
                (session_id,),
            ).fetchone()
            if (
                last is None
                and not conn.execute(f"SELECT 1 FROM sessions WHERE id = {self.P}", (session_id,)).fetchone()
            ):
                raise NotFoundError(f"no session {session_id!r}", path=str(self.path))
            seq, turn = (last[0] + 1, last[1]) if last else (0, 0)
            ids = self._db.reserve_ids(conn, "messages", len(messages)) if messages else []
            values: list[tuple[Any, ...]] = []
            for message_id, message, usage, parts in zip(ids, messages, usages, counted, strict=True):
                if seq > 0 and is_user_input(message):
                    turn += 1
                # the parse's count, else one cached count (a cache smaller than the session forgot the parse's)
                talk, result_tokens = parts if parts is not None else tokenizer.count_message_parts(message)
                tokens = talk + result_tokens
                if message.role == "tool":  # the whole content is a result there; the column counts blocks
                    blocks = () if isinstance(message.content, str) else message.content
                    result_tokens = sum(
                        tokenizer.count_block(b) for b in blocks if isinstance(b, ToolResultBlock)
                    )
                kind = message_kind(message)
                # counted as sent, kept without secrets
                message, (uid, content_json, preview, tool_names, meta_json) = stored_row_texts(
                    message, PREVIEW_CHARS
                )
                values.append((
                    message_id, session_id, seq, turn, message.role, kind, uid, content_json,
                    preview, tool_names, int(message.pinned), tokens, result_tokens, tokenizer.id,
                    usage.input_tokens if usage else None, usage.output_tokens if usage else None,
                    usage.cache_read_input_tokens if usage else None,
                    usage.cache_creation_input_tokens if usage else None,
                    meta_json, now,
                ))  # fmt: skip
                rows.append(  # each value made or validated here: not validated again
                    constructed(StoredMessage, {
                        "id": message_id, "session_id": session_id, "seq": seq, "turn_index": turn, "kind": kind,
                        "tokens": tokens, "tool_result_tokens": result_tokens, "tokenizer": tokenizer.id,
                        "message": message, "usage": usage, "created_utc": now,
                    })
                )  # fmt: skip
                seq += 1
                if len(values) >= HELD_ROWS:  # inserted as they come: memory stays bounded
                    self._insert_messages(conn, values)
                    values = []
            if values:
                self._insert_messages(conn, values)
            conn.execute(f"UPDATE sessions SET updated_utc = {self.P} WHERE id = {self.P}", (now, session_id))
        return rows

    def load_messages(self, session_id: str, *, from_seq: int = 0) -> list[StoredMessage]:
        pages = self._pages(
            f"SELECT * FROM messages WHERE session_id = {self.P} AND seq >= {self.P}", [session_id], from_seq
        )
        return [_stored_message(r, self.path) for page in pages for r in page]

    def _pages(self, sql: str, params: list[Any], from_seq: int = 0) -> Iterator[list[Any]]:
        """The rows of ``sql`` (whose last condition is ``seq >= ?``) in seq order, a page at a
        time: a reader converting 200k rows never holds all of them raw as well."""
        while True:
            page = self._read(f"{sql} ORDER BY seq LIMIT {READ_PAGE_ROWS}", [*params, from_seq])
            if page:
                yield page
            if len(page) < READ_PAGE_ROWS:
                return
            from_seq = int(page[-1]["seq"]) + 1

    def load_transcript(self, session_id: str) -> list[Message]:
        """The full transcript as messages (never modified by compaction)."""
        self.get_session(session_id)
        return [m.message for m in self.load_messages(session_id)]

    def message_count(self, session_id: str) -> int:
        return int(
            self._read(f"SELECT count(*) FROM messages WHERE session_id = {self.P}", (session_id,))[0][0]
        )

    def message_sizes(self, session_id: str) -> list[tuple[int, int, int, int]]:
        """(seq, turn_index, tokens, tool_result_tokens) of every message, in order (no content read)."""
        rows = self._read(
            f"SELECT seq, turn_index, tokens, tool_result_tokens FROM messages WHERE session_id = {self.P} ORDER BY seq",
            (session_id,),
        )
        return [(r[0], r[1], r[2], r[3]) for r in rows]

    def truncate_messages(self, session_id: str, from_seq: int, *, event_source: str) -> None:
        """Drop the transcript from ``from_seq`` on, with the events about those messages whose
        ``details.source`` starts with ``event_source`` (and their exact requests); other events stay."""
        with self.transaction() as conn:
            conn.execute(
                f"DELETE FROM messages WHERE session_id = {self.P} AND seq >= {self.P}",
                (session_id, from_seq),
            )
            events = conn.execute(
                f"SELECT id, details_json FROM context_events WHERE session_id = {self.P} AND message_seq >= {self.P}",
                (session_id, from_seq),
            ).fetchall()
            for event_id, details_json in events:
                details = json.loads(details_json) if details_json else {}
                if isinstance(details, dict) and str(details.get("source", "")).startswith(event_source):
                    conn.execute(f"DELETE FROM model_requests WHERE event_id = {self.P}", (event_id,))
                    conn.execute(f"DELETE FROM context_events WHERE id = {self.P}", (event_id,))

    # -- events --------------------------------------------------------------------------
    def record_event(self, session_id: str, event: ContextEvent) -> int:
        batch = self._event_batch
        if batch is not None:  # inside batched_costs: held and inserted with the others
            return self._hold_event(batch, session_id, event)
        with self.transaction() as conn:
            self._db.lock_session(conn, session_id)
            row = event_row(session_id, self._next_event_seq(conn, session_id), event, utc_now())
            try:
                cur = conn.execute(
                    f"INSERT INTO context_events ({', '.join(EVENT_COLUMNS)}) VALUES ({self._marks(len(row))})"
                    " RETURNING id",
                    row,
                )
            except self._integrity_errors as exc:
                raise NotFoundError(f"cannot record event for session {session_id!r} ({exc})") from exc
            event_id = int(cur.fetchone()[0])
            if (
                event.kind == "request" and event.usage is not None
            ):  # its cost row, once the transaction commits
                self._pending_cost(session_id, event_id)
        return event_id

    def _insert_messages(self, conn: Any, values: Sequence[Sequence[Any]]) -> None:
        """Insert ``messages`` rows (:data:`MESSAGE_COLUMNS` order): one statement, no round trip per row."""
        conn.executemany(
            f"INSERT INTO messages ({', '.join(MESSAGE_COLUMNS)}) VALUES ({self._marks(len(MESSAGE_COLUMNS))})",
            values,
        )

    def _next_event_seq(self, conn: Any, session_id: str) -> int:
        return int(
            conn.execute(
                f"SELECT coalesce(max(seq), -1) + 1 FROM context_events WHERE session_id = {self.P}",
                (session_id,),
            ).fetchone()[0]
        )

    def _insert_events(self, conn: Any, rows: Sequence[Sequence[Any]]) -> None:
        """Insert ``context_events`` rows whose ids are given (``id`` then :data:`EVENT_COLUMNS`)."""
        conn.executemany(
            f"INSERT INTO context_events (id, {', '.join(EVENT_COLUMNS)}) VALUES ({self._marks(len(EVENT_COLUMNS) + 1)})",
            rows,
        )

    def list_events(
        self, session_id: str, *, kind: str | None = None, from_seq: int = 0
    ) -> list[StoredEvent]:
        """The session's events in seq order (``from_seq``: only those from that seq on)."""
        sql = f"SELECT * FROM context_events WHERE session_id = {self.P}"
        params: list[Any] = [session_id]
        if kind:
            sql += f" AND kind = {self.P}"
            params.append(kind)
        return [
            event_from_row(r)
            for page in self._pages(sql + f" AND seq >= {self.P}", params, from_seq)
            for r in page
        ]

    # -- snapshots -----------------------------------------------------------------------
    def write_snapshot(
        self,
        session_id: str,
        messages: Sequence[Message],
        *,
        through_seq: int,
        summary: str | None,
        tokens: int,
        strategy: str,
        event_id: int | None = None,
    ) -> int:
        payload = json.dumps([message_to_json(m) for m in messages], ensure_ascii=False)
        with self.transaction() as conn:
            cur = conn.execute(
                "INSERT INTO session_snapshots (session_id, through_seq, messages_json, summary, message_count,"
                f" tokens, strategy, event_id, created_utc) VALUES ({self._marks(9)}) RETURNING id",
                redact_row(
                    (
                        session_id,
                        through_seq,
                        payload,
                        summary,
                        len(messages),
                        tokens,
                        strategy,
                        event_id,
                        utc_now(),
                    ),
                    keys=(0,),
                ),
            )
            return int(cur.fetchone()[0])

    def latest_snapshot(self, session_id: str) -> Snapshot | None:
        rows = self._read(
            f"SELECT * FROM session_snapshots WHERE session_id = {self.P} ORDER BY id DESC LIMIT 1",
            (session_id,),
        )
        return _snapshot(rows[0]) if rows else None

    def get_snapshot(self, snapshot_id: int) -> Snapshot:
        rows = self._read(f"SELECT * FROM session_snapshots WHERE id = {self.P}", (snapshot_id,))
        if not rows:
            raise NotFoundError(f"no snapshot {snapshot_id}", path=str(self.path))
        return _snapshot(rows[0])

    def link_snapshot_event(self, snapshot_id: int, event_id: int) -> None:
        """Name the event that wrote a snapshot (written together: the event id exists only after
        the snapshot, so the link is set once both rows are in, inside the caller's transaction)."""
        with self.transaction() as conn:
            cur = conn.execute(
                f"UPDATE session_snapshots SET event_id = {self.P} WHERE id = {self.P}",
                (event_id, snapshot_id),
            )
        if cur.rowcount == 0:
            raise NotFoundError(f"no snapshot {snapshot_id}", path=str(self.path))

    def list_snapshots(self, session_id: str) -> list[Snapshot]:
        rows = self._read(
            f"SELECT * FROM session_snapshots WHERE session_id = {self.P} ORDER BY id", (session_id,)
        )
        return [_snapshot(r) for r in rows]

    def load_resume_history(self, session_id: str) -> tuple[list[Message], str | None, int]:
        """History to resume with: the latest snapshot plus later transcript messages.

        Returns (messages, summary, through_seq); a never-compacted session gives the transcript.
        """
        self.get_session(session_id)
        snapshot = self.latest_snapshot(session_id)
        if snapshot is None:
            return self.load_transcript(session_id), None, -1
        later = [m.message for m in self.load_messages(session_id, from_seq=snapshot.through_seq + 1)]
        return [*snapshot.messages, *later], snapshot.summary, snapshot.through_seq

    # -- offloaded blobs -----------------------------------------------------------------
    def put_blob(
        self,
        session_id: str,
        content: bytes | str,
        *,
        tool_name: str | None = None,
        tool_use_id: str | None = None,
        tokens: int | None = None,
        preview: str | None = None,
        ref_id: str | None = None,
    ) -> BlobRecord:
        if not isinstance(content, str | bytes | bytearray | memoryview):
            raise StoreError(f"blob content must be bytes or text, got {type(content).__name__}")
        stats = blob_stats(blob_pieces(content))
        ref_id = ref_id or f"res_{uuid.uuid4().hex[:16]}"
        if preview is None:
            preview = (
                stats.head.decode("utf-8", errors="ignore")[:PREVIEW_CHARS]
                if stats.is_text
                else f"binary data, {stats.size:,} bytes"
            )
        # The content itself stays exact (read_result serves it back to the model); its description does not.
        tool_name, tool_use_id, preview = redact_row((tool_name, tool_use_id, preview))
        record = BlobRecord(
            ref_id=ref_id, session_id=session_id, tool_use_id=tool_use_id, tool_name=tool_name,
            size_bytes=stats.size, is_text=stats.is_text, line_count=stats.line_count,
            sha256=stats.sha256, preview=preview, tokens=tokens, created_utc=utc_now(),
        )  # fmt: skip
        values = (
            record.ref_id, session_id, tool_use_id, tool_name, record.size_bytes, int(record.is_text),
            record.line_count, record.sha256, preview, tokens, record.created_utc,
        )  # fmt: skip
        with self.transaction() as conn:
            try:
                self._db.insert_blob(conn, values, blob_pieces(content))
            except self._integrity_errors as exc:
                raise StoreError(
                    f"cannot store blob for session {session_id!r} ({exc})", path=str(self.path)
                ) from exc
        return record

    def get_blob(self, ref_id: str, *, with_content: bool = True) -> BlobRecord:
        columns = (
            "*"
            if with_content
            else "ref_id, session_id, tool_use_id, tool_name, size_bytes, is_text, line_count, sha256, preview, tokens, created_utc"
        )
        rows = self._read(f"SELECT {columns} FROM tool_result_blobs WHERE ref_id = {self.P}", (ref_id,))
        if not rows:
            raise NotFoundError(f"no stored result {ref_id!r}", path=str(self.path))
        return _blob(rows[0])

    def list_blobs(self, session_id: str | None = None) -> list[BlobRecord]:
        columns = "ref_id, session_id, tool_use_id, tool_name, size_bytes, is_text, line_count, sha256, preview, tokens, created_utc"
        if session_id is None:
            rows = self._read(f"SELECT {columns} FROM tool_result_blobs ORDER BY created_utc")
        else:
            rows = self._read(
                f"SELECT {columns} FROM tool_result_blobs WHERE session_id = {self.P} ORDER BY created_utc",
                (session_id,),
            )
        return [_blob(r) for r in rows]

    # -- cached summaries ----------------------------------------------------------------
    def save_context_state(
        self,
        session_id: str,
        *,
        strategy: str,
        range_start: int,
        range_end: int,
        summary: str,
        summary_tokens: int,
        summarizer: str,
        level: int = 0,
    ) -> int:
        with self.transaction() as conn:
            cur = conn.execute(
                "INSERT INTO context_states (session_id, strategy, level, range_start, range_end, summary,"
                f" summary_tokens, summarizer, created_utc) VALUES ({self._marks(9)}) RETURNING id",
                redact_row(
                    (
                        session_id,
                        strategy,
                        level,
                        range_start,
                        range_end,
                        summary,
                        summary_tokens,
                        summarizer,
                        utc_now(),
                    ),
                    keys=(0,),
                ),
            )
            return int(cur.fetchone()[0])

    def list_context_states(self, session_id: str, *, strategy: str | None = None) -> list[ContextState]:
        sql = f"SELECT * FROM context_states WHERE session_id = {self.P}"
        params: list[Any] = [session_id]
        if strategy:
            sql += f" AND strategy = {self.P}"
            params.append(strategy)
        return [ContextState(**dict(r)) for r in self._read(sql + " ORDER BY id", params)]

    def latest_context_state(self, session_id: str, *, strategy: str, level: int = 0) -> ContextState | None:
        rows = self._read(
            f"SELECT * FROM context_states WHERE session_id = {self.P} AND strategy = {self.P} AND level = {self.P} ORDER BY id DESC LIMIT 1",
            (session_id, strategy, level),
        )
        return ContextState(**dict(rows[0])) if rows else None

    def clear_context_states(self, session_id: str, *, keep_strategy: str | None = None) -> int:
        """Delete cached summaries (all, or all but those of ``keep_strategy``); returns rows deleted."""
        with self.transaction() as conn:
            if keep_strategy is None:
                cur = conn.execute(f"DELETE FROM context_states WHERE session_id = {self.P}", (session_id,))
            else:
                cur = conn.execute(
                    f"DELETE FROM context_states WHERE session_id = {self.P} AND strategy != {self.P}",
                    (session_id, keep_strategy),
                )
        return cur.rowcount

    # -- exact requests (model_requests, payload_parts) -----------------------------------
    def record_request(self, session_id: str, record: RequestRecord) -> int:
        """Store one model call exactly as sent (parts by content hash, stored once); returns its id."""
        batch = self._event_batch  # an import's write: its parts already stored are known by identity
        with self.transaction() as conn:
            self._db.lock_session(conn, session_id)
            try:
                return insert_request(
                    conn,
                    self.P,
                    session_id,
                    record,
                    utc_now(),
                    stored=batch.parts if batch is not None else None,
                )
            except self._integrity_errors as exc:
                raise NotFoundError(f"cannot record request for session {session_id!r} ({exc})") from exc

    def get_request(self, request_id: int, *, with_body: bool = True) -> StoredRequest:
        rows = self._read(f"SELECT * FROM model_requests WHERE id = {self.P}", (request_id,))
        if not rows:
            raise NotFoundError(f"no request {request_id}", path=str(self.path))
        parts = load_parts(self._reader(), self.P, request_hashes(rows[0])) if with_body else None
        return stored_request(rows[0], parts)

    def list_requests(self, session_id: str, *, with_body: bool = False) -> list[StoredRequest]:
        """A session's model calls in order; ``with_body`` rebuilds each exact body."""
        rows = self._read(
            f"SELECT * FROM model_requests WHERE session_id = {self.P} ORDER BY seq", (session_id,)
        )
        parts = (
            load_parts(self._reader(), self.P, [h for r in rows for h in request_hashes(r)])
            if with_body
            else None
        )
        return [stored_request(r, parts) for r in rows]

    # -- tools ---------------------------------------------------------------------------
    def upsert_tools(self, session_id: str, tools: Iterable[ToolRecord]) -> None:
        with self.transaction() as conn:
            conn.executemany(
                "INSERT INTO session_tools (session_id, name, category, server, tokens, definition_json)"
                f" VALUES ({self._marks(6)}) ON CONFLICT (session_id, name) DO UPDATE SET category = excluded.category,"
                " server = excluded.server, tokens = excluded.tokens, definition_json = excluded.definition_json",
                [
                    redact_row(
                        (session_id, t.name, t.category, t.server, t.tokens, json.dumps(t.definition)),
                        keys=(0,),
                    )
                    for t in tools
                ],
            )

    def list_tools(self, session_id: str) -> list[ToolRecord]:
        rows = self._read(
            f"SELECT * FROM session_tools WHERE session_id = {self.P} ORDER BY name", (session_id,)
        )
        return [
            ToolRecord(
                name=r["name"], category=r["category"], server=r["server"], tokens=r["tokens"],
                definition=loads_json(r["definition_json"], "session_tools.definition_json"),
            )
            for r in rows
        ]  # fmt: skip


# -- row mapping -----------------------------------------------------------------------------


_dumps = json_text


def _session(r: Any) -> SessionRecord:
    d = dict(r)
    d["settings"] = loads_json(d.pop("settings_json"), f"sessions.settings_json ({d['id']})") or {}
    d["metadata"] = loads_json(d.pop("metadata_json"), f"sessions.metadata_json ({d['id']})") or {}
    d["tokens_exact"] = bool(d["tokens_exact"])
    return SessionRecord(**d)


def _stored_message(r: Any, path: Any) -> StoredMessage:
    d = intern_columns(dict(r), "session_id", "kind", "tokenizer", "role")
    where = f"messages row {d['id']} ({path.name})"
    content = content_from_json(d["content_json"], where=where)
    meta = loads_json(d["meta_json"], where) if d["meta_json"] else {}
    message = Message(
        role=d["role"], content=content, id=d["message_uid"], pinned=bool(d["pinned"]), meta=meta
    )
    stored = StoredMessage(
        id=d["id"], session_id=d["session_id"], seq=d["seq"], turn_index=d["turn_index"], kind=d["kind"],
        tokens=d["tokens"], tool_result_tokens=d["tool_result_tokens"], tokenizer=d["tokenizer"],
        message=share_fields_set(message), usage=usage_from_row(d), created_utc=d["created_utc"],
    )  # fmt: skip
    if stored.usage is not None:
        share_fields_set(stored.usage)
    return share_fields_set(stored)


def _snapshot(r: Any) -> Snapshot:
    d = dict(r)
    messages = messages_from_json_text(d.pop("messages_json"), where=f"session_snapshots row {d['id']}")
    return Snapshot(messages=messages, **d)


def _blob(r: Any) -> BlobRecord:
    d = dict(r)
    d["is_text"] = bool(d["is_text"])
    if "content" in d and d["content"] is not None:
        d["content"] = bytes(d["content"])
    return BlobRecord(**d)
