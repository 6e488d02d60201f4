"""Read-only access to one or many session databases through DuckDB (no streamlit here).

:func:`connect` attaches every SQLite file READ_ONLY with the sqlite scanner loaded offline
from the ``duckdb-extension-sqlite-scanner`` package, and defines one view per schema table
(``sessions``, ``messages``, ...) that unions the files with a ``db`` label column. Query
functions aggregate in SQL and return pandas frames; list queries never read message content.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import duckdb
import duckdb_extensions
import pandas as pd

from dashboard import pg_source
from engine.errors import NotADatabaseError, NotFoundError, ValidationError
from engine.findings import Finding
from engine.locations import DB_PATHS_ENV_VAR, SAMPLE_DATA_DIR
from engine.sent import compaction_removals, sent_end
from engine.store import LIMIT_BASE, SESSION_TOTALS, TABLE_NAMES, column_types, rollup_sql, totals_sql
from engine.store.factory import default_database, redact_url

#: The bundled sample data (written by ``ctxdesk demo``), used when nothing else is given.
DEFAULT_DATA_DIR = SAMPLE_DATA_DIR
#: Tables every attached file must have (docs/schema.md).
TABLES = TABLE_NAMES
COMPONENT_COLUMNS = {
    "system": "system_tokens",
    "skills": "skills_tokens",
    "tools": "tools_tokens",
    "summary": "summary_tokens",
    "conversation": "conversation_tokens",
    "tool_results": "tool_results_tokens",
}
USAGE_COLUMNS = (
    "provider_input_tokens",
    "provider_cache_read_tokens",
    "provider_cache_creation_tokens",
    "provider_output_tokens",
)


# -- which files ------------------------------------------------------------------------------


def expand_path(path: str | os.PathLike[str]) -> list[Path]:
    """A file as itself, a folder as its ``*.db`` files (sorted); a missing path raises NotFoundError.
    A ``postgresql://`` URL stays as it is (a str)."""
    if pg_source.is_database_url(str(path)):
        return [str(path)]  # type: ignore[list-item]
    p = Path(path).expanduser()
    if p.is_dir():
        return sorted(f.resolve() for f in p.glob("*.db") if f.is_file())
    if p.is_file():
        return [p.resolve()]
    raise NotFoundError("no such database file or folder", path=str(p))


def script_args(argv: Sequence[str], script: Path) -> list[str]:
    """The paths given to the app: what follows ``--``, or, when ``argv[0]`` is the app script
    itself (``streamlit run app.py -- a b`` leaves ``[app.py, a, b]``), what follows it."""
    if "--" in argv:
        return [a for a in argv[list(argv).index("--") + 1 :] if a]
    if argv and Path(argv[0]).resolve() == script.resolve():
        return [a for a in argv[1:] if a]
    return []


def loaded_paths(
    argv: Sequence[str] | None = None,
    env: Mapping[str, str] | None = None,
    default_dir: Path = DEFAULT_DATA_DIR,
) -> list[Path]:
    """The databases to show: argv after ``--``, else $CTXDESK_DB_PATHS, else ``default_dir``.

    Each entry may be a file or a folder (all its ``*.db``); duplicates are dropped, order kept.
    """
    env = os.environ if env is None else env
    items: list[str] = []
    if argv is not None and "--" in argv:
        items = [a for a in argv[list(argv).index("--") + 1 :] if a]
    if not items and env.get(DB_PATHS_ENV_VAR):
        items = [p for p in env[DB_PATHS_ENV_VAR].split(os.pathsep) if p.strip()]
    if not items and (team := default_database(env)):  # $CTXDESK_DB: a team's postgresql:// URL
        items = [team]
    if not items:
        items = [str(default_dir)] if default_dir.is_dir() else []
    found: dict[Path, None] = {}
    for item in items:
        for path in expand_path(item):
            found.setdefault(path, None)
    return list(found)


def files_signature(paths: Iterable[Path]) -> tuple[tuple[str, int, int], ...]:
    """(path, mtime_ns, size) of each database and its WAL: changes whenever a writer commits."""
    out: list[tuple[str, int, int]] = []
    for path in paths:
        if pg_source.is_database_url(str(path)):
            out.append(pg_source.signature(str(path)))
            continue
        for f in (Path(path), Path(f"{path}-wal")):
            try:
                st = f.stat()
            except FileNotFoundError:
                continue
            out.append((str(f), st.st_mtime_ns, st.st_size))
    return tuple(out)


def files_identity(paths: Iterable[Path | str]) -> tuple[tuple[str, int | None], ...]:
    """(path, inode) of each database: changes when a file is replaced, not when it is written."""
    out: list[tuple[str, int | None]] = []
    for path in paths:
        try:
            out.append((str(path), Path(path).stat().st_ino))
        except (OSError, ValueError):  # a postgresql:// URL, or a file gone
            out.append((str(path), None))
    return tuple(out)


