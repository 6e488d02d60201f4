"""Copy SQLite session databases into another store (a team's PostgreSQL server, usually).

Session by session, each in one transaction on the destination: a session already there is
left alone, so running the copy again is a no-op and an interrupted run resumes where it
stopped. Tables are found from the source's schema (every table with a ``session_id``,
parents before children by their foreign keys), so tables added by later migrations are
copied too. Row ids are renumbered by the destination; references to them are rewritten.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from engine.errors import NotADatabaseError, StoreError
from engine.redact import redact_row
from engine.store.backend import SessionStoreBackend
from engine.store.sqlite import check_database_file

#: on_progress(done, total, label): called after each session.
Progress = Callable[[int, int, str], None]
SKIP_TABLES = frozenset({"_migrations", "sqlite_sequence"})


@dataclass
class CopyReport:
    """What one source database gave: sessions copied, sessions already present, rows written."""

    source: str
    copied: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    rows: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class _Table:
    name: str
    columns: tuple[str, ...]
    has_id: bool  # an INTEGER PRIMARY KEY the destination renumbers
    references: dict[str, str]  # column -> table whose renumbered id it holds


def _source(path: Path) -> sqlite3.Connection:
    check_database_file(path)
    if not path.is_file():
        raise StoreError("no such database file", path=str(path))
    try:
        conn = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)
        conn.execute("SELECT count(*) FROM sessions").fetchone()
    except sqlite3.Error as exc:
        raise NotADatabaseError(f"cannot read as a session database ({exc})", path=str(path)) from exc
    return conn


def _tables(conn: sqlite3.Connection) -> tuple[list[_Table], list[_Table]]:
    """(tables owned by a session, in foreign-key order; tables shared by sessions)."""
    names = [
        r[0]
        for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")
        if r[0] not in SKIP_TABLES and r[0] != "sessions" and not r[0].startswith("sqlite_")
    ]
    tables: dict[str, _Table] = {}
    for name in names:
        info = conn.execute(f"PRAGMA table_info({name})").fetchall()
        columns = tuple(r[1] for r in info)
        has_id = any(r[1] == "id" and r[5] == 1 and r[2].upper() == "INTEGER" for r in info)
        refs = {
            r[3]: r[2]
            for r in conn.execute(f"PRAGMA foreign_key_list({name})").fetchall()
            if r[2] != "sessions" and r[4] == "id"
        }
        tables[name] = _Table(name, columns, has_id, refs)
    ordered: list[_Table] = []

    def visit(table: _Table, path: tuple[str, ...] = ()) -> None:
        if table in ordered or table.name in path:
            return
        for target in table.references.values():
            if target in tables:
                visit(tables[target], (*path, table.name))
        ordered.append(table)

    for table in tables.values():
        visit(table)
    owned = [t for t in ordered if "session_id" in t.columns]
    shared = [t for t in ordered if "session_id" not in t.columns]
    return owned, shared


def _session_order(conn: sqlite3.Connection) -> list[tuple[str, str | None]]:
    """Session ids with parents before their sub-agent threads."""
    rows = conn.execute("SELECT id, parent_session_id FROM sessions ORDER BY created_utc, id").fetchall()
    known = {r[0] for r in rows}
    ordered: list[tuple[str, str | None]] = []
    done: set[str] = set()
    pending = list(rows)
    while pending:
        later = []
        for sid, parent in pending:
            if parent is None or parent in done or parent not in known:
                ordered.append((sid, parent))
                done.add(sid)
            else:
                later.append((sid, parent))
        if len(later) == len(pending):  # a cycle: cannot happen with real data; keep them all
            ordered += later
            break
        pending = later
    return ordered


def _exists(dst_conn: Any, session_id: str) -> bool:
    return dst_conn.execute("SELECT 1 FROM sessions WHERE id = ?", (session_id,)).fetchone() is not None


def _insert_sql(table: str, columns: Sequence[str], *, ignore: bool = False) -> str:
    verb = "INSERT OR IGNORE INTO" if ignore else "INSERT INTO"
    return f"{verb} {table} ({', '.join(columns)}) VALUES ({', '.join('?' * len(columns))})"


def _copy_session(
    src: sqlite3.Connection,
    dst_conn: Any,
    session_id: str,
    owned: list[_Table],
    dst_columns: dict[str, set[str]],
    rows: dict[str, int],
) -> None:
    session_columns = [c for c in _columns(src, "sessions") if c in dst_columns["sessions"]]
    values = src.execute(
        f"SELECT {', '.join(session_columns)} FROM sessions WHERE id = ?", (session_id,)
    ).fetchone()
    dst_conn.execute(_insert_sql("sessions", session_columns), redact_row(values))
    rows["sessions"] = rows.get("sessions", 0) + 1
    new_ids: dict[str, dict[int, int]] = {}
    for table in owned:
        if table.name not in dst_columns:
            raise StoreError(f"the destination has no table {table.name} (an older ctxdesk schema?)")
        columns = [c for c in table.columns if c in dst_columns[table.name]]
        cur = src.execute(
            f"SELECT {', '.join(columns)} FROM {table.name} WHERE session_id = ? ORDER BY rowid",
            (session_id,),
        )
        keep = [c for c in columns if not (table.has_id and c == "id")]
        sql = _insert_sql(table.name, keep)
        id_at = columns.index("id") if table.has_id else None
        ref_at = {columns.index(c): target for c, target in table.references.items() if c in columns}
        referenced = any(table.name in t.references.values() for t in owned)
        batch: list[list[Any]] = []
        for row in cur:
            out = list(row)
            for i, target in ref_at.items():
                if out[i] is not None:
                    out[i] = new_ids.get(target, {}).get(out[i])
            values = redact_row(v for i, v in enumerate(out) if i != id_at)
            if id_at is not None and referenced:
                new_ids.setdefault(table.name, {})[row[id_at]] = dst_conn.execute(sql, values).lastrowid
            else:
                batch.append(values)
            rows[table.name] = rows.get(table.name, 0) + 1
        if batch:
            dst_conn.executemany(sql, batch)


def _columns(src: sqlite3.Connection, table: str) -> list[str]:
    return [r[1] for r in src.execute(f"PRAGMA table_info({table})").fetchall()]


def _destination_columns(dst: SessionStoreBackend, tables: Sequence[str]) -> dict[str, set[str]]:
    """table -> columns, for the tables the destination has (one probe each)."""
    out: dict[str, set[str]] = {}
    for table in tables:
        try:
            with dst.transaction() as conn:
                out[table] = {d[0] for d in conn.execute(f"SELECT * FROM {table} LIMIT 0").description}
        except StoreError:
            continue  # absent: a session that has rows there says so when it is copied
    return out


def copy_database(
    source: str | Path, dst: SessionStoreBackend, *, on_progress: Progress | None = None
) -> CopyReport:
    """Copy every session of the SQLite file ``source`` into ``dst`` (sessions already there are skipped)."""
    path = Path(source)
    src = _source(path)
    report = CopyReport(source=str(path))
    try:
        owned, shared = _tables(src)
        dst_columns = _destination_columns(dst, ["sessions", *(t.name for t in (*owned, *shared))])
        for table in shared:  # content-addressed parts (payload_parts) first, by key, once
            columns = [c for c in table.columns if c in dst_columns.get(table.name, set())]
            cur = src.execute(f"SELECT {', '.join(columns)} FROM {table.name}")
            while chunk := cur.fetchmany(1000):
                with dst.transaction() as conn:
                    conn.executemany(_insert_sql(table.name, columns, ignore=True), map(redact_row, chunk))
        sessions = _session_order(src)
        for done, (session_id, _) in enumerate(sessions, start=1):
            with dst.transaction() as conn:
                if _exists(conn, session_id):
                    report.skipped.append(session_id)
                else:
                    _copy_session(src, conn, session_id, owned, dst_columns, report.rows)
                    report.copied.append(session_id)
            if on_progress:
                on_progress(done, len(sessions), session_id)
    except sqlite3.Error as exc:
        raise StoreError(f"cannot read the source database ({exc})", path=str(path)) from exc
    finally:
        src.close()
    return report
