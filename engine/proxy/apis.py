"""The APIs the proxy understands: which one a path is, and what a request and an answer hold.

Pure functions over bytes and dicts: ``detect_api`` maps a path to an API, ``upstream_kind``
to the upstream that serves it; ``request_view`` turns a request body into our messages and
components' inputs (leniently: an unknown block becomes text, never an error);
``agent_session_id`` finds the agent's own session id. Answers are read in
:mod:`engine.proxy.responses` (its names re-exported here); ``response_message`` turns one into
our message. Nothing here does I/O.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from engine.convert import from_anthropic, from_openai
from engine.errors import ContextDeskError
from engine.messages import Message, TextBlock, ThinkingBlock, ToolResultBlock, ToolUseBlock
from engine.proxy.api_names import (  # noqa: F401  (re-exported: apis.X is the proxy's name for them)
    ANTHROPIC_COUNT_TOKENS,
    ANTHROPIC_MESSAGES,
    MODEL_CALL_APIS,
    OPENAI_CHAT,
    OPENAI_RESPONSES,
    PASSTHROUGH,
    PROVIDERS,
)
from engine.proxy.responses import (  # noqa: F401  (re-exported)
    PROMPT_TOO_LONG,
    ParsedResponse,
    decode_body,
    iter_sse,
    parse_response,
    usage_fields,
)

_PATHS = (
    (re.compile(r"^(/v1)?/messages/count_tokens/?$"), ANTHROPIC_COUNT_TOKENS),
    (re.compile(r"^(/v1)?/messages/?$"), ANTHROPIC_MESSAGES),
    (re.compile(r"^(/v1)?/chat/completions/?$"), OPENAI_CHAT),
    (re.compile(r"^(/v1)?/responses/?$"), OPENAI_RESPONSES),
)


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
    if api in PROVIDERS:
        return PROVIDERS[api]
    lowered = {k.lower() for k in headers}
    if {"x-api-key", "anthropic-version"} & lowered:
        return "anthropic"
    if "authorization" in lowered or path == "/v1" or path.startswith("/v1/"):
        return "openai"
    return "anthropic"


# -- requests ------------------------------------------------------------------------------


@dataclass(frozen=True)
class RequestView:
    """A request body in our terms: system text, tools, messages, and where they came from."""

    model: str | None
    system: str
    tools: list[dict[str, Any]]
    messages: list[Message]
    raw_messages: list[Any]
    stream: bool
    agent_session_id: str | None = None


def _text_of(value: Any) -> str:
    """The text of a system prompt / content given as a string, blocks or parts."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, dict):
        if isinstance(value.get("text"), str):
            return value["text"]
        if "parts" in value:
            return _text_of(value["parts"])
        if "content" in value:
            return _text_of(value["content"])
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, list):
        return "\n".join(t for t in (_text_of(v) for v in value) if t)
    return str(value)


def lenient_message(convert: Any, raw: Any, role: str) -> Message:
    try:
        return convert([raw])[0]
    except (ContextDeskError, IndexError, TypeError, ValueError, AttributeError):
        text = raw.get("content") if isinstance(raw, dict) else raw
        return Message(role=role, content=_text_of(text) or json.dumps(raw, ensure_ascii=False, default=str))


def _role(raw: Any) -> str:
    role = raw.get("role") if isinstance(raw, dict) else None
    return role if role in ("user", "assistant") else "user"


def is_system_message(raw: Any) -> bool:
    """A Chat Completions message that is part of the system prompt (system or developer role)."""
    return isinstance(raw, dict) and raw.get("role") in ("system", "developer")


def one_message(api: str, raw: Any) -> Message:
    """One Anthropic or Chat Completions history message (not a system one) as ours, leniently."""
    return lenient_message(from_openai if api == OPENAI_CHAT else from_anthropic, raw, _role(raw))


def _anthropic_messages(raw: list[Any]) -> list[Message]:
    return [one_message(ANTHROPIC_MESSAGES, m) for m in raw]


def _chat_messages(raw: list[Any]) -> tuple[str, list[Message]]:
    system = [_text_of(m.get("content")) for m in raw if is_system_message(m)]
    rest = [one_message(OPENAI_CHAT, m) for m in raw if not is_system_message(m)]
    return "\n".join(system), rest


