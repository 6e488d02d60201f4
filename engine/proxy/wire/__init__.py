"""The wire formats the proxy speaks, one :class:`WireApi` per provider API (Anthropic Messages,
OpenAI Chat Completions, OpenAI Responses; Anthropic's count_tokens is recorded too).

A wire API is everything that differs between formats: which path it is, a request body in our
terms and its history as canonical messages, the tool results in it and how they are replaced,
a compacted history rendered back, the provider's error shape, an answer read (JSON or SSE) and
the proxy's own read_result rounds. Everything above (policies, recording, transport) asks
:func:`wire_for` and never branches on the API. A new format is a module here implementing the
protocol, listed in :data:`WIRES` (and its path in :func:`detect_api`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from engine.messages import Message
from engine.proxy.wire.anthropic import AnthropicCountTokens, AnthropicMessages
from engine.proxy.wire.api_names import (
    ANTHROPIC_COUNT_TOKENS,
    ANTHROPIC_MESSAGES,
    OPENAI_CHAT,
    OPENAI_RESPONSES,
    OPENAI_RESPONSES_COMPACT,
    PASSTHROUGH,
)
from engine.proxy.wire.openai_chat import OpenAIChat
from engine.proxy.wire.openai_responses import OpenAIResponses, OpenAIResponsesCompact
from engine.proxy.wire.shared import ParsedResponse, ProviderEdit, ReadCalls, RequestView, ToolResult

__all__ = [
    "WIRES",
    "WireApi",
    "detect_api",
    "error_body",
    "upstream_kind",
    "wire_for",
]


class WireApi(Protocol):
    """One provider API's request and answer shapes (see the module docstring)."""

    name: str  #: the API's name (``engine.proxy.wire.api_names``), recorded as ``model_requests.api``
    provider: str  #: ``anthropic`` or ``openai``: the upstream that serves it
    model_call: bool  #: a model call (a request event is recorded)
    edited: bool  #: the in-flight policies apply to its requests
    history_key: str  #: the body field holding the history (``messages``, ``input``)
    tokenizer: str  #: the tokenizer of a model the settings do not name
    #: whether each history item is one message (counted once per distinct item by the policies)
    per_item: bool

    # -- requests --------------------------------------------------------------------------
    def request_view(self, body: Mapping[str, Any], headers: Mapping[str, str] | None = None) -> RequestView:
        """The body in our terms (lenient: never raises on odd content)."""
        ...

    def session_id(self, headers: Mapping[str, str], body: Mapping[str, Any] | None) -> str | None:
        """The agent's own session id (headers, then what the body carries)."""
        ...

    def head_length(self, items: Sequence[Any]) -> int:
        """How many leading history items are system prompt (never compacted)."""
        ...

    def is_system(self, item: Any) -> bool:
        """Whether a history item is part of the system prompt."""
        ...

    def one_message(self, item: Any) -> Message:
        """One history item (``per_item`` formats) as our message, leniently."""
        ...

    def to_messages(self, items: Sequence[Any]) -> list[Message]:
        """History items (system items left out) as our messages, leniently."""
        ...

    def message_starts(self, items: Sequence[Any]) -> list[int]:
        """Index of the item each of :meth:`to_messages`' messages starts at."""
        ...

    def render(self, messages: Sequence[Message], summary: str | None, *, keep_meta: bool) -> list[Any]:
        """Our messages as history items, the summary first; ``keep_meta``: messages that came from
        a request are rendered exactly as they were sent (``engine.convert`` is lossless)."""
        ...

    def tool_results(self, items: Sequence[Any]) -> list[ToolResult]:
        """Every tool result in the history, oldest first, with its call's tool name."""
        ...

    def with_results(self, items: Sequence[Any], texts: Mapping[str, str]) -> list[Any]:
        """The history with the results of these call ids replaced by these texts."""
        ...

    def with_inputs(self, items: Sequence[Any], inputs: Mapping[str, dict[str, Any]]) -> list[Any]:
        """The history with the inputs of these calls replaced."""
        ...

    def with_read_result(self, tools: list[Any] | None) -> list[Any]:
        """The request's tools with the proxy's read_result added (unchanged when offered)."""
        ...

    def with_native_clearing(
        self, body: Mapping[str, Any], policy: Any
    ) -> tuple[dict[str, Any], tuple[str, ...]] | None:
        """The body asking the provider to clear old tool results itself, as ``policy`` (a
        ``ClearToolResultsPolicy``) says, and the beta flags that needs; None where it cannot."""
        ...

    # -- answers ---------------------------------------------------------------------------
    def error_body(self, message: str, *, error_type: str, code: str | None = None) -> dict[str, Any]:
        """An error in the provider's own shape."""
        ...

    def parse_response(self, status: int | None, content_type: str | None, data: bytes) -> ParsedResponse:
        """An answer (JSON or a whole SSE stream) read; never raises on malformed input."""
        ...

    def answer_message(self, parsed: ParsedResponse) -> Message | None:
        """The assistant's answer as our message (None when there was none)."""
        ...

    def provider_edits(self, parsed: ParsedResponse) -> list[ProviderEdit]:
        """Context the provider removed itself on this call (server-side context management)."""
        ...

    def unbilled_iterations(self, parsed: ParsedResponse) -> list[dict[str, Any]]:
        """Usage of iterations the provider billed outside the answer's top-level usage."""
        ...

    def usage_fields(self, usage: Mapping[str, Any] | None) -> dict[str, int | None]:
        """Usage as the columns of ``model_requests`` (input = uncached input only)."""
        ...

    # -- the proxy's own read_result rounds ----------------------------------------------
    def whole_answer_request(self, body: Mapping[str, Any]) -> dict[str, Any]:
        """The request asking for one whole answer (not a stream)."""
        ...

    def round_answer(self, status: int, content_type: str | None, data: bytes) -> Any | None:
        """A round's answer, or None (an error or no answer: relayed to the agent as it is)."""
        ...

    def read_calls(self, answer: Any) -> tuple[ReadCalls, bool]:
        """The model's read_result calls in one answer and whether it also called another tool."""
        ...

    def continue_with_reads(
        self, body: dict[str, Any], answer: Any, answers: list[tuple[Any, str]]
    ) -> dict[str, Any]:
        """The next request: the answer and the proxy's read_result answers appended."""
        ...

    def final_answer(self, answers: list[Any], asked: Mapping[str, Any]) -> tuple[dict[str, Any], bytes, str]:
        """What the agent gets from every round's answer, as the request ``asked`` (JSON or SSE):
        (the answer as recorded, its bytes, its media type)."""
        ...


