"""GitHub Copilot CLI read from a real run (@github/copilot 1.0.102 offline, its own-key provider
pointed at the scripted Chat Completions server: tests/fixtures/real_agents/copilot, made by
scripts/real_agents_copilot.py): every call of the session's events equals the request the server
received (the system prompt, the user text with the date Copilot adds, tool calls and their results
in the order asked, the resumed run's prompt), with the usage the server answered."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest

from engine.importers import agent_files, import_file
from engine.store import SessionStore
from tests.chat_requests import (
    chat_requests,
    imported_atoms,
    request_atoms,
    run_fixture_script,
    system_prompt_of,
)

ROOT = Path(__file__).resolve().parents[1]
FIXTURE = ROOT / "tests" / "fixtures" / "real_agents" / "copilot" / "tools-resume"
sys.path.insert(0, str(ROOT / "scripts"))

from real_agents_chat import load_answers  # noqa: E402


@pytest.fixture
def store(tmp_path: Path) -> SessionStore:
    with SessionStore(tmp_path / "sessions.db") as s:
        yield s


def events_file(folder: Path) -> Path:
    (path,) = sorted(folder.glob("session-state/*/events.jsonl"))
    return path


def check_every_call(folder: Path, store: SessionStore) -> None:
    (session,) = import_file(events_file(folder), store).sessions
    requests = chat_requests(folder)
    answers = load_answers(folder)
    events = store.list_events(session.session_id, kind="request")
    transcript = store.load_transcript(session.session_id)
    system = store.get_session(session.session_id).metadata["system_prompt"]
    assert len(events) == len(requests) == 5
    for event, request in zip(events, requests, strict=True):
        body = request["body"]
        assert system == system_prompt_of(body)
        assert imported_atoms(transcript[: event.details["messages_sent"]]) == request_atoms(body["messages"])
        answered = answers[request["seq"]]
        assert event.usage.prompt_tokens == answered["prompt_tokens"]
        assert event.usage.cache_read_input_tokens == answered["prompt_tokens_details"]["cached_tokens"]
        assert event.usage.output_tokens == answered["completion_tokens"]
        assert event.model == body["model"]
        assert (
            event.limit_tokens == 64_000
        )  # Copilot's own prompt limit (maxPromptTokens), not the model's window


def test_every_call_is_the_request_copilot_sent_with_the_usage_it_was_answered(store: SessionStore) -> None:
    check_every_call(FIXTURE, store)


def test_an_older_copilot_keeps_no_usage_per_call_and_its_runs_totals_are_said(store: SessionStore) -> None:
    """Copilot CLI 1.0.34 (scripts/real_agents_copilot.py run with it) writes no session.usage_record and
    names its model only in session.model_change: each call is what it sent, with no provider count
    (none invented), and the runs' totals from session.shutdown add up to what the server answered."""
    folder = FIXTURE.parent / "releases" / "1.0.34-tools-resume"
    (session,) = import_file(events_file(folder), store).sessions
    requests, answers = chat_requests(folder), load_answers(folder)
    events = store.list_events(session.session_id, kind="request")
    transcript = store.load_transcript(session.session_id)
    assert len(events) == len(requests) == 5
    for event, request in zip(events, requests, strict=True):
        assert imported_atoms(transcript[: event.details["messages_sent"]]) == request_atoms(
            request["body"]["messages"]
        )
        assert event.usage is None and event.model == request["body"]["model"] == "gpt-4o"
    stored = store.get_session(session.session_id)
    runs = stored.metadata["provider_run_totals"]
    assert sum(r["requests"] for r in runs) == 5
    assert sum(r["inputTokens"] for r in runs) == sum(a["prompt_tokens"] for a in answers.values())
    assert sum(r["outputTokens"] for r in runs) == sum(a["completion_tokens"] for a in answers.values())
    cached = sum(a["prompt_tokens_details"]["cached_tokens"] for a in answers.values())
    assert sum(r["cacheReadTokens"] for r in runs) == cached
    notes = stored.metadata["import_notes"]
    assert any(n.startswith("Copilot CLI 1.0.34 keeps no usage per call") for n in notes), notes
    # what the file does not keep (the tool definitions) is each run's total less our count of its calls,
    # shared among them: every run adds up to its total, and each call comes within 1% of its own count
    prompts = [answers[r["seq"]]["prompt_tokens"] for r in requests]
    projected = [e.projected_tokens for e in events]
    assert [sum(projected[:3]), sum(projected[3:])] == [r["inputTokens"] for r in runs]
    assert all(abs(ours - theirs) <= theirs / 100 for ours, theirs in zip(projected, prompts, strict=True))
    assert all(
        e.details["unlogged_prefix_tokens"] > 6_000 and e.components_basis == "estimate" for e in events
    )


def test_results_follow_the_order_of_the_calls_not_of_their_completion(store: SessionStore) -> None:
    """The view finished before the shell command; the request sends them in the order asked."""
    lines = [json.loads(line) for line in events_file(FIXTURE).read_text(encoding="utf-8").splitlines()]
    completed = [e["data"]["toolCallId"] for e in lines if e["type"] == "tool.execution_complete"]
    assert completed[:2] == ["call_scripted_0001_1", "call_scripted_0001_0"]
    (session,) = import_file(events_file(FIXTURE), store).sessions
    transcript = store.load_transcript(session.session_id)
    assert transcript[2].tool_result_ids == ["call_scripted_0001_0", "call_scripted_0001_1"]
    assert session.project == "/tmp/ctxdesk-real-agents/copilot-tools-resume/repo"


