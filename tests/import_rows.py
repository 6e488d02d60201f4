"""Every row an import writes, in a form that does not depend on where or when it ran: the check that
a faster write path writes the same rows (tests/test_import_rows.py, tests/fixtures/import_rows.json).

Left out or normalized: the times of the import itself (``created_utc``, ``updated_utc``,
``computed_utc``), the folder the files were copied to (and the path hashes session ids carry) and
the files' modification times (``mtime_ns`` of an import state).
"""

from __future__ import annotations

import hashlib
import json
import re
import sqlite3
from pathlib import Path
from typing import Any

#: Columns that hold when the import ran, not what it read.
IMPORT_TIMES = frozenset({"created_utc", "updated_utc", "computed_utc"})
_MTIME = re.compile(r'"mtime_ns": \d+')
#: A blob's id is random (engine.store: ``res_`` and 16 hex digits).
_BLOB_ID = re.compile(r"\bres_[0-9a-f]{16}\b")


def path_names(root: Path) -> dict[str, str]:
    """{text that names a file under ``root`` (its path, its path's short hashes): a stable name}."""
    names = {str(root.resolve()): "<root>"}
    for path in sorted(root.rglob("*")):
        where = str(path.resolve())
        digest = hashlib.sha1(where.encode()).hexdigest()
        names[digest[:8]] = f"<h:{path.relative_to(root)}>"
    return names


def normalized(value: Any, names: dict[str, str]) -> Any:
    if not isinstance(value, str):
        return value
    for text, name in names.items():
        if text in value:
            value = value.replace(text, name)
    return _BLOB_ID.sub("res_*", _MTIME.sub('"mtime_ns": 0', value))


def table_rows(db: Path, root: Path) -> dict[str, list[tuple[Any, ...]]]:
    """{table: its rows in key order, normalized}, every table but the migrations'."""
    names = path_names(root)
    conn = sqlite3.connect(db)
    try:
        tables = [
            r[0]
            for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")
            if not r[0].startswith(("_", "sqlite_"))
        ]
        out: dict[str, list[tuple[Any, ...]]] = {}
        for table in tables:
            columns = [r[1] for r in conn.execute(f"PRAGMA table_info({table})")]
            kept = [c for c in columns if c not in IMPORT_TIMES]
            order = ", ".join(f'"{c}"' for c in kept)
            rows = [
                tuple(normalized(v, names) for v in r) for r in conn.execute(f"SELECT {order} FROM {table}")
            ]
            out[table] = [
                tuple(kept),
                *sorted(rows, key=repr),
            ]  # sorted as normalized (a blob's id is random)
        return out
    finally:
        conn.close()


def table_digests(db: Path, root: Path) -> dict[str, str]:
    """{table: sha256 of its normalized rows} (with its row count, to read a difference at a glance)."""
    return {
        table: f"{len(rows) - 1}:{hashlib.sha256(json.dumps(rows, default=repr).encode()).hexdigest()[:16]}"
        for table, rows in table_rows(db, root).items()
    }
