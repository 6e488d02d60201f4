"""Anthropic Messages API on a ScriptedServer: ``POST /v1/messages`` and ``/v1/messages/count_tokens``.

Replies are :class:`Reply` values (text, thinking with a signature, one or several tool_use
blocks, or an error such as 400 "prompt is too long" / 529 overloaded), streamed as
server-sent events when the request says ``"stream": true`` (as Claude Code does) and sent as
one JSON body otherwise. Usage is chosen deterministically from the request itself: the
prompt is estimated with ctxdesk's Anthropic estimator over the system, tools and messages;
what an earlier call with the same system prompt already sent counts as a cache read, the
rest as a cache write, and a few tokens as uncached input, so input + cache sums are
plausible and reproducible. :class:`ScriptedResponse` sends a raw status and body as given.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .core import HttpReply, RecordedRequest, ScriptedServer, sse_events

Predicate = Callable[[RecordedRequest], bool]
#: Uncached input tokens reported per call (Claude Code's real sessions show a handful).
UNCACHED_TAIL_TOKENS = 3


@dataclass(frozen=True)
class ScriptedResponse:
    """A raw reply: HTTP status, JSON body, and seconds to wait before sending it."""

    status: int = 200
    body: dict[str, Any] = field(default_factory=dict)
    delay: float = 0.0
    headers: tuple[tuple[str, str], ...] = ()
    when: Predicate | None = None


@dataclass(frozen=True)
class Reply:
    """One scripted model reply: content blocks (dicts as the API has them) or an error.

    tool_use blocks without an ``id`` get a stable one when served; ``usage`` overrides the
    computed usage keys it names; ``when`` restricts which request may take this reply.
    """

    content: tuple[dict[str, Any], ...] = ()
    stop_reason: str | None = None
    status: int = 200
    error: tuple[str, str] | None = None  # (error type, message) for a non-200 status
    usage: dict[str, int] | None = None
    delay: float = 0.0
    headers: tuple[tuple[str, str], ...] = ()
    when: Predicate | None = None


# -- building replies ------------------------------------------------------------------------
def text_block(text: str) -> dict[str, Any]:
    return {"type": "text", "text": text}


def tool_use_block(name: str, tool_input: dict[str, Any], id: str | None = None) -> dict[str, Any]:
    block: dict[str, Any] = {"type": "tool_use", "name": name, "input": tool_input}
    if id:
        block["id"] = id
    return block


def thinking_block(thinking: str, signature: str | None = None) -> dict[str, Any]:
    sig = signature or "sig_" + hashlib.sha256(thinking.encode()).hexdigest()[:32]
    return {"type": "thinking", "thinking": thinking, "signature": sig}


def reply(*blocks: dict[str, Any] | str, **kwargs: Any) -> Reply:
    """A reply of the given blocks (a plain string is a text block)."""
    content = tuple(text_block(b) if isinstance(b, str) else b for b in blocks)
    return Reply(content=content, **kwargs)


def text(value: str, **kwargs: Any) -> Reply:
    return reply(value, **kwargs)


def tool_calls(*calls: tuple[str, dict[str, Any]] | dict[str, Any], **kwargs: Any) -> Reply:
    """One reply with one or several (parallel) tool_use blocks: ``(name, input)`` pairs or blocks."""
    blocks = [c if isinstance(c, dict) else tool_use_block(c[0], c[1]) for c in calls]
    return reply(*blocks, **kwargs)


def error(status: int, error_type: str, message: str, **kwargs: Any) -> Reply:
    return Reply(status=status, error=(error_type, message), **kwargs)


def prompt_too_long(tokens: int = 210_000, maximum: int = 200_000, **kwargs: Any) -> Reply:
    message = f"prompt is too long: {tokens} tokens > {maximum} maximum"
    return error(400, "invalid_request_error", message, **kwargs)


def overloaded(**kwargs: Any) -> Reply:
    return error(529, "overloaded_error", "Overloaded", **kwargs)


# -- request predicates (for ``when=``) ------------------------------------------------------
def system_text(request: RecordedRequest) -> str:
    system = (request.body or {}).get("system") if isinstance(request.body, dict) else None
    if isinstance(system, str):
        return system
    if isinstance(system, list):
        return "\n".join(str(b.get("text", "")) for b in system if isinstance(b, dict))
    return ""


def first_user_text(request: RecordedRequest) -> str:
    messages = (request.body or {}).get("messages") or [] if isinstance(request.body, dict) else []
    return _content_text(messages[0].get("content")) if messages else ""


def last_user_text(request: RecordedRequest) -> str:
    messages = (request.body or {}).get("messages") or [] if isinstance(request.body, dict) else []
    users = [m for m in messages if m.get("role") == "user"]
    return _content_text(users[-1].get("content")) if users else ""


def _content_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    parts: list[str] = []
    for block in content or []:
        if not isinstance(block, dict):
            continue
        if block.get("type") == "text":
            parts.append(str(block.get("text", "")))
        elif block.get("type") == "tool_result":
            parts.append(_content_text(block.get("content")))
    return "\n".join(parts)


def offers_tool(name: str) -> Predicate:
    def check(request: RecordedRequest) -> bool:
        tools = (request.body or {}).get("tools") or [] if isinstance(request.body, dict) else []
        return any(isinstance(t, dict) and t.get("name") == name for t in tools)

    return check


def first_user_contains(needle: str) -> Predicate:
    return lambda request: needle in first_user_text(request)


def last_user_contains(needle: str) -> Predicate:
    return lambda request: needle in last_user_text(request)


def all_of(*predicates: Predicate) -> Predicate:
    return lambda request: all(p(request) for p in predicates)


def not_(predicate: Predicate) -> Predicate:
    return lambda request: not predicate(request)


# -- serving ---------------------------------------------------------------------------------
def estimate_prompt_tokens(body: dict[str, Any]) -> int:
    """ctxdesk's Anthropic estimate of a request's prompt: system, tools and messages."""
    from engine.tokens import get_tokenizer  # the repo's estimator: real, deterministic

    tokenizer = get_tokenizer("anthropic")
    parts = [
        json.dumps(body.get("system") or "", ensure_ascii=False),
        json.dumps(body.get("tools") or [], ensure_ascii=False),
        json.dumps(body.get("messages") or [], ensure_ascii=False),
    ]
    return max(1, sum(tokenizer.count(p) for p in parts))


def _output_tokens(content: list[dict[str, Any]]) -> int:
    from engine.tokens import get_tokenizer

    tokenizer = get_tokenizer("anthropic")
    return max(1, tokenizer.count(json.dumps(content, ensure_ascii=False)))


def _usage(server: ScriptedServer, body: dict[str, Any], override: dict[str, int] | None) -> dict[str, Any]:
    total = estimate_prompt_tokens(body)
    key = (
        "anthropic-cache:"
        + hashlib.sha256(json.dumps(body.get("system"), sort_keys=True).encode()).hexdigest()
    )
    with server._lock:
        previous = server.state.get(key, 0)
        server.state[key] = total
    cache_read = previous if previous <= total else 0
    uncached = min(UNCACHED_TAIL_TOKENS, total - cache_read)
    usage = {
        "input_tokens": uncached,
        "cache_creation_input_tokens": total - cache_read - uncached,
        "cache_read_input_tokens": cache_read,
    }
    usage.update(override or {})
    # the split of the writes, summing to their total as real responses give it (5-minute TTL)
    usage["cache_creation"] = {
        "ephemeral_5m_input_tokens": usage["cache_creation_input_tokens"],
        "ephemeral_1h_input_tokens": 0,
    }
    return usage


def _error_body(error_type: str, message: str) -> dict[str, Any]:
    return {"type": "error", "error": {"type": error_type, "message": message}}


def _served_content(server: ScriptedServer, item: Reply) -> list[dict[str, Any]]:
    content = []
    for block in item.content:
        block = dict(block)
        if block["type"] == "tool_use" and "id" not in block:
            block["id"] = f"toolu_scripted_{server.counter('tool_use'):04d}"
        content.append(block)
    return content


def handle_messages(server: ScriptedServer, request: RecordedRequest) -> HttpReply:
    body = request.body if isinstance(request.body, dict) else {}
    item = server.next_item(request)
    if item is None:
        return HttpReply(500, _error_body("api_error", "no scripted response left"))
    if isinstance(item, ScriptedResponse):
        return HttpReply(item.status, item.body, item.headers, item.delay)
    if item.status != 200:
        error_type, message = item.error or ("api_error", "scripted error")
        return HttpReply(item.status, _error_body(error_type, message), item.headers, item.delay)
    content = _served_content(server, item)
    stop_reason = item.stop_reason or (
        "tool_use" if any(b["type"] == "tool_use" for b in content) else "end_turn"
    )
    usage = _usage(server, body, item.usage)
    output_tokens = (item.usage or {}).get("output_tokens") or _output_tokens(content)
    message = {
        "id": f"msg_scripted_{server.counter('message'):04d}",
        "type": "message",
        "role": "assistant",
        "model": body.get("model") or "claude-sonnet-4-5",
        "content": content,
        "stop_reason": stop_reason,
        "stop_sequence": None,
        "usage": {**usage, "output_tokens": output_tokens},
    }
    if not body.get("stream"):
        return HttpReply(200, message, item.headers, item.delay)
    return HttpReply(
        200,
        None,
        item.headers,
        item.delay,
        chunks=sse_events(_stream_events(message)),
        content_type="text/event-stream",
    )


def _stream_events(message: dict[str, Any]) -> list[tuple[str, Any]]:
    start = {**message, "content": [], "stop_reason": None, "usage": {**message["usage"], "output_tokens": 1}}
    events: list[tuple[str, Any]] = [("message_start", {"type": "message_start", "message": start})]
    for index, block in enumerate(message["content"]):
        kind = block["type"]
        if kind == "text":
            first = {"type": "text", "text": ""}
            deltas = [{"type": "text_delta", "text": block["text"]}]
        elif kind == "thinking":
            first = {"type": "thinking", "thinking": "", "signature": ""}
            deltas = [
                {"type": "thinking_delta", "thinking": block["thinking"]},
                {"type": "signature_delta", "signature": block["signature"]},
            ]
        elif kind == "tool_use":
            first = {"type": "tool_use", "id": block["id"], "name": block["name"], "input": {}}
            deltas = [{"type": "input_json_delta", "partial_json": json.dumps(block["input"])}]
        else:
            raise ValueError(f"cannot stream a {kind!r} block")
        events.append(
            ("content_block_start", {"type": "content_block_start", "index": index, "content_block": first})
        )
        events += [
            ("content_block_delta", {"type": "content_block_delta", "index": index, "delta": d})
            for d in deltas
        ]
        events.append(("content_block_stop", {"type": "content_block_stop", "index": index}))
    events.append(
        (
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": message["stop_reason"], "stop_sequence": None},
                "usage": {"output_tokens": message["usage"]["output_tokens"]},
            },
        )
    )
    events.append(("message_stop", {"type": "message_stop"}))
    return events


def handle_count_tokens(server: ScriptedServer, request: RecordedRequest) -> HttpReply:
    body = request.body if isinstance(request.body, dict) else {}
    return HttpReply(200, {"input_tokens": estimate_prompt_tokens(body)})


def install(server: ScriptedServer) -> ScriptedServer:
    """Add the Anthropic Messages routes to ``server``."""
    server.add_route("POST", "/v1/messages", handle_messages)
    server.add_route("POST", "/v1/messages/count_tokens", handle_count_tokens)
    return server


def anthropic_server(*items: Any, **kwargs: Any) -> ScriptedServer:
    """A ScriptedServer answering the Anthropic Messages API with ``items`` in order."""
    return install(ScriptedServer(*items, **kwargs))


# -- the older fake's helpers, kept for the tests that use them ------------------------------
def message_body(
    text: str,
    *,
    model: str = "claude-haiku-4-5",
    input_tokens: int = 100,
    output_tokens: int = 20,
    stop_reason: str = "end_turn",
    content: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """A Messages API response body with one text block (or the given content blocks)."""
    return {
        "id": "msg_fake_0001",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content if content is not None else [{"type": "text", "text": text}],
        "stop_reason": stop_reason,
        "stop_sequence": None,
        "usage": {"input_tokens": input_tokens, "output_tokens": output_tokens},
    }


error_body = _error_body


def success(text: str = "A summary.", **kwargs: Any) -> ScriptedResponse:
    return ScriptedResponse(200, message_body(text, **kwargs))


def slow(seconds: float, then: ScriptedResponse | None = None) -> ScriptedResponse:
    """``then`` (default: a success), sent only after ``seconds``: longer than a client's timeout."""
    answer = then or success()
    return ScriptedResponse(answer.status, answer.body, seconds, answer.headers)


class FakeAnthropicServer(ScriptedServer):
    """The Messages API with raw scripted replies; once they run out, ``default`` (a 500 unless given)."""

    def __init__(self, *responses: Any, default: Any = None, log_path: Any = None) -> None:
        super().__init__(
            *responses,
            default=default or ScriptedResponse(500, _error_body("api_error", "no scripted response left")),
            log_path=log_path,
            name="fake-anthropic",
        )
        install(self)
