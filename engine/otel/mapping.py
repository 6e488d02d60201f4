"""Agents' OpenTelemetry events mapped to ctxdesk rows (pure: records in, typed items out).

Claude Code (``claude_code.*`` log events), Codex (``codex.*``) and Gemini CLI (``gemini_cli.*``)
each log one event per model call with the provider's usage, and events for failed calls and tool
results. A call becomes a ``request`` event with :class:`~engine.events.ProviderUsage` (the same
row an import writes); a failed call a ``request`` event whose ``details["failure"]`` is
:func:`engine.call_failures.failure_details`; a tool result a ``note`` event (trigger ``tool_result``);
a raw request body that arrived whole (Claude Code ``OTEL_LOG_RAW_API_BODIES=1``) a ``model_requests`` row.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from engine.call_failures import classify_failure, failure_details
from engine.events import ContextEvent, ProviderUsage
from engine.otel.payload import OtlpRecord

__all__ = ["AGENT_PREFIXES", "OtelItem", "items_of", "session_of"]

#: Event-name prefix -> (agent, provider when the event does not say).
AGENT_PREFIXES: dict[str, tuple[str, str]] = {
    "claude_code.": ("claude-code", "anthropic"),
    "codex.": ("codex", "openai"),
    "gemini_cli.": ("gemini", "gemini"),  # the provider name the Gemini CLI importer records
}
#: Attributes naming the agent's session, in the order they are tried.
_SESSION_KEYS = ("session.id", "conversation.id", "gen_ai.conversation.id", "session_id")


@dataclass(frozen=True)
class OtelItem:
    """One thing to record: an event, or an exact request body (``request_body``), for ``session_id``."""

    session_id: str
    agent: str
    time_unix_nano: int
    event: ContextEvent | None = None
    request_body: dict[str, Any] | None = None
    model: str | None = None


def _int(value: Any) -> int:
    try:
        return max(0, int(float(value)))
    except (TypeError, ValueError, OverflowError):
        return 0


def _text(value: Any) -> str | None:
    return None if value is None or value == "" else str(value)


def agent_of(name: str) -> tuple[str, str] | None:
    return next((pair for prefix, pair in AGENT_PREFIXES.items() if name.startswith(prefix)), None)


def session_of(record: OtlpRecord) -> str | None:
    for key in _SESSION_KEYS:
        value = record.attributes.get(key) or record.resource.get(key)
        if value:
            return str(value)
    return None


def _common(record: OtlpRecord, agent: str) -> dict[str, Any]:
    attrs = record.attributes
    details: dict[str, Any] = {"source": f"otel:{agent}", "otel_event": record.name}
    for key, out in (
        ("prompt.id", "prompt_id"), ("request_id", "request_id"), ("event.sequence", "otel_sequence"),
        ("duration_ms", "duration_ms"), ("ttft_ms", "ttft_ms"), ("query_source", "query_source"),
        ("event.timestamp", "call_utc"),
    ):  # fmt: skip
        if attrs.get(key) is not None:
            details[out] = attrs[key]
    return details


def _usage(attrs: dict[str, Any], agent: str) -> ProviderUsage:
    if agent == "claude-code":  # Anthropic's split: input excludes cache reads and writes
        return ProviderUsage(
            input_tokens=_int(attrs.get("input_tokens")),
            output_tokens=_int(attrs.get("output_tokens")),
            cache_read_input_tokens=_int(attrs.get("cache_read_tokens")),
            cache_creation_input_tokens=_int(attrs.get("cache_creation_tokens")),
        )
    # Codex (input_token_count includes cached_token_count) and Gemini CLI (input_token_count
    # includes cached_content_token_count): the prompt total with its cached part
    cached = _int(attrs.get("cached_token_count") or attrs.get("cached_content_token_count"))
    output = _int(attrs.get("output_token_count"))
    if agent == "gemini":  # Gemini's candidates count leaves the thoughts out; both are billed as output
        output += _int(attrs.get("thoughts_token_count"))
    return ProviderUsage.from_prompt_total(_int(attrs.get("input_token_count")), output, cache_read=cached)


def _request(record: OtlpRecord, agent: str, provider: str) -> ContextEvent:
    attrs = record.attributes
    details = _common(record, agent)
    if attrs.get("cost_usd") is not None:
        details["agent_cost_usd"] = attrs["cost_usd"]
    for key in ("cache_creation_5m_tokens", "cache_creation_1h_tokens"):
        if attrs.get(key) is not None:
            details[key.replace("cache_creation", "cache_write")] = _int(attrs[key])
    for key in ("reasoning_token_count", "thoughts_token_count"):
        if attrs.get(key) is not None:
            details["reasoning_tokens"] = _int(attrs[key])
    if attrs.get("role") is not None:  # Gemini CLI: "main", or a side call such as its "utility_router"
        details["agent_role"] = str(attrs["role"])
    usage = _usage(attrs, agent)
    details["provider_prompt_tokens"] = usage.prompt_tokens
    return ContextEvent(
        kind="request", provider=provider, model=_text(attrs.get("model")), usage=usage,
        projected_tokens=usage.prompt_tokens, details=details,
    )  # fmt: skip


def _failure(record: OtlpRecord, agent: str, provider: str) -> ContextEvent:
    attrs = record.attributes
    status = _int(attrs.get("status_code") or attrs.get("http.response.status_code")) or None
    message = _text(attrs.get("error") or attrs.get("error.message") or attrs.get("error_message"))
    error_type = _text(attrs.get("error_type") or attrs.get("error.type"))
    cause = classify_failure(status, error_type, message)
    details = _common(record, agent)
    details["failure"] = failure_details(cause, status=status, message=message, error_type=error_type)
    if attrs.get("attempt") is not None:
        details["attempt"] = _int(attrs["attempt"])
    outcome = "context_length_exceeded" if cause == "prompt_too_long" else "provider_error"
    return ContextEvent(
        kind="request", outcome=outcome, provider=provider, model=_text(attrs.get("model")),
        reason=message, details=details,
    )  # fmt: skip


def _tool_result(record: OtlpRecord, agent: str) -> ContextEvent:
    attrs = record.attributes
    details = _common(record, agent)
    for key in ("tool_name", "function_name", "tool_use_id", "call_id", "tool_result_size_bytes", "decision"):
        if attrs.get(key) is not None:
            details[key] = attrs[key]
    success = str(attrs.get("success", "")).lower()
    details["success"] = success == "true" if success in ("true", "false") else None
    if attrs.get("error"):
        details["error"] = str(attrs["error"])
    name = attrs.get("tool_name") or attrs.get("function_name")
    return ContextEvent(
        kind="note",
        trigger="tool_result",
        outcome="ok" if details["success"] is not False else "error",
        reason=f"tool {name}" if name else "tool result",
        details=details,
    )


def _request_body(record: OtlpRecord) -> dict[str, Any] | None:
    """The exact request when the agent logged it whole (Claude Code cuts long bodies and says so)."""
    attrs = record.attributes
    if str(attrs.get("body_truncated", "false")).lower() == "true":
        return None
    try:
        body = json.loads(str(attrs.get("body") or ""))
    except ValueError:
        return None
    return body if isinstance(body, dict) else None


_REQUESTS = {"claude_code.api_request", "codex.api_request", "gemini_cli.api_response"}
_ERRORS = {"claude_code.api_error", "codex.api_error", "gemini_cli.api_error"}
_TOOLS = {"claude_code.tool_result", "codex.tool_result", "gemini_cli.tool_call"}
_BODIES = {"claude_code.api_request_body"}
#: Codex events that carry a call's usage only in one of their records (the one with token counts).
_USAGE_LATER = {"codex.api_request", "codex.sse_event"}


def _is_http_failure(attrs: dict[str, Any]) -> bool:
    """Codex logs a failed HTTP attempt as an api_request with the status it got (or an error)."""
    status = _int(attrs.get("http.response.status_code"))
    return status >= 400 or bool(attrs.get("error.message"))


def items_of(records: list[OtlpRecord]) -> list[OtelItem]:
    """What to record for ``records``, in their order; events of other kinds and other programs are skipped."""
    items: list[OtelItem] = []
    for record in records:
        known = agent_of(record.name)
        session = session_of(record)
        if known is None or session is None:
            continue
        agent, provider = known
        if record.name == "codex.api_request" and _is_http_failure(record.attributes):
            items.append(
                OtelItem(session, agent, record.time_unix_nano, event=_failure(record, agent, provider))
            )
            continue
        if record.name in _USAGE_LATER and record.attributes.get("input_token_count") is None:
            continue  # Codex logs the HTTP call, and each response.completed a first time, without usage
        when = record.time_unix_nano
        if record.name in _REQUESTS or (
            record.name == "codex.sse_event" and record.attributes.get("event.kind") == "response.completed"
        ):
            items.append(OtelItem(session, agent, when, event=_request(record, agent, provider)))
        elif record.name in _ERRORS:
            items.append(OtelItem(session, agent, when, event=_failure(record, agent, provider)))
        elif record.name in _TOOLS:
            items.append(OtelItem(session, agent, when, event=_tool_result(record, agent)))
        elif record.name in _BODIES:
            body = _request_body(record)
            if body is not None:
                model = _text(record.attributes.get("model"))
                items.append(OtelItem(session, agent, when, request_body=body, model=model))
    return items
