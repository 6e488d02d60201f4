"""PostgresSessionStore: the session database on a PostgreSQL server (psycopg 3, a connection pool).

The same tables, columns and migrations as the SQLite store: every statement is the SQLite
store's own, translated by :mod:`engine.store.dialect`, so each is written once. Writes are
transactions on a pooled connection (nested ``transaction()`` calls join the outer one, per
thread); appends and events of one session are serialised by an advisory lock, as SQLite's
write lock does. A server that goes away raises StoreError; committed rows stay, and the pool
replaces dead connections on the next call.
"""

from __future__ import annotations

import re
import sqlite3
import threading
import zlib
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager, suppress
from typing import Any
from urllib.parse import urlsplit

import psycopg
from psycopg.rows import RowMaker
from psycopg_pool import ConnectionPool, PoolTimeout

from engine.errors import NotADatabaseError, SchemaVersionError, StoreError
from engine.events import ContextEvent, ProviderUsage
from engine.messages import Message
from engine.store.dialect import PRAGMAS_TABLE_SQL, defer_forward_references, split_script, to_postgres
from engine.store.payloads import RequestRecord
from engine.store.pg_rollups import ensure_rollups
from engine.store.records import StoredMessage
from engine.store.schema import APPLICATION_ID, SCHEMA_VERSION, TABLE_NAMES, apply_migrations
from engine.store.sqlite import SessionStore
from engine.store.urls import is_database_url, redact_url
from engine.tokens import Tokenizer

POOL_MAX_SIZE = 8
CONNECT_TIMEOUT_S = 10


class DatabaseUrl(str):
    """``store.path`` of a server store: the redacted URL, with ``.name`` the database name."""

    @property
    def name(self) -> str:
        return urlsplit(self).path.lstrip("/") or "postgres"


class _IntegrityError(sqlite3.IntegrityError):
    """A PostgreSQL integrity violation, raised where the shared store code catches SQLite's."""


class _Row(tuple):
    """A row addressable by position and by column name, like sqlite3.Row."""

    _names: tuple[str, ...] = ()

    def __getitem__(self, key: Any) -> Any:  # type: ignore[override]
        if isinstance(key, str):
            return tuple.__getitem__(self, self._names.index(key))
        return tuple.__getitem__(self, key)

    def keys(self) -> tuple[str, ...]:
        return self._names


def _row_factory(cursor: psycopg.Cursor[Any]) -> RowMaker[_Row]:
    names = tuple(c.name for c in cursor.description or ())
    row_type = type("Row", (_Row,), {"_names": names, "__slots__": ()})

    def make(values: Sequence[Any]) -> _Row:
        return row_type(values)

    return make


def _clean(value: Any) -> Any:
    # PostgreSQL text cannot hold NUL; SQLite's can. Previews and titles keep U+FFFD instead.
    if isinstance(value, str) and "\x00" in value:
        return value.replace("\x00", "\ufffd")
    return value


_REFERENCED = re.compile(r"REFERENCES\s+(\w+)", re.IGNORECASE)
_ZEROBLOB = re.compile(r"zeroblob\(\?\)", re.IGNORECASE)


class _Cursor:
    """What the shared store code reads from a cursor: rows, rowcount, lastrowid."""

    def __init__(
        self, rows: list[_Row], rowcount: int, lastrowid: int | None, description: Any = None
    ) -> None:
        self._rows = rows
        self.rowcount = rowcount
        self.lastrowid = lastrowid
        # DB-API shape, as sqlite3 gives it: (name, None, ...) per column
        self.description = [(c.name, *(None,) * 6) for c in description] if description else None

    def fetchone(self) -> _Row | None:
        return self._rows[0] if self._rows else None

    def fetchall(self) -> list[_Row]:
        return list(self._rows)

    def __iter__(self) -> Iterator[_Row]:
        return iter(self._rows)


