"""mini-swe-agent read from a real run (mini-swe-agent 2.4.6 offline against the scripted Chat
Completions server: tests/fixtures/real_agents/mini-swe-agent, made by scripts/real_agents_mini.py):
every call of the trajectory equals the request the server received (the system prompt, texts, tool
calls and outputs, the user's follow-up task), with the usage the server answered; the agent's own
exit record is no call. Such trajectories were refused before ("unknown role 'exit'")."""

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
FIXTURE = ROOT / "tests" / "fixtures" / "real_agents" / "mini-swe-agent" / "tools-followup"
TRAJECTORY = FIXTURE / "config" / "mini-swe-agent" / "last_mini_run.traj.json"
sys.path.insert(0, str(ROOT / "scripts"))

from real_agents_chat import load_answers  # noqa: E402


@pytest.fixture
def store(tmp_path: Path) -> SessionStore:
    with SessionStore(tmp_path / "sessions.db") as s:
        yield s


def check_every_call(folder: Path, trajectory: Path, store: SessionStore) -> None:
    (session,) = import_file(trajectory, store).sessions
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


def test_every_call_is_the_request_mini_sent_with_the_usage_it_was_answered(store: SessionStore) -> None:
    check_every_call(FIXTURE, TRAJECTORY, store)


def test_the_exit_record_and_the_last_unsent_output_are_kept_without_a_call(store: SessionStore) -> None:
    (session,) = import_file(TRAJECTORY, store).sessions
    row = store.get_session(session.session_id)
    assert row.metadata["mini_version"] == "2.4.6"
    assert row.metadata["configured_model"] == "openai/gpt-4o"
    transcript = store.load_transcript(session.session_id)
    events = store.list_events(session.session_id, kind="request")
    assert events[-1].details["messages_sent"] < len(transcript)  # the last tool output was never sent
    raw = json.loads(TRAJECTORY.read_text(encoding="utf-8"))["messages"]
    assert raw[-1]["role"] == "exit" and len(transcript) == len(raw) - 2  # no system, no exit message


def test_import_from_mini_swe_agent_finds_its_last_run(tmp_path: Path) -> None:
    config = tmp_path / "config"
    shutil.copytree(TRAJECTORY.parent, config / "mini-swe-agent")
    expected = [config / "mini-swe-agent" / TRAJECTORY.name]
    assert agent_files("mini-swe-agent", env={"XDG_CONFIG_HOME": str(config)}, home=tmp_path) == expected
    home = tmp_path / "home"
    shutil.copytree(TRAJECTORY.parent, home / ".config" / "mini-swe-agent")
    assert agent_files("mini-swe-agent", env={}, home=home) == [
        home / ".config" / "mini-swe-agent" / TRAJECTORY.name
    ]


@pytest.mark.peer("mini")
def test_live_mini_run_imports_exactly(tmp_path: Path, store: SessionStore) -> None:
    out = run_fixture_script("real_agents_mini.py", tmp_path)
    folder = out / "mini-swe-agent" / "tools-followup"
    check_every_call(folder, folder / "config" / "mini-swe-agent" / TRAJECTORY.name, store)
