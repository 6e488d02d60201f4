"""SessionStore: the SQLite-backed session database (WAL, busy timeout, migrations on open).

Opening a file that is not a ctxdesk database, or one from a newer schema, raises a typed
error before anything is written. Every write method is one transaction; ``transaction()``
groups several (the session manager uses it to persist a plan and its event atomically).

One concept over ~400 lines: the store owns all SQL of the session database, so every query
and write lives here (row converters beside them).
"""

from __future__ import annotations

import codecs
import hashlib
import json
import logging
import os
import re
import sqlite3
import threading
import time
import uuid
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engine.errors import NotADatabaseError, NotFoundError, SchemaVersionError, StoreError
from engine.events import ComponentTokens, ContextEvent, ProviderUsage
from engine.messages import Message, ToolResultBlock, ToolUseBlock, is_tool_result_only, is_user_input
from engine.redact import redact_row
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
    content_from_json,
    event_from_row,
    intern_columns,
    loads_json,
    message_to_json,
    messages_from_json_text,
    share_fields_set,
    stored_form,
    usage_from_row,
    utc_now,
)
from engine.store.schema import APPLICATION_ID, SCHEMA_VERSION, TABLE_NAMES, apply_migrations
from engine.tokens import Tokenizer

logger = logging.getLogger(__name__)

SQLITE_MAGIC = b"SQLite format 3\x00"
BUSY_TIMEOUT_MS = 30_000
PREVIEW_CHARS = 200


def message_kind(message: Message) -> str:
    if message.role == "assistant":
        return "tool_use" if message.tool_use_ids else "assistant"
    if is_tool_result_only(message):
        return "tool_result"
    return "user_input" if is_user_input(message) else message.role


def is_sqlite_file(path: Path) -> bool:
    """True when ``path`` starts with the SQLite header (a transcript file does not)."""
    with open(path, "rb") as fh:
        return fh.read(len(SQLITE_MAGIC)) == SQLITE_MAGIC


#: Longest a write-open spends on PRAGMA quick_check before going ahead (large databases).
INTEGRITY_CHECK_BUDGET_S = 2.0


#: Rows per query when a session's messages or events are read whole.
READ_PAGE_ROWS = 5_000
#: Piece size for writing and checking large blobs without copying them whole.
BLOB_CHUNK_BYTES = 1 << 20
#: Bytes of a blob's head kept for its preview.
HEAD_BYTES = 4096


@dataclass(frozen=True)
class _BlobStats:
    size: int
    sha256: str
    is_text: bool
    line_count: int | None
    head: bytes


def _blob_pieces(content: str | bytes | bytearray | memoryview) -> Iterator[bytes | memoryview]:
    """The blob's bytes in pieces: text is encoded (UTF-8, lone surrogates kept) a piece at a time."""
    if isinstance(content, str):
        step = BLOB_CHUNK_BYTES // 4
        for start in range(0, len(content), step):
            yield content[start : start + step].encode("utf-8", "surrogatepass")
        return
    view = memoryview(content).cast("B")
    for start in range(0, len(view), BLOB_CHUNK_BYTES):
        yield view[start : start + BLOB_CHUNK_BYTES]


def _blob_stats(pieces: Iterable[bytes | memoryview]) -> _BlobStats:
    """Size, sha256, UTF-8 validity and line count in one pass, never holding the whole blob twice."""
    digest, decoder = hashlib.sha256(), codecs.getincrementaldecoder("utf-8")()
    size, newlines, is_text, head, last = 0, 0, True, b"", b""
    for piece in pieces:
        digest.update(piece)
        if is_text:
            try:
                decoder.decode(piece)
            except UnicodeDecodeError:
                is_text = False
        raw = bytes(piece[:HEAD_BYTES]) if len(head) < HEAD_BYTES else b""
        head = (head + raw)[:HEAD_BYTES]
        newlines += bytes(piece).count(b"\n") if isinstance(piece, memoryview) else piece.count(b"\n")
        size += len(piece)
        if len(piece):
            last = bytes(piece[-1:])
    if is_text:
        try:
            decoder.decode(b"", final=True)
        except UnicodeDecodeError:
            is_text = False
    lines = newlines + (0 if last == b"\n" or size == 0 else 1) if is_text else None
    return _BlobStats(size=size, sha256=digest.hexdigest(), is_text=is_text, line_count=lines, head=head)


