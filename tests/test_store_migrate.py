"""``ctxdesk migrate`` / copy_database: SQLite databases copied whole into another store (PostgreSQL
or SQLite), every row and reference kept, and a second run copying nothing."""

from __future__ import annotations

import io
import shutil
from pathlib import Path
from typing import Any

import pytest

from engine.cli import main
from engine.events import ComponentTokens, ContextEvent, ProviderUsage
from engine.messages import assistant, tool_result, tool_use, user
from engine.store import SessionStore, ToolRecord
from engine.store.copy import copy_database
from engine.store.factory import open_store
from engine.store.payloads import RequestRecord
from engine.tokens import get_tokenizer
from tests.test_store import BACKENDS, new_target

TOKENIZER = get_tokenizer("o200k_base")
DEMO_DB = Path(__file__).resolve().parents[1] / "data" / "demo-guard-limits.db"


def _fill(path: Path, prefix: str) -> None:
    with SessionStore(path) as s:
        parent = s.create_session(
            session_id=f"{prefix}-parent", title="parent", model="gpt-4o", metadata={"k": 1}
        )
        child = s.create_session(session_id=f"{prefix}-child", parent_session_id=parent)
        s.append_messages(
            parent,
            [
                user("fix it"),
                assistant("", tool_use("t1", "bash", cmd="ls")),
                tool_result("t1", "a\nb"),
                assistant("ok"),
            ],
            tokenizer=TOKENIZER,
            usages=[None, ProviderUsage(input_tokens=10, output_tokens=3), None, None],
        )
        s.append_messages(child, [user("sub-task")], tokenizer=TOKENIZER)
        s.record_event(parent, ContextEvent(kind="note", reason="first"))
        event_id = s.record_event(
            parent, ContextEvent(kind="compaction", outcome="compacted", components=ComponentTokens(system=5))
        )
        s.write_snapshot(
            parent, [user("short")], through_seq=3, summary="s", tokens=2, strategy="x", event_id=event_id
        )
        s.put_blob(parent, b"\x00\xffbinary", tool_name="bash", tool_use_id="t1")
        s.save_context_state(
            parent,
            strategy="rolling",
            range_start=0,
            range_end=2,
            summary="r",
            summary_tokens=1,
            summarizer="offline",
        )
        s.upsert_tools(parent, [ToolRecord(name="bash", tokens=9, definition={"name": "bash"})])
        s.record_request(
            parent,
            RequestRecord(
                api="anthropic_messages",
                body={
                    "model": "m",
                    "system": "be brief",
                    "messages": [{"role": "user", "content": "fix it"}],
                },
                event_id=event_id,
                input_tokens=10,
            ),
        )


def _dump(store: Any) -> dict[str, Any]:
    """Everything the store API returns, with ids replaced by what they point at."""
    out: dict[str, Any] = {}
    for s in store.list_sessions():
        events = store.list_events(s.id)
        seq_of = {e.id: e.seq for e in events}
        out[s.id] = {
            "session": s.model_dump(),
            "messages": [m.model_dump(exclude={"id"}) for m in store.load_messages(s.id)],
            "events": [e.model_dump(exclude={"id"}) for e in events],
            "snapshots": [
                (x.model_dump(exclude={"id", "event_id"}), seq_of.get(x.event_id))
                for x in store.list_snapshots(s.id)
            ],
            "blobs": [store.get_blob(b.ref_id).model_dump() for b in store.list_blobs(s.id)],
            "states": [c.model_dump(exclude={"id"}) for c in store.list_context_states(s.id)],
            "tools": store.list_tools(s.id),
            "requests": [
                (r.model_dump(exclude={"id", "event_id"}), seq_of.get(r.event_id))
                for r in store.list_requests(s.id, with_body=True)
            ],
        }
    return out


@pytest.mark.parametrize("backend", BACKENDS)
def test_copy_keeps_every_row_and_reference_and_a_rerun_copies_nothing(backend: str, tmp_path: Path) -> None:
    a, b = tmp_path / "a.db", tmp_path / "b.db"
    _fill(a, "a")
    _fill(b, "b")  # same row ids as a.db: the destination renumbers them
    expected: dict[str, Any] = {}
    for path in (a, b):
        with SessionStore(path, read_only=True) as src:
            expected |= _dump(src)
    with open_store(new_target(backend, tmp_path / "dst")) as dst:
        first = [copy_database(p, dst) for p in (a, b)]
        assert [sorted(r.copied) for r in first] == [["a-child", "a-parent"], ["b-child", "b-parent"]]
        assert _dump(dst) == expected
        again = [copy_database(p, dst) for p in (a, b)]
        assert [r.copied for r in again] == [[], []]
        assert sorted(again[0].skipped + again[1].skipped) == sorted(expected)
        assert _dump(dst) == expected


@pytest.mark.parametrize("backend", BACKENDS)
def test_migrate_command_copies_a_folder_with_a_progress_bar(
    backend: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = tmp_path / "dbs"
    folder.mkdir()
    shutil.copy(DEMO_DB, folder / DEMO_DB.name)
    _fill(folder / "mine.db", "m")
    dst = new_target(backend, tmp_path / "dst")
    out = io.StringIO()
    assert main(["migrate", str(folder), dst], out=out) == 0
    assert "[##############################]" in capsys.readouterr().err
    lines = out.getvalue().splitlines()
    assert len(lines) == 2 and all("sessions copied" in line and "0 already in" in line for line in lines)
    out = io.StringIO()
    assert main(["migrate", str(folder), dst], out=out) == 0
    assert all(" 0 sessions copied (0 rows)" in line for line in out.getvalue().splitlines())
    with SessionStore(DEMO_DB, read_only=True) as src, open_store(dst, read_only=True) as copy:
        for s in src.list_sessions():
            assert copy.load_transcript(s.id) == src.load_transcript(s.id)
            assert len(copy.list_events(s.id)) == len(src.list_events(s.id))


def test_migrate_refuses_what_it_cannot_copy(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    notes = tmp_path / "notes.db"
    notes.write_text("not a database\n" * 20)
    assert main(["migrate", str(tmp_path / "absent.db"), str(tmp_path / "d.db")]) == 2
    assert main(["migrate", str(notes), str(tmp_path / "d.db")]) == 1
    assert "not a SQLite database" in capsys.readouterr().err
