"""OpenAIClient with the real openai SDK against the scripted server (Chat Completions, Responses)."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import openai
import pytest
from model_server import ScriptedServer
from model_server import openai_chat as C
from model_server import openai_responses as R
from proxy_support import close_sdk_clients, opened  # noqa: F401 - autouse fixture

from engine.clients import ModelClient, ModelRequest
from engine.clients_openai import OpenAIClient
from engine.errors import ContextLengthExceededError, ProviderError
from engine.messages import assistant, tool_result, tool_use, user

SHELL = {
    "name": "shell",
    "description": "Run a command",
    "input_schema": {"type": "object", "properties": {}},
}


@pytest.fixture
def server() -> Iterator[ScriptedServer]:
    with R.install(C.install(ScriptedServer())) as s:
        yield s


def client_for(server: ScriptedServer, api: str = "chat") -> OpenAIClient:
    sdk = opened(openai.OpenAI(base_url=server.base_url + "/v1", api_key="sk-test", max_retries=0))
    return OpenAIClient("gpt-4o", client=sdk, api=api)  # type: ignore[arg-type]


def request(*messages, tools=(SHELL,)) -> ModelRequest:  # type: ignore[no-untyped-def]
    return ModelRequest(
        model="gpt-4o",
        system="Be terse.",
        messages=tuple(messages),
        tools=tuple(tools),
        max_output_tokens=256,
    )


def test_chat_completions_sends_system_tools_and_history_and_reads_tool_calls(server: ScriptedServer) -> None:
    server.queue(C.chat_tool_calls(("shell", {"cmd": "ls"})), C.chat_text("Two files."))
    client = client_for(server)
    assert isinstance(client, ModelClient)
    first = client.complete(request(user("List files.")))
    (call,) = [b for b in first.message.blocks if b.type == "tool_use"]
    assert call.name == "shell" and call.input == {"cmd": "ls"} and first.stop_reason == "tool_calls"
    sent = server.requests[0].body
    assert sent["messages"][0] == {"role": "system", "content": "Be terse."}
    assert sent["tools"][0]["function"]["name"] == "shell" and sent["max_tokens"] == 256
    second = client.complete(request(user("List files."), first.message, tool_result(call.id, "a b")))
    assert second.message.text == "Two files."
    assert server.requests[1].body["messages"][-1] == {
        "role": "tool",
        "tool_call_id": call.id,
        "content": "a b",
    }
    assert second.usage.cache_read_input_tokens == first.usage.input_tokens


def test_responses_api_streams_to_the_final_response(server: ScriptedServer) -> None:
    server.queue(
        [
            {"type": "reasoning", "summary": "look"},
            {"type": "function_call", "name": "shell", "arguments": {"cmd": "ls"}},
        ],
        [{"type": "message", "text": "Done."}],
    )
    client = client_for(server, "responses")
    first = client.complete(request(user("List.")))
    (call,) = [b for b in first.message.blocks if b.type == "tool_use"]
    assert first.stop_reason == "tool_use" and first.message.blocks[0].type == "thinking"
    sent = server.requests[0].body
    assert (
        sent["instructions"] == "Be terse." and sent["tools"][0]["name"] == "shell" and sent["stream"] is True
    )
    second = client.complete(
        request(user("List."), assistant("", tool_use(call.id, "shell", cmd="ls")), tool_result(call.id, "a"))
    )
    assert second.message.text == "Done." and second.usage.output_tokens > 0
    assert server.requests[1].body["input"][-1] == {
        "type": "function_call_output",
        "call_id": call.id,
        "output": "a",
    }


@pytest.mark.parametrize(
    ("reply", "error", "retryable"),
    [
        (
            C.chat_error(
                400, "context_length_exceeded", "This model's maximum context length is 128000 tokens."
            ),
            ContextLengthExceededError,
            False,
        ),
        (C.chat_error(429, "rate_limit_exceeded", "slow down"), ProviderError, True),
        (C.chat_error(400, "invalid_request_error", "bad tool schema"), ProviderError, False),
    ],
    ids=["too-long", "rate-limited", "bad-request"],
)
def test_provider_errors_become_typed_errors(server: ScriptedServer, reply, error, retryable) -> None:  # type: ignore[no-untyped-def]
    server.queue(reply)
    with pytest.raises(error) as raised:
        client_for(server).complete(request(user("x")))
    assert raised.value.retryable is retryable


def test_an_unreachable_server_is_a_retryable_provider_error() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    client = opened(
        OpenAIClient(
            "llama3", base_url=f"http://127.0.0.1:{port}/v1", api_key="none", max_retries=0, timeout=2
        )
    )
    with client, pytest.raises(ProviderError) as raised:
        client.complete(request(user("x")))
    assert raised.value.retryable and client.max_tokens_param == "max_tokens"


def test_the_session_manager_runs_a_tool_turn_with_the_openai_client(
    server: ScriptedServer, tmp_path: Path
) -> None:
    from engine import SessionManager, SessionStore

    server.queue(C.chat_tool_calls(("shell", {"cmd": "git log"})), C.chat_text("Five commits."))
    with SessionStore(tmp_path / "s.db") as store, SessionManager(
        client_for(server), store, system_prompt="Be terse.", tools=[SHELL],
        tool_handlers={"shell": lambda tool_input: "commit 1\n" * 5},
    ) as agent:  # fmt: skip
        result = agent.run_turn("Summarise the log.")
        events = store.list_events(agent.session_id, kind="request")
    assert result.text == "Five commits."
    assert len(events) == 2 and all(e.usage and e.usage.prompt_tokens > 0 for e in events)
