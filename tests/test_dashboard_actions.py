"""dashboard.actions: the dashboard's sqlite3 work runs in a child process and keeps its contract."""

from __future__ import annotations

import os
import re
import shutil
import sqlite3
from pathlib import Path

import pytest

from dashboard import actions
from engine.store import SessionStore

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def sample_db(tmp_path: Path) -> tuple[Path, str]:
    db = tmp_path / "demo.db"
    shutil.copy(ROOT / "data" / "demo-coding-agent.db", db)
    with SessionStore(db, read_only=True) as store:
        longest = max(store.list_sessions(), key=lambda s: store.message_count(s.id))
    return db, longest.id


def test_actions_run_outside_the_dashboard_process() -> None:
    assert actions.worker_pid() != os.getpid()


def test_preview_writes_nothing_and_apply_writes_a_snapshot(sample_db: tuple[Path, str]) -> None:
    db, session_id = sample_db
    with SessionStore(db, read_only=True) as store:
        transcript = store.load_transcript(session_id)
        snapshots_before = len(store.list_snapshots(session_id))
    preview = actions.preview_compaction(db, session_id, strategy="chain", target_tokens=4_000)
    assert preview.dry_run and preview.snapshot_id is None and preview.after_tokens < preview.before_tokens
    with SessionStore(db, read_only=True) as store:
        assert len(store.list_snapshots(session_id)) == snapshots_before

    applied = actions.apply_compaction(db, session_id, strategy="chain", target_tokens=4_000)
    assert applied.snapshot_id is not None
    with SessionStore(db, read_only=True) as store:
        assert store.load_transcript(session_id) == transcript  # the transcript is never modified
        assert store.latest_snapshot(session_id).id == applied.snapshot_id
    assert sqlite3.connect(db).execute("PRAGMA integrity_check").fetchone()[0] == "ok"


def test_restore_and_findings_cross_the_process_boundary(sample_db: tuple[Path, str]) -> None:
    db, session_id = sample_db
    with SessionStore(db, read_only=True) as store:
        first = store.list_snapshots(session_id)[0]
    restored = actions.restore(db, session_id, first.id)
    assert restored.strategy == "restore" and restored.messages == first.messages
    found = actions.findings(db, session_id)
    assert found and all(f.tokens >= 0 for f in found)


def test_engine_errors_come_back_typed_by_name(sample_db: tuple[Path, str]) -> None:
    db, session_id = sample_db
    with pytest.raises(actions.ActionError, match="no snapshot 987654") as caught:
        actions.restore(db, session_id, 987_654)
    assert caught.value.kind == "NotFoundError"


#: In-process sqlite3 allowed only to page through one immutable blob, each page on its own read-only
#: connection (no transaction spans a DuckDB call; a dropped lock can at worst show a stale page).
READ_ONLY_BLOB_READER = "data/blob_pages.py"


def test_no_dashboard_module_opens_a_session_database_with_sqlite3_in_process() -> None:
    offenders = [
        f"{path.relative_to(ROOT)}: {needle}"
        for path in sorted((ROOT / "dashboard").rglob("*.py"))
        if str(path.relative_to(ROOT / "dashboard")) not in ("actions.py", READ_ONLY_BLOB_READER)
        for needle in ("SessionStore(", "sqlite3.connect(", "import sqlite3")
        if needle in path.read_text(encoding="utf-8")
    ]
    assert not offenders, "route sqlite3 work through dashboard.actions: " + ", ".join(offenders)


def test_the_blob_page_reader_opens_sqlite3_read_only_and_never_writes() -> None:
    source = (ROOT / "dashboard" / READ_ONLY_BLOB_READER).read_text(encoding="utf-8")
    connects = re.findall(r"sqlite3\.connect\(([^)]*)\)", source)
    assert connects and all("mode=ro" in c for c in connects), connects
    assert "SessionStore(" not in source
    assert not re.search(r"\b(INSERT|UPDATE|DELETE|CREATE|DROP)\b", source)
    assert "readonly=True" in source
