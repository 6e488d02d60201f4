"""Copy SQLite session databases into another store (a team's PostgreSQL server, usually).

Session by session, each in one transaction on the destination, copying what the destination
does not hold yet: a new session whole, a session copied before only the rows the source gained
since (by seq; by key or content where a table has no seq). Running the copy again is a no-op,
an interrupted run resumes where it stopped, and a rerun after the source grew brings the copy up
to date. Tables are found from the source's schema (every table with a ``session_id``, parents
before children by their foreign keys), so tables added by later migrations are copied too. Row ids
are renumbered by the destination; references to them are rewritten. A session whose copied rows
the source has since rewritten is left as it is and reported (``CopyReport.diverged``).
"""

from __future__ import annotations

import hashlib
import sqlite3
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from engine.errors import NotADatabaseError, StoreError
from engine.redact import redact_row
from engine.store.pg_rollups import ROLLUP_TABLE
from engine.store.sql_store import SqlSessionStore
from engine.store.sqlite import check_database_file

#: on_progress(done, total, label): called after each session.
Progress = Callable[[int, int, str], None]
#: Not copied: the migrations' own, and derived totals (the destination keeps its own).
SKIP_TABLES = frozenset({"_migrations", "sqlite_sequence", ROLLUP_TABLE})


@dataclass
class CopyReport:
    """What one source database gave: sessions copied, sessions already present, rows written."""

    source: str
    copied: list[str] = field(default_factory=list)
    #: sessions already in the destination that got the rows the source gained since
    grown: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    #: (session id, why) of sessions whose copied rows the source has since rewritten: left as they are
    diverged: list[tuple[str, str]] = field(default_factory=list)
    rows: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class _Table:
    name: str
    columns: tuple[str, ...]
    has_id: bool  # an INTEGER PRIMARY KEY the destination renumbers
    references: dict[str, str]  # column -> table whose renumbered id it holds
    key: tuple[str, ...] = ()  # primary key columns


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
        key = tuple(r[1] for r in sorted(info, key=lambda r: r[5]) if r[5] > 0)
        tables[name] = _Table(name, columns, has_id, refs, key)
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


def _exists(dst_conn: Any, p: str, session_id: str) -> bool:
    return dst_conn.execute(f"SELECT 1 FROM sessions WHERE id = {p}", (session_id,)).fetchone() is not None


def _insert_sql(
    table: str, columns: Sequence[str], p: str, *, ignore: bool = False, returning: bool = False
) -> str:
    """An INSERT of ``columns`` in the destination's own parameter marker ``p``."""
    return (
        f"INSERT INTO {table} ({', '.join(columns)}) VALUES ({', '.join([p] * len(columns))})"
        + (" ON CONFLICT DO NOTHING" if ignore else "")
        + (" RETURNING id" if returning else "")
    )


def _row_key(values: Sequence[Any]) -> str:
    """A row's identity where seq cannot tell it: its primary key, or all its values."""
    return hashlib.sha256(repr([_plain(v) for v in values]).encode()).hexdigest()


class DivergedError(StoreError):
    """The source changed rows the destination already holds (a rewritten transcript tail)."""


def _copy_session(
    src: sqlite3.Connection,
    dst_conn: Any,
    p: str,
    session_id: str,
    owned: list[_Table],
    dst_columns: dict[str, set[str]],
    rows: dict[str, int],
) -> int:
    """Copy what ``dst_conn`` does not hold yet of one session (all of it when the session is new),
    inside the caller's transaction; returns the rows written.

    Rows are new by their ``seq`` (past the destination's last), by their own key (blobs, tools,
    cost rows) or, in tables with neither (snapshots, cached summaries), by their content. The
    destination's last row of each seq-numbered table must still be the source's, else
    DivergedError: the source rewrote what was copied, and merging would mix two histories.
    """
    written = 0
    session_columns = [c for c in _columns(src, "sessions") if c in dst_columns["sessions"]]
    session_row = src.execute(
        f"SELECT {', '.join(session_columns)} FROM sessions WHERE id = ?", (session_id,)
    ).fetchone()
    if not _exists(dst_conn, p, session_id):
        dst_conn.execute(
            _insert_sql("sessions", session_columns, p), redact_row(session_row, keys=_keys(session_columns))
        )
        rows["sessions"] = rows.get("sessions", 0) + 1
    new_ids: dict[str, dict[int, int]] = {}
    for table in owned:
        if table.name not in dst_columns:
            raise StoreError(f"the destination has no table {table.name} (an older ctxdesk schema?)")
        columns = [c for c in table.columns if c in dst_columns[table.name]]
        keep = [c for c in columns if not (table.has_id and c == "id")]
        referenced = any(table.name in t.references.values() for t in owned)
        by_seq = "seq" in columns
        own_key = not table.has_id and not by_seq  # a primary key of its own: the insert skips a copy
        sql = _insert_sql(table.name, keep, p, ignore=own_key, returning=table.has_id and referenced)
        after = -1
        if by_seq:
            after = _check_last_row(src, dst_conn, p, table, keep, session_id)
            if referenced:  # rows already copied keep their destination ids: map them by seq
                new_ids[table.name] = _ids_by_seq(src, dst_conn, p, table.name, session_id)
        # what the destination holds already, where seq cannot tell: by primary key, else by content
        identity = [c for c in keep if c in table.key] if own_key else keep
        present = set() if by_seq else _present_keys(dst_conn, p, table.name, identity, session_id)
        cur = src.execute(
            f"SELECT {', '.join(columns)} FROM {table.name} WHERE session_id = ?"
            + (" AND seq > ?" if by_seq else "")
            + " ORDER BY rowid",
            (session_id, after) if by_seq else (session_id,),
        )
        id_at = columns.index("id") if table.has_id else None
        ref_at = {columns.index(c): target for c, target in table.references.items() if c in columns}
        batch: list[list[Any]] = []
        for row in cur:
            out = list(row)
            for i, target in ref_at.items():
                if out[i] is not None:
                    out[i] = new_ids.get(target, {}).get(out[i])
            values = redact_row((v for i, v in enumerate(out) if i != id_at), keys=_keys(keep))
            if present and _row_key([values[keep.index(c)] for c in identity]) in present:
                continue
            if table.name == "request_costs" and values[keep.index("event_id")] is None:
                continue  # the cost row of an event not copied (its key would be NULL)
            if id_at is not None and referenced:
                new_ids.setdefault(table.name, {})[row[id_at]] = dst_conn.execute(sql, values).fetchone()[0]
            else:
                batch.append(values)
            rows[table.name] = rows.get(table.name, 0) + 1
            written += 1
        if batch:
            dst_conn.executemany(sql, batch)
    if written:  # the session's own row as the source has it now (title, status, import state)
        mutable = [c for c in session_columns if c not in ("id", "created_utc")]
        dst_conn.execute(
            f"UPDATE sessions SET {', '.join(f'{c} = {p}' for c in mutable)} WHERE id = {p}",
            [
                *redact_row((session_row[session_columns.index(c)] for c in mutable), keys=_keys(mutable)),
                session_id,
            ],
        )
    return written


