"""OpenCode's own database and its fork Kilo CLI's, written by the real CLIs run offline
(tests/fixtures/real_agents/{opencode,kilo}, made by scripts/real_agents_opencode.py), checked call by call against what the scripted server
received: every request event's messages are the request's messages (texts, reasoning sent back,
tool calls with their ids and arguments, tool results), in order; its usage is what the server
answered; no call is invented.
"""

from __future__ import annotations

import os
import shutil
import sqlite3
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from engine.errors import ImportFormatError
from engine.importers import agent_files, import_file
from engine.importers.formats.opencode.database import Rows
from engine.importers.formats.opencode.history import parse_rows
from engine.messages import ToolUseBlock
from engine.store import SessionStore
from tests.chat_requests import chat_requests, imported_atoms, request_atoms, run_fixture_script

ROOT = Path(__file__).resolve().parents[1]
REAL = ROOT / "tests" / "fixtures" / "real_agents"
FIXTURE = REAL / "opencode" / "tools-resume"
DATABASE = FIXTURE / "data" / "opencode" / "opencode.db"
KILO = REAL / "kilo" / "tools-resume"
KILO_DATABASE = KILO / "data" / "kilo" / "kilo.db"
sys.path.insert(0, str(ROOT / "scripts"))

from real_agents_chat import load_answers  # noqa: E402


@pytest.fixture
def store(tmp_path: Path) -> SessionStore:
    with SessionStore(tmp_path / "sessions.db") as s:
        yield s


def check_every_call(folder: Path, database: Path, store: SessionStore, *, calls: int | None = None) -> None:
    """The import of ``database`` against the request log of ``folder``, call by call."""
    result = import_file(database, store)
    (session,) = result.sessions
    requests = chat_requests(folder)
    answers = load_answers(folder)
    events = store.list_events(session.session_id, kind="request")
    transcript = store.load_transcript(session.session_id)
    assert len(events) == len(requests)
    if calls is not None:
        assert len(events) == calls
    for event, request in zip(events, requests, strict=True):
        sent = transcript[: event.details["messages_sent"]]
        assert imported_atoms(sent) == request_atoms(request["body"]["messages"])
        answered = answers[request["seq"]]
        assert event.usage is not None
        assert event.usage.prompt_tokens == answered["prompt_tokens"]
        assert event.usage.cache_read_input_tokens == answered["prompt_tokens_details"]["cached_tokens"]
        assert event.usage.output_tokens == answered["completion_tokens"]
        assert event.model == request["body"]["model"]
    reasoning = [e.details.get("reasoning_tokens") for e in events]
    assert reasoning == [
        answers[r["seq"]]["completion_tokens_details"]["reasoning_tokens"] or None for r in requests
    ]


@pytest.mark.parametrize(
    ("folder", "database"), [(FIXTURE, DATABASE), (KILO, KILO_DATABASE)], ids=["opencode", "kilo"]
)
def test_every_call_is_the_request_the_cli_sent_with_the_usage_it_was_answered(
    folder: Path, database: Path, store: SessionStore
) -> None:
    check_every_call(folder, database, store, calls=5)


def test_kilo_and_opencode_databases_are_told_apart(store: SessionStore) -> None:
    assert import_file(KILO_DATABASE, store).format == "kilo"
    assert import_file(DATABASE, store).format == "opencode"


def test_the_session_keeps_its_folder_title_and_the_parallel_calls_of_one_step(store: SessionStore) -> None:
    (session,) = import_file(DATABASE, store).sessions
    assert session.project == "/tmp/ctxdesk-real-agents/opencode-tools-resume/repo"
    row = store.get_session(session.session_id)
    assert row.metadata["title"] == "Scripted run"
    transcript = store.load_transcript(session.session_id)
    first = next(m for m in transcript if m.role == "assistant")
    assert [b.name for b in first.blocks if isinstance(b, ToolUseBlock)] == ["bash", "read"]
    assert len(transcript[transcript.index(first) + 1].tool_result_ids) == 2