def check_database_path(path: Path, *, for_writing: bool) -> None:
    """Raise StoreError for a path that can never hold a database file (a folder, a file as a parent)."""
    if path.is_dir():
        raise StoreError("is a directory, not a database file", path=str(path))
    if path.exists() and not path.is_file():
        raise StoreError("is not a regular file", path=str(path))
    if for_writing:
        for parent in path.parents:
            if parent.exists():
                if not parent.is_dir():
                    raise StoreError(f"{parent} is a file, not a folder", path=str(path))
                break


def _connect_read_only(path: Path, *, timeout: float = 5.0) -> sqlite3.Connection:
    """Open read-only; a WAL database in a folder we cannot write is opened immutable instead."""
    uri = path.resolve().as_uri()
    options: dict[str, Any] = {
        "uri": True,
        "isolation_level": None,
        "check_same_thread": False,
        "timeout": timeout,
    }
    conn = sqlite3.connect(f"{uri}?mode=ro", **options)
    try:
        conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
        return conn
    except sqlite3.OperationalError:
        conn.close()
        if os.access(path.parent, os.W_OK):
            raise
    # No -shm can be created beside it: nobody can be writing it through this folder either.
    return sqlite3.connect(f"{uri}?mode=ro&immutable=1", **options)


def _check_integrity(conn: sqlite3.Connection, path: Path) -> None:
    """Refuse to write into a damaged database: PRAGMA quick_check, bounded in time."""
    deadline = time.monotonic() + INTEGRITY_CHECK_BUDGET_S
    conn.set_progress_handler(lambda: 1 if time.monotonic() > deadline else 0, 10_000)
    try:
        rows = conn.execute("PRAGMA quick_check(5)").fetchall()
    except sqlite3.OperationalError as exc:
        if "interrupted" in str(exc):
            logger.info("quick_check of %s skipped after %.1f s", path, INTEGRITY_CHECK_BUDGET_S)
            return
        raise StoreError(f"database is damaged ({exc}); not writing into it", path=str(path)) from exc
    except sqlite3.DatabaseError as exc:
        raise StoreError(f"database is damaged ({exc}); not writing into it", path=str(path)) from exc
    finally:
        conn.set_progress_handler(None, 0)
    problems = [r[0] for r in rows if r[0] != "ok"]
    if problems:
        raise StoreError(
            f"database is damaged ({'; '.join(problems)[:300]}); not writing into it", path=str(path)
        )


def settle_database(path: Path) -> None:
    """VACUUM and checkpoint ``path`` so the .db file alone holds every row (no -wal or -shm to
    ship with it, e.g. the bundled sample data)."""
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute("VACUUM")
        busy, _, _ = conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
    finally:
        conn.close()
    wal = path.with_name(path.name + "-wal")
    if busy or (wal.exists() and wal.stat().st_size):
        raise StoreError("cannot checkpoint the database (another process has it open?)", path=str(path))


def check_database_file(path: Path) -> None:
    """Raise NotADatabaseError / SchemaVersionError for a file we must not touch; never writes."""
    if not path.exists() or path.stat().st_size == 0:
        return
    with open(path, "rb") as fh:
        header = fh.read(100)
    if not header.startswith(SQLITE_MAGIC):
        raise NotADatabaseError("not a SQLite database (bad header)", path=str(path))
    try:
        conn = _connect_read_only(path, timeout=BUSY_TIMEOUT_MS / 1000)
    except sqlite3.Error as exc:
        raise NotADatabaseError(f"cannot open as SQLite ({exc})", path=str(path)) from exc
    try:
        app_id = conn.execute("PRAGMA application_id").fetchone()[0]
        version = conn.execute("PRAGMA user_version").fetchone()[0]
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    except sqlite3.DatabaseError as exc:
        raise NotADatabaseError(f"unreadable SQLite file ({exc})", path=str(path)) from exc
    finally:
        conn.close()
    if app_id != APPLICATION_ID:
        if tables - {"_migrations"}:
            raise NotADatabaseError(
                f"SQLite database without the ctxdesk application id (tables: {', '.join(sorted(tables)[:5])})",
                path=str(path),
            )
        return
    if version > SCHEMA_VERSION:
        raise SchemaVersionError(
            f"database schema version {version} is newer than this ctxdesk supports ({SCHEMA_VERSION})",
            path=str(path),
            found=version,
            supported=SCHEMA_VERSION,
        )


