"""Reading an OpenCode (or Kilo CLI) database: read-only, in OpenCode's own order. The only SQL
of the engine outside :mod:`engine.store`, on another application's file."""

from __future__ import annotations

import json
import sqlite3
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from engine.importers.parsing.parsed import SourceProblem

_TABLES = frozenset({"session", "message", "part"})


@dataclass(frozen=True)
class Rows:
    """The rows of an OpenCode database this importer reads, in OpenCode's own order."""

    sessions: list[dict[str, Any]]
    messages: list[tuple[str, str, dict[str, Any]]]  # (id, session id, data)
    parts: list[tuple[str, dict[str, Any]]]  # (message id, data)
    #: Assistant messages deleted after they were answered (Kilo CLI removes the calls of its
    #: chunked compaction summary), their last state, in the order written: only the ``event``
    #: table (Kilo's event log) keeps them.
    removed: list[dict[str, Any]] = field(default_factory=list)


def _connect(path: Path) -> sqlite3.Connection:
    try:
        return sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)
    except sqlite3.Error as exc:
        raise SourceProblem(f"cannot open the SQLite database ({exc})") from exc


def _tables(conn: sqlite3.Connection) -> set[str]:
    return {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}


def app_of(path: Path) -> str | None:
    """``opencode`` or ``kilo`` (its fork, which adds its own tables) for a database holding
    OpenCode's tables, else None."""
    conn = _connect(path)
    try:
        tables = _tables(conn)
    except sqlite3.Error:
        return None
    finally:
        conn.close()
    if not tables >= _TABLES:
        return None
    return "kilo" if any(t.startswith("kilo_") for t in tables) else "opencode"


def read_database(path: Path) -> Rows:
    """The sessions, messages and parts of an OpenCode database, read-only (OpenCode may be
    writing it: its write-ahead log is read too)."""
    conn = _connect(path)
    try:
        conn.row_factory = sqlite3.Row
        tables = _tables(conn)
        missing = _TABLES - tables
        if missing:
            raise SourceProblem(
                f"a SQLite database without OpenCode's tables (missing {', '.join(sorted(missing))})"
            )
        sessions = [dict(row) for row in conn.execute("SELECT * FROM session ORDER BY time_created, id")]
        messages = [
            (row["id"], row["session_id"], _json(row["data"], f"message {row['id']}"))
            for row in conn.execute(
                "SELECT id, session_id, data FROM message ORDER BY session_id, time_created, id"
            )
        ]
        parts = [
            (row["message_id"], _json(row["data"], f"part {row['id']}"))
            for row in conn.execute("SELECT id, message_id, data FROM part ORDER BY message_id, id")
        ]
        removed = _removed_messages(conn, {m[0] for m in messages}) if "event" in tables else []
    except sqlite3.Error as exc:
        raise SourceProblem(f"cannot read the OpenCode database ({exc})") from exc
    finally:
        conn.close()
    return Rows(sessions, messages, parts, removed)


def _removed_messages(conn: sqlite3.Connection, kept: set[str]) -> list[dict[str, Any]]:
    """The last state of every message the event log shows updated then removed."""
    last: dict[str, dict[str, Any]] = {}
    removed: list[str] = []
    rows = conn.execute(
        "SELECT seq, type, data FROM event WHERE type LIKE 'message.updated%' OR type LIKE 'message.removed%'"
        " ORDER BY aggregate_id, seq"
    )
    for row in rows:
        try:
            data = json.loads(row["data"])
        except (TypeError, json.JSONDecodeError):
            continue  # an event this reader cannot use: the tables stay the truth
        if not isinstance(data, dict):
            continue
        if str(row["type"]).startswith("message.updated") and isinstance(data.get("info"), dict):
            info = data["info"]
            last[str(info.get("id"))] = info
        elif str(row["type"]).startswith("message.removed") and data.get("messageID") not in kept:
            removed.append(str(data.get("messageID")))
    return [last[mid] for mid in dict.fromkeys(removed) if mid in last]


def _json(text: str, where: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except (TypeError, json.JSONDecodeError) as exc:
        raise SourceProblem(f"{where}: its data is not JSON ({exc})") from exc
    if not isinstance(value, dict):
        raise SourceProblem(f"{where}: its data is {type(value).__name__}, not an object")
    return value
