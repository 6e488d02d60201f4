"""One offloaded output read a page at a time, never whole (a 200 MB output stays 200 MB on disk).

In a SQLite file a page is read through SQLite's incremental blob I/O on a read-only connection:
``substr(content, ...)``, in SQLite or through DuckDB's scanner, loads the whole value first (a
200 MB blob: ~200-260 MB and a second per page), the blob handle reads only the pages asked for.
In a PostgreSQL store ``substring`` runs in the server. Pages are byte ranges cut after a newline
(so lines are whole), decoded as UTF-8 with replacement; search scans the bytes in chunks.
No streamlit here: the Offloaded results page renders what these functions return.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import duckdb

from dashboard.data import postgres
from dashboard.data.connection import attached_database, read, sql_string
from engine.errors import NotFoundError

__all__ = ["PAGE_BYTES", "WHOLE_LIMIT", "BlobPage", "BlobReader", "open_blob"]

#: Bytes per page (a page ends at the first newline after this many bytes).
PAGE_BYTES = 256 * 1024
#: Outputs up to this size are still read whole (download button, line view).
WHOLE_LIMIT = 8 * 1024 * 1024
#: How far past a page boundary the newline that ends the page is looked for.
_LINE_LOOKAHEAD = 16 * 1024
_SEARCH_CHUNK = 4 * 1024 * 1024

#: read(start, length) -> the bytes of that range.
_Read = Callable[[int, int], bytes]


@dataclass(frozen=True)
class BlobPage:
    """Page ``number`` of ``pages``: bytes [start, end) of ``size``, decoded."""

    number: int
    pages: int
    start: int
    end: int
    size: int
    text: str


class BlobReader:
    """Byte ranges of one stored output; ``read(start, length)`` is the only access to content."""

    def __init__(self, db: str, ref_id: str, size: int, read: _Read) -> None:
        self.db, self.ref_id, self.size = db, ref_id, size
        self._read = read

    def read(self, start: int, length: int) -> bytes:
        start = max(0, min(start, self.size))
        length = max(0, min(length, self.size - start))
        return self._read(start, length) if length else b""

    @property
    def pages(self) -> int:
        return max(1, -(-self.size // PAGE_BYTES))

    def boundary(self, index: int) -> int:
        """Where page ``index + 1`` starts: after the first newline at or past index * PAGE_BYTES
        (no newline near: the next character start)."""
        if index <= 0:
            return 0
        at = index * PAGE_BYTES
        if at >= self.size:
            return self.size
        ahead = self.read(at - 1, _LINE_LOOKAHEAD)
        newline = ahead.find(b"\n")
        if newline >= 0:
            return at + newline
        while at < self.size and (self.read(at, 1)[0] & 0xC0) == 0x80:  # not inside a character
            at += 1
        return at

    def page(self, number: int) -> BlobPage:
        number = max(1, min(number, self.pages))
        start, end = self.boundary(number - 1), self.boundary(number)
        text = self.read(start, end - start).decode("utf-8", errors="replace")
        return BlobPage(number, self.pages, start, end, self.size, text)

    def page_at(self, offset: int) -> int:
        """The page holding byte ``offset``."""
        number = min(self.pages, offset // PAGE_BYTES + 1)
        if number < self.pages and offset >= self.boundary(number):
            number += 1
        elif number > 1 and offset < self.boundary(number - 1):
            number -= 1
        return number

    def search(self, needle: str, *, limit: int = 200) -> list[tuple[int, str]]:
        """(byte offset, the line holding it) of the first ``limit`` matches, read in chunks."""
        pattern = needle.encode("utf-8")
        if not pattern:
            return []
        hits: list[tuple[int, str]] = []
        for base, chunk in self._chunks(len(pattern) - 1):
            at = chunk.find(pattern)
            while at >= 0 and len(hits) < limit:
                line_start = chunk.rfind(b"\n", 0, at) + 1
                line_end = chunk.find(b"\n", at)
                line = chunk[line_start : line_end if line_end >= 0 else len(chunk)]
                hits.append((base + at, line[:2000].decode("utf-8", errors="replace")))
                at = chunk.find(pattern, line_end + 1) if line_end >= 0 else -1
            if len(hits) >= limit:
                break
        return hits

    def _chunks(self, overlap: int) -> Iterator[tuple[int, bytes]]:
        start = 0
        while start < self.size:
            chunk = self.read(start, _SEARCH_CHUNK + overlap)
            yield start, chunk
            start += _SEARCH_CHUNK


def open_blob(con: duckdb.DuckDBPyConnection, db: str, ref_id: str) -> BlobReader:
    """A reader of one output of a loaded database (NotFoundError when it holds no such ref). ``con`` is
    the dashboard's shared connection: each read takes a cursor of its own (dashboard.data.read)."""
    _, path = read(con, attached_database, db)
    if postgres.is_database_url(path):
        return _postgres_reader(con, db, ref_id)
    return _sqlite_reader(Path(path), db, ref_id)


def _sqlite_reader(path: Path, db: str, ref_id: str) -> BlobReader:
    def connect() -> sqlite3.Connection:
        uri = path.resolve().as_uri()
        try:
            conn = sqlite3.connect(f"{uri}?mode=ro", uri=True, check_same_thread=False)
            conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
            return conn
        except sqlite3.OperationalError:  # a WAL file in a folder we cannot write
            return sqlite3.connect(f"{uri}?mode=ro&immutable=1", uri=True, check_same_thread=False)

    conn = connect()
    try:
        row = conn.execute(
            "SELECT rowid, length(content) FROM tool_result_blobs WHERE ref_id = ?", [ref_id]
        ).fetchone()
    finally:
        conn.close()
    if row is None:
        raise NotFoundError(f"no stored result {ref_id!r} in {db}")
    rowid, size = int(row[0]), int(row[1] or 0)

    def read(start: int, length: int) -> bytes:
        reader = connect()
        try:
            with reader.blobopen("tool_result_blobs", "content", rowid, readonly=True) as blob:
                blob.seek(start)
                return blob.read(length)
        finally:
            reader.close()

    return BlobReader(db, ref_id, size, read)


def _postgres_reader(con: duckdb.DuckDBPyConnection, db: str, ref_id: str) -> BlobReader:
    alias, _ = read(con, attached_database, db)
    where = f"ref_id = {sql_string(ref_id)}"

    def fetch_one(cursor: duckdb.DuckDBPyConnection, sql: str) -> tuple | None:
        return cursor.execute("SELECT * FROM postgres_query(?, ?)", [alias, sql]).fetchone()

    row = read(
        con, fetch_one, f"SELECT octet_length(content)::BIGINT AS n FROM tool_result_blobs WHERE {where}"
    )
    if row is None:
        raise NotFoundError(f"no stored result {ref_id!r} in {db}")

    def read_page(start: int, length: int) -> bytes:
        sql = (
            f"SELECT encode(substring(content from {int(start) + 1} for {int(length)}), 'hex') AS c "
            f"FROM tool_result_blobs WHERE {where}"
        )
        (hexed,) = read(con, fetch_one, sql) or ("",)
        return bytes.fromhex(hexed or "")

    return BlobReader(db, ref_id, int(row[0] or 0), read_page)