#: The wire APIs by name.
WIRES: dict[str, WireApi] = {
    wire.name: wire
    for wire in (
        AnthropicMessages(),
        AnthropicCountTokens(),
        OpenAIChat(),
        OpenAIResponses(),
        OpenAIResponsesCompact(),
    )
}
_PATHS = (
    (re.compile(r"^(/v1)?/messages/count_tokens/?$"), ANTHROPIC_COUNT_TOKENS),
    (re.compile(r"^(/v1)?/messages/?$"), ANTHROPIC_MESSAGES),
    (re.compile(r"^(/v1)?/chat/completions/?$"), OPENAI_CHAT),
    (re.compile(r"^(/v1)?/responses/?$"), OPENAI_RESPONSES),
    (re.compile(r"^(/v1)?/responses/compact/?$"), OPENAI_RESPONSES_COMPACT),
)


def wire_for(api: str) -> WireApi | None:
    """The wire API of that name (None for ``passthrough``)."""
    return WIRES.get(api)


def detect_api(method: str, path: str) -> str:
    """The API of a request by method and path (query excluded); ``passthrough`` when unknown."""
    if method.upper() != "POST":
        return PASSTHROUGH
    return next((api for pattern, api in _PATHS if pattern.match(path)), PASSTHROUGH)


def upstream_kind(api: str, headers: Mapping[str, str], path: str = "/") -> str:
    """``anthropic`` or ``openai``: which upstream serves a request.

    Unknown paths go by their headers (``x-api-key`` / ``anthropic-version``: Anthropic; a
    bearer token: OpenAI), else by path: OpenAI clients' base URL ends in ``/v1``, Anthropic's
    does not (Claude Code probes ``HEAD /``).
    """
    wire = WIRES.get(api)
    if wire is not None:
        return wire.provider
    lowered = {k.lower() for k in headers}
    if {"x-api-key", "anthropic-version"} & lowered:
        return "anthropic"
    if "authorization" in lowered or path == "/v1" or path.startswith("/v1/"):
        return "openai"
    return "anthropic"


def error_body(
    provider: str, message: str, *, error_type: str = "api_error", code: str | None = None
) -> dict[str, Any]:
    """An error in the shape of ``provider``'s APIs (the proxy's own 4xx/5xx, for any path)."""
    wire = WIRES[ANTHROPIC_MESSAGES] if provider == "anthropic" else WIRES[OPENAI_CHAT]
    return wire.error_body(message, error_type=error_type, code=code)
