"""m004_blob_content_last: tool_result_blobs keeps ``content`` as its last column, so an offload
inserts a zeroblob SQLite does not materialize; a database made before it is rebuilt, rows kept."""

from __future__ import annotations

import hashlib
import sqlite3
from pathlib import Path

from engine.offload import ResultStore
from engine.store import SessionStore
from engine.store.schema import MIGRATIONS, SCHEMA_VERSION


def _columns(path: Path) -> list[str]:
    with sqlite3.connect(path) as conn:
        return [r[1] for r in conn.execute("PRAGMA table_info(tool_result_blobs)")]


def _v3_database(path: Path) -> None:
    """A database as ctxdesk wrote it before m004: content between preview and tokens."""
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("CREATE TABLE _migrations (name TEXT PRIMARY KEY, applied_utc TEXT NOT NULL)")
    for number, (name, migrate) in enumerate(MIGRATIONS[:3], start=1):
        migrate(conn)
        conn.execute("INSERT INTO _migrations VALUES (?, '2026-01-01T00:00:00Z')", (name,))
        conn.execute(f"PRAGMA user_version = {number}")
    conn.execute("PRAGMA application_id = 1129601092")
    conn.execute("INSERT INTO sessions (id, title, created_utc, updated_utc) VALUES ('s1', 't', 'x', 'x')")
    for i, content in enumerate([b"first output\n" * 100, bytes(range(256)) * 10]):
        conn.execute(
            "INSERT INTO tool_result_blobs (rowid, ref_id, session_id, tool_name, size_bytes, is_text, line_count,"
            " sha256, preview, content, tokens, created_utc) VALUES (?,?,?,?,?,?,?,?,?,?,?,?)",
            (10 + i, f"res_{i}", "s1", "bash", len(content), 1 - i, 100 if i == 0 else None,
             hashlib.sha256(content).hexdigest(), "p", content, 7, "2026-01-01T00:00:0{i}Z"),
        )  # fmt: skip
    conn.close()


def test_a_new_database_has_the_blob_content_column_last(tmp_path: Path) -> None:
    SessionStore(tmp_path / "new.db").close()
    columns = _columns(tmp_path / "new.db")
    assert columns[-1] == "content"
    assert set(columns) == {
        "ref_id", "session_id", "tool_use_id", "tool_name", "size_bytes", "is_text", "line_count",
        "sha256", "preview", "content", "tokens", "created_utc",
    }  # fmt: skip


def test_an_older_database_is_rebuilt_with_every_blob_row_and_rowid_kept(tmp_path: Path) -> None:
    path = tmp_path / "v3.db"
    _v3_database(path)
    assert _columns(path).index("content") < len(_columns(path)) - 1
    with sqlite3.connect(path) as conn:
        before = conn.execute("SELECT rowid, * FROM tool_result_blobs ORDER BY rowid").fetchall()
        names = ["rowid", *(r[1] for r in conn.execute("PRAGMA table_info(tool_result_blobs)"))]
    with SessionStore(path) as store:
        blobs = {b.ref_id: b for b in store.list_blobs("s1")}
        assert store.get_blob("res_1").content == bytes(range(256)) * 10
        assert blobs["res_0"].line_count == 100 and blobs["res_1"].tokens == 7
        added = ResultStore(store, "s1").offload("x" * 10_000, tool_name="bash")
    assert _columns(path)[-1] == "content"
    with sqlite3.connect(path) as conn:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
        assert conn.execute("PRAGMA foreign_key_check").fetchall() == []
        indexes = {r[1] for r in conn.execute("PRAGMA index_list(tool_result_blobs)")}
        after = conn.execute(f"SELECT {', '.join(names)} FROM tool_result_blobs ORDER BY rowid").fetchall()
        stored = conn.execute(
            "SELECT length(content) FROM tool_result_blobs WHERE ref_id = ?", (added.ref_id,)
        ).fetchone()
    assert "blobs_session" in indexes
    assert after[: len(before)] == before
    assert stored == (10_000,)


def test_rebuilt_table_is_still_cascaded_from_its_session(tmp_path: Path) -> None:
    path = tmp_path / "v3.db"
    _v3_database(path)
    with SessionStore(path) as store:
        store.delete_session("s1")
        assert store.list_blobs() == []
