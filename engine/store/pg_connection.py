"""A psycopg connection spoken to in SQLite's dialect, for the PostgreSQL store.

:class:`PgConnection` gives the shared store code what it uses from a sqlite3 connection
(``execute`` with ``?`` placeholders and ``lastrowid``, rows by name, ``executemany``,
``executescript``, ``blobopen`` after ``zeroblob``); statements go through
:func:`engine.store.dialect.to_postgres`. Integrity violations surface as sqlite3's.
"""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Iterable, Iterator, Sequence
from contextlib import suppress
from typing import Any

import psycopg
from psycopg.rows import RowMaker

from engine.store.dialect import defer_forward_references, split_script, to_postgres


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


def row_factory(cursor: psycopg.Cursor[Any]) -> RowMaker[_Row]:
    """psycopg rows addressable by position and by column name, like sqlite3.Row."""
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


def rollback(conn: PgConnection) -> None:
    """Roll back the connection's transaction, if the server still has one."""
    with suppress(psycopg.Error):  # a lost connection: the server rolled back by itself
        conn.raw.execute("ROLLBACK")