def test_what_the_database_does_not_keep_is_measured_once_from_the_provider_count(
    store: SessionStore,
) -> None:
    """OpenCode keeps neither its system prompt nor its tools: the gap at the first call is carried."""
    (session,) = import_file(DATABASE, store).sessions
    events = store.list_events(session.session_id, kind="request")
    assert events[0].details["unlogged_prefix_tokens"] > 1_000
    assert events[0].projected_tokens == events[0].usage.prompt_tokens
    for event in events[1:]:
        assert abs(event.projected_tokens - event.usage.prompt_tokens) / event.usage.prompt_tokens < 0.05


def test_a_database_imported_again_adds_nothing_and_a_grown_one_only_its_new_calls(
    store: SessionStore, tmp_path: Path
) -> None:
    """OpenCode keeps writing the same database: importing it as it grows ends where one import
    of the whole ends (the second run's prompt and calls added once)."""
    growing = tmp_path / "opencode.db"
    shutil.copy(DATABASE, growing)
    with sqlite3.connect(growing) as conn:  # the database as it was before the second run
        (cut,) = conn.execute(
            "SELECT m.time_created FROM message m JOIN part p ON p.message_id = m.id WHERE p.data LIKE '%Show me%'"
        ).fetchone()
        conn.execute(
            "DELETE FROM part WHERE message_id IN (SELECT id FROM message WHERE time_created >= ?)", (cut,)
        )
        conn.execute("DELETE FROM message WHERE time_created >= ?", (cut,))
    conn.close()
    first = import_file(growing, store)
    assert first.request_count == 3
    assert import_file(growing, store).status == "unchanged"
    shutil.copy(DATABASE, growing)
    grown = import_file(growing, store)
    assert grown.status == "updated"
    (session,) = store.list_sessions()
    events = store.list_events(session.id, kind="request")
    with SessionStore(tmp_path / "whole.db") as whole:
        (once,) = import_file(DATABASE, whole).sessions
        expected = whole.list_events(once.session_id, kind="request")
        assert [(e.usage, e.details["messages_sent"]) for e in events] == [
            (e.usage, e.details["messages_sent"]) for e in expected
        ]
        assert store.load_transcript(session.id) == whole.load_transcript(once.session_id)


def test_import_from_opencode_finds_the_database_where_opencode_keeps_it(tmp_path: Path) -> None:
    data = tmp_path / "share"
    shutil.copytree(DATABASE.parent, data / "opencode")
    assert agent_files("opencode", env={"XDG_DATA_HOME": str(data)}, home=tmp_path) == [
        data / "opencode" / "opencode.db"
    ]
    home = tmp_path / "home"
    shutil.copytree(DATABASE.parent, home / ".local" / "share" / "opencode")
    assert agent_files("opencode", env={}, home=home) == [
        home / ".local" / "share" / "opencode" / "opencode.db"
    ]


@pytest.mark.parametrize(
    "agent",
    [
        pytest.param("opencode", marks=pytest.mark.peer("opencode")),
        pytest.param("kilo", marks=pytest.mark.peer("kilo")),
    ],
)
def test_live_run_imports_exactly(agent: str, tmp_path: Path, store: SessionStore) -> None:
    """The installed CLI, run now against the scripted server, imports call for call."""
    out = run_fixture_script(
        "real_agents_opencode.py", tmp_path, "--agent", agent, "--scenario", "tools-resume"
    )
    folder = out / agent / "tools-resume"
    check_every_call(folder, folder / "data" / agent / f"{agent}.db", store, calls=5)


SUB_TASK = "Find the file that prints hello."


def first_user_text(body: dict) -> str:
    content = next(m for m in body["messages"] if m["role"] == "user")["content"]
    return content if isinstance(content, str) else content[0]["text"]


