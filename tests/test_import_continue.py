"""Continue CLI read from a real run (npm @continuedev/cli 1.5.47 offline, a local config.yaml's
openai model pointed at the scripted Chat Completions server: tests/fixtures/real_agents/continue,
made by scripts/real_agents_continue.py): every call of the session file equals the request the
server received (parallel tool calls, results kept in the asking message's toolCallStates and sent
as tool messages in the order asked, the ``--resume`` run's prompt), with the usage answered."""

from __future__ import annotations

import json
import shutil
import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest

from engine.importers import agent_files, folder_files, import_file
from engine.importers.formats.continue_cli import result_text
from engine.store import SessionStore
from tests.chat_requests import chat_requests, imported_atoms, request_atoms, run_fixture_script

ROOT = Path(__file__).resolve().parents[1]
FIXTURE = ROOT / "tests" / "fixtures" / "real_agents" / "continue" / "tools-resume"
sys.path.insert(0, str(ROOT / "scripts"))

from real_agents_chat import load_answers  # noqa: E402


@pytest.fixture
def store(tmp_path: Path) -> SessionStore:
    with SessionStore(tmp_path / "sessions.db") as s:
        yield s


def session_file(folder: Path) -> Path:
    (path,) = [p for p in sorted(folder.glob("sessions/*.json")) if p.name != "sessions.json"]
    return path


def check_every_call(folder: Path, store: SessionStore) -> None:
    result = import_file(session_file(folder), store)
    assert result.format == "continue"
    (session,) = result.sessions
    requests = chat_requests(folder)
    answers = load_answers(folder)
    events = store.list_events(session.session_id, kind="request")
    transcript = store.load_transcript(session.session_id)
    assert len(events) == len(requests) == 5
    for event, request in zip(events, requests, strict=True):
        body = request["body"]
        assert imported_atoms(transcript[: event.details["messages_sent"]]) == request_atoms(body["messages"])
        answered = answers[request["seq"]]
        assert event.usage.prompt_tokens == answered["prompt_tokens"]
        assert event.usage.cache_read_input_tokens == answered["prompt_tokens_details"]["cached_tokens"]
        assert event.usage.output_tokens == answered["completion_tokens"]
        assert event.model == body["model"]


def test_every_call_is_the_request_continue_sent_with_the_usage_it_was_answered(store: SessionStore) -> None:
    check_every_call(FIXTURE, store)


def test_results_are_tool_messages_in_the_order_asked(store: SessionStore) -> None:
    (session,) = import_file(session_file(FIXTURE), store).sessions
    transcript = store.load_transcript(session.session_id)
    assert transcript[2].tool_result_ids == ["call_scripted_0001_0", "call_scripted_0001_1"]
    assert session.project == "/tmp/ctxdesk-real-agents/continue-tools-resume/repo"
    assert store.get_session(session.session_id).metadata["agent_cost_usd"] > 0


@pytest.mark.parametrize(
    ("state", "sent"),
    [
        ({"output": [{"content": "a\n", "name": "Tool Result"}]}, "a\n"),
        ({"output": [{"content": ""}]}, ""),
        ({"output": []}, ""),
        ({}, ""),
    ],
    ids=["text", "empty-text", "no-items", "no-output"],
)
def test_a_tool_state_sends_its_output_text(state: dict[str, object], sent: str) -> None:
    assert result_text(state) == sent


def test_a_session_started_when_its_list_entry_says(tmp_path: Path, store: SessionStore) -> None:
    """The session file keeps no time; ``sessions.json`` beside it has ``dateCreated`` (epoch ms),
    written once when Continue first saved the session. Without the list: no time, no error."""
    index = json.loads((FIXTURE / "sessions" / "sessions.json").read_text())
    (session,) = import_file(next(FIXTURE.glob("sessions/*-*.json")), store).sessions
    created = datetime.fromtimestamp(int(index[0]["dateCreated"]) / 1000, tz=UTC)
    metadata = store.get_session(session.session_id).metadata
    assert metadata["started_utc"] == created.isoformat(timespec="milliseconds").replace("+00:00", "Z")
    alone = tmp_path / "sessions"
    alone.mkdir()
    shutil.copy(next(FIXTURE.glob("sessions/*-*.json")), alone)
    with SessionStore(tmp_path / "alone.db") as other:
        (without,) = import_file(next(alone.glob("*.json")), other).sessions
        assert "started_utc" not in other.get_session(without.session_id).metadata
    for number, hostile in enumerate(("[{broken", "[" * 200_000)):  # not JSON; nested past the parser
        (alone / "sessions.json").write_text(hostile)
        with SessionStore(tmp_path / f"broken-{number}.db") as other:
            (broken,) = import_file(next(alone.glob("*-*.json")), other).sessions
            assert "started_utc" not in other.get_session(broken.session_id).metadata


def test_import_from_continue_finds_its_sessions_not_their_index(tmp_path: Path) -> None:
    home = tmp_path / "home"
    shutil.copytree(FIXTURE / "sessions", home / ".continue" / "sessions")
    found = agent_files("continue", env={}, home=home)
    assert [p.name for p in found] == [session_file(FIXTURE).name] and home in found[0].parents
    moved = tmp_path / "elsewhere"
    shutil.copytree(FIXTURE / "sessions", moved / "sessions")
    assert len(agent_files("continue", env={"CONTINUE_GLOBAL_DIR": str(moved)}, home=home)) == 1
    assert [p.name for p in folder_files(FIXTURE / "sessions")] == [session_file(FIXTURE).name]


@pytest.mark.peer("cn")
def test_live_continue_run_imports_exactly(tmp_path: Path, store: SessionStore) -> None:
    out = run_fixture_script("real_agents_continue.py", tmp_path, "--scenario", "tools-resume")
    check_every_call(out / "continue" / "tools-resume", store)
