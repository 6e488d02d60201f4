"""The Anthropic summarizer against a local fake Messages API, through the real anthropic client."""

from __future__ import annotations

from collections.abc import Iterator

import anthropic
import pytest
from anthropic_server import (
    FakeAnthropicServer,
    ScriptedResponse,
    message_body,
    overloaded,
    prompt_too_long,
    slow,
    success,
)

from engine.compaction import AnthropicSummarizer
from engine.compaction.result import summary_message
from engine.compaction.summarizers import SUMMARY_SYSTEM_PROMPT, Summarizer
from engine.errors import SummarizerUnavailableError, ValidationError
from engine.messages import assistant, tool_result, tool_use, user

CONVERSATION = [
    user("Migrate the billing API to v2. Never change the public endpoint names."),
    assistant("Looking at the router.", tool_use("tu_1", "read_file", path="src/billing/routes.py")),
    tool_result("tu_1", "def create_invoice(): ..."),
    assistant("We decided to keep create_invoice and add a v2 prefix."),
]


@pytest.fixture
def server() -> Iterator[FakeAnthropicServer]:
    with FakeAnthropicServer() as fake:
        yield fake


def make_client(server: FakeAnthropicServer, timeout: float = 5.0) -> anthropic.Anthropic:
    return anthropic.Anthropic(api_key="test-key", base_url=server.base_url, max_retries=0, timeout=timeout)


@pytest.fixture
def client(server: FakeAnthropicServer) -> Iterator[anthropic.Anthropic]:
    c = make_client(server)
    yield c
    c.close()


def test_summary_is_the_text_the_model_returned(server, client):
    server.queue(success("## Decisions\n- keep create_invoice"))
    summarizer = AnthropicSummarizer("claude-haiku-4-5", client=client)
    assert summarizer.summarize(CONVERSATION) == "## Decisions\n- keep create_invoice"
    assert summarizer.name == "anthropic:claude-haiku-4-5"
    assert isinstance(summarizer, Summarizer)


def test_request_carries_model_budget_prompt_instructions_and_conversation(server, client):
    server.queue(success("ok"))
    AnthropicSummarizer("claude-sonnet-4-6", client=client).summarize(
        CONVERSATION, instructions="focus on the API changes", max_tokens=777
    )
    (request,) = server.requests
    assert request.path == "/v1/messages"
    # The SDK sends the key as x-api-key or as a bearer token, depending on its version.
    assert "test-key" in (request.headers.get("x-api-key", ""), request.headers.get("authorization", "")[7:])
    body = request.body
    assert body["model"] == "claude-sonnet-4-6"
    assert body["max_tokens"] == 777
    assert body["system"] == SUMMARY_SYSTEM_PROMPT
    (turn,) = body["messages"]
    assert turn["role"] == "user"
    sent = turn["content"]
    assert "focus on the API changes" in sent
    assert "Migrate the billing API to v2. Never change the public endpoint names." in sent
    assert "src/billing/routes.py" in sent
    assert "[read_file result]\ndef create_invoice(): ..." in sent
    assert "We decided to keep create_invoice" in sent


def test_an_earlier_summary_is_sent_marked_as_such(server, client):
    server.queue(success("merged"))
    AnthropicSummarizer(client=client).summarize([summary_message("## Decisions\n- use v2"), *CONVERSATION])
    assert "[earlier summary]\n## Decisions\n- use v2" in server.requests[0].text


def test_overloaded_raises_unavailable_with_status_529(server, client):
    server.queue(overloaded())
    with pytest.raises(SummarizerUnavailableError) as info:
        AnthropicSummarizer(client=client).summarize(CONVERSATION)
    assert info.value.status == 529
    assert info.value.summarizer == "anthropic:claude-haiku-4-5"
    assert "overloaded_error" in str(info.value)


def test_prompt_too_long_raises_unavailable_with_status_400_and_the_message(server, client):
    server.queue(prompt_too_long())
    with pytest.raises(SummarizerUnavailableError) as info:
        AnthropicSummarizer(client=client).summarize(CONVERSATION)
    assert info.value.status == 400
    assert "prompt is too long: 210000 tokens > 200000 maximum" in str(info.value)
    assert isinstance(info.value.__cause__, anthropic.BadRequestError)


def test_slow_response_times_out_as_unavailable(server):
    server.queue(slow(5.0))
    with (
        make_client(server, timeout=0.3) as short,
        pytest.raises(SummarizerUnavailableError, match="timed out") as info,
    ):
        AnthropicSummarizer(client=short).summarize(CONVERSATION)
    assert info.value.status is None
    assert isinstance(info.value.__cause__, anthropic.APITimeoutError)


def test_unreachable_server_is_unavailable(server):
    url = server.base_url
    server.stop()
    with (
        AnthropicSummarizer(base_url=url, api_key="k", max_retries=0, timeout=1.0) as summarizer,
        pytest.raises(SummarizerUnavailableError, match="cannot reach") as info,
    ):
        summarizer.summarize(CONVERSATION)
    assert isinstance(info.value.__cause__, anthropic.APIConnectionError)


def test_a_reply_without_text_is_unavailable(server, client):
    server.queue(ScriptedResponse(200, message_body("", content=[], stop_reason="max_tokens")))
    with pytest.raises(SummarizerUnavailableError, match="no text"):
        AnthropicSummarizer(client=client).summarize(CONVERSATION)


def test_missing_api_key_is_unavailable_before_any_request(server):
    with (
        AnthropicSummarizer(base_url=server.base_url, max_retries=0) as summarizer,
        pytest.raises(SummarizerUnavailableError, match="no Anthropic API key"),
    ):
        summarizer.summarize(CONVERSATION)
    assert server.requests == []


@pytest.mark.parametrize(
    ("messages", "max_tokens", "field"),
    [([], 100, "messages"), (CONVERSATION, 0, "max_tokens"), (CONVERSATION, -5, "max_tokens")],
    ids=["empty-messages", "zero-max-tokens", "negative-max-tokens"],
)
def test_bad_input_raises_validation_error_and_sends_nothing(server, client, messages, max_tokens, field):
    with pytest.raises(ValidationError) as info:
        AnthropicSummarizer(client=client).summarize(messages, max_tokens=max_tokens)
    assert info.value.field == field
    assert server.requests == []