def _check_last_row(
    src: sqlite3.Connection, dst_conn: Any, p: str, table: _Table, keep: list[str], session_id: str
) -> int:
    """The destination's last seq of the session in ``table`` (-1: none), once its row there is
    checked to be the source's (DivergedError otherwise)."""
    last = dst_conn.execute(
        f"SELECT max(seq) FROM {table.name} WHERE session_id = {p}", (session_id,)
    ).fetchone()
    if last is None or last[0] is None:
        return -1
    seq = int(last[0])
    compare = [c for c in keep if c not in table.references and c not in ("created_utc",)]
    select = f"SELECT {', '.join(compare)} FROM {table.name} WHERE session_id = {{p}} AND seq = {{p}}"
    theirs = src.execute(select.format(p="?"), (session_id, seq)).fetchone()
    ours = dst_conn.execute(select.format(p=p), (session_id, seq)).fetchone()
    if theirs is None or [_plain(v) for v in redact_row(theirs, keys=_keys(compare))] != [
        _plain(v) for v in ours
    ]:
        raise DivergedError(
            f"session {session_id!r}: {table.name} seq {seq} differs from the copy already made "
            "(the source rewrote it); not merged"
        )
    return seq


#: Columns holding a row's identity: copied as they are (the store writes them unredacted too).
KEY_COLUMNS = frozenset({"id", "session_id", "parent_session_id"})


def _keys(columns: Sequence[str]) -> list[int]:
    return [i for i, c in enumerate(columns) if c in KEY_COLUMNS]


def _plain(value: Any) -> Any:
    """A value as both backends give it back (PostgreSQL text holds U+FFFD for a NUL)."""
    if isinstance(value, str):
        return value.replace("\x00", "\ufffd")
    return bytes(value) if isinstance(value, memoryview | bytearray) else value


def _ids_by_seq(
    src: sqlite3.Connection, dst_conn: Any, p: str, table: str, session_id: str
) -> dict[int, int]:
    """Source id -> destination id of the rows of a session already copied, matched by seq."""
    sql = f"SELECT seq, id FROM {table} WHERE session_id = {{p}}"
    theirs = {seq: row_id for seq, row_id in dst_conn.execute(sql.format(p=p), (session_id,)).fetchall()}
    return {
        row_id: theirs[seq]
        for seq, row_id in src.execute(sql.format(p="?"), (session_id,)).fetchall()
        if seq in theirs
    }


def _present_keys(dst_conn: Any, p: str, table: str, columns: list[str], session_id: str) -> set[str]:
    """Keys (:func:`_row_key` of ``columns``) of the rows the destination holds of a session."""
    cur = dst_conn.execute(f"SELECT {', '.join(columns)} FROM {table} WHERE session_id = {p}", (session_id,))
    return {_row_key(list(row)) for row in cur.fetchall()}


def _columns(src: sqlite3.Connection, table: str) -> list[str]:
    return [r[1] for r in src.execute(f"PRAGMA table_info({table})").fetchall()]


def _destination_columns(dst: SqlSessionStore, tables: Sequence[str]) -> dict[str, set[str]]:
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
    source: str | Path, dst: SqlSessionStore, *, on_progress: Progress | None = None
) -> CopyReport:
    """Copy every session of the SQLite file ``source`` into ``dst``: new sessions whole, the new rows
    of sessions copied before."""
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
                    conn.executemany(
                        _insert_sql(table.name, columns, dst.P, ignore=True), map(redact_row, chunk)
                    )
        sessions = _session_order(src)
        for done, (session_id, _) in enumerate(sessions, start=1):
            try:
                with dst.transaction() as conn:
                    existed = _exists(conn, dst.P, session_id)
                    written = _copy_session(src, conn, dst.P, session_id, owned, dst_columns, report.rows)
            except DivergedError as exc:
                report.diverged.append((session_id, str(exc)))
            else:
                if not existed:
                    report.copied.append(session_id)
                elif written:
                    report.grown.append(session_id)
                else:
                    report.skipped.append(session_id)
            if on_progress:
                on_progress(done, len(sessions), session_id)
    except (sqlite3.Error, UnicodeDecodeError) as exc:  # not UTF-8: a damaged page
        raise StoreError(f"cannot read the source database ({exc})", path=str(path)) from exc
    finally:
        src.close()
    return report