@pytest.mark.parametrize("app", ["opencode", "kilo"])
def test_a_sub_agent_is_a_child_session_and_each_side_sent_what_it_imports(
    app: str, store: SessionStore
) -> None:
    folder = REAL / app / "subagent"
    sessions = import_file(folder / "data" / app / f"{app}.db", store).sessions
    (parent,) = [s for s in sessions if s.parent_session_id is None]
    (child,) = [s for s in sessions if s.parent_session_id is not None]
    assert child.parent_session_id == parent.session_id
    requests = chat_requests(folder)
    answers = load_answers(folder)
    by_side = {
        parent.session_id: [r for r in requests if first_user_text(r["body"]) != SUB_TASK],
        child.session_id: [r for r in requests if first_user_text(r["body"]) == SUB_TASK],
    }
    assert [len(v) for v in by_side.values()] == [4, 2]
    for session_id, sent in by_side.items():
        events = store.list_events(session_id, kind="request")
        transcript = store.load_transcript(session_id)
        assert len(events) == len(sent)
        for event, request in zip(events, sent, strict=True):
            assert imported_atoms(transcript[: event.details["messages_sent"]]) == request_atoms(
                request["body"]["messages"]
            )
            assert event.usage.prompt_tokens == answers[request["seq"]]["prompt_tokens"]
    result = next(m for m in store.load_transcript(parent.session_id) if m.tool_result_ids)
    assert (
        f'<task id="{child.session_id.rsplit(":", 1)[-1]}"' in result.text or "<task_result>" in result.text
    )


def test_a_refused_call_is_a_failed_request_and_nothing_of_it_is_sent_again(store: SessionStore) -> None:
    """The provider answered 400: the call is there, failed, without usage, and the next run's
    request (both prompts, no reply between) is what the import says was sent."""
    folder = REAL / "opencode" / "provider-error"
    (session,) = import_file(folder / "data" / "opencode" / "opencode.db", store).sessions
    requests = chat_requests(folder)
    events = store.list_events(session.session_id, kind="request")
    assert len(events) == len(requests) == 2
    failed, ok = events
    assert failed.outcome == "provider_error" and failed.usage is None
    assert failed.details["failure"]["status"] == 400
    assert "this request was refused" in failed.details["failure"]["message"]
    assert ok.usage.prompt_tokens == load_answers(folder)[2]["prompt_tokens"]
    transcript = store.load_transcript(session.session_id)
    for event, request in zip(events, requests, strict=True):
        assert imported_atoms(transcript[: event.details["messages_sent"]]) == request_atoms(
            request["body"]["messages"]
        )


def test_kilo_keeps_no_trace_of_a_refused_call(store: SessionStore) -> None:
    """Kilo CLI 7.7.7 writes no message for a call the provider refused (OpenCode writes one with its
    error): the import has the calls the database has, exactly, and cannot have the refused one."""
    folder = REAL / "kilo" / "provider-error"
    (session,) = import_file(folder / "data" / "kilo" / "kilo.db", store).sessions
    refused, second = chat_requests(folder)
    assert refused["body"]["messages"][-1]["content"][0]["text"] == '"Say hello."'
    (event,) = store.list_events(session.session_id, kind="request")
    transcript = store.load_transcript(session.session_id)
    assert imported_atoms(transcript[: event.details["messages_sent"]]) == request_atoms(
        second["body"]["messages"]
    )
    assert event.usage.prompt_tokens == load_answers(folder)[second["seq"]]["prompt_tokens"]