class SessionStore:
    """The session database. Thread-safe for use from one process; WAL lets readers run alongside.

    One concept over ~300 lines: one method per read or write of each table (the whole SQL
    surface), so nothing outside the store writes SQL.
    """

    #: session id -> request event ids whose cost rows wait for the end of ``batched_costs``
    _pending_costs: dict[str, list[int]] | None = None

    def __init__(self, path: str | os.PathLike[str], *, read_only: bool = False) -> None:
        self.path = Path(path)
        self.read_only = read_only
        self._lock = threading.RLock()
        check_database_path(self.path, for_writing=not read_only)
        if read_only and not self.path.exists():
            raise NotFoundError("database file does not exist", path=str(self.path))
        check_database_file(self.path)
        existed = self.path.exists() and self.path.stat().st_size > 0
        try:
            if read_only:
                self._conn = _connect_read_only(self.path)
            else:
                try:
                    self.path.parent.mkdir(parents=True, exist_ok=True)
                except OSError as exc:
                    raise StoreError(
                        f"cannot create the database's folder ({exc.strerror or exc})", path=str(self.path)
                    ) from exc
                self._conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
            self._conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
            self._conn.execute("PRAGMA foreign_keys = ON")
            if not read_only:
                if existed:
                    _check_integrity(self._conn, self.path)
                self._conn.execute("PRAGMA journal_mode = WAL")
                self._conn.execute("PRAGMA synchronous = NORMAL")
                apply_migrations(self._conn)
            else:
                self._check_tables()
        except sqlite3.DatabaseError as exc:
            raise StoreError(f"cannot open session database ({exc})", path=str(self.path)) from exc

    def _check_tables(self) -> None:
        present = {r[0] for r in self._conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        missing = set(TABLE_NAMES) - present
        if missing:
            raise NotADatabaseError(f"missing ctxdesk tables {sorted(missing)}", path=str(self.path))

    # -- lifecycle -----------------------------------------------------------------------
    def close(self) -> None:
        with self._lock:
            self._conn.close()

    def __enter__(self) -> SessionStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """One write transaction (BEGIN IMMEDIATE); nested calls join the outer one."""
        if self.read_only:
            raise StoreError("the session database was opened read-only", path=str(self.path))
        with self._lock:
            if self._conn.in_transaction:
                yield self._conn
                return
            try:
                self._conn.execute("BEGIN IMMEDIATE")
            except sqlite3.Error as exc:
                raise StoreError(f"cannot start a write transaction ({exc})", path=str(self.path)) from exc
            try:
                yield self._conn
            except (sqlite3.Error, UnicodeDecodeError) as exc:
                self._rollback()  # SQLite may have rolled back already (disk full, I/O error)
                if isinstance(exc, UnicodeDecodeError) or _NOT_UTF8 in str(exc):  # a read met a damaged page
                    raise StoreError(_not_utf8(exc), path=str(self.path)) from exc
                raise StoreError(f"write failed ({exc})", path=str(self.path)) from exc
            except BaseException:
                self._rollback()
                raise
            else:
                try:
                    self._conn.execute("COMMIT")
                except sqlite3.Error as exc:  # e.g. "database or disk is full" surfaces at COMMIT
                    self._rollback()
                    raise StoreError(f"write failed at commit ({exc})", path=str(self.path)) from exc

    @contextmanager
    def batched_costs(self) -> Iterator[None]:
        """One write transaction in which request events' ``request_costs`` rows are written
        together at its end, one pass per session (an import's calls), instead of one by one in
        ``record_event``; the rows are the same. Nested calls join the outer one."""
        with self.transaction() as conn:
            if self._pending_costs is not None:
                yield
                return
            from engine.store.cost_writer import record_request_costs  # cost analysis loaded on first use

            self._pending_costs = {}
            try:
                yield
                for session_id, event_ids in self._pending_costs.items():
                    record_request_costs(conn, session_id, event_ids)
            finally:
                self._pending_costs = None

    def _rollback(self) -> None:
        if self._conn.in_transaction:
            self._conn.execute("ROLLBACK")

    def _read(self, sql: str, params: Sequence[Any] = ()) -> list[sqlite3.Row]:
        with self._lock:
            cur = self._conn.cursor()
            cur.row_factory = sqlite3.Row
            try:
                return cur.execute(sql, params).fetchall()
            except sqlite3.DatabaseError as exc:
                if _NOT_UTF8 in str(exc):
                    raise StoreError(_not_utf8(exc), path=str(self.path)) from exc
                raise StoreError(f"query failed ({exc})", path=str(self.path)) from exc
            except UnicodeDecodeError as exc:
                raise StoreError(_not_utf8(exc), path=str(self.path)) from exc

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
                    " VALUES (?,?,?,?,?,?,?,?,?,'active',?,?,?,?)",
                    redact_row((
                        session_id, title, model, provider, tokenizer, int(tokens_exact), source, source_path,
                        parent_session_id, _dumps(settings), _dumps(metadata), now, now,
                    )),
                )  # fmt: skip
            except sqlite3.IntegrityError as exc:
                raise StoreError(
                    f"cannot create session {session_id!r} ({exc})", path=str(self.path)
                ) from exc
        return session_id

    def update_session(self, session_id: str, **fields: Any) -> None:
        """Update status, title, model, provider, settings or metadata of a session."""
        allowed = {"status", "title", "model", "provider", "tokenizer", "settings", "metadata"}
        unknown = set(fields) - allowed
        if unknown:
            raise StoreError(f"cannot update session fields {sorted(unknown)}")
        columns = {
            ("settings_json" if k == "settings" else "metadata_json" if k == "metadata" else k): v
            for k, v in fields.items()
        }
        values = [_dumps(v) if k.endswith("_json") else v for k, v in columns.items()]
        sets = ", ".join(f"{k} = ?" for k in columns)
        with self.transaction() as conn:
            cur = conn.execute(
                f"UPDATE sessions SET {sets}{', ' if sets else ''}updated_utc = ? WHERE id = ?",
                (*redact_row(values), utc_now(), session_id),
            )
            if cur.rowcount == 0:
                raise NotFoundError(f"no session {session_id!r}", path=str(self.path))

    def get_session(self, session_id: str) -> SessionRecord:
        rows = self._read("SELECT * FROM sessions WHERE id = ?", (session_id,))
        if not rows:
            raise NotFoundError(f"no session {session_id!r}", path=str(self.path))
        return _session(rows[0])

    def list_sessions(self) -> list[SessionRecord]:
        return [_session(r) for r in self._read("SELECT * FROM sessions ORDER BY created_utc, id")]

    def delete_session(self, session_id: str) -> None:
        with self.transaction() as conn:
            conn.execute("DELETE FROM sessions WHERE id = ?", (session_id,))

    # -- transcript ----------------------------------------------------------------------
    def append_messages(
        self,
        session_id: str,
        messages: Iterable[Message],
        *,
        tokenizer: Tokenizer,
        usages: Sequence[ProviderUsage | None] | None = None,
    ) -> list[StoredMessage]:
        """Append messages to the transcript, counting their tokens; returns the stored rows."""
        messages = list(messages)
        usages = list(usages) if usages is not None else [None] * len(messages)
        if len(usages) != len(messages):
            raise StoreError("usages must match messages one to one")
        rows: list[StoredMessage] = []
        now = utc_now()
        with self.transaction() as conn:
            last = conn.execute(
                "SELECT seq, turn_index FROM messages WHERE session_id = ? ORDER BY seq DESC LIMIT 1",
                (session_id,),
            ).fetchone()
            if (
                last is None
                and not conn.execute("SELECT 1 FROM sessions WHERE id = ?", (session_id,)).fetchone()
            ):
                raise NotFoundError(f"no session {session_id!r}", path=str(self.path))
            seq, turn = (last[0] + 1, last[1]) if last else (0, 0)
            for message, usage in zip(messages, usages, strict=True):
                if seq > 0 and is_user_input(message):
                    turn += 1
                tokens = tokenizer.count_message(message)
                result_tokens = sum(
                    tokenizer.count_block(b) for b in message.blocks if isinstance(b, ToolResultBlock)
                )
                kind = message_kind(message)
                message, content_json = stored_form(message)  # counted as sent, kept without secrets
                tool_names = ",".join(b.name for b in message.blocks if isinstance(b, ToolUseBlock)) or None
                cur = conn.execute(
                    "INSERT INTO messages (session_id, seq, turn_index, role, kind, message_uid, content_json,"
                    " text_preview, tool_names, pinned, tokens, tool_result_tokens, tokenizer,"
                    " provider_input_tokens, provider_output_tokens, provider_cache_read_tokens,"
                    " provider_cache_creation_tokens, meta_json, created_utc) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                    (
                        session_id, seq, turn, message.role, kind, *redact_row((message.id,)), content_json,
                        *redact_row((message.text[:PREVIEW_CHARS], tool_names)), int(message.pinned), tokens,
                        result_tokens, tokenizer.id,
                        usage.input_tokens if usage else None, usage.output_tokens if usage else None,
                        usage.cache_read_input_tokens if usage else None,
                        usage.cache_creation_input_tokens if usage else None,
                        _dumps(message.meta) if message.meta else None, now,
                    ),
                )  # fmt: skip
                rows.append(
                    StoredMessage(
                        id=int(cur.lastrowid or 0), session_id=session_id, seq=seq, turn_index=turn, kind=kind,
                        tokens=tokens, tool_result_tokens=result_tokens, tokenizer=tokenizer.id, message=message,
                        usage=usage, created_utc=now,
                    )
                )  # fmt: skip
                seq += 1
            conn.execute("UPDATE sessions SET updated_utc = ? WHERE id = ?", (now, session_id))
        return rows

    def load_messages(self, session_id: str, *, from_seq: int = 0) -> list[StoredMessage]:
        pages = self._pages(
            "SELECT * FROM messages WHERE session_id = ? AND seq >= ?", [session_id], from_seq
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
        return int(self._read("SELECT count(*) FROM messages WHERE session_id = ?", (session_id,))[0][0])

    def message_sizes(self, session_id: str) -> list[tuple[int, int, int, int]]:
        """(seq, turn_index, tokens, tool_result_tokens) of every message, in order (no content read)."""
        rows = self._read(
            "SELECT seq, turn_index, tokens, tool_result_tokens FROM messages WHERE session_id = ? ORDER BY seq",
            (session_id,),
        )
        return [(r[0], r[1], r[2], r[3]) for r in rows]

    def truncate_messages(self, session_id: str, from_seq: int, *, event_source: str) -> None:
        """Drop the transcript from ``from_seq`` on, with the events about those messages whose
        ``details.source`` starts with ``event_source`` (and their exact requests); other events stay."""
        with self.transaction() as conn:
            conn.execute("DELETE FROM messages WHERE session_id = ? AND seq >= ?", (session_id, from_seq))
            events = conn.execute(
                "SELECT id, details_json FROM context_events WHERE session_id = ? AND message_seq >= ?",
                (session_id, from_seq),
            ).fetchall()
            for event_id, details_json in events:
                details = json.loads(details_json) if details_json else {}
                if isinstance(details, dict) and str(details.get("source", "")).startswith(event_source):
                    conn.execute("DELETE FROM model_requests WHERE event_id = ?", (event_id,))
                    conn.execute("DELETE FROM context_events WHERE id = ?", (event_id,))

    # -- events --------------------------------------------------------------------------
    def record_event(self, session_id: str, event: ContextEvent) -> int:
        c = event.components or ComponentTokens()
        u = event.usage
        with self.transaction() as conn:
            seq = conn.execute(
                "SELECT coalesce(max(seq), -1) + 1 FROM context_events WHERE session_id = ?", (session_id,)
            ).fetchone()[0]
            try:
                cur = conn.execute(
                    "INSERT INTO context_events (session_id, seq, turn_index, kind, trigger, outcome, reason, provider,"
                    " model, context_window, max_output_tokens, buffer_tokens, limit_tokens, projected_tokens,"
                    " remaining_tokens, system_tokens, skills_tokens, tools_tokens, summary_tokens,"
                    " conversation_tokens, tool_results_tokens, offloaded_bytes, provider_input_tokens,"
                    " provider_output_tokens, provider_cache_read_tokens, provider_cache_creation_tokens,"
                    " message_seq, details_json, created_utc, unattributed_tokens, components_basis)"
                    " VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                    redact_row((
                        session_id, seq, event.turn_index, event.kind, event.trigger, event.outcome, event.reason,
                        event.provider, event.model, event.context_window, event.max_output_tokens,
                        event.buffer_tokens, event.limit_tokens, event.projected_tokens, event.remaining_tokens,
                        c.system if event.components else None, c.skills if event.components else None,
                        c.tools if event.components else None, c.summary if event.components else None,
                        c.conversation if event.components else None, c.tool_results if event.components else None,
                        c.offloaded_bytes if event.components else None,
                        u.input_tokens if u else None, u.output_tokens if u else None,
                        u.cache_read_input_tokens if u else None, u.cache_creation_input_tokens if u else None,
                        event.message_seq, _dumps(event.details), utc_now(),
                        c.unattributed if event.components else None, event.components_basis,
                    )),
                )  # fmt: skip
            except sqlite3.IntegrityError as exc:
                raise NotFoundError(f"cannot record event for session {session_id!r} ({exc})") from exc
            if event.kind == "request" and u is not None:  # its cost row (request_costs), same transaction
                if self._pending_costs is not None:  # written at the end of batched_costs
                    self._pending_costs.setdefault(session_id, []).append(int(cur.lastrowid or 0))
                else:
                    from engine.store.cost_writer import (
                        record_request_cost,  # cost analysis loaded on first use
                    )

                    record_request_cost(conn, session_id, int(cur.lastrowid or 0))
        return int(cur.lastrowid or 0)

    def list_events(self, session_id: str, *, kind: str | None = None) -> list[StoredEvent]:
        sql = "SELECT * FROM context_events WHERE session_id = ?"
        params: list[Any] = [session_id]
        if kind:
            sql += " AND kind = ?"
            params.append(kind)
        return [event_from_row(r) for page in self._pages(sql + " AND seq >= ?", params) for r in page]

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
                " tokens, strategy, event_id, created_utc) VALUES (?,?,?,?,?,?,?,?,?)",
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
                    )
                ),
            )
        return int(cur.lastrowid or 0)

    def latest_snapshot(self, session_id: str) -> Snapshot | None:
        rows = self._read(
            "SELECT * FROM session_snapshots WHERE session_id = ? ORDER BY id DESC LIMIT 1", (session_id,)
        )
        return _snapshot(rows[0]) if rows else None

    def get_snapshot(self, snapshot_id: int) -> Snapshot:
        rows = self._read("SELECT * FROM session_snapshots WHERE id = ?", (snapshot_id,))
        if not rows:
            raise NotFoundError(f"no snapshot {snapshot_id}", path=str(self.path))
        return _snapshot(rows[0])

    def link_snapshot_event(self, snapshot_id: int, event_id: int) -> None:
        """Name the event that wrote a snapshot (written together: the event id exists only after
        the snapshot, so the link is set once both rows are in, inside the caller's transaction)."""
        with self.transaction() as conn:
            cur = conn.execute(
                "UPDATE session_snapshots SET event_id = ? WHERE id = ?", (event_id, snapshot_id)
            )
        if cur.rowcount == 0:
            raise NotFoundError(f"no snapshot {snapshot_id}", path=str(self.path))

    def list_snapshots(self, session_id: str) -> list[Snapshot]:
        rows = self._read("SELECT * FROM session_snapshots WHERE session_id = ? ORDER BY id", (session_id,))
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
        stats = _blob_stats(_blob_pieces(content))
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
        with self.transaction() as conn:
            try:
                cur = conn.execute(
                    "INSERT INTO tool_result_blobs (ref_id, session_id, tool_use_id, tool_name, size_bytes, is_text,"
                    " line_count, sha256, preview, content, tokens, created_utc)"
                    " VALUES (?,?,?,?,?,?,?,?,?,zeroblob(?),?,?)",
                    (
                        record.ref_id, session_id, tool_use_id, tool_name, record.size_bytes, int(record.is_text),
                        record.line_count, record.sha256, preview, stats.size, tokens, record.created_utc,
                    ),
                )  # fmt: skip
            except sqlite3.IntegrityError as exc:
                raise StoreError(
                    f"cannot store blob for session {session_id!r} ({exc})", path=str(self.path)
                ) from exc
            # Written in pieces through incremental blob I/O: binding the whole value would copy it.
            with conn.blobopen("tool_result_blobs", "content", int(cur.lastrowid or 0)) as blob:
                for piece in _blob_pieces(content):
                    blob.write(piece)
        return record

    def get_blob(self, ref_id: str, *, with_content: bool = True) -> BlobRecord:
        columns = (
            "*"
            if with_content
            else "ref_id, session_id, tool_use_id, tool_name, size_bytes, is_text, line_count, sha256, preview, tokens, created_utc"
        )
        rows = self._read(f"SELECT {columns} FROM tool_result_blobs WHERE ref_id = ?", (ref_id,))
        if not rows:
            raise NotFoundError(f"no stored result {ref_id!r}", path=str(self.path))
        return _blob(rows[0])

    def list_blobs(self, session_id: str | None = None) -> list[BlobRecord]:
        columns = "ref_id, session_id, tool_use_id, tool_name, size_bytes, is_text, line_count, sha256, preview, tokens, created_utc"
        if session_id is None:
            rows = self._read(f"SELECT {columns} FROM tool_result_blobs ORDER BY created_utc")
        else:
            rows = self._read(
                f"SELECT {columns} FROM tool_result_blobs WHERE session_id = ? ORDER BY created_utc",
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
                " summary_tokens, summarizer, created_utc) VALUES (?,?,?,?,?,?,?,?,?)",
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
                    )
                ),
            )
        return int(cur.lastrowid or 0)

    def list_context_states(self, session_id: str, *, strategy: str | None = None) -> list[ContextState]:
        sql = "SELECT * FROM context_states WHERE session_id = ?"
        params: list[Any] = [session_id]
        if strategy:
            sql += " AND strategy = ?"
            params.append(strategy)
        return [ContextState(**dict(r)) for r in self._read(sql + " ORDER BY id", params)]

    def latest_context_state(self, session_id: str, *, strategy: str, level: int = 0) -> ContextState | None:
        rows = self._read(
            "SELECT * FROM context_states WHERE session_id = ? AND strategy = ? AND level = ? ORDER BY id DESC LIMIT 1",
            (session_id, strategy, level),
        )
        return ContextState(**dict(rows[0])) if rows else None

    def clear_context_states(self, session_id: str, *, keep_strategy: str | None = None) -> int:
        """Delete cached summaries (all, or all but those of ``keep_strategy``); returns rows deleted."""
        with self.transaction() as conn:
            if keep_strategy is None:
                cur = conn.execute("DELETE FROM context_states WHERE session_id = ?", (session_id,))
            else:
                cur = conn.execute(
                    "DELETE FROM context_states WHERE session_id = ? AND strategy != ?",
                    (session_id, keep_strategy),
                )
        return cur.rowcount

    # -- exact requests (model_requests, payload_parts) -----------------------------------
    def record_request(self, session_id: str, record: RequestRecord) -> int:
        """Store one model call exactly as sent (parts by content hash, stored once); returns its id."""
        with self.transaction() as conn:
            return insert_request(conn, session_id, record, utc_now())

    def get_request(self, request_id: int, *, with_body: bool = True) -> StoredRequest:
        rows = self._read("SELECT * FROM model_requests WHERE id = ?", (request_id,))
        if not rows:
            raise NotFoundError(f"no request {request_id}", path=str(self.path))
        parts = load_parts(self._read, request_hashes(rows[0])) if with_body else None
        return stored_request(rows[0], parts)

    def list_requests(self, session_id: str, *, with_body: bool = False) -> list[StoredRequest]:
        """A session's model calls in order; ``with_body`` rebuilds each exact body."""
        rows = self._read("SELECT * FROM model_requests WHERE session_id = ? ORDER BY seq", (session_id,))
        parts = load_parts(self._read, [h for r in rows for h in request_hashes(r)]) if with_body else None
        return [stored_request(r, parts) for r in rows]

    # -- tools ---------------------------------------------------------------------------
    def upsert_tools(self, session_id: str, tools: Iterable[ToolRecord]) -> None:
        with self.transaction() as conn:
            conn.executemany(
                "INSERT INTO session_tools (session_id, name, category, server, tokens, definition_json)"
                " VALUES (?,?,?,?,?,?) ON CONFLICT (session_id, name) DO UPDATE SET category = excluded.category,"
                " server = excluded.server, tokens = excluded.tokens, definition_json = excluded.definition_json",
                [
                    redact_row((session_id, t.name, t.category, t.server, t.tokens, json.dumps(t.definition)))
                    for t in tools
                ],
            )

    def list_tools(self, session_id: str) -> list[ToolRecord]:
        rows = self._read("SELECT * FROM session_tools WHERE session_id = ? ORDER BY name", (session_id,))
        return [
            ToolRecord(
                name=r["name"], category=r["category"], server=r["server"], tokens=r["tokens"],
                definition=loads_json(r["definition_json"], "session_tools.definition_json"),
            )
            for r in rows
        ]  # fmt: skip