class PgConnection:
    """A psycopg connection spoken to in SQLite's dialect (``?`` placeholders, lastrowid).

    The store's methods, the migrations and callers of ``store.transaction()`` use it as they
    use a sqlite3 connection.
    """

    def __init__(self, conn: psycopg.Connection[Any], identity_tables: frozenset[str]) -> None:
        self.raw = conn
        self._identity_tables = identity_tables
        self._pending_references: list[tuple[str, str]] = []  # (referenced table, ALTER TABLE)
        self._row_keys: list[dict[str, Any]] = []  # "rowids" of zeroblob inserts, for blobopen

    @property
    def in_transaction(self) -> bool:
        return self.raw.info.transaction_status != psycopg.pq.TransactionStatus.IDLE

    def _returning_id(self, sql: str) -> bool:
        words = sql.split(None, 3)
        return (
            len(words) > 2
            and words[0].upper() == "INSERT"
            and words[2].split("(")[0] in self._identity_tables
            and "RETURNING" not in sql.upper()
        )

    def _exists(self, table: str) -> bool:
        return self.raw.execute("SELECT to_regclass(%s) IS NOT NULL", [table]).fetchone()[0]

    def _create_table(self, statement: str) -> _Cursor:
        statement, later = defer_forward_references(statement, self._exists)
        cur = self.raw.execute(statement)
        self._pending_references += [(_REFERENCED.search(alter).group(1), alter) for alter in later]  # type: ignore[union-attr]
        ready = [(t, alter) for t, alter in self._pending_references if self._exists(t)]
        for item in ready:
            self.raw.execute(item[1])
            self._pending_references.remove(item)
        return _Cursor([], cur.rowcount, None)

    def execute(self, sql: str, params: Sequence[Any] = ()) -> _Cursor:
        params = list(params)
        zero = _ZEROBLOB.search(sql)
        if zero:  # zeroblob(n) + blobopen: the row starts empty, the blob writer fills it in
            params[sql[: zero.start()].count("?")] = b""
            sql = f"{sql[: zero.start()]}?{sql[zero.end() :]}"
        statement = to_postgres(sql, has_params=bool(params))
        if not params and statement.lstrip().upper().startswith("CREATE TABLE"):
            return self._create_table(statement)
        want_id = self._returning_id(statement)
        key_columns = (
            self._primary_key(statement.split(None, 3)[2].split("(")[0]) if zero and not want_id else []
        )
        if want_id:
            statement += " RETURNING id"
        elif key_columns:
            statement += f" RETURNING {', '.join(key_columns)}"
        try:
            cur = self.raw.execute(statement, [_clean(p) for p in params] if params else None)
            rows = cur.fetchall() if cur.description else []
        except psycopg.errors.IntegrityError as exc:
            raise _IntegrityError(str(exc).strip()) from exc
        lastrowid = int(rows[0][0]) if want_id and rows else None
        if key_columns and rows:
            self._row_keys.append(dict(zip(key_columns, rows[0], strict=True)))
            lastrowid = len(self._row_keys) - 1
            rows = []
        return _Cursor([] if want_id else rows, cur.rowcount, lastrowid, cur.description)

    def _primary_key(self, table: str) -> list[str]:
        sql = (
            "SELECT a.attname FROM pg_index i JOIN pg_attribute a ON a.attrelid = i.indrelid"
            " AND a.attnum = ANY(i.indkey) WHERE i.indrelid = to_regclass(%s) AND i.indisprimary"
        )
        return [r[0] for r in self.raw.execute(sql, [table]).fetchall()]

    def blobopen(self, table: str, column: str, row: int, **_: Any) -> _BlobWriter:
        """sqlite3's incremental blob writing, for a row inserted with ``zeroblob(n)``."""
        return _BlobWriter(self, table, column, self._row_keys[row])

    def executemany(self, sql: str, seq_of_params: Iterable[Sequence[Any]]) -> _Cursor:
        statement = to_postgres(sql, has_params=True)
        try:
            with self.raw.cursor() as cur:
                cur.executemany(statement, [[_clean(p) for p in params] for params in seq_of_params])
                return _Cursor([], cur.rowcount, None)
        except psycopg.errors.IntegrityError as exc:
            raise _IntegrityError(str(exc).strip()) from exc

    def executescript(self, script: str) -> None:
        for statement in split_script(script):
            self.execute(statement)

    def cursor(self) -> PgConnection:
        return self


