"""PostgresSessionStore: the session database on a PostgreSQL server (psycopg 3, a connection pool).

The same tables, columns and migrations as the SQLite store: every statement is the SQLite
store's own, translated by :mod:`engine.store.dialect`, so each is written once. Writes are
transactions on a pooled connection (nested ``transaction()`` calls join the outer one, per
thread); appends and events of one session are serialised by an advisory lock, as SQLite's
write lock does. A server that goes away raises StoreError; committed rows stay, and the pool
replaces dead connections on the next call.
"""

from __future__ import annotations

import sqlite3
import threading
import zlib
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager, suppress
from typing import Any

import psycopg
from psycopg_pool import ConnectionPool, PoolTimeout

from engine.errors import NotADatabaseError, SchemaVersionError, StoreError
from engine.events import ContextEvent, ProviderUsage
from engine.messages import Message
from engine.store.dialect import PRAGMAS_TABLE_SQL
from engine.store.payloads import RequestRecord
from engine.store.pg_connection import PgConnection, rollback, row_factory
from engine.store.pg_rollups import ensure_rollups
from engine.store.records import StoredMessage
from engine.store.schema import APPLICATION_ID, SCHEMA_VERSION, TABLE_NAMES, apply_migrations
from engine.store.sqlite import SessionStore
from engine.store.urls import database_name, is_database_url, redact_url
from engine.tokens import Tokenizer

POOL_MAX_SIZE = 8
CONNECT_TIMEOUT_S = 10


class DatabaseUrl(str):
    """``store.path`` of a server store: the redacted URL or DSN, with ``.name`` the database name."""

    @property
    def name(self) -> str:
        return database_name(self)


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
            raise StoreError("not a postgresql:// URL or key=value DSN", path=redact_url(str(url)))
        self.url = url
        self.path = DatabaseUrl(redact_url(url))  # type: ignore[assignment]
        self.read_only = read_only
        self._local = threading.local()
        self._identity_tables: frozenset[str] = frozenset()
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
            rollback(conn)
            raise StoreError(f"write failed ({_first_line(exc)})", path=str(self.path)) from exc
        except BaseException:
            rollback(conn)
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

    @property  # type: ignore[override]
    def _pending_costs(self) -> dict[str, list[int]] | None:
        """Request events whose cost rows wait for the end of this thread's ``batched_costs``.

        Per thread, as transactions are: another thread's ``record_event`` meanwhile writes its
        event's row in its own transaction (a class-wide dict would hand it to this one's)."""
        return getattr(self._local, "pending_costs", None)

    @_pending_costs.setter
    def _pending_costs(self, value: dict[str, list[int]] | None) -> None:
        self._local.pending_costs = value

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


def _first_line(exc: BaseException) -> str:
    """The error's first line, any password it quotes (a DSN echoed by libpq) hidden."""
    text = str(exc).strip()
    return redact_url(text.splitlines()[0]) if text else type(exc).__name__
