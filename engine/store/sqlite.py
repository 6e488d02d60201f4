"""SessionStore: the session database in a SQLite file (WAL, busy timeout, migrations on open).

Opening a file that is not a ctxdesk database, or one from a newer schema, raises a typed
error before anything is written. Every write method is one transaction; ``transaction()``
groups several (the session manager uses it to persist a plan and its event atomically). The
reads and writes themselves are :class:`engine.store.sql_store.SqlSessionStore`'s, on the
:class:`SqliteFile` it holds: what only SQLite has (the file, its checks, WAL, BEGIN IMMEDIATE,
incremental blob I/O), which never calls the store back.
"""

from __future__ import annotations

import logging
import os
import re
import sqlite3
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Any

from engine.errors import NotADatabaseError, NotFoundError, SchemaVersionError, StoreError
from engine.store import sqlite_rollups
from engine.store.blobs import BLOB_COLUMNS
from engine.store.integrity import BACKGROUND_CHECK_BYTES, BackgroundCheck, check_integrity
from engine.store.schema import APPLICATION_ID, SCHEMA_VERSION, TABLE_NAMES, apply_migrations
from engine.store.sql_store import PREVIEW_CHARS, READ_PAGE_ROWS, SqlSessionStore, message_kind

logger = logging.getLogger(__name__)

SQLITE_MAGIC = b"SQLite format 3\x00"
BUSY_TIMEOUT_MS = 30_000

__all__ = [
    "BUSY_TIMEOUT_MS",
    "PREVIEW_CHARS",
    "READ_PAGE_ROWS",
    "SQLITE_MAGIC",
    "SessionStore",
    "SqliteFile",
    "check_database_file",
    "check_database_path",
    "is_sqlite_file",
    "message_kind",
    "settle_database",
]


def is_sqlite_file(path: Path) -> bool:
    """True when ``path`` starts with the SQLite header (a transcript file does not)."""
    with open(path, "rb") as fh:
        return fh.read(len(SQLITE_MAGIC)) == SQLITE_MAGIC


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


def use_wal(conn: sqlite3.Connection) -> None:
    """Put the database in WAL mode (once per database: a database already in it is left alone).
    Setting the mode takes an exclusive lock and does not wait out busy_timeout: a second opener of
    the database (the proxy beside its live exporter), above all of a new one still being set up,
    was told 'database is locked'; it retries until the first has set the mode, within the timeout."""
    deadline = time.monotonic() + BUSY_TIMEOUT_MS / 1000
    while str(conn.execute("PRAGMA journal_mode").fetchone()[0]).lower() != "wal":
        try:
            conn.execute("PRAGMA journal_mode = WAL")
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() > deadline:
                raise
            time.sleep(0.01)