def db_labels(paths: Sequence[Path]) -> list[str]:
    """A short unique label per file: its stem, with the parent folder added when stems repeat."""
    stems = [pg_source.label(str(p)) if pg_source.is_database_url(str(p)) else p.stem for p in paths]
    labels = []
    for p, stem in zip(paths, stems, strict=True):
        label = stem if stems.count(stem) == 1 else f"{Path(p).parent.name}/{stem}"
        while label in labels:
            label += "'"
        labels.append(label)
    return labels


# -- connection -------------------------------------------------------------------------------


def _sql_string(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def load_sqlite_scanner(con: duckdb.DuckDBPyConnection) -> None:
    """Install the scanner from the local wheel (no download) and load it."""
    duckdb_extensions.import_extension("sqlite_scanner", con=con)
    con.execute("LOAD sqlite_scanner")


def connect(
    paths: Sequence[str | os.PathLike[str]], *, skip_invalid: bool = False
) -> duckdb.DuckDBPyConnection:
    """An in-memory DuckDB with each file attached READ_ONLY and a union view per table.

    A file lacking ctxdesk tables raises NotADatabaseError naming it; with ``skip_invalid`` it
    is left out instead and listed in the ``skipped`` table (path, reason), so one junk file in
    a folder does not hide the others. ``databases`` lists (db, alias, path). Use
    ``con.cursor()`` per thread.
    """
    resolved = [str(p) if pg_source.is_database_url(str(p)) else Path(p).resolve() for p in paths]
    labels = db_labels(resolved)  # type: ignore[arg-type]
    con = duckdb.connect(":memory:")
    load_sqlite_scanner(con)
    if any(isinstance(p, str) for p in resolved):
        pg_source.load_postgres_extension(con)
    con.execute("CREATE TABLE databases (db VARCHAR, alias VARCHAR, path VARCHAR)")
    con.execute("CREATE TABLE skipped (path VARCHAR, reason VARCHAR)")
    attached: list[tuple[str, str]] = []
    for i, (label, path) in enumerate(zip(labels, resolved, strict=True)):
        alias = f"db_{i}"
        try:
            _attach(con, path, alias)
        except (NotADatabaseError, NotFoundError) as exc:
            if not skip_invalid:
                raise
            with contextlib.suppress(duckdb.Error):
                con.execute(f"DETACH DATABASE IF EXISTS {alias}")
            con.execute("INSERT INTO skipped VALUES (?, ?)", [redact_url(str(path)), str(exc)])
            continue
        con.execute("INSERT INTO databases VALUES (?, ?, ?)", [label, alias, str(path)])
        attached.append((label, alias))
    for table in TABLES:
        if not attached:
            continue
        parts = [f"SELECT {_sql_string(label)} AS db, * FROM {alias}.{table}" for label, alias in attached]
        con.execute(f"CREATE VIEW {table} AS " + " UNION ALL BY NAME ".join(parts))
    return con


def _attach(con: duckdb.DuckDBPyConnection, path: str | Path, alias: str) -> None:
    """Attach one SQLite file (or postgresql:// URL) as ``alias``; NotADatabaseError when it is
    not a ctxdesk session database."""
    if isinstance(path, Path) and not path.is_file():
        raise NotFoundError("database file does not exist", path=str(path))
    try:
        if isinstance(path, str):  # a postgresql:// URL
            pg_source.attach_postgres(con, path, alias)
        else:
            con.execute(f"ATTACH {_sql_string(str(path))} AS {alias} (TYPE sqlite, READ_ONLY)")
        present = {
            r[0]
            for r in con.execute(
                "SELECT table_name FROM duckdb_tables() WHERE database_name = ?", [alias]
            ).fetchall()
        }
    except duckdb.Error as exc:
        kind = "PostgreSQL" if isinstance(path, str) else "SQLite"
        raise NotADatabaseError(
            f"cannot attach as {kind} ({redact_url(str(exc))})", path=redact_url(str(path))
        ) from exc
    missing = set(TABLES) - present
    if missing:
        raise NotADatabaseError(f"missing ctxdesk tables {sorted(missing)}", path=str(path))


def skipped_files(con: duckdb.DuckDBPyConnection) -> list[tuple[str, str]]:
    """(path, reason) of each file :func:`connect` left out (``skip_invalid``)."""
    return [(str(p), str(r)) for p, r in con.execute("SELECT path, reason FROM skipped").fetchall()]


def database_paths(con: duckdb.DuckDBPyConnection) -> dict[str, Path]:
    """db label -> file path (or postgresql:// URL, a str) of every attached database."""
    return {
        db: path if pg_source.is_database_url(path) else Path(path)
        for db, path in con.execute("SELECT db, path FROM databases").fetchall()
    }


def _df(con: duckdb.DuckDBPyConnection, sql: str, params: Sequence[Any] = ()) -> pd.DataFrame:
    return plain_nulls(con.execute(sql, list(params)).df())


def plain_nulls(df: pd.DataFrame) -> pd.DataFrame:
    """Nullable integer columns (DuckDB gives ``Int64`` when a column holds NULL) as float64 with
    NaN: ``pd.NA`` raises on ``bool()``, so ``x == x`` tests and chart arithmetic crash on it
    (imported sessions record no limit, no provider usage on some calls)."""
    nullable = [c for c, t in df.dtypes.items() if isinstance(t, pd.api.extensions.ExtensionDtype)
                and t.kind in "iuf"]  # fmt: skip
    return df.astype(dict.fromkeys(nullable, "float64")) if nullable else df


def _has_data(con: duckdb.DuckDBPyConnection) -> bool:
    return bool(con.execute("SELECT count(*) FROM databases").fetchone()[0])


def _duck_type(sqlite_type: str) -> str:
    return {"INTEGER": "BIGINT", "TEXT": "VARCHAR", "BLOB": "BLOB", "REAL": "DOUBLE"}[sqlite_type.split()[0]]


#: table -> column -> DuckDB type, from the documented schema.
SCHEMA_TYPES = {t: {c: _duck_type(kind) for c, kind in cols.items()} for t, cols in column_types().items()}


def _alias(con: duckdb.DuckDBPyConnection, db: str) -> str:
    return _attached(con, db)[0]


def _attached(con: duckdb.DuckDBPyConnection, db: str) -> tuple[str, str]:
    """(alias, path or URL) of a loaded database."""
    row = con.execute("SELECT alias, path FROM databases WHERE db = ?", [db]).fetchone()
    if row is None:
        raise NotFoundError(f"no database labelled {db!r} is loaded")
    return str(row[0]), str(row[1])


def _rows(
    con: duckdb.DuckDBPyConnection,
    db: str,
    table: str,
    where: str,
    columns: Sequence[str] | None = None,
) -> tuple[str, list[Any]]:
    """A typed subquery over one table of one file, filtered inside SQLite (so its indexes serve
    per-session lookups; the scanner alone would read the whole table). ``where`` is SQLite SQL
    built only from quoted literals and integers; returns (sql, params)."""
    types = SCHEMA_TYPES[table]
    cols = list(columns or types)
    alias, path = _attached(con, db)  # SQLite file or PostgreSQL (pg_source): same SQL inside
    inner = ", ".join(f"{pg_source.blob_hex_sql(path, c)} AS {c}" if types[c] == "BLOB" else c for c in cols)
    outer = ", ".join(
        f"from_hex({c}) AS {c}" if types[c] == "BLOB" else f"CAST({c} AS {types[c]}) AS {c}" for c in cols
    )
    return f"(SELECT {outer} FROM {pg_source.query_function(path)}(?, ?))", [
        alias,
        f"SELECT {inner} FROM {table} WHERE {where}",
    ]


def _each_db(
    con: duckdb.DuckDBPyConnection, sql: str, types: Mapping[str, str], *, postgres_sql: str | None = None
) -> tuple[str, list[Any]]:
    """``sql`` run inside every attached database (``postgres_sql`` instead in a PostgreSQL one, when
    given), unioned with a ``db`` label; (subquery, params)."""
    casts = ", ".join(f"CAST({c} AS {t}) AS {c}" for c, t in types.items())
    parts, params = [], []
    for db, alias, path in con.execute("SELECT db, alias, path FROM databases ORDER BY alias").fetchall():
        parts.append(f"SELECT {_sql_string(db)} AS db, {casts} FROM {pg_source.query_function(path)}(?, ?)")
        params += [alias, postgres_sql if postgres_sql and pg_source.is_database_url(path) else sql]
    return "(" + " UNION ALL ".join(parts) + ")", params


#: DuckDB types of the per-session totals that are not BIGINT.
ROLLUP_TYPES = {"peak_usage_pct": "DOUBLE"}


def _session_rows(
    con: duckdb.DuckDBPyConnection,
    db: str,
    table: str,
    session_id: str,
    where: str = "",
    columns: Sequence[str] | None = None,
) -> tuple[str, list[Any]]:
    condition = f"session_id = {_sql_string(session_id)}" + (f" AND ({where})" if where else "")
    return _rows(con, db, table, condition, columns)


# -- sessions ---------------------------------------------------------------------------------

SESSION_COLUMNS = (
    "db", "session_id", "title", "model", "provider", "status", "source", "turns", "messages",
    "peak_usage_pct", "peak_tokens", "limit_tokens", "compactions", "forced_final", "skipped_provider",
    "offloaded_bytes", "blobs", "created_utc", "updated_utc", "parent_session_id",
)  # fmt: skip


def sessions_overview(con: duckdb.DuckDBPyConnection) -> pd.DataFrame:
    """One row per session across every database, aggregated in SQL (no message content read)."""
    if not _has_data(con):
        return pd.DataFrame(columns=list(SESSION_COLUMNS))
    # Per-session totals (engine.store.pg_rollups): grouped inside each SQLite file, where indexes
    # cover them; read from the totals a PostgreSQL server keeps (10,000 rows, not millions).
    parts, params = [], []
    for table in SESSION_TOTALS:
        types = {"session_id": "VARCHAR"} | {c: ROLLUP_TYPES.get(c, "BIGINT") for c in SESSION_TOTALS[table]}
        sql, p = _each_db(con, totals_sql(table), types, postgres_sql=rollup_sql(table))
        parts.append(sql)
        params += p
    m, e, b = parts
    return _df(
        con,
        f"""
        WITH m AS (
            SELECT db, session_id, messages, last_turn + 1 AS turns FROM {m}),
        e AS (
            SELECT db, session_id, peak_usage_pct, peak_tokens, last_limit % {LIMIT_BASE} AS limit_tokens,
                compactions, forced_final, skipped_provider FROM {e}),
        b AS (SELECT db, session_id, offloaded_bytes, blobs FROM {b})
        SELECT s.db, s.id AS session_id, s.title, s.model, s.provider, s.status, s.source,
            coalesce(m.turns, 0)::BIGINT AS turns, coalesce(m.messages, 0)::BIGINT AS messages,
            round(e.peak_usage_pct, 1) AS peak_usage_pct, e.peak_tokens, e.limit_tokens,
            coalesce(e.compactions, 0)::BIGINT AS compactions,
            coalesce(e.forced_final, 0)::BIGINT AS forced_final,
            coalesce(e.skipped_provider, 0)::BIGINT AS skipped_provider,
            coalesce(b.offloaded_bytes, 0)::BIGINT AS offloaded_bytes, coalesce(b.blobs, 0)::BIGINT AS blobs,
            s.created_utc, s.updated_utc, s.parent_session_id
        FROM sessions s
        LEFT JOIN m ON m.db = s.db AND m.session_id = s.id
        LEFT JOIN e ON e.db = s.db AND e.session_id = s.id
        LEFT JOIN b ON b.db = s.db AND b.session_id = s.id
        ORDER BY s.updated_utc DESC, s.db, s.id
        """,
        params,
    )


def resolve_session_link(link: str, overview: pd.DataFrame) -> tuple[str, str] | None:
    """The (db, session_id) a ``?session=`` link names: ``db::id``, or a plain id that is unique
    across the loaded databases. None when nothing (or more than one session) matches."""
    db, sep, sid = link.partition("::")
    if sep:
        match = overview[(overview["db"] == db) & (overview["session_id"] == sid)]
    else:
        match = overview[overview["session_id"] == link]
    if len(match) != 1:
        return None
    return str(match.iloc[0]["db"]), str(match.iloc[0]["session_id"])


def session_settings(con: duckdb.DuckDBPyConnection, db: str, session_id: str) -> dict[str, Any]:
    """The resolved settings a session recorded when it was created (``sessions.settings_json``)."""
    src, params = _rows(con, db, "sessions", f"id = {_sql_string(session_id)}", ["settings_json"])
    row = con.execute(f"SELECT settings_json FROM {src}", params).fetchone()
    return _parse_details(row[0]) if row is not None else {}


def session_findings(
    db_path: str | os.PathLike[str], session_id: str, settings_file: str | os.PathLike[str] | None = None
) -> list[Finding]:
    """``engine.findings.find_waste`` over one session, its database opened read-only.

    ``settings_file`` is the user's settings (what the fixes are phrased against); a path that
    does not exist yet means no user settings. Runs in a child process (dashboard.actions): the
    store's sqlite3 must not share a process with DuckDB's bundled SQLite.
    """
    from dashboard import actions

    return actions.findings(db_path, session_id, settings_file)


@dataclass(frozen=True)
class SessionFilter:
    """What the Sessions page filters on; empty fields match everything."""

    text: str = ""
    models: tuple[str, ...] = ()
    statuses: tuple[str, ...] = ()
    dbs: tuple[str, ...] = ()
    only_stopped: bool = False


def filter_sessions(
    df: pd.DataFrame, f: SessionFilter, sort_by: str = "updated_utc", descending: bool = True
) -> pd.DataFrame:
    """Filter and sort the overview frame (pure; the frame is small: one row per session)."""
    if sort_by not in df.columns:
        raise ValidationError(f"cannot sort by {sort_by!r}", field="sort_by", value=sort_by)
    out = df
    if f.text:
        needle = f.text.lower()
        hay = (out["title"].fillna("") + " " + out["session_id"].fillna("")).str.lower()
        out = out[hay.str.contains(needle, regex=False)]
    if f.models:
        out = out[out["model"].isin(f.models)]
    if f.statuses:
        out = out[out["status"].isin(f.statuses)]
    if f.dbs:
        out = out[out["db"].isin(f.dbs)]
    if f.only_stopped:
        out = out[(out["forced_final"] > 0) | (out["skipped_provider"] > 0)]
    return out.sort_values(sort_by, ascending=not descending, na_position="last", kind="stable").reset_index(
        drop=True
    )


def as_tree(df: pd.DataFrame) -> pd.DataFrame:
    """The (filtered, sorted) overview with each sub-agent session right under its parent (in the
    order given) and ``depth`` set (0 for a top-level session); a sub-agent whose parent is not in
    the frame stays where it is, at depth 0. Pure; the frame has one row per session."""
    if df.empty or "parent_session_id" not in df:
        return df.assign(depth=0)
    keys = list(zip(df["db"], df["session_id"], strict=True))
    present = set(keys)
    children: dict[tuple[str, str], list[int]] = {}
    roots: list[int] = []
    for i, (db, parent) in enumerate(zip(df["db"], df["parent_session_id"], strict=True)):
        if isinstance(parent, str) and parent and (db, parent) in present and (db, parent) != keys[i]:
            children.setdefault((db, parent), []).append(i)
        else:
            roots.append(i)
    order: list[int] = []
    depth: list[int] = []
    seen: set[int] = set()

    def visit(i: int, level: int) -> None:
        if i in seen:  # a cycle in recorded parents: show each session once
            return
        seen.add(i)
        order.append(i)
        depth.append(level)
        for child in children.get(keys[i], []):
            visit(child, level + 1)

    for i in roots:
        visit(i, 0)
    for i in range(len(df)):  # rows only reachable through a cycle
        visit(i, 0)
    return df.iloc[order].assign(depth=depth).reset_index(drop=True)


# -- timeline ---------------------------------------------------------------------------------


def timeline(con: duckdb.DuckDBPyConnection, db: str, session_id: str) -> pd.DataFrame:
    """Per turn: the components of its last request, the limit in force, provider usage, call count."""
    src, params = _session_rows(
        con, db, "context_events", session_id, "kind = 'request' AND turn_index IS NOT NULL"
    )
    comps = ", ".join(f"coalesce({c}, 0)::BIGINT AS {name}" for name, c in COMPONENT_COLUMNS.items())
    return _df(
        con,
        f"""
        SELECT turn_index AS turn, {comps}, projected_tokens, limit_tokens, context_window,
            max_output_tokens, buffer_tokens, {", ".join(USAGE_COLUMNS)}, offloaded_bytes,
            message_seq, seq AS event_seq, requests, peak_projected, model, provider
        FROM (
            SELECT *, count(*) OVER w AS requests, max(projected_tokens) OVER w AS peak_projected,
                row_number() OVER (PARTITION BY turn_index ORDER BY seq DESC) AS rn
            FROM {src}
            WINDOW w AS (PARTITION BY turn_index))
        WHERE rn = 1 ORDER BY turn
        """,
        params,
    )


def requests(con: duckdb.DuckDBPyConnection, db: str, session_id: str) -> pd.DataFrame:
    """Every request event (one per model call) in order, with its components."""
    src, params = _session_rows(con, db, "context_events", session_id, "kind = 'request'")
    comps = ", ".join(f"coalesce({c}, 0)::BIGINT AS {name}" for name, c in COMPONENT_COLUMNS.items())
    return _df(
        con,
        f"""SELECT seq AS event_seq, turn_index AS turn, {comps}, projected_tokens, limit_tokens,
            context_window, max_output_tokens, buffer_tokens, {", ".join(USAGE_COLUMNS)}, message_seq, model
        FROM {src} ORDER BY seq""",
        params,
    )


def events(
    con: duckdb.DuckDBPyConnection, db: str, session_id: str, kinds: Sequence[str] | None = None
) -> pd.DataFrame:
    """Events of a session (all columns, details parsed into ``details``), optionally by kind."""
    where = f"kind IN ({', '.join(_sql_string(k) for k in kinds)})" if kinds else ""
    src, params = _session_rows(con, db, "context_events", session_id, where)
    df = _df(con, f"SELECT * FROM {src} ORDER BY seq", params)
    df["details"] = [_parse_details(t) for t in df["details_json"]]
    return df


def _parse_details(text: Any) -> dict[str, Any]:
    if not isinstance(text, str) or not text:
        return {}
    try:
        value = json.loads(text)
    except json.JSONDecodeError:
        return {"unparsed": text}
    return value if isinstance(value, dict) else {"value": value}


def markers(con: duckdb.DuckDBPyConnection, db: str, session_id: str) -> pd.DataFrame:
    """Compactions, restores and guard stops (forced_final, skipped_provider, a refused tool result)
    to mark on the timeline."""
    src, params = _session_rows(
        con, db, "context_events", session_id,
        "turn_index IS NOT NULL AND ((kind = 'compaction' AND outcome = 'compacted')"
        " OR (kind = 'guard' AND outcome IN ('forced_final', 'skipped_provider', 'rejected')) OR kind = 'restore')",
        ["seq", "turn_index", "kind", "trigger", "outcome", "projected_tokens", "limit_tokens"],
    )  # fmt: skip
    return _df(
        con,
        f"""SELECT seq AS event_seq, turn_index AS turn, kind, trigger, outcome, projected_tokens, limit_tokens
        FROM {src} ORDER BY seq""",
        params,
    )


def removed_seqs_before(con: duckdb.DuckDBPyConnection, db: str, session_id: str, event_seq: int) -> set[int]:
    """Transcript seqs removed or summarized by compactions recorded before an event."""
    src, params = _session_rows(
        con, db, "context_events", session_id,
        f"kind = 'compaction' AND outcome = 'compacted' AND seq < {int(event_seq)}", ["seq", "details_json"],
    )  # fmt: skip
    removed: set[int] = set()
    for (details_json,) in con.execute(f"SELECT details_json FROM {src} ORDER BY seq", params).fetchall():
        removed.update(compaction_removals(_parse_details(details_json))[0])
    return removed


MESSAGE_LIST_COLUMNS = (
    "seq", "turn_index", "role", "kind", "tokens", "tool_result_tokens", "tool_names", "pinned", "text_preview",
)  # fmt: skip


def sent_messages(
    con: duckdb.DuckDBPyConnection, db: str, session_id: str, turn: int, event_seq: int | None = None
) -> pd.DataFrame:
    """The messages a turn's last request sent, largest first (previews only, no content).

    What a request sent is :func:`engine.sent.sent_end`'s rule (the one findings and reports
    use); what earlier compactions removed or summarized is left out.
    """
    where = f"kind = 'request' AND turn_index = {int(turn)}"
    if event_seq is not None:
        where += f" AND seq = {int(event_seq)}"
    columns = ["seq", "message_seq", "turn_index", "details_json"]
    src, params = _session_rows(con, db, "context_events", session_id, where, columns)
    row = con.execute(f"SELECT {', '.join(columns)} FROM {src} ORDER BY seq DESC LIMIT 1", params).fetchone()
    removed: set[int] = set()
    end = _turn_end(con, db, session_id, int(turn))
    if row is not None:
        removed = removed_seqs_before(con, db, session_id, int(row[0]))
        end = sent_end(
            _parse_details(row[3]), row[1], row[2],
            kind_of=lambda seq: _message_kind(con, db, session_id, seq),
            turn_end=lambda t: _turn_end(con, db, session_id, t),
        )  # fmt: skip
    src, params = _session_rows(con, db, "messages", session_id, f"seq < {int(end)}", MESSAGE_LIST_COLUMNS)
    df = _df(
        con,
        f"""SELECT seq, turn_index AS turn, role, kind, tokens, tool_result_tokens, tool_names, pinned, text_preview
        FROM {src} ORDER BY tokens DESC, seq""",
        params,
    )
    if removed:
        df = df[~df["seq"].isin(removed)].reset_index(drop=True)
    return df


def _message_kind(con: duckdb.DuckDBPyConnection, db: str, session_id: str, seq: int) -> str | None:
    src, params = _session_rows(con, db, "messages", session_id, f"seq = {int(seq)}", ["kind"])
    row = con.execute(f"SELECT kind FROM {src}", params).fetchone()
    return None if row is None else str(row[0])


def _turn_end(con: duckdb.DuckDBPyConnection, db: str, session_id: str, turn: int) -> int:
    """One past the last seq of ``turn`` (the transcript's length when the turn has no messages)."""
    src, params = _session_rows(con, db, "messages", session_id, "", ["seq", "turn_index"])
    row = con.execute(
        f"SELECT max(seq) FILTER (WHERE turn_index = {int(turn)}), count(*) FROM {src}", params
    ).fetchone()
    return int(row[0]) + 1 if row[0] is not None else int(row[1])


def message(con: duckdb.DuckDBPyConnection, db: str, session_id: str, seq: int) -> dict[str, Any] | None:
    """One transcript message with its content (``content_json``) and text, or None."""
    src, params = _session_rows(
        con, db, "messages", session_id, f"seq = {int(seq)}",
        ["seq", "turn_index", "role", "kind", "tokens", "tool_result_tokens", "tool_names", "content_json", "text_preview"],
    )  # fmt: skip
    df = _df(con, f"SELECT * EXCLUDE (turn_index), turn_index AS turn FROM {src}", params)
    if df.empty:
        return None
    out = df.iloc[0].to_dict()
    out["text"] = content_text(out["content_json"])
    return out


def content_text(content_json: str) -> str:
    """The readable text of stored content: text, tool calls and tool results, one per line."""
    try:
        content = json.loads(content_json)
    except json.JSONDecodeError:
        return content_json
    if isinstance(content, str):
        return content
    parts: list[str] = []
    for block in content if isinstance(content, list) else [content]:
        if not isinstance(block, dict):
            parts.append(str(block))
            continue
        kind = block.get("type")
        if kind == "text":
            parts.append(str(block.get("text", "")))
        elif kind == "thinking":
            parts.append("[thinking] " + str(block.get("thinking", "")))
        elif kind == "tool_use":
            parts.append(
                f"[tool_use {block.get('name')}] " + json.dumps(block.get("input", {}), ensure_ascii=False)
            )
        elif kind == "tool_result":
            inner = block.get("content", "")
            if isinstance(inner, list):
                inner = "\n".join(
                    str(b.get("text", f"[{b.get('type')}]")) for b in inner if isinstance(b, dict)
                )
            parts.append(f"[tool_result {block.get('tool_use_id')}] {inner}")
        else:
            parts.append(f"[{kind}]")
    return "\n".join(parts)


# -- compaction -------------------------------------------------------------------------------


def compactions(con: duckdb.DuckDBPyConnection, db: str, session_id: str) -> pd.DataFrame:
    """Compaction events with their before/after component dicts parsed."""
    df = events(con, db, session_id, ["compaction"])
    return df[["seq", "turn_index", "trigger", "outcome", "reason", "created_utc", "details"]].reset_index(
        drop=True
    )


def snapshots(con: duckdb.DuckDBPyConnection, db: str, session_id: str) -> pd.DataFrame:
    """Snapshots of a session, newest first, without their message payloads."""
    src, params = _session_rows(
        con, db, "session_snapshots", session_id, "",
        ["id", "through_seq", "message_count", "tokens", "strategy", "event_id", "summary", "created_utc"],
    )  # fmt: skip
    snaps = _df(con, f"SELECT * FROM {src} ORDER BY id DESC", params)
    # The event is shown by its number within the session (``seq``), as every other page does.
    ids = sorted({int(i) for i in snaps["event_id"].dropna()})
    seqs: dict[int, int] = {}
    if ids:
        ev, ev_params = _session_rows(
            con, db, "context_events", session_id, f"id IN ({', '.join(map(str, ids))})", ["id", "seq"]
        )
        seqs = dict(con.execute(f"SELECT id, seq FROM {ev}", ev_params).fetchall())
    snaps["event"] = [seqs.get(int(i)) if i == i and i is not None else None for i in snaps["event_id"]]
    snaps["event"] = snaps["event"].astype("float64")
    return snaps


# -- offloaded results ------------------------------------------------------------------------


def blobs(
    con: duckdb.DuckDBPyConnection,
    *,
    db: str | None = None,
    session_id: str | None = None,
    tool: str | None = None,
    min_bytes: int = 0,
) -> pd.DataFrame:
    """Offloaded outputs (no content), largest first."""
    where, params = ["size_bytes >= ?"], [min_bytes]
    for column, value in (("db", db), ("session_id", session_id), ("tool_name", tool)):
        if value:
            where.append(f"{column} = ?")
            params.append(value)
    return _df(
        con,
        f"""SELECT db, session_id, ref_id, tool_name, tool_use_id, size_bytes, is_text, line_count, tokens,
            preview, created_utc FROM tool_result_blobs WHERE {" AND ".join(where)}
        ORDER BY size_bytes DESC, ref_id""",
        params,
    )


def blob_content(con: duckdb.DuckDBPyConnection, db: str, ref_id: str) -> bytes:
    """The exact bytes of one offloaded output (looked up by its primary key inside SQLite)."""
    src, params = _rows(con, db, "tool_result_blobs", f"ref_id = {_sql_string(ref_id)}", ["content"])
    row = con.execute(f"SELECT content FROM {src}", params).fetchone()
    if row is None:
        raise NotFoundError(f"no stored result {ref_id!r} in {db}")
    return bytes(row[0])


# -- tools ------------------------------------------------------------------------------------


def tool_costs(con: duckdb.DuckDBPyConnection, db: str, session_id: str) -> pd.DataFrame:
    """Each tool offered: its definition tokens, category, server, and how often it was called."""
    uses, p1 = _session_rows(
        con, db, "messages", session_id, "kind = 'tool_use' AND tool_names IS NOT NULL", ["tool_names"]
    )
    tools, p2 = _session_rows(
        con, db, "session_tools", session_id, "", ["name", "category", "server", "tokens"]
    )
    return _df(
        con,
        f"""WITH uses AS (
            SELECT trim(name) AS name, count(*) AS calls
            FROM (SELECT unnest(string_split(tool_names, ',')) AS name FROM {uses})
            GROUP BY 1)
        SELECT t.name, t.category, t.server, t.tokens, coalesce(u.calls, 0)::BIGINT AS calls,
            CASE WHEN coalesce(u.calls, 0) = 0 THEN NULL ELSE round(t.tokens / u.calls, 1) END AS tokens_per_call
        FROM {tools} t LEFT JOIN uses u ON u.name = t.name
        ORDER BY t.tokens DESC, t.name""",
        [*p1, *p2],
    )


def server_costs(tools: pd.DataFrame) -> pd.DataFrame:
    """Tokens per MCP server (builtin and skill tools grouped by their category)."""
    if tools.empty:
        return pd.DataFrame(columns=["server", "tools", "tokens", "calls"])
    key = tools["server"].where(tools["server"].notna(), "(" + tools["category"] + ")")
    out = (
        tools.assign(server=key)
        .groupby("server", as_index=False)
        .agg(tools=("name", "count"), tokens=("tokens", "sum"), calls=("calls", "sum"))
    )
    return out.sort_values("tokens", ascending=False).reset_index(drop=True)


def deferral_matrix(con: duckdb.DuckDBPyConnection, db: str, session_id: str) -> pd.DataFrame:
    """Turn by turn, per tool: 'loaded' or 'deferred' as of the latest deferral event of that turn.

    Columns: turn, tool, state. States carry forward to later turns until the next deferral event.
    """
    ev = events(con, db, session_id, ["deferral"])
    src, params = _session_rows(con, db, "messages", session_id, "", ["turn_index"])
    last_turn = con.execute(f"SELECT max(turn_index) FROM {src}", params).fetchone()[0]
    if ev.empty:
        return pd.DataFrame(columns=["turn", "tool", "state"])
    by_turn: dict[int, dict[str, str]] = {}
    for turn, details in zip(ev["turn_index"].fillna(0).astype(int), ev["details"], strict=True):
        states = {_tool_name(t): "deferred" for t in details.get("deferred", [])}
        states.update({_tool_name(t): "loaded" for t in details.get("loaded", details.get("active", []))})
        by_turn[turn] = states
    rows, current = [], {}
    for turn in range(min(by_turn), max(max(by_turn), int(last_turn or 0)) + 1):
        current = by_turn.get(turn, current)
        rows += [(turn, tool, state) for tool, state in sorted(current.items())]
    return pd.DataFrame(rows, columns=["turn", "tool", "state"])


def _tool_name(item: Any) -> str:
    """A tool named in event details: a plain name, or a dict with ``name`` (search hits)."""
    return str(item.get("name")) if isinstance(item, dict) else str(item)


def tool_searches(con: duckdb.DuckDBPyConnection, db: str, session_id: str) -> pd.DataFrame:
    """tool_search queries with their hits; ``hit`` is False for a search that found nothing."""
    ev = events(con, db, session_id, ["tool_search"])
    rows = []
    for turn, details in zip(ev["turn_index"], ev["details"], strict=True):
        hits = [_tool_name(h) for h in details.get("hits", [])]
        rows.append((turn, str(details.get("query", "")), ", ".join(hits), len(hits), bool(hits)))
    return pd.DataFrame(rows, columns=["turn", "query", "hits", "hit_count", "hit"])


def messages_by_seq(
    con: duckdb.DuckDBPyConnection, db: str, session_id: str, seqs: Sequence[int]
) -> pd.DataFrame:
    """Previews (no content) of the given transcript messages, in transcript order."""
    if not seqs:
        return pd.DataFrame(columns=["seq", "turn", "role", "kind", "tokens", "tool_names", "text_preview"])
    src, params = _session_rows(
        con, db, "messages", session_id, f"seq IN ({', '.join(str(int(s)) for s in seqs)})",
        ["seq", "turn_index", "role", "kind", "tokens", "tool_names", "text_preview"],
    )  # fmt: skip
    return _df(
        con,
        f"SELECT seq, turn_index AS turn, role, kind, tokens, tool_names, text_preview FROM {src} ORDER BY seq",
        params,
    )
