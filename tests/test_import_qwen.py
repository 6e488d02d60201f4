"""Qwen Code read from a real run (@qwen-code/qwen-code 0.24.4 offline against the scripted Chat
Completions server: tests/fixtures/real_agents/qwen, made by scripts/real_agents_qwen.py): every
call of the chat recording equals the request the server received (texts, tool calls with ids and
arguments, tool results, in order), except what Qwen Code sends and does not record: the
``<system-reminder>`` texts before a first or resumed prompt. The usage is what the server answered."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

from engine.importers import agent_files, import_file
from engine.store import SessionStore
from tests.chat_requests import Atom, chat_requests, imported_atoms, request_atoms, run_fixture_script

ROOT = Path(__file__).resolve().parents[1]
FIXTURE = ROOT / "tests" / "fixtures" / "real_agents" / "qwen" / "tools-resume"
sys.path.insert(0, str(ROOT / "scripts"))

from real_agents_chat import load_answers  # noqa: E402

REMINDER = "<system-reminder>"


@pytest.fixture
def store(tmp_path: Path) -> SessionStore:
    with SessionStore(tmp_path / "sessions.db") as s:
        yield s


def chat_file(folder: Path) -> Path:
    (path,) = sorted(folder.glob("projects/*/chats/*.jsonl"))
    return path


def without_reminders(atoms: list[Atom]) -> tuple[list[Atom], list[str]]:
    kept = [a for a in atoms if not (a[0] == "text" and a[1] == "user" and a[2].startswith(REMINDER))]
    return kept, [a[2] for a in atoms if a not in kept]


def check_every_call(folder: Path, store: SessionStore) -> None:
    (session,) = import_file(chat_file(folder), store).sessions
    requests = chat_requests(folder)
    answers = load_answers(folder)
    events = store.list_events(session.session_id, kind="request")
    transcript = store.load_transcript(session.session_id)
    assert len(events) == len(requests) == 5
    for event, request in zip(events, requests, strict=True):
        sent, reminders = without_reminders(request_atoms(request["body"]["messages"]))
        assert reminders and all(r.startswith(REMINDER) for r in reminders)
        assert imported_atoms(transcript[: event.details["messages_sent"]]) == sent
        answered = answers[request["seq"]]
        assert event.usage.prompt_tokens == answered["prompt_tokens"]
        assert event.usage.cache_read_input_tokens == answered["prompt_tokens_details"]["cached_tokens"]
        assert event.usage.output_tokens == answered["completion_tokens"]
        assert event.model == request["body"]["model"]


def test_every_call_is_the_request_qwen_sent_but_its_unrecorded_reminders(store: SessionStore) -> None:
    check_every_call(FIXTURE, store)


def test_thoughts_are_kept_with_their_reply_and_counted(store: SessionStore) -> None:
    (session,) = import_file(chat_file(FIXTURE), store).sessions
    transcript = store.load_transcript(session.session_id)
    first = next(m for m in transcript if m.role == "assistant")
    assert first.blocks[0].thinking == "I should look before editing."
    events = store.list_events(session.session_id, kind="request")
    assert (
        events[0].details["reasoning_tokens"]
        == load_answers(FIXTURE)[1]["completion_tokens_details"]["reasoning_tokens"]
    )
    assert session.project == "/tmp/ctxdesk-real-agents/qwen-tools-resume/repo"


def test_the_unrecorded_prefix_is_measured_from_the_first_call(store: SessionStore) -> None:
    (session,) = import_file(chat_file(FIXTURE), store).sessions
    events = store.list_events(session.session_id, kind="request")
    assert events[0].details["unlogged_prefix_tokens"] > 5_000  # system prompt, tools, the reminders
    assert events[0].projected_tokens == events[0].usage.prompt_tokens


def test_import_from_qwen_finds_its_chats(tmp_path: Path) -> None:
    home = tmp_path / "home"
    shutil.copytree(FIXTURE / "projects", home / ".qwen" / "projects")
    (found,) = agent_files("qwen", env={}, home=home)
    assert found.name == chat_file(FIXTURE).name


@pytest.mark.peer("qwen")
def test_live_qwen_run_imports_exactly(tmp_path: Path, store: SessionStore) -> None:
    out = run_fixture_script("real_agents_qwen.py", tmp_path, "--scenario", "tools-resume")
    check_every_call(out / "qwen" / "tools-resume", store)


SUB_TASK = "Find the file that prints hello."


def test_a_sub_agent_is_a_child_session_however_its_file_is_passed(
    store: SessionStore, tmp_path: Path
) -> None:
    """Qwen Code keeps a sub-agent's transcript in ``subagents/<session>/``, its usage and its reply
    on separate lines: imported with its chat, it is a child session whose calls equal the server's
    requests for it (but the unrecorded reminders); passed alone, it is the same child."""
    folder = FIXTURE.parent / "subagent"
    sessions = import_file(chat_file(folder), store).sessions
    (parent,) = [s for s in sessions if s.parent_session_id is None]
    (child,) = [s for s in sessions if s.parent_session_id is not None]
    assert child.parent_session_id == parent.session_id
    requests = chat_requests(folder)
    answers = load_answers(folder)
    subs = [r for r in requests if SUB_TASK in str(r["body"]["messages"][1]["content"])]
    mains = [r for r in requests if r not in subs]
    for session_id, sent in ((parent.session_id, mains), (child.session_id, subs)):
        events = store.list_events(session_id, kind="request")
        transcript = store.load_transcript(session_id)
        assert len(events) == len(sent)
        for event, request in zip(events, sent, strict=True):
            atoms, _ = without_reminders(request_atoms(request["body"]["messages"]))
            assert imported_atoms(transcript[: event.details["messages_sent"]]) == atoms
            assert event.usage.prompt_tokens == answers[request["seq"]]["prompt_tokens"]
            assert event.usage.output_tokens == answers[request["seq"]]["completion_tokens"]
    (alone,) = import_file(next(folder.glob("projects/*/subagents/*/*.jsonl")), store).sessions
    assert alone.session_id == child.session_id and alone.parent_session_id == parent.session_id
    assert len(store.list_sessions()) == 2


def test_a_sub_agent_file_passed_before_its_chat_is_linked_once_the_chat_comes(store: SessionStore) -> None:
    folder = FIXTURE.parent / "subagent"
    (alone,) = import_file(next(folder.glob("projects/*/subagents/*/*.jsonl")), store).sessions
    sessions = import_file(chat_file(folder), store).sessions
    (parent,) = [s for s in sessions if s.parent_session_id is None]
    assert len(store.list_sessions()) == 2
    assert store.get_session(alone.session_id).parent_session_id == parent.session_id
    assert len(store.list_events(alone.session_id, kind="request")) == 2


def test_a_refused_call_is_failed_its_prompt_is_sent_again_and_the_memory_agent_is_counted(
    store: SessionStore,
) -> None:
    """A 400 ends the first run: Qwen Code records it only in its telemetry (api_error); resumed, it
    sends the unanswered prompt again, with the new one. Its managed memory extractor then calls the
    model: a call the chat shows only in its telemetry (its usage; what it was sent is not recorded)."""
    folder = FIXTURE.parent / "provider-error"
    (session,) = import_file(chat_file(folder), store).sessions
    requests = chat_requests(folder)
    answers = load_answers(folder)
    events = store.list_events(session.session_id, kind="request")
    transcript = store.load_transcript(session.session_id)
    assert len(events) == len(requests) == 3
    failed, answered, memory = events
    assert failed.outcome == "provider_error" and failed.usage is None
    assert failed.details["failure"]["status"] == 400
    assert memory.details["side_call"].startswith("managed-auto-memory-extractor")
    for event, request in zip((failed, answered), requests[:2], strict=True):
        sent = transcript[: event.details["messages_sent"]]
        atoms, _ = without_reminders(request_atoms(request["body"]["messages"]))
        assert imported_atoms(sent) == atoms
    for event, request in zip((answered, memory), requests[1:], strict=True):
        assert event.usage.prompt_tokens == answers[request["seq"]]["prompt_tokens"]
        assert event.usage.output_tokens == answers[request["seq"]]["completion_tokens"]


def test_a_chat_compression_restarts_the_history_with_what_qwen_kept(store: SessionStore) -> None:
    """The first reply reports a prompt past Qwen Code's compression threshold (padded usage): Qwen
    asks for a summary (a call the chat shows only in telemetry), records the compressed history it
    goes on with (``chat_compression``: the summary as a user turn, its acknowledgement, the kept
    turns), and every later call sends that, then what follows."""
    folder = FIXTURE.parent / "compress"
    (session,) = import_file(chat_file(folder), store).sessions
    requests = chat_requests(folder)
    answers = load_answers(folder)
    events = store.list_events(session.session_id, kind="request")
    transcript = store.load_transcript(session.session_id)
    assert len(events) == len(requests)
    (compaction,) = store.list_events(session.session_id, kind="compaction")
    assert compaction.details["trigger_kind"] == "auto" and compaction.details["before_tokens"] > 90_000
    starts = [0, compaction.message_seq]
    summaries = [
        r for r in requests if "summarizes a conversation" in str(r["body"]["messages"][-1]["content"])
    ]
    (summary_call,) = [e for e in events if e.details.get("compaction_call")]
    assert len(summaries) == 1
    assert summary_call.usage.prompt_tokens == answers[summaries[0]["seq"]]["prompt_tokens"]
    agent_calls = [e for e in events if not e.details.get("compaction_call")]
    for event, request in zip(agent_calls, [r for r in requests if r not in summaries], strict=True):
        sent = transcript[starts[event.details["segment"]] : event.details["messages_sent"]]
        atoms, _ = without_reminders(request_atoms(request["body"]["messages"]))
        assert imported_atoms(sent) == atoms
        assert event.usage.prompt_tokens == answers[request["seq"]]["prompt_tokens"]
