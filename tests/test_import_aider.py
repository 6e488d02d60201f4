"""Aider read from a real run (aider-chat 0.86.2 offline against the scripted Chat Completions server:
tests/fixtures/real_agents/aider, made by scripts/real_agents_aider.py): its chat log and its LLM
history beside it, checked call by call against what the server received; and chat logs as users
have them (lines before the first session header).
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from engine.importers import import_file
from engine.importers.detect import read_document
from engine.importers.formats.aider import parse
from engine.importers.formats.aider.llm_history import as_logged, parse_llm_history
from engine.importers.utc_times import local_utc_text
from engine.store import SessionStore
from tests.chat_requests import chat_requests, run_fixture_script

ROOT = Path(__file__).resolve().parents[1]
FIXTURE = ROOT / "tests" / "fixtures" / "real_agents" / "aider" / "edit-run-resume"
CHAT_LOG = FIXTURE / ".aider.chat.history.md"
SYNTHETIC = ROOT / "tests" / "fixtures" / "agents" / "aider" / ".aider.chat.history.md"
sys.path.insert(0, str(ROOT / "scripts"))

from real_agents_chat import load_answers  # noqa: E402

#: What Aider puts around the conversation in every request (aider 0.86 prompts): its system
#: prompt first, its reminder last, and the repository map and files in the chat as user messages
#: it answers itself.
FRAMING_USER_STARTS = (
    "Here are summaries of some files present in my git repository.",
    "I have *added these files to the chat*",
)


@pytest.fixture
def store(tmp_path: Path) -> SessionStore:
    with SessionStore(tmp_path / "sessions.db") as s:
        yield s


def framing_and_conversation(messages: list[dict[str, Any]]) -> tuple[list[str], list[tuple[str, str]]]:
    """A request's framing texts and conversation (role, text as Aider logs it), by Aider's prompts."""
    framing: list[str] = []
    conversation: list[tuple[str, str]] = []
    skip_answer = False
    for index, message in enumerate(messages):
        text = as_logged(message["content"])
        if skip_answer:
            framing.append(text)
            skip_answer = False
        elif index in (0, len(messages) - 1) and message["role"] == "system":
            framing.append(text)
        elif message["role"] == "user" and text.startswith(FRAMING_USER_STARTS):
            framing.append(text)
            skip_answer = True
        else:
            conversation.append((message["role"], text))
    return framing, conversation


def test_every_call_is_rebuilt_from_the_llm_history_as_the_server_received_it() -> None:
    sessions = parse(read_document(CHAT_LOG), "key")
    calls = []
    for session in sessions:
        transcript: list[tuple[str, str]] = []
        for parsed in session.messages:
            if parsed.starts_context:
                transcript = []
            if parsed.call is not None:
                calls.append((parsed.call, list(transcript)))
            transcript.append((parsed.message.role, parsed.message.text))
    requests = chat_requests(FIXTURE)
    assert len(calls) == len(requests) == 3
    for (call, sent), request in zip(calls, requests, strict=True):
        framing, conversation = framing_and_conversation(request["body"]["messages"])
        assert sent == conversation
        assert call.system_prompt == "\n\n".join(framing)
        assert len(framing) + len(conversation) == len(request["body"]["messages"])


def test_the_resumed_session_starts_with_the_history_aider_restored(store: SessionStore) -> None:
    """--restore-chat-history re-reads the chat log: the resumed run's first call sent that text (two
    user inputs in a row, the replies with the log's blank lines), and the session starts with it."""
    first, resumed = import_file(CHAT_LOG, store).sessions
    transcript = store.load_transcript(resumed.session_id)
    restored = chat_requests(FIXTURE)[2]["body"]["messages"][3:8]
    assert [m["role"] for m in restored] == ["user", "assistant", "user", "user", "assistant"]
    assert [(m.role, m.text) for m in transcript[:5]] == [
        (m["role"], as_logged(m["content"])) for m in restored
    ]
    assert store.list_events(first.session_id, kind="request")[-1].details["messages_sent"] == 7


