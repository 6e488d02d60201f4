"""Cline CLI read from a real run (npm cline 3.0.65 offline, its openai-compatible provider pointed
at the scripted Chat Completions server: tests/fixtures/real_agents/cline, made by
scripts/real_agents_cline.py): every call of the session's ``<id>.messages.json`` equals the
request the server received (the system prompt, the user text Cline keeps wrapped in
``<user_input>`` and sends bare, parallel tool calls, results kept as objects and sent as their
JSON), with the usage the server answered; a refused call is a failed request."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from engine.importers import agent_files, folder_files, import_file
from engine.importers.formats.cline_cli import sent_result_text, sent_user_text
from engine.store import SessionStore
from tests.chat_requests import (
    chat_requests,
    imported_atoms,
    request_atoms,
    run_fixture_script,
    system_prompt_of,
)

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "fixtures" / "real_agents" / "cline"
sys.path.insert(0, str(ROOT / "scripts"))

from real_agents_chat import load_answers  # noqa: E402


@pytest.fixture
def store(tmp_path: Path) -> SessionStore:
    with SessionStore(tmp_path / "sessions.db") as s:
        yield s


def messages_file(folder: Path) -> Path:
    (path,) = sorted(folder.glob("sessions/*/*.messages.json"))
    return path


def check_every_call(folder: Path, store: SessionStore, calls: int) -> None:
    result = import_file(messages_file(folder), store)
    assert result.format == "cline-cli"
    (session,) = result.sessions
    requests = chat_requests(folder)
    answers = load_answers(folder)
    events = store.list_events(session.session_id, kind="request")
    transcript = store.load_transcript(session.session_id)
    system = store.get_session(session.session_id).metadata["system_prompt"]
    assert len(events) == len(requests) == calls
    for event, request in zip(events, requests, strict=True):
        body = request["body"]
        assert system == system_prompt_of(body)
        assert imported_atoms(transcript[: event.details["messages_sent"]]) == request_atoms(body["messages"])
        answered = answers[request["seq"]]
        assert event.usage.prompt_tokens == answered["prompt_tokens"]
        assert event.usage.cache_read_input_tokens == answered["prompt_tokens_details"]["cached_tokens"]
        assert event.usage.output_tokens == answered["completion_tokens"]
        assert event.model == body["model"]


def test_every_call_is_the_request_cline_sent_with_the_usage_it_was_answered(store: SessionStore) -> None:
    check_every_call(FIXTURES / "tools-resume", store, calls=5)


def test_the_session_keeps_cline_s_own_facts(store: SessionStore) -> None:
    (session,) = import_file(messages_file(FIXTURES / "tools-resume"), store).sessions
    stored = store.get_session(session.session_id)
    assert session.project == "/tmp/ctxdesk-real-agents/cline-tools-resume/repo"
    assert stored.metadata["cline_version"] == "3.0.65"
    # the resumed run's terminal UI was left with Ctrl+C: Cline records the run failed and shows an
    # error after the last reply, which answers no model call
    assert stored.metadata["status"] == "failed"
    (error,) = stored.metadata["cline_errors"]
    assert "disconnected before request was resolved" in error
    transcript = store.load_transcript(session.session_id)
    assert transcript[0].meta["mode"] == "act"
    assert [m.tool_result_ids for m in transcript[2:4]] == [
        ["call_scripted_0001_0"],
        ["call_scripted_0001_1"],
    ]


def test_a_refused_call_is_a_failed_request_never_sent_back(store: SessionStore) -> None:
    folder = FIXTURES / "provider-error"
    (session,) = import_file(messages_file(folder), store).sessions
    (request,) = chat_requests(folder)
    (event,) = store.list_events(session.session_id, kind="request")
    assert event.outcome == "provider_error" and event.usage is None
    assert "scripted: this request was refused" in event.details["failure"]["message"]
    transcript = store.load_transcript(session.session_id)
    assert [m.role for m in transcript] == ["user"]  # the error Cline shows is not a message sent
    assert imported_atoms(transcript[: event.details["messages_sent"]]) == request_atoms(
        request["body"]["messages"]
    )


@pytest.mark.parametrize(
    ("kept", "sent", "mode"),
    [
        ('<user_input mode="act">Say hello.</user_input>', "Say hello.", "act"),
        ('<user_input mode="plan">two\nlines</user_input>', "two\nlines", "plan"),
        ("no wrapper", "no wrapper", None),
        ('<user_input mode="act">unclosed', '<user_input mode="act">unclosed', None),
    ],
    ids=["act", "plan-multiline", "bare", "unclosed"],
)
def test_user_text_is_sent_without_its_wrapper(kept: str, sent: str, mode: str | None) -> None:
    assert sent_user_text(kept) == (sent, mode)


@pytest.mark.parametrize(
    ("kept", "sent"),
    [
        ("plain", "plain"),
        (
            [{"query": "ls", "result": "a\n", "success": True}],
            '[{"query":"ls","result":"a\\n","success":true}]',
        ),
        ([{"query": "é", "result": "ü"}], '[{"query":"é","result":"ü"}]'),
    ],
    ids=["string", "objects", "non-ascii"],
)
def test_tool_results_are_sent_as_javascript_would_stringify_them(kept: object, sent: str) -> None:
    assert sent_result_text(kept) == sent


def test_import_from_cline_cli_finds_its_sessions(tmp_path: Path) -> None:
    home = tmp_path / "home"
    shutil.copytree(FIXTURES / "tools-resume" / "sessions", home / ".cline" / "data" / "sessions")
    found = agent_files("cline-cli", env={}, home=home)
    assert [p.name.endswith(".messages.json") for p in found] == [True] and home in found[0].parents
    moved = tmp_path / "elsewhere"
    shutil.copytree(FIXTURES / "tools-resume" / "sessions", moved / "sessions")
    assert len(agent_files("cline-cli", env={"CLINE_DATA_DIR": str(moved)}, home=home)) == 1
    assert len(agent_files("cline-cli", env={"CLINE_DIR": str(tmp_path / "none")}, home=home)) == 0


def test_a_folder_import_takes_the_conversation_not_the_run_facts_beside_it() -> None:
    folder = FIXTURES / "tools-resume" / "sessions"
    assert len(list(folder.glob("*/*.json"))) == 2  # the conversation and the run's facts beside it
    assert [p.name.endswith(".messages.json") for p in folder_files(folder)] == [True]


@pytest.mark.peer("cline")
def test_live_cline_run_imports_exactly(tmp_path: Path, store: SessionStore) -> None:
    out = run_fixture_script("real_agents_cline.py", tmp_path, "--scenario", "tools-resume")
    check_every_call(out / "cline" / "tools-resume", store, calls=5)


@given(text=st.text(), mode=st.sampled_from(["act", "plan", "yolo"]))
def test_any_wrapped_text_is_sent_as_typed(text: str, mode: str) -> None:
    assert sent_user_text(f'<user_input mode="{mode}">{text}</user_input>') == (text, mode)
