"""Concurrency: a process appends messages and events at full speed while the dashboard's data
layer reads the same file and manual compactions run; nobody sees "database is locked", no row
is lost, and readers only ever see whole, growing transcripts.
"""

from __future__ import annotations

import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import duckdb
import pytest

from dashboard import data
from engine.store import SessionStore
from tests.reliability.checks import check_integrity, check_snapshots, check_transcript
from tests.reliability.workloads import batch_ends, progress_lines
from tests.reliability.zygote import Zygote

pytestmark = pytest.mark.slow

RUN_S = 8.0
READERS = 2
#: Between the writer's transactions: ~500 messages and events a second on an idle machine, so
#: the transcript stays small enough for several compactions to finish within the run.
WRITER_PAUSE_S = 0.005
#: Manual compactions cycle through these (each leaves a short resume history for the next).
STRATEGIES = ("sliding_window", "summarize", "emergency")


def test_appends_dashboard_reads_and_compaction_run_together(tmp_path: Path) -> None:
    """Writer and compactor are other processes (an agent, ``ctxdesk compact``); the dashboard's
    DuckDB readers run here, two threads, reconnecting now and then as a browser reload does."""
    db, progress, compacted = tmp_path / "busy.db", tmp_path / "progress.txt", tmp_path / "compacted.txt"
    with SessionStore(db) as store:
        session_id = store.create_session(title="busy", model="gpt-4.1", tokenizer="chars/4")
    errors: list[BaseException] = []
    seen: list[list[int]] = [[] for _ in range(READERS)]
    stop = threading.Event()

    def read(slot: int) -> None:
        try:
            while not stop.is_set():
                con = data.connect([db])
                try:
                    label = data.db_labels([db.resolve()])[0]
                    for _ in range(10):
                        overview = data.sessions_overview(con)
                        count = int(con.execute("SELECT count(*) FROM messages").fetchone()[0])
                        assert count in batch_ends(count), f"reader saw a partial batch: {count} messages"
                        data.timeline(con, label, session_id)
                        data.events(con, label, session_id)
                        data.snapshots(con, label, session_id)
                        assert len(overview) == 1
                        seen[slot].append(count)
                finally:
                    con.close()
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=read, args=(i,)) for i in range(READERS)]
    with Zygote() as zygote:
        writer = zygote.spawn(
            "append", db=str(db), session_id=session_id, progress=str(progress), pause_s=WRITER_PAUSE_S
        )
        compactor = zygote.spawn(
            "compact",
            db=str(db),
            session_id=session_id,
            progress=str(compacted),
            append_between=False,
            strategies=list(STRATEGIES),
        )
        for t in threads:
            t.start()
        time.sleep(RUN_S)
        stop.set()
        for t in threads:
            t.join(timeout=120)
        statuses = [zygote.kill(writer), zygote.kill(compactor)]
    assert [s["signal"] for s in statuses] == [9, 9], f"a writer stopped on its own: {statuses}"
    assert not errors, [f"{type(e).__name__}: {e}" for e in errors]

    committed = int(progress_lines(progress)[-1])
    check_integrity(db)
    final = check_transcript(db, session_id, at_least=committed)
    snapshots = check_snapshots(db, session_id)
    reported = [int(line.split()[0]) for line in progress_lines(compacted)]
    assert committed > 500, f"the writer only committed {committed} messages"
    assert len(reported) >= 2 and set(reported) <= {s[0] for s in snapshots}
    for counts in seen:
        assert counts == sorted(counts) and len(counts) >= 10, counts[:5]
        assert counts[-1] <= final
    with SessionStore(db, read_only=True) as store:
        assert store.message_count(session_id) == final
        history, _, through = store.load_resume_history(session_id)
        assert through == snapshots[-1][1] and history


WRITER = """
import sqlite3, sys
c = sqlite3.connect(sys.argv[1], isolation_level=None, timeout=30)
c.execute("PRAGMA wal_autocheckpoint = 20")
i = 0
while True:
    c.execute("BEGIN IMMEDIATE")
    c.executemany("INSERT INTO t (v) VALUES (?)", [("x" * 500,)] * 20)
    c.execute("COMMIT")
    i += 1
    if i % 100 == 0:
        c.execute("DELETE FROM t WHERE id % 3 = 0")
"""


READER = """
import sqlite3, sys, time
conn = sqlite3.connect(sys.argv[1], isolation_level=None, timeout=30)
deadline = time.monotonic() + float(sys.argv[2])
while time.monotonic() < deadline:
    conn.execute("BEGIN")
    first = conn.execute("SELECT count(*), max(id) FROM t").fetchone()
    for _ in range(30):
        again = conn.execute("SELECT count(*), max(id) FROM t").fetchone()
        if again != first:
            print("changed", first, again)
            sys.exit(1)
        time.sleep(0.005)
    conn.execute("COMMIT")
"""


def test_sqlite3_work_beside_duckdb_keeps_its_locks_in_a_child_process(tmp_path: Path) -> None:
    """DuckDB's bundled SQLite drops the POSIX locks Python's sqlite3 holds on a file *in the same
    process* when it closes that file (sqlite.org/howtocorrupt.html 2.2.1). The dashboard therefore
    runs all its sqlite3 work in a child process (dashboard.actions); here DuckDB opens and closes
    the file in this process the whole time, an agent process writes, and a read transaction in a
    child process must keep its snapshot."""
    db = tmp_path / "t.db"
    setup = sqlite3.connect(db, isolation_level=None)
    setup.execute("PRAGMA journal_mode = WAL")
    setup.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, v TEXT)")
    setup.close()
    writer = subprocess.Popen([sys.executable, "-c", WRITER, str(db)])
    stop = threading.Event()
    opened = []

    def open_and_close_duckdb() -> None:
        while not stop.is_set():
            con = duckdb.connect(":memory:")
            data.load_sqlite_scanner(con)
            con.execute(f"ATTACH '{db}' AS s (TYPE sqlite, READ_ONLY)")
            con.execute("SELECT count(*) FROM s.t").fetchone()
            con.close()
            opened.append(1)

    opener = threading.Thread(target=open_and_close_duckdb)
    opener.start()
    try:
        reader = subprocess.run(
            [sys.executable, "-c", READER, str(db), "8"], capture_output=True, text=True, timeout=120
        )
    finally:
        stop.set()
        opener.join()
        writer.kill()
        writer.wait()
    assert len(opened) > 10, "DuckDB must have opened and closed the file meanwhile"
    assert reader.returncode == 0, f"a read transaction saw other commits: {reader.stdout}"
