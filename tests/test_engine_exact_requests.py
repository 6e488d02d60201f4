"""The session manager records each call's exact request (``model_requests``) beside its request
event, as the proxy does: checked against what a local server actually received, with the real
``anthropic`` and ``openai`` SDKs, for answers and for failures."""

from __future__ import annotations

from pathlib import Path

import openai
import pytest
from model_server import ScriptedServer
from model_server import openai_chat as C
from proxy_support import close_sdk_clients, opened  # noqa: F401 - autouse fixture

from engine import SessionManager, SessionStore
from engine.clients import AnthropicClient, ScriptedClient
from engine.clients_openai import OpenAIClient
from engine.errors import ProviderError
from engine.proxy.wire import api_names
from engine.wire_requests import ANTHROPIC_MESSAGES, OPENAI_CHAT, OPENAI_RESPONSES
from tests.anthropic_server import FakeAnthropicServer, ScriptedResponse, error_body, message_body, success

MODEL = "claude-sonnet-4-6"
READ = {
    "name": "read_file",
    "description": "Read a file",
    "input_schema": {"type": "object", "properties": {}},
}


def test_the_clients_name_their_apis_as_the_proxy_records_them() -> None:
    assert (ANTHROPIC_MESSAGES, OPENAI_CHAT, OPENAI_RESPONSES) == (
        api_names.ANTHROPIC_MESSAGES, api_names.OPENAI_CHAT, api_names.OPENAI_RESPONSES,
    )  # fmt: skip


def test_each_anthropic_call_is_stored_as_the_server_received_it_with_its_event(tmp_path: Path) -> None:
    call = [{"type": "tool_use", "id": "toolu_1", "name": "read_file", "input": {"path": "a.py"}}]
    replies = [
        ScriptedResponse(200, message_body("", content=call, stop_reason="tool_use", input_tokens=900)),
        success("Done.", input_tokens=1500, output_tokens=10),
    ]
    with (
        FakeAnthropicServer(*replies) as server,
        AnthropicClient(
            MODEL, api_key="sk-test", base_url=server.base_url, max_retries=0, timeout=5
        ) as client,
        SessionStore(tmp_path / "s.db") as store,
    ):
        agent = SessionManager(client, store, system_prompt="Be terse.", tools=[READ],
                               tool_handlers={"read_file": lambda _: "x = 1\n"})  # fmt: skip
        assert agent.run_turn("read a.py").text == "Done."
        stored = store.list_requests(agent.session_id, with_body=True)
        events = store.list_events(agent.session_id, kind="request")
    assert [r.body for r in stored] == [r.body for r in server.requests]
    assert len(stored) == 2 and stored[1].body["messages"][-1]["content"][0]["type"] == "tool_result"
    assert [(r.api, r.source, r.path, r.status_code) for r in stored] == [
        (ANTHROPIC_MESSAGES, "engine", "/v1/messages", 200)
    ] * 2
    assert [r.event_id for r in stored] == [e.id for e in events]
    assert [r.input_tokens for r in stored] == [e.usage.input_tokens for e in events] == [900, 1500]
    assert stored[1].output_tokens == 10
    assert stored[0].response["content"] == call and stored[0].stop_reason == "tool_use"
    assert stored[1].response["content"] == [{"type": "text", "text": "Done."}]
    assert all(r.latency_ms is not None and r.latency_ms > 0 and r.started_utc for r in stored)


def test_a_refused_call_is_stored_with_the_providers_status_and_its_failed_event(tmp_path: Path) -> None:
    with (
        FakeAnthropicServer(ScriptedResponse(529, error_body("overloaded_error", "Overloaded"))) as server,
        AnthropicClient(
            MODEL, api_key="sk-test", base_url=server.base_url, max_retries=0, timeout=5
        ) as client,
        SessionStore(tmp_path / "s.db") as store,
    ):
        agent = SessionManager(client, store, system_prompt="Be terse.")
        with pytest.raises(ProviderError):
            agent.run_turn("hello")
        (stored,) = store.list_requests(agent.session_id, with_body=True)
        (event,) = store.list_events(agent.session_id, kind="request")
    assert stored.body == server.requests[0].body
    assert (stored.status_code, stored.error_type, stored.event_id) == (529, "ProviderError", event.id)
    assert "Overloaded" in stored.error_message and event.outcome == "provider_error"
    assert stored.response is None and stored.input_tokens is None


def test_an_openai_chat_call_is_stored_as_the_server_received_it(tmp_path: Path) -> None:
    with ScriptedServer() as server:
        C.install(server)
        server.queue(C.chat_text("Five commits."))
        sdk = opened(openai.OpenAI(base_url=server.base_url + "/v1", api_key="sk-test", max_retries=0))
        with SessionStore(tmp_path / "s.db") as store, SessionManager(
            OpenAIClient("gpt-4o", client=sdk, api="chat"), store, system_prompt="Be terse."
        ) as agent:  # fmt: skip
            agent.run_turn("Summarise the log.")
            (stored,) = store.list_requests(agent.session_id, with_body=True)
        received = server.requests[0]
    assert (stored.api, stored.path, stored.body) == (OPENAI_CHAT, "/v1/chat/completions", received.body)
    assert stored.response["content"][0]["content"] == "Five commits."


def test_a_scripted_client_imitating_another_provider_records_no_exact_request(tmp_path: Path) -> None:
    with SessionStore(tmp_path / "s.db") as store:
        agent = SessionManager(
            ScriptedClient(["ok"], model="gpt-4o", provider="openai"), store, system_prompt="x"
        )
        agent.run_turn("hi")
        assert store.list_requests(agent.session_id) == []
        assert len(store.list_events(agent.session_id, kind="request")) == 1