# -- row mapping -----------------------------------------------------------------------------


#: How sqlite3 says a text value is not UTF-8 (it quotes the whole value after it).
_NOT_UTF8 = "Could not decode to UTF-8"
_COLUMN = re.compile(r"column '(\w+)'")


def _not_utf8(exc: BaseException) -> str:
    """What a read of text that is not UTF-8 means: SQLite wrote it as UTF-8, so a page is damaged.
    (The value itself is not quoted: it is garbage, and may be megabytes long.)"""
    column = _COLUMN.search(str(exc)) if not isinstance(exc, UnicodeDecodeError) else None
    where = f" in column {column.group(1)}" if column else ""
    return (
        f"the database holds text that is not UTF-8{where}: its pages are damaged "
        "(check it with `sqlite3 FILE 'PRAGMA integrity_check'`)"
    )


def _dumps(value: Any) -> str | None:
    return None if value is None else json.dumps(value, ensure_ascii=False, default=str)


def _session(r: sqlite3.Row) -> SessionRecord:
    d = dict(r)
    d["settings"] = loads_json(d.pop("settings_json"), f"sessions.settings_json ({d['id']})") or {}
    d["metadata"] = loads_json(d.pop("metadata_json"), f"sessions.metadata_json ({d['id']})") or {}
    d["tokens_exact"] = bool(d["tokens_exact"])
    return SessionRecord(**d)


def _stored_message(r: sqlite3.Row, path: Path) -> StoredMessage:
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


def _snapshot(r: sqlite3.Row) -> Snapshot:
    d = dict(r)
    messages = messages_from_json_text(d.pop("messages_json"), where=f"session_snapshots row {d['id']}")
    return Snapshot(messages=messages, **d)


def _blob(r: sqlite3.Row) -> BlobRecord:
    d = dict(r)
    d["is_text"] = bool(d["is_text"])
    if "content" in d and d["content"] is not None:
        d["content"] = bytes(d["content"])
    return BlobRecord(**d)
