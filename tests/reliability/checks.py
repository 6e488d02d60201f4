"""What a session database must look like after any crash: checks shared by the reliability tests.

Each check reads the file with plain sqlite3 (the first connection after a kill recovers the
WAL, as the next ctxdesk process would) and fails with a message naming the row at fault.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
from collections.abc import Iterable
from pathlib import Path

from engine.store.records import content_to_json
from tests.reliability.workloads import batch_ends, expected_message, progress_lines


def connect(db: str | Path) -> sqlite3.Connection:
    conn = sqlite3.connect(db, timeout=30)
    conn.execute("PRAGMA busy_timeout = 30000")
    return conn


def check_integrity(db: str | Path) -> None:
    conn = connect(db)
    try:
        assert conn.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
        assert conn.execute("PRAGMA foreign_key_check").fetchall() == []
    finally:
        conn.close()


def check_transcript(db: str | Path, session_id: str, *, at_least: int) -> int:
    """The transcript is seq 0..n-1 with no gap, made of whole batches, each row holding exactly
    the message written at its seq, one note event per batch; n >= ``at_least``. Returns n."""
    conn = connect(db)
    try:
        rows = conn.execute(
            "SELECT seq, role, content_json FROM messages WHERE session_id = ? ORDER BY seq", (session_id,)
        ).fetchall()
        events = conn.execute(
            "SELECT details_json FROM context_events WHERE session_id = ? AND kind = 'note' AND trigger = 'append'"
            " ORDER BY seq",
            (session_id,),
        ).fetchall()
    finally:
        conn.close()
    n = len(rows)
    assert [r[0] for r in rows] == list(range(n)), "transcript seqs are not 0..n-1"
    assert n >= at_least, f"transcript has {n} messages, but {at_least} were reported committed"
    ends = batch_ends(n)
    assert n in ends, f"transcript length {n} ends inside a batch: a partial transaction survived"
    expected_json: dict[int, str] = {}
    for seq, role, content_json in rows:
        message = expected_message(seq)
        key = id(message)
        if key not in expected_json:
            expected_json[key] = content_to_json(message)
        assert role == message.role and content_json == expected_json[key], f"message seq {seq} differs"
    starts = [json.loads(e[0])["batch_start"] for e in events]
    assert starts == sorted(e for e in ends if e < n), "note events do not match the committed batches"
    return n


def check_blobs(db: str | Path, progress: str | Path) -> int:
    """Every stored blob is whole (content matches its sha256 and size) and every blob the
    child reported committed is there, byte for byte. Returns the number of blobs."""
    conn = connect(db)
    try:
        rows = {
            ref: (sha, size, hashlib.sha256(content).hexdigest(), len(content))
            for ref, sha, size, content in conn.execute(
                "SELECT ref_id, sha256, size_bytes, content FROM tool_result_blobs"
            )
        }
    finally:
        conn.close()
    for ref, (sha, size, actual_sha, actual_size) in rows.items():
        assert (sha, size) == (actual_sha, actual_size), f"blob {ref} is not whole"
    for line in progress_lines(progress):
        ref, sha, size = line.split()
        assert ref in rows, f"blob {ref} was committed but is missing"
        assert rows[ref][:2] == (sha, int(size)), f"blob {ref} differs from what was written"
    return len(rows)


def check_snapshots(db: str | Path, session_id: str) -> list[tuple[int, int]]:
    """Every snapshot row is complete JSON whose length matches message_count; returns
    (id, through_seq) of each, oldest first."""
    conn = connect(db)
    try:
        rows = conn.execute(
            "SELECT id, through_seq, messages_json, message_count FROM session_snapshots"
            " WHERE session_id = ? ORDER BY id",
            (session_id,),
        ).fetchall()
    finally:
        conn.close()
    for snapshot_id, _, messages_json, count in rows:
        messages = json.loads(messages_json)
        assert isinstance(messages, list), f"snapshot {snapshot_id} is not a list"
        assert len(messages) == count, f"snapshot {snapshot_id}: {len(messages)} messages, count says {count}"
    return [(r[0], r[1]) for r in rows]


def check_compaction_records(db: str | Path, session_id: str) -> int:
    """Each snapshot and its compaction event name each other (written in one transaction), and
    every ``compacted`` event has its snapshot. Returns the number of snapshots."""
    conn = connect(db)
    try:
        snapshots = dict(
            conn.execute("SELECT id, event_id FROM session_snapshots WHERE session_id = ?", (session_id,))
        )
        events = {
            event_id: json.loads(details)["snapshot_id"]
            for event_id, details in conn.execute(
                "SELECT id, details_json FROM context_events WHERE session_id = ? AND kind = 'compaction'"
                " AND outcome = 'compacted'",
                (session_id,),
            )
        }
    finally:
        conn.close()
    for snapshot_id, event_id in snapshots.items():
        assert event_id is not None and events.get(event_id) == snapshot_id, (
            f"snapshot {snapshot_id} and its compaction event {event_id} do not match"
        )
    assert sorted(events.values()) == sorted(snapshots), "a compaction event has no snapshot"
    return len(snapshots)


def file_digest(paths: Iterable[str | Path]) -> str:
    """sha256 over the bytes of each existing file (a database and its -wal / -shm)."""
    h = hashlib.sha256()
    for path in paths:
        p = Path(path)
        h.update(str(p.name).encode())
        h.update(p.read_bytes() if p.exists() else b"<absent>")
    return h.hexdigest()