class _BlobWriter:
    """Collects written pieces and stores them in one UPDATE when closed (PostgreSQL has no
    incremental blob I/O: the content is held in memory once)."""

    def __init__(self, conn: PgConnection, table: str, column: str, key: dict[str, Any]) -> None:
        self._conn, self._table, self._column, self._key = conn, table, column, key
        self._pieces: list[bytes] = []

    def write(self, data: bytes) -> None:
        self._pieces.append(bytes(data))

    def __enter__(self) -> _BlobWriter:
        return self

    def __exit__(self, exc_type: object, *_: object) -> None:
        if exc_type is not None:
            return
        where = " AND ".join(f"{k} = %s" for k in self._key)
        self._conn.raw.execute(
            f"UPDATE {self._table} SET {self._column} = %s WHERE {where}",
            [b"".join(self._pieces), *self._key.values()],
        )
        self._pieces = []


def _advisory_key(text: str) -> int:
    return zlib.crc32(text.encode()) - 2**31


class PostgresSessionStore(SessionStore):
    """The session database on PostgreSQL: ``PostgresSessionStore("postgresql://user@host/db")``.

    Same methods and rows as :class:`SessionStore`. ``read_only`` opens read-only transactions
    and refuses writes; a read-only open of a database without the ctxdesk tables raises.
    """

    def __init__(
        self,
        url: str,
        *,
        read_only: bool = False,
        max_size: int = POOL_MAX_SIZE,
        timeout: float = CONNECT_TIMEOUT_S,
    ) -> None:
        if not is_database_url(url):
            raise StoreError("not a postgresql:// URL", path=redact_url(str(url)))
        self.url = url
        self.path = DatabaseUrl(redact_url(url))  # type: ignore[assignment]
        self.read_only = read_only
        self._local = threading.local()
        self._identity_tables: frozenset[str] = frozenset()
        self._timeout = timeout
        kwargs: dict[str, Any] = {"autocommit": True, "row_factory": _row_factory}
        try:
            given = psycopg.conninfo.conninfo_to_dict(url)
        except psycopg.ProgrammingError as exc:
            raise StoreError(f"invalid database URL ({exc})", path=str(self.path)) from exc
        if read_only:  # keeps the URL's own options (a search_path, say)
            kwargs["options"] = f"{given.get('options') or ''} -c default_transaction_read_only=on".strip()
        self._pool_kwargs = kwargs | {"connect_timeout": max(1, round(timeout))}
        self._max_size = max_size
        self._pool_lock = threading.Lock()
        self._pool = self._new_pool()
        try:
            with self._connection() as conn:
                self._check_schema(conn)
                if not read_only:
                    self._migrate(conn)
                self._identity_tables = self._find_identity_tables(conn)
        except BaseException:
            self._pool.close()
            raise

    # -- connections ---------------------------------------------------------------------
    def _new_pool(self) -> ConnectionPool[Any]:
        pool: ConnectionPool[Any] = ConnectionPool(
            self.url,
            min_size=1,
            max_size=self._max_size,
            kwargs=self._pool_kwargs,
            open=False,
            name="ctxdesk-store",
        )
        try:
            pool.open(wait=True, timeout=self._timeout)
        except PoolTimeout as exc:
            pool.close()
            raise StoreError(
                f"cannot connect to the database server within {self._timeout:g} s", path=str(self.path)
            ) from exc
        return pool

    def _getconn(self) -> tuple[ConnectionPool[Any], psycopg.Connection[Any]]:
        pool = self._pool
        try:
            return pool, pool.getconn(timeout=self._timeout)
        except PoolTimeout:
            pass
        # The pool waits longer and longer between reconnection attempts (up to minutes):
        # once the server answers again, a fresh pool serves now.
        with self._pool_lock:
            if self._pool is pool:
                self._pool = self._new_pool()  # StoreError while the server is still away
                pool.close(timeout=0)
            pool = self._pool
        try:
            return pool, pool.getconn(timeout=self._timeout)
        except PoolTimeout as exc:
            raise StoreError(f"database server unreachable ({exc})", path=str(self.path)) from exc

    @contextmanager
    def _connection(self) -> Iterator[PgConnection]:
        """The thread's transaction connection, else one from the pool for this call."""
        current: PgConnection | None = getattr(self._local, "conn", None)
        if current is not None:
            yield current
            return
        pool, raw = self._getconn()
        try:
            yield PgConnection(raw, self._identity_tables)
        except psycopg.Error as exc:
            raise StoreError(f"database error ({_first_line(exc)})", path=str(self.path)) from exc
        finally:
            if raw.info.transaction_status not in (
                psycopg.pq.TransactionStatus.IDLE,
                psycopg.pq.TransactionStatus.UNKNOWN,
            ):
                with suppress(psycopg.Error):  # the pool discards a broken connection on return
                    raw.rollback()
            pool.putconn(raw)

    def _check_schema(self, conn: PgConnection) -> None:
        tables = {
            r[0]
            for r in conn.execute(
                "SELECT table_name FROM information_schema.tables WHERE table_schema = current_schema()"
            )
        }
        pragmas: dict[str, int] = {}
        if "_pragmas" in tables:
            pragmas = {r[0]: int(r[1]) for r in conn.execute("SELECT name, value FROM _pragmas")}
        app_id = pragmas.get("application_id")
        if app_id is not None and app_id != APPLICATION_ID:
            raise NotADatabaseError(f"database with another application id ({app_id})", path=str(self.path))
        if app_id is None and tables & set(TABLE_NAMES):
            raise NotADatabaseError(
                f"tables {sorted(tables & set(TABLE_NAMES))} exist but are not ctxdesk's", path=str(self.path)
            )
        version = pragmas.get("user_version", 0)
        if version > SCHEMA_VERSION:
            raise SchemaVersionError(
                f"database schema version {version} is newer than this ctxdesk supports ({SCHEMA_VERSION})",
                path=str(self.path),
                found=version,
                supported=SCHEMA_VERSION,
            )
        if self.read_only and set(TABLE_NAMES) - tables:
            raise NotADatabaseError(
                f"missing ctxdesk tables {sorted(set(TABLE_NAMES) - tables)}", path=str(self.path)
            )

    def _migrate(self, conn: PgConnection) -> None:
        # One migrator at a time across processes (the session-level lock spans every step).
        key = _advisory_key(f"ctxdesk-migrations:{APPLICATION_ID}")
        conn.execute("SELECT pg_advisory_lock(?)", (key,))
        try:
            conn.execute(PRAGMAS_TABLE_SQL)
            apply_migrations(conn)  # type: ignore[arg-type]
            ensure_rollups(conn.raw)  # the Sessions page's per-session totals, kept by the server
        finally:
            conn.execute("SELECT pg_advisory_unlock(?)", (key,))

    @staticmethod
    def _find_identity_tables(conn: PgConnection) -> frozenset[str]:
        return frozenset(
            r[0]
            for r in conn.execute(
                "SELECT table_name FROM information_schema.columns WHERE table_schema = current_schema()"
                " AND column_name = 'id' AND is_identity = 'YES'"
            )
        )

    # -- lifecycle -----------------------------------------------------------------------
    def close(self) -> None:
        self._pool.close()

    def __enter__(self) -> PostgresSessionStore:
        return self

    def _begun(self, prelude: str = "") -> tuple[ConnectionPool[Any], psycopg.Connection[Any]]:
        """A pooled connection inside BEGIN (and ``prelude``, a parameterless statement sent in the
        same round trip). One the server dropped (a restart) fails right here, where trying again
        is safe: the pool's idle connections are checked, one more is taken."""
        for attempt in range(2):
            pool, raw = self._getconn()
            try:
                raw.execute(f"BEGIN; {prelude}" if prelude else "BEGIN")
                return pool, raw
            except psycopg.Error as exc:
                pool.putconn(raw)  # a broken connection is discarded
                if attempt or not raw.broken:
                    raise StoreError(
                        f"cannot start a write transaction ({_first_line(exc)})", path=str(self.path)
                    ) from exc
                pool.check()
        raise AssertionError("unreachable")

    @contextmanager
    def transaction(self) -> Iterator[PgConnection]:  # type: ignore[override]
        """One write transaction; nested calls (in the same thread) join the outer one."""
        with self._transaction() as conn:
            yield conn

    @contextmanager
    def _transaction(self, prelude: str = "") -> Iterator[PgConnection]:
        if self.read_only:
            raise StoreError("the session database was opened read-only", path=str(self.path))
        current: PgConnection | None = getattr(self._local, "conn", None)
        if current is not None:
            if prelude:
                current.raw.execute(prelude)
            yield current
            return
        pool, raw = self._begun(prelude)
        conn = self._local.conn = PgConnection(raw, self._identity_tables)
        try:
            yield conn
        except (psycopg.Error, sqlite3.Error) as exc:
            _rollback(conn)
            raise StoreError(f"write failed ({_first_line(exc)})", path=str(self.path)) from exc
        except BaseException:
            _rollback(conn)
            raise
        else:
            try:
                raw.execute("COMMIT")
            except psycopg.Error as exc:
                raise StoreError(
                    f"the commit was not confirmed ({_first_line(exc)})", path=str(self.path)
                ) from exc
        finally:
            self._local.conn = None
            pool.putconn(raw)

    def _read(self, sql: str, params: Sequence[Any] = ()) -> list[Any]:
        current: PgConnection | None = getattr(self._local, "conn", None)
        for attempt in range(2):
            pool, raw = (None, current.raw) if current is not None else self._getconn()
            try:
                return PgConnection(raw, self._identity_tables).execute(sql, params).fetchall()
            except psycopg.Error as exc:
                # A connection the server dropped fails here first: a read is safe to try again.
                if attempt or pool is None or not raw.broken:
                    raise StoreError(f"query failed ({_first_line(exc)})", path=str(self.path)) from exc
                pool.check()
            finally:
                if pool is not None:
                    pool.putconn(raw)
        raise AssertionError("unreachable")

    @staticmethod
    def _session_lock(session_id: str) -> str:
        """Held until the transaction ends: rows numbered within a session get one writer at a time."""
        return f"SELECT pg_advisory_xact_lock({_advisory_key(f'session:{session_id}')})"

    # -- writes that number rows within a session: one writer per session at a time -------
    def append_messages(
        self,
        session_id: str,
        messages: Iterable[Message],
        *,
        tokenizer: Tokenizer,
        usages: Sequence[ProviderUsage | None] | None = None,
    ) -> list[StoredMessage]:
        with self._transaction(prelude=self._session_lock(session_id)):
            return super().append_messages(session_id, messages, tokenizer=tokenizer, usages=usages)

    def record_event(self, session_id: str, event: ContextEvent) -> int:
        with self._transaction(prelude=self._session_lock(session_id)):
            return super().record_event(session_id, event)

    def record_request(self, session_id: str, record: RequestRecord) -> int:
        with self._transaction(prelude=self._session_lock(session_id)):
            return super().record_request(session_id, record)


def _rollback(conn: PgConnection) -> None:
    with suppress(psycopg.Error):  # a lost connection: the server rolled back by itself
        conn.raw.execute("ROLLBACK")


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
