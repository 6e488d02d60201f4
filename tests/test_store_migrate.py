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
    assert all(" 0 sessions copied, 0 updated (0 rows)" in line for line in out.getvalue().splitlines())
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


def _grow(path: Path, sid: str) -> None:
    """What a source gains after a first copy: messages, a call with usage (its cost row), a request
    naming an old and a new event, a snapshot, a blob, a cached summary, a tool."""
    with SessionStore(path) as s:
        old_event = s.list_events(sid)[-1].id
        s.append_messages(
            sid, [user("and now?"), assistant("done")], tokenizer=TOKENIZER,
            usages=[None, ProviderUsage(input_tokens=30, output_tokens=4, cache_creation_input_tokens=7)],
        )  # fmt: skip
        new_event = s.record_event(
            sid,
            ContextEvent(
                kind="request", model="claude-sonnet-4-5", message_seq=5, components=ComponentTokens(conversation=30),
                usage=ProviderUsage(input_tokens=30, output_tokens=4, cache_creation_input_tokens=7),
            ),
        )  # fmt: skip
        s.record_event(sid, ContextEvent(kind="note", reason="later"))
        s.write_snapshot(
            sid, [user("shorter")], through_seq=5, summary="t", tokens=1, strategy="y", event_id=new_event
        )
        s.put_blob(sid, "more output", tool_name="bash", tool_use_id="t2")
        s.save_context_state(
            sid,
            strategy="rolling",
            range_start=2,
            range_end=4,
            summary="r2",
            summary_tokens=1,
            summarizer="offline",
        )
        s.upsert_tools(sid, [ToolRecord(name="grep", tokens=3, definition={"name": "grep"})])
        for event_id in (old_event, new_event):
            s.record_request(
                sid,
                RequestRecord(api="anthropic_messages", event_id=event_id, input_tokens=30,
                              body={"model": "m", "messages": [{"role": "user", "content": "and now?"}]}),
            )  # fmt: skip


def _costs(store: Any, sid: str) -> list[tuple[Any, ...]]:
    with store.transaction() as conn:
        rows = conn.execute(
            "SELECT e.seq, c.call_index, c.total_usd FROM request_costs c JOIN context_events e ON e.id = c.event_id"
            f" WHERE c.session_id = {store.P} ORDER BY e.seq",
            (sid,),
        ).fetchall()
    return [tuple(r) for r in rows]


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_rerun_after_the_source_grew_copies_what_grew_once(backend: str, tmp_path: Path) -> None:
    source = tmp_path / "a.db"
    _fill(source, "a")
    with open_store(new_target(backend, tmp_path / "dst")) as dst:
        copy_database(source, dst)
        _grow(source, "a-parent")
        with SessionStore(source, read_only=True) as src:
            expected = _dump(src)
        with SessionStore(source) as src:
            expected_costs = _costs(src, "a-parent")
        report = copy_database(source, dst)
        assert (report.copied, report.grown, report.skipped) == ([], ["a-parent"], ["a-child"])
        assert report.rows["messages"] == 2 and report.rows["context_events"] == 2
        assert report.rows["model_requests"] == 2 and report.rows["session_snapshots"] == 1
        assert _dump(dst) == expected
        assert _costs(dst, "a-parent") == expected_costs and len(expected_costs) == 1
        again = copy_database(source, dst)
        assert (again.grown, again.rows, sorted(again.skipped)) == ([], {}, ["a-child", "a-parent"])
        assert _dump(dst) == expected


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_source_that_rewrote_what_was_copied_is_not_merged(
    backend: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = tmp_path / "a.db"
    _fill(source, "a")
    dst = new_target(backend, tmp_path / "dst")
    assert main(["migrate", str(source), dst]) == 0
    with open_store(dst, read_only=True) as copy:
        before = _dump(copy)
    with SessionStore(source) as s:  # an import replacing a rewritten tail, then growing past it
        s.truncate_messages("a-parent", 2, event_source="import:")
        s.append_messages("a-parent", [user("rewritten"), user("x"), user("y")], tokenizer=TOKENIZER)
        s.append_messages("a-child", [assistant("child grew")], tokenizer=TOKENIZER)
    capsys.readouterr()
    assert main(["migrate", str(source), dst]) == 1
    err = capsys.readouterr().err
    assert "a-parent" in err and "messages seq 3 differs" in err and "not merged" in err
    with open_store(dst, read_only=True) as copy:
        after = _dump(copy)
    assert after["a-parent"] == before["a-parent"]  # left as it was
    assert [m["message"]["content"] for m in after["a-child"]["messages"]][-1] == "child grew"