@pytest.mark.parametrize("app", ["opencode", "kilo"])
def test_an_auto_compaction_is_recorded_and_later_calls_send_only_what_followed_it(
    app: str, store: SessionStore
) -> None:
    """The context passed the model's usable window (a small ``limit`` in the config): the agent
    summarised (a call with its own prompt and no tools, sent the history rendered as text) and went
    on from its "What did we do so far?" exchange. The agent's calls equal the server's requests;
    the summary call is marked and counted with its usage; one compaction event, by the agent."""
    folder = REAL / app / "compact"
    (session,) = import_file(folder / "data" / app / f"{app}.db", store).sessions
    requests = chat_requests(folder)
    answers = load_answers(folder)
    events = store.list_events(session.session_id, kind="request")
    transcript = store.load_transcript(session.session_id)
    assert len(events) == len(requests)
    summaries = [r for r in requests if not r["body"].get("tools")]
    assert len(summaries) == 1
    (compaction,) = store.list_events(session.session_id, kind="compaction")
    starts = [0, compaction.message_seq]  # where each segment's calls start sending from
    for event, request in zip(events, requests, strict=True):
        assert event.usage.prompt_tokens == answers[request["seq"]]["prompt_tokens"]
        if request in summaries:
            assert event.details["compaction_call"] is True
            continue
        sent = transcript[starts[event.details["segment"]] : event.details["messages_sent"]]
        assert imported_atoms(sent) == request_atoms(request["body"]["messages"])
    assert compaction.details["trigger_kind"] == "auto" and compaction.details["by"] == "agent"
    assert transcript[compaction.message_seq].text.startswith("What did we do so far?")
    # the summary the session went on from: the summarizer's reply (the scripted server's "OK.")
    (snapshot,) = store.list_snapshots(session.session_id)
    assert (
        compaction.details["summary"]
        == snapshot.summary
        == transcript[compaction.message_seq + 1].text
        == "OK."
    )


def test_a_session_growing_in_the_write_ahead_log_is_imported_before_any_checkpoint(
    store: SessionStore, tmp_path: Path
) -> None:
    """OpenCode writes new messages to ``opencode.db-wal``; the database file itself stays as it was
    until a checkpoint. A re-import sees the log grow."""
    growing = tmp_path / "opencode.db"
    shutil.copy(DATABASE, growing)
    conn = sqlite3.connect(growing)
    conn.execute("PRAGMA journal_mode=WAL")  # as OpenCode keeps it
    with conn:
        (cut,) = conn.execute(
            "SELECT m.time_created FROM message m JOIN part p ON p.message_id = m.id WHERE p.data LIKE '%Show me%'"
        ).fetchone()
        conn.execute(
            "DELETE FROM part WHERE message_id IN (SELECT id FROM message WHERE time_created >= ?)", (cut,)
        )
        conn.execute("DELETE FROM message WHERE time_created >= ?", (cut,))
    conn.close()
    assert import_file(growing, store).request_count == 3
    before = growing.stat()
    writer = sqlite3.connect(growing)
    try:
        writer.execute("PRAGMA wal_autocheckpoint=0")
        writer.execute("ATTACH DATABASE ? AS whole", (str(DATABASE),))
        writer.execute(
            "INSERT INTO message SELECT * FROM whole.message WHERE id NOT IN (SELECT id FROM message)"
        )
        writer.execute("INSERT INTO part SELECT * FROM whole.part WHERE id NOT IN (SELECT id FROM part)")
        writer.commit()
        # the database file as it was (size and time): only the write-ahead log tells it grew
        os.utime(growing, ns=(before.st_atime_ns, before.st_mtime_ns))
        assert growing.stat().st_size == before.st_size and Path(f"{growing}-wal").stat().st_size > 0
        grown = import_file(growing, store)
        assert grown.status == "updated"
        (session,) = store.list_sessions()
        assert len(store.list_events(session.id, kind="request")) == 5
    finally:
        writer.close()


def test_a_sqlite_file_that_is_no_agents_database_is_refused_naming_what_it_lacks(
    store: SessionStore, tmp_path: Path
) -> None:
    other = tmp_path / "notes.db"
    with sqlite3.connect(other) as conn:
        conn.execute("CREATE TABLE notes (id INTEGER PRIMARY KEY, text TEXT)")
    conn.close()
    with pytest.raises(
        ImportFormatError, match="without OpenCode's tables \\(missing message, part, session\\)"
    ):
        import_file(other, store)
    assert store.list_sessions() == []


