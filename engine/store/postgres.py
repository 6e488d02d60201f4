"""PostgresSessionStore: the session database on a PostgreSQL server (psycopg 3, a connection pool).

The same tables, columns and rows as the SQLite store, and the same reads and writes
(:class:`engine.store.sql_store.SqlSessionStore`, portable SQL with psycopg's ``%s``); what is
PostgreSQL's own lives here (:class:`PgServer`, which the store holds) and in
:mod:`engine.store.pg_schema` (its DDL and migrations): the pool, transactions on a pooled connection,
an advisory lock serialising the rows a session numbers (as SQLite's write lock does), bytea blobs,
NUL-free text. A server that goes away raises StoreError; committed rows stay, and the pool replaces
dead connections on the next call.
"""

from __future__ import annotations

import threading
import zlib
from collections.abc import Iterable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext, suppress
from typing import Any

import psycopg
from psycopg.rows import RowMaker
from psycopg_pool import ConnectionPool, PoolTimeout

from engine.errors import NotADatabaseError, SchemaVersionError, StoreError
from engine.store.blobs import BLOB_COLUMNS
from engine.store.pg_rollups import ensure_rollups
from engine.store.pg_schema import apply_pg_migrations
from engine.store.schema import APPLICATION_ID, SCHEMA_VERSION, TABLE_NAMES
from engine.store.sql_store import SqlSessionStore
from engine.store.urls import database_name, is_database_url, redact_url

POOL_MAX_SIZE = 8
CONNECT_TIMEOUT_S = 10


class DatabaseUrl(str):
    """``store.path`` of a server store: the redacted URL or DSN, with ``.name`` the database name."""

    @property
    def name(self) -> str:
        return database_name(self)


def _advisory_key(text: str) -> int:
    return zlib.crc32(text.encode()) - 2**31


class _Row(tuple):
    """A row addressable by position and by column name (as the shared store code reads rows)."""

    _names: tuple[str, ...] = ()

    def __getitem__(self, key: Any) -> Any:  # type: ignore[override]
        if isinstance(key, str):
            return tuple.__getitem__(self, self._names.index(key))
        return tuple.__getitem__(self, key)

    def keys(self) -> tuple[str, ...]:
        return self._names


def row_factory(cursor: psycopg.Cursor[Any]) -> RowMaker[_Row]:
    """psycopg rows addressable by position and by column name."""
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


class PgTransaction:
    """A transaction's psycopg connection as the store code uses it: ``execute`` and ``executemany``
    of the statements as written (``%s`` parameters), text made NUL-free."""

    def __init__(self, raw: psycopg.Connection[Any]) -> None:
        self.raw = raw

    def execute(self, sql: str, params: Sequence[Any] = ()) -> psycopg.Cursor[Any]:
        return self.raw.execute(sql, [_clean(p) for p in params] if params else None)

    def executemany(self, sql: str, seq_of_params: Iterable[Sequence[Any]]) -> psycopg.Cursor[Any]:
        cur = self.raw.cursor()
        cur.executemany(sql, [[_clean(p) for p in params] for params in seq_of_params])
        return cur


