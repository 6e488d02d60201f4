"""Model clients: the scripted client's playback and simulated usage, provider error mapping."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import pytest

from engine.clients import ModelClient, ModelRequest, ScriptedClient, provider_error_from_status
from engine.errors import ContextLengthExceededError, ProviderError, ValidationError
from engine.messages import assistant, tool_result, tool_use, user
from engine.tokens import get_tokenizer


def request_of(*messages, payload=None, max_output_tokens: int = 100) -> ModelRequest:
    return ModelRequest(
        model="claude-sonnet-4-6",
        system="You are terse.",
        messages=tuple(messages),
        max_output_tokens=max_output_tokens,
        payload=payload or {},
    )


def test_scripted_client_plays_text_messages_callables_and_exceptions_in_order() -> None:
    boom = ContextLengthExceededError("prompt is too long", provider="anthropic", status=400)
    client = ScriptedClient(
        [
            "hello",
            assistant("", tool_use("t1", "grep", pattern="x")),
            boom,
            lambda req: f"you sent {len(req.messages)} messages",
        ]
    )
    assert isinstance(client, ModelClient)
    first = client.complete(request_of(user("hi")))
    assert first.message.text == "hello" and first.stop_reason == "end_turn"
    second = client.complete(request_of(user("hi")))
    assert second.message.tool_use_ids == ["t1"] and second.stop_reason == "tool_use"
    with pytest.raises(ContextLengthExceededError):
        client.complete(request_of(user("hi")))
    fourth = client.complete(request_of(user("a"), assistant("b"), user("c")))
    assert fourth.message.text == "you sent 3 messages"
    assert len(client.requests) == 4 and client.remaining == 0
    with pytest.raises(ValidationError, match="no step left"):
        client.complete(request_of(user("hi")))


def test_scripted_usage_is_our_count_times_the_ratio_without_cache_breakpoints() -> None:
    tokenizer = get_tokenizer("claude-sonnet-4-6")
    req = request_of(user("count these words please"))
    expected = tokenizer.count(req.system) + tokenizer.count_messages(req.messages)
    usage = ScriptedClient(["ok"], usage_ratio=1.0).complete(req).usage
    assert usage.input_tokens == expected and usage.cache_read_input_tokens == 0
    scaled = ScriptedClient(["ok"], usage_ratio=1.5).complete(req).usage
    assert scaled.input_tokens == round(expected * 1.5)


def test_scripted_usage_reports_the_shared_prefix_as_cache_reads() -> None:
    payload = {"system": [{"type": "text", "text": "s", "cache_control": {"type": "ephemeral"}}]}
    client = ScriptedClient(["one", "two"])
    history = [user("read the file " * 50), assistant("", tool_use("t1", "read", path="a.py"))]
    first = client.complete(request_of(*history, payload=payload)).usage
    assert first.cache_read_input_tokens == 0
    second = client.complete(request_of(*history, tool_result("t1", "x = 1\n" * 40), payload=payload)).usage
    assert second.cache_read_input_tokens > 0
    assert second.prompt_tokens > first.prompt_tokens
    assert second.cache_read_input_tokens + second.cache_creation_input_tokens + second.input_tokens == (
        second.prompt_tokens
    )


def test_scripted_client_with_a_window_rejects_prompts_that_do_not_fit() -> None:
    client = ScriptedClient(["fits"], context_window=300)
    with pytest.raises(ContextLengthExceededError, match="prompt is too long") as info:
        client.complete(request_of(user("word " * 400)))
    assert info.value.status == 400 and isinstance(info.value, ProviderError)
    assert client.complete(request_of(user("short"))).message.text == "fits"


@pytest.mark.parametrize(
    ("status", "detail", "error_type", "retryable"),
    [
        (400, "prompt is too long: 210000 tokens > 200000 maximum", ContextLengthExceededError, False),
        (
            400,
            "input length and `max_tokens` exceed context limit: 1 + 2 > 3",
            ContextLengthExceededError,
            False,
        ),
        (400, "messages: roles must alternate", ProviderError, False),
        (401, "invalid x-api-key", ProviderError, False),
        (429, "rate limited", ProviderError, True),
        (500, "internal error", ProviderError, True),
        (529, "Overloaded", ProviderError, True),
    ],
)
def test_http_statuses_map_to_typed_provider_errors(status, detail, error_type, retryable) -> None:
    error = provider_error_from_status(status, detail, provider="anthropic")
    assert type(error) is error_type
    assert error.status == status and error.retryable is retryable and error.provider == "anthropic"
    assert detail in str(error)


# -- AnthropicClient against the local fake Messages API ---------------------------------------

import anthropic  # noqa: E402

from engine.clients import AnthropicClient  # noqa: E402
from tests.anthropic_server import (  # noqa: E402
    FakeAnthropicServer,
    ScriptedResponse,
    error_body,
    message_body,
    overloaded,
    prompt_too_long,
    success,
)


@contextlib.contextmanager
def client_for(server: FakeAnthropicServer, model: str = "claude-sonnet-4-6") -> Iterator[AnthropicClient]:
    with AnthropicClient(
        model, api_key="sk-test-key", base_url=server.base_url, max_retries=0, timeout=5
    ) as client:
        yield client


def test_anthropic_client_sends_the_body_and_returns_blocks_and_provider_usage() -> None:
    content = [
        {"type": "thinking", "thinking": "look first", "signature": "sig"},
        {"type": "text", "text": "Reading it."},
        {"type": "tool_use", "id": "toolu_1", "name": "read_file", "input": {"path": "a.py"}},
    ]
    body = message_body("", content=content, input_tokens=1200, output_tokens=40, stop_reason="tool_use")
    body["usage"] |= {"cache_read_input_tokens": 800, "cache_creation_input_tokens": 50}
    with FakeAnthropicServer(ScriptedResponse(200, body)) as server:
        with client_for(server) as client:
            response = client.complete(request_of(user("read a.py")))
        sent = server.requests[0]
    assert sent.path == "/v1/messages" and sent.body["model"] == "claude-sonnet-4-6"
    assert sent.body["max_tokens"] == 100
    assert [m["role"] for m in sent.body["messages"]] == ["user"]
    assert sent.body["messages"][0]["content"][0]["text"] == "read a.py"
    assert sent.body["system"][0]["text"] == "You are terse."
    assert [type(b).__name__ for b in response.message.content] == [
        "ThinkingBlock",
        "TextBlock",
        "ToolUseBlock",
    ]
    assert response.message.tool_use_ids == ["toolu_1"] and response.stop_reason == "tool_use"
    usage = response.usage
    assert (usage.input_tokens, usage.cache_read_input_tokens, usage.cache_creation_input_tokens) == (
        1200,
        800,
        50,
    )
    assert usage.output_tokens == 40 and usage.prompt_tokens == 2050


def test_anthropic_client_sends_a_prepared_payload_as_is() -> None:
    payload = {"system": [{"type": "text", "text": "S", "cache_control": {"type": "ephemeral"}}],
               "messages": [{"role": "user", "content": "hi"}]}  # fmt: skip
    with FakeAnthropicServer(success("hello")) as server:
        with client_for(server) as client:
            response = client.complete(request_of(user("hi"), payload=payload))
        sent = server.requests[0].body
    assert sent["system"] == payload["system"] and sent["model"] == "claude-sonnet-4-6"
    assert response.message.text == "hello"


@pytest.mark.parametrize(
    ("reply", "error_type", "status", "retryable"),
    [
        (prompt_too_long(), ContextLengthExceededError, 400, False),
        (overloaded(), ProviderError, 529, True),
        (ScriptedResponse(500, error_body("api_error", "boom")), ProviderError, 500, True),
        (ScriptedResponse(400, error_body("invalid_request_error", "bad roles")), ProviderError, 400, False),
    ],
)
def test_anthropic_errors_become_typed_errors(reply, error_type, status, retryable) -> None:
    with (
        FakeAnthropicServer(reply) as server,
        client_for(server) as client,
        pytest.raises(ProviderError) as info,
    ):
        client.complete(request_of(user("hi")))
    assert type(info.value) is error_type
    assert info.value.status == status and info.value.retryable is retryable
    assert "sk-test-key" not in str(info.value)


def test_anthropic_connection_failure_is_a_retryable_provider_error() -> None:
    server = FakeAnthropicServer()
    url = server.base_url
    server.stop()  # nothing listens there any more
    with (
        AnthropicClient("claude-sonnet-4-6", api_key="k", base_url=url, max_retries=0, timeout=2) as client,
        pytest.raises(ProviderError) as info,
    ):
        client.complete(request_of(user("hi")))
    assert info.value.retryable and info.value.status is None


def test_anthropic_client_accepts_a_ready_sdk_client_and_hides_the_key() -> None:
    with FakeAnthropicServer(success("ok")) as server:
        sdk = anthropic.Anthropic(api_key="sk-hidden-1234", base_url=server.base_url, max_retries=0)
        client = AnthropicClient("claude-haiku-4-5", client=sdk)
        assert client.complete(request_of(user("hi"))).message.text == "ok"
        assert "sk-hidden-1234" in str(server.requests[0].headers)
        sdk.close()
    assert "sk-hidden" not in repr(client) and "sk-hidden" not in str(vars(client).keys())


def test_the_scripted_window_is_checked_against_the_provider_count_not_our_estimate() -> None:
    req = ModelRequest(
        model="m", system="", messages=(user("x"),), max_output_tokens=100, estimated_prompt_tokens=850
    )
    assert ScriptedClient(["fits"], context_window=1000).complete(req).message.text == "fits"
    with pytest.raises(ContextLengthExceededError, match="1020 tokens"):
        ScriptedClient(["never"], context_window=1000, usage_ratio=1.2).complete(req)
