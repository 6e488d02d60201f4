"""request_costs rows written in one pass at the end of ``batched_costs`` (what imports do) are
the rows ``record_event`` writes one request event at a time."""

from __future__ import annotations

import contextlib
import os
import sqlite3
from pathlib import Path

import pytest

import engine.store.sql_store as store_module
from engine.importers import import_files
from engine.store import SessionStore

FIXTURES = Path(__file__).parent / "fixtures" / "real_agents"
SOURCES = [
    next((FIXTURES / "codex").rglob("rollout-*.jsonl")),
    FIXTURES / "claude-code" / "compact_auto" / "transcripts" / "005e4ed3-208c-4f24-ac39-ceb1cfae1fa5.jsonl",
]


def _cost_rows(db: Path) -> list[tuple[object, ...]]:
    conn = sqlite3.connect(db)
    try:
        columns = [r[1] for r in conn.execute("PRAGMA table_info(request_costs)") if r[1] != "computed_utc"]
        return conn.execute(f"SELECT {', '.join(columns)} FROM request_costs ORDER BY event_id").fetchall()
    finally:
        conn.close()


def _import_grown(source: Path, folder: Path, db: Path) -> None:
    """The file imported at half its lines, then whole (rows exist before the second batch)."""
    copy = folder / source.name
    folder.mkdir()
    lines = source.read_text(encoding="utf-8").splitlines(keepends=True)
    for part, mtime in ((lines[: len(lines) // 2], 1), (lines, 2)):
        copy.write_text("".join(part), encoding="utf-8")
        os.utime(copy, ns=(mtime * 10**9, mtime * 10**9))
        with SessionStore(db) as store:
            import_files([copy], store)


@pytest.mark.parametrize("source", SOURCES, ids=lambda p: p.parent.name)
def test_batched_cost_rows_equal_rows_written_event_by_event(
    source: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(store_module, "utc_now", lambda: "2026-01-01T00:00:00.000000Z")
    _import_grown(source, tmp_path / "a", tmp_path / "batched.db")
    monkeypatch.setattr(SessionStore, "batched_costs", lambda self: contextlib.nullcontext())
    _import_grown(source, tmp_path / "b", tmp_path / "one_by_one.db")
    batched, one_by_one = _cost_rows(tmp_path / "batched.db"), _cost_rows(tmp_path / "one_by_one.db")
    assert batched
    # session ids carry a hash of the file's path: compare from call_index on
    assert [r[2:] for r in batched] == [r[2:] for r in one_by_one]