def test_import_from_copilot_finds_its_sessions(tmp_path: Path) -> None:
    home = tmp_path / "home"
    shutil.copytree(FIXTURE / "session-state", home / ".copilot" / "session-state")
    found = agent_files("copilot", env={}, home=home)
    assert [p.name for p in found] == ["events.jsonl"] and home in found[0].parents
    moved = tmp_path / "elsewhere"
    shutil.copytree(FIXTURE / "session-state", moved / "session-state")
    assert len(agent_files("copilot", env={"COPILOT_HOME": str(moved)}, home=home)) == 1


@pytest.mark.peer("copilot")
def test_live_copilot_run_imports_exactly(tmp_path: Path, store: SessionStore) -> None:
    out = run_fixture_script("real_agents_copilot.py", tmp_path, "--scenario", "tools-resume")
    check_every_call(out / "copilot" / "tools-resume", store)


def test_a_sub_agent_in_the_same_file_is_a_child_session_and_each_side_sent_what_it_imports(
    store: SessionStore,
) -> None:
    folder = FIXTURE.parent / "subagent"
    sessions = import_file(events_file(folder), store).sessions
    (parent,) = [s for s in sessions if s.parent_session_id is None]
    (child,) = [s for s in sessions if s.parent_session_id is not None]
    assert child.parent_session_id == parent.session_id
    requests = chat_requests(folder)
    answers = load_answers(folder)
    sub = "As a sub-agent"
    by_side = {
        parent.session_id: [r for r in requests if not system_prompt_of(r["body"]).startswith(sub)],
        child.session_id: [r for r in requests if system_prompt_of(r["body"]).startswith(sub)],
    }
    assert [len(v) for v in by_side.values()] == [2, 2]
    for session_id, sent in by_side.items():
        events = store.list_events(session_id, kind="request")
        transcript = store.load_transcript(session_id)
        system = store.get_session(session_id).metadata["system_prompt"]
        assert len(events) == len(sent)
        for event, request in zip(events, sent, strict=True):
            assert system == system_prompt_of(request["body"])
            assert imported_atoms(transcript[: event.details["messages_sent"]]) == request_atoms(
                request["body"]["messages"]
            )
            answered = answers[request["seq"]]
            assert event.usage.prompt_tokens == answered["prompt_tokens"]
            assert event.usage.output_tokens == answered["completion_tokens"]
    assert store.get_session(child.session_id).metadata["agent"] == "general-purpose"


def test_a_background_compaction_restarts_the_history_and_its_summary_call_is_counted(
    store: SessionStore,
) -> None:
    """The first reply reports a prompt past Copilot's limit (padded usage): Copilot summarises in the
    background (a call with the history and its request for a summary) while the agent goes on, then
    restarts the history at a user message with what the user typed and the summary, followed by what
    came after. Every call of the agent equals the server's request; the summary call is there with
    its usage; one compaction event."""
    folder = FIXTURE.parent / "compact"
    (session,) = import_file(events_file(folder), store).sessions
    requests = chat_requests(folder)
    answers = load_answers(folder)
    events = store.list_events(session.session_id, kind="request")
    transcript = store.load_transcript(session.session_id)
    summaries = [r for r in requests if "Please create a detailed summary" in str(r["body"]["messages"][-1])]
    assert len(events) == len(requests) and len(summaries) == 1
    (compaction,) = store.list_events(session.session_id, kind="compaction")
    assert compaction.details["trigger_kind"] == "auto" and compaction.details["threshold_tokens"] == 64_000
    starts = [0, compaction.message_seq]
    agent_events = [e for e in events if not e.details.get("compaction_call")]
    agent_requests = [r for r in requests if r not in summaries]
    for event, request in zip(agent_events, agent_requests, strict=True):
        sent = transcript[starts[event.details["segment"]] : event.details["messages_sent"]]
        assert imported_atoms(sent) == request_atoms(request["body"]["messages"])
        assert event.usage.prompt_tokens == answers[request["seq"]]["prompt_tokens"]
    (summary_call,) = [e for e in events if e.details.get("compaction_call")]
    assert summary_call.usage.prompt_tokens == answers[summaries[0]["seq"]]["prompt_tokens"]
    assert (
        summary_call.usage.cache_read_input_tokens
        == answers[summaries[0]["seq"]]["prompt_tokens_details"]["cached_tokens"]
    )
    # one limit for every call, the summary call's too: the one Copilot compacted against
    assert {(e.limit_tokens, e.details["limit_source"]) for e in events} == {(64_000, "agent")}


def test_a_refused_call_is_a_failed_request_and_the_next_run_sends_both_prompts(store: SessionStore) -> None:
    folder = FIXTURE.parent / "provider-error"
    (session,) = import_file(events_file(folder), store).sessions
    requests = chat_requests(folder)
    events = store.list_events(session.session_id, kind="request")
    transcript = store.load_transcript(session.session_id)
    assert len(events) == len(requests) == 2
    failed, ok = events
    assert failed.outcome == "provider_error" and failed.usage is None
    assert failed.details["failure"]["status"] == 400
    assert ok.usage.prompt_tokens == load_answers(folder)[2]["prompt_tokens"]
    for event, request in zip(events, requests, strict=True):
        assert imported_atoms(transcript[: event.details["messages_sent"]]) == request_atoms(
            request["body"]["messages"]
        )
