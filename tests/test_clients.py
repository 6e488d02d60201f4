"""Model clients: the scripted client's playback and simulated usage, provider error mapping."""

from __future__ import annotations

import pytest

from engine.clients import ModelClient, ModelRequest, ScriptedClient, provider_error_from_status
from engine.errors import ContextLengthExceededError, ProviderError, ValidationError
from engine.messages import assistant, tool_result, tool_use, user
from engine.tokens import get_tokenizer


def request_of(*messages, payload=None, max_output_tokens: int = 100) -> ModelRequest:
    return ModelRequest(
        model="claude-sonnet-4-5",
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
    tokenizer = get_tokenizer("claude-sonnet-4-5")
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