class SqliteFile:
    """A session database file (:class:`engine.store.backend.SqlDatabase`): one connection for every
    thread (WAL lets readers run alongside), its lock held by the thread in a write transaction,
    BEGIN IMMEDIATE, incremental blob I/O."""

    P = "?"
    integrity_errors: tuple[type[BaseException], ...] = (sqlite3.IntegrityError,)
    ids_in_commit_order = True

    @staticmethod
    def json_member(column: str, key: str) -> str:
        return f"{column} -> '$.{key}'"

    def __init__(self, path: str | os.PathLike[str], *, read_only: bool = False) -> None:
        self.path = Path(path)
        self.read_only = read_only
        self._lock = threading.RLock()
        self._integrity: BackgroundCheck | None = None  # a large file's check, awaited before a write
        check_database_path(self.path, for_writing=not read_only)
        if read_only and not self.path.exists():
            raise NotFoundError("database file does not exist", path=str(self.path))
        check_database_file(self.path)
        existed = self.path.exists() and self.path.stat().st_size > 0
        try:
            if read_only:
                self.conn = _connect_read_only(self.path)
            else:
                try:
                    self.path.parent.mkdir(parents=True, exist_ok=True)
                except OSError as exc:
                    raise StoreError(
                        f"cannot create the database's folder ({exc.strerror or exc})", path=str(self.path)
                    ) from exc
                self.conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
            self.conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
            self.conn.execute("PRAGMA foreign_keys = ON")
            if not read_only:
                if existed:
                    self._check_before_writing()
                use_wal(self.conn)
                self.conn.execute("PRAGMA synchronous = NORMAL")
                apply_migrations(self.conn)
                sqlite_rollups.watch(self.conn)
            else:
                self._check_tables()
        except sqlite3.DatabaseError as exc:
            raise StoreError(f"cannot open session database ({exc})", path=str(self.path)) from exc

    def _check_before_writing(self) -> None:
        """Refuse a damaged file (engine.store.integrity): checked now when it is small, not yet in
        WAL mode (switching needs the file alone) or due a migration (a write at once); otherwise
        beside the caller's work, its verdict awaited before the first write transaction."""
        if (
            self.path.stat().st_size >= BACKGROUND_CHECK_BYTES
            and str(self.conn.execute("PRAGMA journal_mode").fetchone()[0]).lower() == "wal"
            and int(self.conn.execute("PRAGMA user_version").fetchone()[0]) >= SCHEMA_VERSION
        ):
            self._integrity = BackgroundCheck(self.path, _connect_read_only)
        else:
            check_integrity(self.conn, self.path)

    def _checked_for_writing(self) -> None:
        if self._integrity is not None:
            check, self._integrity = self._integrity, None
            try:
                check.verdict()
            except StoreError:
                self._integrity = check  # every later write is refused as well
                raise

    def _check_tables(self) -> None:
        missing = set(TABLE_NAMES) - self.table_names()
        if missing:
            raise NotADatabaseError(f"missing ctxdesk tables {sorted(missing)}", path=str(self.path))

    def table_names(self) -> set[str]:
        """The tables the file holds."""
        return {r[0] for r in self.read("SELECT name FROM sqlite_master WHERE type = 'table'")}

    def close(self) -> None:
        with self._lock:
            if self._integrity is not None:
                self._integrity.stop()
            self.conn.close()

    def write_lock(self) -> AbstractContextManager[Any]:
        """The one connection's lock (reads take it too: they wait for a write in another thread)."""
        return self._lock

    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """One write transaction (BEGIN IMMEDIATE), the connection's lock held until it ends; before
        it commits, the per-session totals of the rows it wrote (:mod:`engine.store.sqlite_rollups`)."""
        if self.read_only:
            raise StoreError("the session database was opened read-only", path=str(self.path))
        with self._lock:
            self._checked_for_writing()
            try:
                self.conn.execute("BEGIN IMMEDIATE")
            except sqlite3.Error as exc:
                raise StoreError(f"cannot start a write transaction ({exc})", path=str(self.path)) from exc
            try:
                marks = sqlite_rollups.begin(self.conn)
                yield self.conn
                sqlite_rollups.merge(self.conn, marks)
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
                    self.conn.execute("COMMIT")
                except sqlite3.Error as exc:  # e.g. "database or disk is full" surfaces at COMMIT
                    self._rollback()
                    raise StoreError(f"write failed at commit ({exc})", path=str(self.path)) from exc

    def _rollback(self) -> None:
        if self.conn.in_transaction:
            self.conn.execute("ROLLBACK")

    def read(self, sql: str, params: Sequence[Any] = (), conn: Any = None) -> list[sqlite3.Row]:
        """Rows of one query (the one connection: ``conn`` is it, inside a transaction)."""
        with self._lock:
            cur = self.conn.cursor()
            cur.row_factory = sqlite3.Row
            try:
                return cur.execute(sql, params).fetchall()
            except sqlite3.DatabaseError as exc:
                if _NOT_UTF8 in str(exc):
                    raise StoreError(_not_utf8(exc), path=str(self.path)) from exc
                raise StoreError(f"query failed ({exc})", path=str(self.path)) from exc
            except UnicodeDecodeError as exc:
                raise StoreError(_not_utf8(exc), path=str(self.path)) from exc

    def tx_rows(self, conn: Any, sql: str, params: Sequence[Any] = ()) -> list[Any]:
        cur = conn.cursor()
        cur.row_factory = sqlite3.Row
        return cur.execute(sql, params).fetchall()

    def lock_session(self, conn: Any, session_id: str) -> None:
        """Nothing to do: BEGIN IMMEDIATE already holds the file's one write lock."""

    def reserve_ids(self, conn: Any, table: str, n: int, *, after: int = 0) -> list[int]:
        """The next ``n`` ids: BEGIN IMMEDIATE holds the write lock, so none is taken before they
        are inserted; past both the highest id and the highest ever used (AUTOINCREMENT)."""
        first = conn.execute(
            "SELECT max(coalesce((SELECT seq FROM sqlite_sequence WHERE name = ?), 0),"
            f" coalesce((SELECT max(id) FROM {table}), 0)) + 1",
            (table,),
        ).fetchone()[0]
        first = max(int(first), after + 1)
        return list(range(first, first + n))

    def insert_blob(self, conn: Any, values: Sequence[Any], pieces: Iterator[bytes | memoryview]) -> None:
        """Insert ``zeroblob(size)`` (the last column: not materialized, m004), then write the
        content piece by piece through incremental blob I/O: binding the whole value would copy it."""
        size = values[BLOB_COLUMNS.index("size_bytes")]
        cur = conn.execute(
            f"INSERT INTO tool_result_blobs ({', '.join(BLOB_COLUMNS)}, content)"
            f" VALUES ({', '.join('?' * len(BLOB_COLUMNS))}, zeroblob(?))",
            (*values, size),
        )
        with conn.blobopen("tool_result_blobs", "content", int(cur.lastrowid or 0)) as blob:
            for piece in pieces:
                blob.write(piece)


class SessionStore(SqlSessionStore):
    """The session database in a SQLite file (:class:`SqliteFile`). Thread-safe for use from one
    process; WAL lets readers run alongside."""

    def __init__(self, path: str | os.PathLike[str], *, read_only: bool = False) -> None:
        super().__init__(SqliteFile(path, read_only=read_only))

    def __enter__(self) -> SessionStore:
        return self


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