def test_token_counts_are_the_providers_only_when_aider_had_them(store: SessionStore) -> None:
    """Streamed, Aider got no usage and counted itself (2.5k where the server counted 2,826): not the
    provider's usage. Not streamed (the resumed run), the count is the provider's, rounded."""
    first, resumed = import_file(CHAT_LOG, store).sessions
    answers = load_answers(FIXTURE)
    streamed = store.list_events(first.session_id, kind="request")
    assert [e.usage for e in streamed] == [None, None]
    assert [e.details["aider_counted"] for e in streamed] == [
        {"sent": 2500, "received": 32},
        {"sent": 2700, "received": 13},
    ]
    assert answers[1]["prompt_tokens"] == 2826  # what the provider really counted
    (event,) = store.list_events(resumed.session_id, kind="request")
    assert event.details["usage_rounded"] is True
    answered = answers[3]
    assert event.usage.output_tokens == answered["completion_tokens"]
    assert round(answered["prompt_tokens"], -2) == event.usage.prompt_tokens


def test_no_call_is_invented_and_aiders_own_answers_are_not_calls(store: SessionStore) -> None:
    sessions = import_file(CHAT_LOG, store).sessions
    assert sum(s.request_count for s in sessions) == len(chat_requests(FIXTURE))
    transcript = store.load_transcript(sessions[0].session_id)
    assert [m.text for m in transcript if m.role == "assistant"].count("Ok.") == 2


def test_without_the_llm_history_the_chat_log_alone_is_read(tmp_path: Path, store: SessionStore) -> None:
    shutil.copy(CHAT_LOG, tmp_path / CHAT_LOG.name)
    first, _ = import_file(tmp_path / CHAT_LOG.name, store).sessions
    transcript = store.load_transcript(first.session_id)
    assert [m.text for m in transcript] == [
        "Add a usage line to README.md",
        "I will add a usage line.\n\nREADME.md\n```\n<<<<<<< SEARCH\nhello\n=======\nhello\n"
        "Usage: run `make test`.\n>>>>>>> REPLACE\n```",
        "/run git diff",
        "What does the diff show?",
        "The diff adds one line: Usage: run `make test`.",
    ]
    assert any(
        "not logged by Aider" in n for n in store.get_session(first.session_id).metadata["import_notes"]
    )


def test_sessions_say_when_they_ran_in_utc(tmp_path: Path, store: SessionStore) -> None:
    """Aider writes local times without a zone (its ``datetime.now()``): each call's time is its
    ``TO LLM`` line's, the session's start its chat log header's, read in this machine's zone."""
    text = (FIXTURE / ".aider.llm.history").read_text()
    sent = [local_utc_text(c.sent_at.isoformat()) for c in parse_llm_history(text)]
    headers = [line.removeprefix("# aider chat started at ") for line in CHAT_LOG.read_text().splitlines()]
    starts = [local_utc_text(h) for h in headers if h[:2] == "20"]
    assert len(starts) == 2 and None not in sent
    sessions = import_file(CHAT_LOG, store).sessions
    calls = [
        e.details.get("call_utc") for s in sessions for e in store.list_events(s.session_id, kind="request")
    ]
    assert calls == sent
    metadata = [store.get_session(s.session_id).metadata for s in sessions]
    assert [m["started_utc"] for m in metadata] == starts
    first_calls = [c for c in calls if c is not None and c >= starts[1]]
    assert metadata[0]["ended_utc"] == max(c for c in calls if c < starts[1])
    assert metadata[1]["ended_utc"] == max(first_calls)
    shutil.copy(CHAT_LOG, tmp_path / CHAT_LOG.name)  # the chat log alone: only when each session started
    alone = SessionStore(tmp_path / "alone.db")
    with alone:
        logged = import_file(tmp_path / CHAT_LOG.name, alone).sessions
        assert [alone.get_session(s.session_id).metadata["ended_utc"] for s in logged] == starts


def test_a_local_time_is_read_in_this_machines_zone() -> None:
    from datetime import UTC, datetime

    naive = "2026-11-28 05:58:23"
    expected = datetime.fromisoformat(naive).astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.000Z")
    assert local_utc_text(naive) == local_utc_text("2026-11-28T05:58:23") == expected
    assert local_utc_text("2026-11-28T05:58:23+02:00") == "2026-11-28T03:58:23.000Z"  # a zone it names wins
    assert local_utc_text("not a time") is None and local_utc_text("") is None