def responses_items(items: list[Any]) -> tuple[str, list[Message]]:
    """Responses ``input`` items as messages; consecutive same-role items share a message."""
    system: list[str] = []
    out: list[tuple[str, list[Any]]] = []

    def add(role: str, block: Any) -> None:
        if out and out[-1][0] == role:
            out[-1][1].append(block)
        else:
            out.append((role, [block]))

    for item in items:
        if not isinstance(item, dict):
            add("user", TextBlock(text=_text_of(item)))
            continue
        kind = item.get("type", "message")
        role = item.get("role")
        if kind == "message" and role in ("system", "developer"):
            system.append(_text_of(item.get("content")))
        elif kind == "message":
            add("assistant" if role == "assistant" else "user", TextBlock(text=_text_of(item.get("content"))))
        elif kind in ("function_call", "custom_tool_call", "local_shell_call", "web_search_call"):
            raw_args = item.get("arguments", item.get("input", item.get("action")))
            try:
                args = json.loads(raw_args) if isinstance(raw_args, str) else raw_args
            except json.JSONDecodeError:
                args = None
            call_id = str(item.get("call_id") or item.get("id") or "call")
            name = str(item.get("name") or kind)
            add(
                "assistant",
                ToolUseBlock(
                    id=call_id, name=name, input=args if isinstance(args, dict) else {"input": raw_args}
                ),
            )
        elif kind.endswith("_output"):
            output = item.get("output")
            add(
                "user",
                ToolResultBlock(
                    tool_use_id=str(item.get("call_id") or "call"),
                    content=output if isinstance(output, str) else json.dumps(output, ensure_ascii=False),
                ),
            )
        elif kind == "reasoning":
            add("assistant", ThinkingBlock(thinking=_text_of(item.get("summary"))))
        else:
            add("user", TextBlock(text=json.dumps(item, ensure_ascii=False, default=str)))
    return "\n".join(system), [Message(role=role, content=blocks) for role, blocks in out]


def _anthropic_session_id(body: Mapping[str, Any]) -> str | None:
    user_id = (body.get("metadata") or {}).get("user_id") if isinstance(body.get("metadata"), dict) else None
    if isinstance(user_id, str) and user_id.startswith("{"):
        try:
            value = json.loads(user_id).get("session_id")
        except (json.JSONDecodeError, AttributeError):
            return None
        return str(value) if value else None
    match = re.search(
        r"_session_([0-9a-fA-F-]{8,})$", user_id or ""
    )  # older Claude Code: user_..._session_<uuid>
    return match.group(1) if match else None


#: Headers that carry an agent's own session id, strongest first.
SESSION_HEADERS = (
    "x-ctxdesk-session",
    "x-claude-code-session-id",
    "session_id",
    "session-id",
    "conversation_id",
)


def agent_session_id(api: str, headers: Mapping[str, str], body: Mapping[str, Any] | None) -> str | None:
    """The agent's own session id: an X-Ctxdesk-Session header, Claude Code's or Codex's id, OpenAI user."""
    lowered = {k.lower(): v for k, v in headers.items()}
    for name in SESSION_HEADERS[:2]:
        if lowered.get(name):
            return lowered[name]
    if body is not None and api in (ANTHROPIC_MESSAGES, ANTHROPIC_COUNT_TOKENS):
        found = _anthropic_session_id(body)
        if found:
            return found
    for name in SESSION_HEADERS[2:]:
        if lowered.get(name):
            return lowered[name]
    if body is not None:
        for key in ("prompt_cache_key", "user"):
            if isinstance(body.get(key), str) and body[key]:
                return body[key]
    return None


def convert_messages(api: str, raw: list[Any]) -> list[Message]:
    """Provider messages (a slice of a request's list) as our messages, leniently."""
    if api == OPENAI_CHAT:
        return _chat_messages(raw)[1]
    if api == OPENAI_RESPONSES:
        return responses_items(raw)[1]
    return _anthropic_messages(raw)


def request_view(api: str, body: Mapping[str, Any], headers: Mapping[str, str] | None = None) -> RequestView:
    """A parsed request body in our terms (lenient: never raises on odd content)."""
    tools = [t for t in body.get("tools") or [] if isinstance(t, dict)]
    model = body.get("model") if isinstance(body.get("model"), str) else None
    if api == OPENAI_CHAT:
        raw = [m for m in body.get("messages") or [] if m is not None]
        system, messages = _chat_messages(raw)
    elif api == OPENAI_RESPONSES:
        raw_input = body.get("input")
        raw = raw_input if isinstance(raw_input, list) else [{"role": "user", "content": raw_input or ""}]
        system, messages = responses_items(raw)
        system = "\n".join(t for t in (_text_of(body.get("instructions")), system) if t)
    else:
        raw = [m for m in body.get("messages") or [] if m is not None]
        system, messages = _text_of(body.get("system")), _anthropic_messages(raw)
    return RequestView(
        model=model,
        system=system,
        tools=tools,
        messages=messages,
        raw_messages=raw,
        stream=bool(body.get("stream")),
        agent_session_id=agent_session_id(api, headers or {}, body),
    )


def response_message(api: str, parsed: ParsedResponse) -> Message | None:
    """The assistant's answer as our message (None when there was no answer)."""
    if not parsed.content:
        return None
    if api == ANTHROPIC_MESSAGES:
        return lenient_message(from_anthropic, {"role": "assistant", "content": parsed.content}, "assistant")
    if api == OPENAI_CHAT:
        return lenient_message(from_openai, parsed.content[0], "assistant")
    if api == OPENAI_RESPONSES:
        items = [i for i in parsed.content if isinstance(i, dict)]
        _, messages = responses_items(
            [i | {"role": "assistant"} if i.get("type") == "message" else i for i in items]
        )
        blocks = [b for m in messages for b in (m.content if isinstance(m.content, list) else [])]
        return Message(role="assistant", content=blocks) if blocks else None
    return None
