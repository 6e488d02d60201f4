"""The Sessions overview orders sessions by when they were last active in the agent's own
transcript, not by when they were imported (an import gives every file the same ``updated_utc``)."""

from __future__ import annotations

import sqlite3
from contextlib import closing
from pathlib import Path

import pandas as pd

from dashboard import data
from engine.importers import import_file
from engine.messages import assistant, user
from engine.store import SessionStore
from engine.tokens import get_tokenizer

REAL = Path(__file__).parent / "fixtures" / "real_agents"
#: Ended 2026-11-28 06:03:24 (Codex) and 05:42 (Claude Code): imported in the opposite order.
CODEX = (
    REAL
    / "codex/auto-compact/sessions/2026/11/28/rollout-2026-11-28T06-03-22-01a220c0-488d-70b0-ae8e-1f2262f1dde8.jsonl"
)
CLAUDE_CODE = REAL / "claude-code/finish/transcripts/1c1f5dce-8631-4c04-9fa2-bedd61446706.jsonl"


def three_sessions(path: Path) -> tuple[str, str, str]:
    """(Codex, Claude Code, one ctxdesk ran) in a new database at ``path``: the Codex file ended
    later but is imported first; the session ctxdesk ran has no transcript time."""
    with SessionStore(path) as store:
        codex = import_file(CODEX, store).sessions[0].session_id
        claude = import_file(CLAUDE_CODE, store).sessions[0].session_id
        ran = store.create_session(model="gpt-4o")
        store.append_messages(ran, [user("q"), assistant("a")], tokenizer=get_tokenizer("gpt-4o"))
    return codex, claude, ran


def overview(path: Path) -> pd.DataFrame:
    con = data.connect([path])
    try:
        return data.sessions_overview(con)
    finally:
        con.close()


def test_imported_sessions_sort_by_their_transcripts_last_message_not_the_import(tmp_path: Path) -> None:
    codex, claude, ran = three_sessions(tmp_path / "s.db")
    df = overview(tmp_path / "s.db")
    rows = df.set_index("session_id")
    assert rows.loc[codex, "last_active_utc"] == "2026-11-28T06:03:24.268000Z"
    assert rows.loc[claude, "last_active_utc"].startswith("2026-11-28T05:4")
    assert rows.loc[claude, "updated_utc"] > rows.loc[codex, "updated_utc"]  # imported later ...
    assert list(df["session_id"]) == [ran, codex, claude]  # ... yet listed after the session active later
    ran_updated = rows.loc[ran, "updated_utc"]
    assert rows.loc[ran, "last_active_utc"][:19] == ran_updated[:19]  # its own last update
    by_default = data.filter_sessions(df, data.SessionFilter(), descending=False)
    assert list(by_default["session_id"]) == [claude, codex, ran]


def test_without_a_transcript_time_an_imported_session_has_none_and_is_listed_last(tmp_path: Path) -> None:
    """Not the import's time: that would put every such session first, as just active."""
    path = tmp_path / "s.db"
    timeless, timed, ran = three_sessions(path)
    with closing(sqlite3.connect(path)) as db, db:  # not JSON: no ended_utc can be read from it
        db.execute("UPDATE sessions SET metadata_json = '{not json' WHERE id IN (?, ?)", (timeless, ran))
        updated = db.execute("SELECT updated_utc FROM sessions WHERE id = ?", (ran,)).fetchone()[0]
    df = overview(path)
    rows = df.set_index("session_id")
    assert pd.isna(rows.loc[timeless, "last_active_utc"])
    assert rows.loc[ran, "last_active_utc"][:19] == updated[:19]  # a session ctxdesk ran: its own last update
    assert list(df["session_id"]) == [ran, timed, timeless]
    assert list(data.filter_sessions(df, data.SessionFilter(), descending=False)["session_id"]) == [
        timed,
        ran,
        timeless,
    ]