@pytest.mark.parametrize(
    "preamble",
    [
        "> Added notes.md to the chat.\n\n",
        "#### what does cli.py do?\n\nIt parses a path argument.\n\n",
        "\nsome notes a user kept above the log\n",
    ],
    ids=["aider-notices", "a-session-cut-at-its-head", "free-text"],
)
def test_a_chat_log_with_lines_before_its_first_header_is_read(
    preamble: str, tmp_path: Path, store: SessionStore
) -> None:
    """Was refused as "not JSON" (the header had to open the file)."""
    path = tmp_path / ".aider.chat.history.md"
    path.write_text(preamble + SYNTHETIC.read_text(encoding="utf-8"), encoding="utf-8")
    result = import_file(path, store)
    assert result.format == "aider"
    whole = parse(read_document(SYNTHETIC), "k")
    assert len(result.sessions) - len(whole) == (1 if preamble.startswith("####") else 0)
    if preamble.startswith("####"):
        head = store.load_transcript(result.sessions[0].session_id)
        assert [m.text for m in head] == ["what does cli.py do?", "It parses a path argument."]


@pytest.mark.peer("aider")
def test_live_aider_run_imports_exactly(tmp_path: Path) -> None:
    out = run_fixture_script("real_agents_aider.py", tmp_path, "--scenario", "edit-run-resume")
    folder = out / "aider" / "edit-run-resume"
    sessions = parse(read_document(folder / CHAT_LOG.name), "key")
    sent = [
        (m.call.system_prompt, framing_and_conversation(r["body"]["messages"])[0])
        for m, r in zip(
            (m for s in sessions for m in s.messages if m.call is not None),
            chat_requests(folder),
            strict=True,
        )
    ]
    assert all(prompt == "\n\n".join(framing) for prompt, framing in sent)


def test_the_commit_message_call_of_an_auto_commit_is_a_call(store: SessionStore) -> None:
    """Aider commits an edit with a message its weak model writes: a call the server received that
    neither the LLM history nor a Tokens line records, only the chat log's "Commit <hash> <message>"."""
    folder = FIXTURE.parent / "auto-commit"
    (session,) = import_file(folder / CHAT_LOG.name, store).sessions
    requests = chat_requests(folder)
    events = store.list_events(session.session_id, kind="request")
    assert len(events) == len(requests) == 2
    main, commit = events
    assert commit.details["side_call"] == "commit_message"
    assert commit.details["reply"] == "docs: add a usage line to README.md"
    assert (
        commit.usage is None
        and commit.model.endswith(requests[1]["body"]["model"])
        and commit.model.endswith("mini")
    )
    assert main.model.endswith(requests[0]["body"]["model"])


def render_llm_history(calls: list[tuple[list[tuple[str, str]], str]]) -> str:
    """What Aider 0.86 writes with ``--llm-history-file`` (io.log_llm_history over
    utils.format_messages / format_content), for calls of (messages, reply)."""

    def lines(role: str, content: str) -> str:
        return "\n".join(f"{role.upper()} {line}" for line in content.splitlines())

    out = []
    for number, (messages, reply) in enumerate(calls):
        body = "\n".join(f"-------\n{lines(role, content)}" for role, content in messages)
        out.append(f"TO LLM 2026-11-28T05:55:{number:02d}\n{body}\n")
        out.append(f"LLM RESPONSE 2026-11-28T05:55:{number:02d}\n{lines('assistant', reply)}\n")
    return "".join(out)


_content = st.text(min_size=1, max_size=60).filter(lambda text: bool(text.splitlines()))


@given(
    st.lists(
        st.tuples(
            st.lists(
                st.tuples(st.sampled_from(["system", "user", "assistant"]), _content), min_size=1, max_size=6
            ),
            _content,
        ),
        min_size=1,
        max_size=4,
    )
)
def test_the_llm_history_reads_back_every_message_as_aider_logged_it(
    calls: list[tuple[list[tuple[str, str]], str]],
) -> None:
    parsed = parse_llm_history(render_llm_history(calls))
    assert [c.messages for c in parsed] == [[(role, as_logged(text)) for role, text in m] for m, _ in calls]
    assert [c.reply for c in parsed] == [as_logged(reply) for _, reply in calls]