class PgServer:
    """A session database on a PostgreSQL server (:class:`engine.store.backend.SqlDatabase`): a pool of
    connections, transactions on one of them, advisory locks, bytea blobs."""

    P = "%s"
    integrity_errors: tuple[type[BaseException], ...] = (psycopg.errors.IntegrityError,)
    ids_in_commit_order = False

    @staticmethod
    def json_member(column: str, key: str) -> str:
        return f"(({column})::jsonb -> '{key}')::text"

    def __init__(self, url: str, read_only: bool, max_size: int, timeout: float) -> None:
        """Connect (``timeout`` seconds at most), check the schema and migrate it unless ``read_only``;
        as :class:`PostgresSessionStore` opens it."""
        if not is_database_url(url):
            raise StoreError("not a postgresql:// URL or key=value DSN", path=redact_url(str(url)))
        self.url = url
        self.path = DatabaseUrl(redact_url(url))
        self.read_only = read_only
        self._timeout = timeout
        kwargs: dict[str, Any] = {"autocommit": True, "row_factory": row_factory}
        try:
            given = psycopg.conninfo.conninfo_to_dict(url)
        except psycopg.ProgrammingError as exc:
            raise StoreError(f"invalid database URL ({redact_url(str(exc))})", path=str(self.path)) from exc
        if read_only:  # keeps the URL's own options (a search_path, say)
            kwargs["options"] = f"{given.get('options') or ''} -c default_transaction_read_only=on".strip()
        self._pool_kwargs = kwargs | {"connect_timeout": max(1, round(timeout))}
        self._max_size = max_size
        self._pool_lock = threading.Lock()
        self._probe()
        self._pool = self._new_pool()
        try:
            with self._connection() as conn:
                self._check_schema(conn)
                if not read_only:
                    self._migrate(conn)
        except BaseException:
            self._pool.close()
            raise

    # -- connections ---------------------------------------------------------------------
    def _probe(self) -> None:
        """One direct connection first: a refused or failed login is said at once, with the
        server's reason, instead of after the pool's retries have used up the whole timeout."""
        try:
            psycopg.connect(self.url, **self._pool_kwargs).close()
        except psycopg.OperationalError as exc:
            raise StoreError(
                f"cannot connect to the database server ({redact_url(_first_line(exc))})", path=str(self.path)
            ) from exc

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
    def _connection(self) -> Iterator[psycopg.Connection[Any]]:
        """A connection from the pool for this call."""
        pool, raw = self._getconn()
        try:
            yield raw
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

    def _check_schema(self, conn: psycopg.Connection[Any]) -> None:
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

    def _migrate(self, conn: psycopg.Connection[Any]) -> None:
        # One migrator at a time across processes (the session-level lock spans every step).
        key = _advisory_key(f"ctxdesk-migrations:{APPLICATION_ID}")
        conn.execute("SELECT pg_advisory_lock(%s)", (key,))
        try:
            apply_pg_migrations(conn)
            ensure_rollups(conn)  # the Sessions page's per-session totals, kept by the server
        finally:
            conn.execute("SELECT pg_advisory_unlock(%s)", (key,))

    def table_names(self) -> set[str]:
        """The tables of the store's schema."""
        sql = "SELECT table_name FROM information_schema.tables WHERE table_schema = current_schema()"
        return {r[0] for r in self.read(sql)}

    def close(self) -> None:
        self._pool.close()

    def _begun(self) -> tuple[ConnectionPool[Any], psycopg.Connection[Any]]:
        """A pooled connection inside BEGIN. One the server dropped (a restart) fails right here,
        where trying again is safe: the pool's idle connections are checked, one more is taken."""
        for attempt in range(2):
            pool, raw = self._getconn()
            try:
                raw.execute("BEGIN")
                return pool, raw
            except psycopg.Error as exc:
                pool.putconn(raw)  # a broken connection is discarded
                if attempt or not raw.broken:
                    raise StoreError(
                        f"cannot start a write transaction ({_first_line(exc)})", path=str(self.path)
                    ) from exc
                pool.check()
        raise AssertionError("unreachable")

    def write_lock(self) -> AbstractContextManager[None]:
        """Nothing held in this process: each transaction has a connection of its own, and the rows a
        session numbers are serialised by the server (:meth:`lock_session`)."""
        return nullcontext()

    @contextmanager
    def transaction(self) -> Iterator[PgTransaction]:
        """One write transaction on a pooled connection."""
        if self.read_only:
            raise StoreError("the session database was opened read-only", path=str(self.path))
        pool, raw = self._begun()
        try:
            yield PgTransaction(raw)
        except psycopg.Error as exc:
            self._rollback(raw)
            raise StoreError(f"write failed ({_first_line(exc)})", path=str(self.path)) from exc
        except BaseException:
            self._rollback(raw)
            raise
        else:
            try:
                raw.execute("COMMIT")
            except psycopg.Error as exc:
                raise StoreError(
                    f"the commit was not confirmed ({_first_line(exc)})", path=str(self.path)
                ) from exc
        finally:
            pool.putconn(raw)

    def _rollback(self, raw: psycopg.Connection[Any]) -> None:
        with suppress(psycopg.Error):  # a lost connection: the server rolled back by itself
            raw.execute("ROLLBACK")

    def read(self, sql: str, params: Sequence[Any] = (), conn: PgTransaction | None = None) -> list[Any]:
        """Rows of one query: on ``conn``, the thread's open transaction, else on a pooled connection."""
        for attempt in range(2):
            pool, raw = (None, conn.raw) if conn is not None else self._getconn()
            try:
                return raw.execute(sql, [_clean(p) for p in params] if params else None).fetchall()
            except psycopg.Error as exc:
                # A connection the server dropped fails here first: a read is safe to try again.
                if attempt or pool is None or not raw.broken:
                    raise StoreError(f"query failed ({_first_line(exc)})", path=str(self.path)) from exc
                pool.check()
            finally:
                if pool is not None:
                    pool.putconn(raw)
        raise AssertionError("unreachable")

    def lock_session(self, conn: Any, session_id: str) -> None:
        """Held until the transaction ends: rows numbered within a session get one writer at a time."""
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (_advisory_key(f"session:{session_id}"),))

    def reserve_ids(self, conn: Any, table: str, n: int, *, after: int = 0) -> list[int]:
        """``n`` ids drawn from the column's identity sequence (others may draw between them; each
        is past ``after``, as a sequence only grows)."""
        rows = conn.execute(
            "SELECT nextval(pg_get_serial_sequence(%s, 'id')) FROM generate_series(1, %s)", (table, n)
        ).fetchall()
        return [int(r[0]) for r in rows]

    def tx_rows(self, conn: Any, sql: str, params: Sequence[Any] = ()) -> list[Any]:
        """Rows by index and by column name of a query inside a transaction (``conn``)."""
        return list(conn.execute(sql, params).fetchall())

    def insert_blob(self, conn: Any, values: Sequence[Any], pieces: Iterator[bytes | memoryview]) -> None:
        """One bytea parameter (PostgreSQL has no incremental blob I/O: the content is held once more)."""
        conn.execute(
            f"INSERT INTO tool_result_blobs ({', '.join(BLOB_COLUMNS)}, content)"
            f" VALUES ({', '.join(['%s'] * (len(BLOB_COLUMNS) + 1))})",
            (*values, b"".join(bytes(piece) for piece in pieces)),
        )


class PostgresSessionStore(SqlSessionStore):
    """The session database on PostgreSQL: ``PostgresSessionStore("postgresql://user@host/db")``.

    Same methods and rows as :class:`engine.store.SessionStore`, on the :class:`PgServer` it holds.
    ``read_only`` opens read-only transactions and refuses writes; a read-only open of a database
    without the ctxdesk tables raises.
    """

    def __init__(
        self,
        url: str,
        *,
        read_only: bool = False,
        max_size: int = POOL_MAX_SIZE,
        timeout: float = CONNECT_TIMEOUT_S,
    ) -> None:
        super().__init__(PgServer(url, read_only, max_size, timeout))
        self.url = url

    def __enter__(self) -> PostgresSessionStore:
        return self


def _first_line(exc: BaseException) -> str:
    """The error's first line, any password it quotes (a DSN echoed by libpq) hidden."""
    text = str(exc).strip()
    return redact_url(text.splitlines()[0]) if text else type(exc).__name__
