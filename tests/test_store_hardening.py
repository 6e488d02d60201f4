"""The store refuses paths that cannot hold a database, damaged files and full disks with typed errors.

Read-only folders and full disks are real: a read-only bind mount and a tiny tmpfs (root only; CI runs as root).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from engine import SessionStore, get_tokenizer
from engine.errors import StoreError
from engine.messages import user

FIXTURE = Path(__file__).parent / "fixtures" / "sessions" / "swe-agent__sweagenttestrepo-1c2844.traj"
CAN_MOUNT = hasattr(os, "geteuid") and os.geteuid() == 0 and shutil.which("mount") is not None


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "engine.cli", *args], capture_output=True, text=True, timeout=120, check=False
    )


def _store_with_messages(path: Path, count: int = 200) -> str:
    with SessionStore(path) as store:
        session_id = store.create_session(model="gpt-4o")
        store.append_messages(
            session_id,
            [user(f"message {i} " + "x" * 400) for i in range(count)],
            tokenizer=get_tokenizer("gpt-4o"),
        )
    return session_id


def test_a_directory_is_not_a_database(tmp_path):
    with pytest.raises(StoreError, match="is a directory"):
        SessionStore(tmp_path)


def test_a_file_standing_where_a_folder_should_be(tmp_path):
    (tmp_path / "file.db").write_bytes(b"")
    with pytest.raises(StoreError, match="is a file, not a folder"):
        SessionStore(tmp_path / "file.db" / "sub.db")


@pytest.mark.parametrize("db", ["{tmp}", "{tmp}/file.db/sub.db"], ids=["directory", "file-as-folder"])
def test_import_into_an_impossible_path_is_one_error_line(tmp_path, db):
    (tmp_path / "file.db").write_bytes(b"")
    result = _cli("import", str(FIXTURE), "--db", db.format(tmp=tmp_path))
    assert result.returncode == 1
    assert result.stderr.startswith("ctxdesk: error:")
    assert "Traceback" not in result.stderr


def test_writing_into_a_damaged_database_is_refused_and_leaves_it_as_it_was(tmp_path):
    path = tmp_path / "damaged.db"
    _store_with_messages(path)
    data = bytearray(path.read_bytes())
    for offset in range(4096 * 3, len(data), 4096):
        data[offset + 100 : offset + 400] = b"\xa5" * 300
    path.write_bytes(bytes(data))
    before = path.read_bytes()
    with pytest.raises(StoreError, match="damaged"):
        SessionStore(path)
    assert path.read_bytes() == before
    result = _cli("import", str(FIXTURE), "--db", str(path))
    assert result.returncode == 1 and "damaged" in result.stderr and "Traceback" not in result.stderr
    assert path.read_bytes() == before


def _damaged(path: Path) -> bytes:
    """A database whose second half (message pages, its schema intact) is overwritten; its bytes."""
    _store_with_messages(path)
    data = bytearray(path.read_bytes())
    for offset in range(len(data) // 2 // 4096 * 4096, len(data), 4096):
        data[offset + 100 : offset + 400] = b"\xa5" * 300
    path.write_bytes(bytes(data))
    return bytes(data)


def test_a_large_database_is_checked_beside_the_reads_and_refused_at_its_first_write(tmp_path, monkeypatch):
    # every file as large as a year of history (checked in a thread: a re-import reading only never waits)
    monkeypatch.setattr("engine.store.sqlite.BACKGROUND_CHECK_BYTES", 0)
    path = tmp_path / "history.db"
    before = _damaged(path)
    store = SessionStore(path)  # opened: the check goes on beside what the caller reads
    try:
        for _ in range(2):  # refused, and refused again
            with pytest.raises(StoreError, match="is damaged"):
                store.create_session(model="gpt-4o")
    finally:
        store.close()
    assert path.read_bytes() == before
    healthy = tmp_path / "healthy.db"
    session_id = _store_with_messages(healthy)
    with SessionStore(healthy) as store:
        assert store.message_count(session_id) == 200  # a read does not wait for the check
    with SessionStore(healthy) as store:
        store.append_messages(session_id, [user("one more")], tokenizer=get_tokenizer("gpt-4o"))
        assert store.message_count(session_id) == 201


def test_a_failed_commit_is_a_store_error_and_the_transaction_is_rolled_back(tmp_path):
    path = tmp_path / "s.db"
    session_id = _store_with_messages(path, count=5)
    with SessionStore(path) as store:
        pages = store._db.conn.execute("PRAGMA page_count").fetchone()[0]
        store._db.conn.execute(f"PRAGMA max_page_count = {pages}")
        with pytest.raises(StoreError, match="full"):
            store.append_messages(
                session_id, [user("y" * 20_000) for _ in range(50)], tokenizer=get_tokenizer("gpt-4o")
            )
        assert store.message_count(session_id) == 5
        assert not store._db.conn.in_transaction


@contextlib.contextmanager
def _mounted(*args: str, target: Path):
    target.mkdir(parents=True, exist_ok=True)
    subprocess.run(["mount", *args, str(target)], check=True, capture_output=True)
    try:
        yield target
    finally:
        subprocess.run(["umount", str(target)], check=False, capture_output=True)


def _mount_works(tmp_path: Path) -> bool:
    try:
        with _mounted("-t", "tmpfs", "-o", "size=1m", "tmpfs", target=tmp_path / "probe"):
            return True
    except (subprocess.CalledProcessError, OSError):
        return False


@pytest.mark.skipif(not CAN_MOUNT, reason="needs root and mount (CI runs as root)")
def test_a_wal_database_in_a_read_only_folder_can_be_read(tmp_path):
    if not _mount_works(tmp_path):
        pytest.fail("mount is present but does not work here: cannot check read-only folders")
    folder = tmp_path / "folder"
    folder.mkdir()
    _store_with_messages(folder / "s.db", count=3)
    conn = sqlite3.connect(folder / "s.db")
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    conn.close()
    for extra in folder.glob("s.db-*"):
        extra.unlink()
    with _mounted("--bind", str(folder), target=tmp_path / "ro"):
        subprocess.run(["mount", "-o", "remount,ro,bind", str(tmp_path / "ro")], check=True)
        with SessionStore(tmp_path / "ro" / "s.db", read_only=True) as store:
            (session,) = store.list_sessions()
            assert store.message_count(session.id) == 3
        result = _cli("inspect", str(tmp_path / "ro" / "s.db"))
        assert result.returncode == 0, result.stderr


@pytest.mark.skipif(not CAN_MOUNT, reason="needs root and mount (CI runs as root)")
def test_a_full_disk_during_import_is_one_error_line_and_loses_nothing(tmp_path):
    if not _mount_works(tmp_path):
        pytest.fail("mount is present but does not work here: cannot check a full disk")
    with _mounted("-t", "tmpfs", "-o", "size=1m", "tmpfs", target=tmp_path / "small") as small:
        path = small / "s.db"
        _store_with_messages(path, count=20)
        with SessionStore(path, read_only=True) as store:
            before = [(s.id, store.message_count(s.id)) for s in store.list_sessions()]
        big = tmp_path / "big.json"
        big.write_text(
            '[{"role": "user", "content": "'
            + "word " * 600_000
            + '"}, {"role": "assistant", "content": "ok"}]'
        )
        result = _cli("import", str(big), "--db", str(path))
        assert result.returncode == 1, result.stdout
        assert result.stderr.startswith("ctxdesk: error:") and "Traceback" not in result.stderr
        with SessionStore(path, read_only=True) as store:
            assert [(s.id, store.message_count(s.id)) for s in store.list_sessions()][: len(before)] == before


DEMO_DB = Path(__file__).resolve().parents[1] / "data" / "demo-guard-limits.db"


def _damage(path: Path, text: bytes) -> None:
    """Overwrite the first bytes of every ``text`` past the header page with bytes UTF-8 never has."""
    data = bytearray(path.read_bytes())
    at = data.find(text, 4096)
    assert at != -1
    while at != -1:
        data[at : at + 3] = b"\xff\xfe\xfd"
        at = data.find(text, at + 3)
    path.write_bytes(bytes(data))


@pytest.mark.slow  # four CLI subprocesses
@pytest.mark.parametrize("command", ["inspect", "report"])
@pytest.mark.parametrize("damaged", ["message text", "column names"])
def test_text_damaged_past_the_header_is_a_typed_error_naming_the_file(
    tmp_path: Path, command: str, damaged: str
) -> None:
    """Pages whose b-trees still parse but whose text is not UTF-8 (a bad sector, a torn copy):
    reading a session gives one line naming the file, never a UnicodeDecodeError traceback."""
    path = tmp_path / "damaged.db"
    if damaged == "message text":
        session_id = _store_with_messages(path, count=20)
        from engine.store import settle_database

        settle_database(path)
        _damage(path, b"message 1")
    else:  # the schema's own text (sqlite_master spills past the first page): a column's name
        shutil.copy(DEMO_DB, path)
        with SessionStore(path, read_only=True) as store:
            session_id = store.list_sessions()[0].id
        _damage(path, b"content")
    args = (
        ["inspect", str(path), session_id]
        if command == "inspect"
        else ["report", session_id, "--db", str(path)]
    )
    result = _cli(*args)
    assert result.returncode == 1, result.stderr
    assert "Traceback" not in result.stderr and "UnicodeDecodeError" not in result.stderr
    assert str(path) in result.stderr and "not UTF-8" in result.stderr
