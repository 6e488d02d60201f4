"""A turn that fails before the model answers leaves the transcript as it was: its user message is
not written (the failure is a request event), and the next turn is sent as if it never happened.
Real SQLite files; the provider is a real HTTP server answering 529 through the anthropic SDK, a
scripted client raising ctxdesk's errors, and a client raising something else entirely."""

from __future__ import annotations

from pathlib import Path

import pytest
from model_server.anthropic import anthropic_server, overloaded, text

from engine.clients import AnthropicClient, ModelRequest, ScriptedClient
from engine.errors import ContextLengthExceededError, ContextOverflowError, ProviderError
from engine.session import SessionManager
from engine.store import SessionStore

MODEL = "claude-sonnet-4-6"


def _transcript(db: Path, session_id: str) -> list[tuple[str, str]]:
    with SessionStore(db, read_only=True) as store:
        return [(m.role, m.text) for m in store.load_transcript(session_id)]


def _second_turn_sent_clean(requests: list[ModelRequest]) -> None:
    texts = [(m.role, m.text) for m in requests[-1].messages]
    assert texts == [("user", "first"), ("assistant", "one"), ("user", "third")], texts


@pytest.mark.parametrize(
    "failure",
    [
        ProviderError("overloaded", provider="anthropic", status=529),
        ConnectionResetError("peer reset the connection"),  # not ours: a bug or a transport
    ],
    ids=["provider-error", "non-ctxdesk-error"],
)
def test_a_failed_turn_leaves_no_dangling_user_message(tmp_path, failure):
    db = tmp_path / "s.db"
    client = ScriptedClient(["one", failure, "three"], model=MODEL)
    with SessionStore(db) as store:
        m = SessionManager(client, store, system_prompt="You help.")
        assert m.run_turn("first").text == "one"
        with pytest.raises(type(failure)):
            m.run_turn("second")
        assert _transcript(db, m.session_id) == [("user", "first"), ("assistant", "one")]
        assert [(x.role, x.text) for x in m.history] == [("user", "first"), ("assistant", "one")]
        assert m.run_turn("third").text == "three"
        assert _transcript(db, m.session_id) == [
            ("user", "first"),
            ("assistant", "one"),
            ("user", "third"),
            ("assistant", "three"),
        ]
        _second_turn_sent_clean(client.requests)
        events = store.list_events(m.session_id, kind="request")
        failed = [e for e in events if e.outcome != "ok"]
        if isinstance(failure, ProviderError):
            assert [e.outcome for e in failed] == ["provider_error"]
            assert failed[0].message_seq == 1  # the last message written, not the unwritten input
        assert [e.turn_index for e in events if e.outcome == "ok"] == [0, 1]


def test_a_real_529_from_the_provider_leaves_the_transcript_as_it_was(tmp_path):
    db = tmp_path / "s.db"
    with (
        anthropic_server(text("one"), overloaded(), text("three")) as server,
        AnthropicClient(
            MODEL, api_key="sk-test", base_url=server.base_url, max_retries=0, timeout=10
        ) as client,
        SessionStore(db) as store,
    ):
        m = SessionManager(client, store, system_prompt="You help.")
        assert m.run_turn("first").text == "one"
        with pytest.raises(ProviderError):
            m.run_turn("second")
        assert _transcript(db, m.session_id) == [("user", "first"), ("assistant", "one")]
        assert m.run_turn("third").text == "three"
        sent = server.requests[-1].body["messages"]
        assert [(x["role"], str(x["content"])) for x in sent][-1][0] == "user"
        assert "second" not in str(sent) and "third" in str(sent[-1])
    assert [r for r, _ in _transcript(db, m.session_id)] == ["user", "assistant", "user", "assistant"]


def test_a_prompt_rejected_after_emergency_compaction_writes_no_input(tmp_path):
    db = tmp_path / "s.db"
    too_long = ContextLengthExceededError("prompt is too long", provider="anthropic", status=400)
    client = ScriptedClient(["one", too_long, too_long], model=MODEL)
    with SessionStore(db) as store:
        m = SessionManager(client, store, system_prompt="You help.")
        m.run_turn("first")
        with pytest.raises(ContextOverflowError):
            m.run_turn("second " * 50)
        assert _transcript(db, m.session_id) == [("user", "first"), ("assistant", "one")]
        assert "second" not in str([x.text for x in m.history]), [(x.role, x.text[:40]) for x in m.history]