_status = st.sampled_from(["completed", "error", "running", "pending"])
_part = st.one_of(
    st.builds(lambda text: {"type": "text", "text": text}, st.text(max_size=20)),
    st.builds(lambda text: {"type": "reasoning", "text": text}, st.text(max_size=20)),
    st.builds(
        lambda status, compacted: {
            "type": "tool",
            "tool": "bash",
            "state": {
                "status": status,
                "input": {"command": "ls"},
                "output": "out",
                "error": "boom",
                "time": {"compacted": 1} if compacted else {},
            },
        },
        _status,
        st.booleans(),
    ),
    st.just({"type": "step-start"}),
    st.just({"type": "step-finish", "tokens": {"input": 5, "output": 2, "cache": {"read": 1}}}),
    st.just({"type": "patch"}),
)


@given(st.lists(st.lists(_part, max_size=8), min_size=1, max_size=4))
def test_every_tool_call_is_answered_right_after_its_reply_whatever_its_state(
    replies: list[list[dict[str, Any]]],
) -> None:
    """OpenCode sends a result for every tool call (its output, its error, the "cleared" note, or
    "interrupted"): the import puts each call's results, in its order, right after it."""
    messages: list[tuple[str, str, dict[str, Any]]] = [("msg_0", "ses_1", {"role": "user"})]
    parts: list[tuple[str, dict[str, Any]]] = [("msg_0", {"type": "text", "text": "hi"})]
    for number, reply in enumerate(replies, start=1):
        messages.append((f"msg_{number}", "ses_1", {"role": "assistant", "modelID": "gpt-4o"}))
        call_ids = iter(range(100))
        parts += [(f"msg_{number}", {**p, "callID": f"c{number}_{next(call_ids)}"}) for p in reply]
    rows = Rows(sessions=[{"id": "ses_1", "directory": "/r", "title": "t"}], messages=messages, parts=parts)
    (session,) = parse_rows(rows)
    parsed = session.messages
    for index, message in enumerate(parsed):
        uses = [b.id for b in message.message.blocks if isinstance(b, ToolUseBlock)]
        if uses:
            assert parsed[index + 1].message.tool_result_ids == uses


@pytest.mark.parametrize("app", ["opencode", "kilo"])
def test_a_prompt_refused_as_too_long_is_a_failed_call_and_the_compaction_after_it_is_reactive(
    app: str, store: SessionStore
) -> None:
    """The provider answers 400 context_length_exceeded: the agent compacts (an ``overflow``
    compaction part) and goes on. It keeps no message of the refused call: the import has it, failed
    as prompt_too_long, and the compaction names it as the call it followed."""
    folder = REAL / app / "overflow"
    (session,) = import_file(folder / "data" / app / f"{app}.db", store).sessions
    requests = chat_requests(folder)
    events = store.list_events(session.session_id, kind="request")
    refused = [e for e in events if e.outcome == "context_length_exceeded"]
    assert [r["status"] for r in requests].count(400) == len(refused) == 1
    (compaction,) = store.list_events(session.session_id, kind="compaction")
    assert compaction.details["trigger_kind"] == "reactive" and compaction.details["by"] == "agent"
    assert compaction.details["after_failed_call"] == refused[0].seq
    transcript = store.load_transcript(session.session_id)
    starts = [0, compaction.message_seq]
    agent = [r for r in requests if r["body"].get("tools") and r["status"] == 200]
    answered = [e for e in events if e.usage is not None and not e.details.get("compaction_call")]
    for event, request in zip(answered, agent, strict=True):
        sent = transcript[starts[event.details["segment"]] : event.details["messages_sent"]]
        assert imported_atoms(sent) == request_atoms(request["body"]["messages"])
    summary_calls = [e for e in events if e.details.get("compaction_call")]
    summaries = [r for r in requests if not r["body"].get("tools")]
    # Kilo summarises in chunks (2 calls) and keeps one summary message with no token counts: the
    # calls and their usage come from the messages its event log shows removed
    assert len(summary_calls) == len(summaries) == (1 if app == "opencode" else 2)
    assert len(events) == len(requests)
    for summary, asked in zip(summary_calls, summaries, strict=True):
        assert summary.usage.prompt_tokens == load_answers(folder)[asked["seq"]]["prompt_tokens"]
