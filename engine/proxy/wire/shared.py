"""What every wire format shares: the values a :class:`~engine.proxy.wire.WireApi` returns (a
request in our terms, a tool result found in a request, a parsed answer) and the lenient readers
they are built with (text of a value, an SSE stream, a content-encoded body, an error body).
Pure functions over bytes and dicts; nothing here does I/O.
"""

from __future__ import annotations

import hashlib
import json
import re
import zlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from engine.errors import ContextDeskError
from engine.messages import Message

#: Words a provider's error uses when the prompt does not fit.
PROMPT_TOO_LONG = re.compile(
    r"prompt is too long|exceed(s|ed)? (the )?context (window|length)|context_length_exceeded|maximum context length",
    re.IGNORECASE,
)
#: Largest answer body the proxy inflates (gzip/deflate) to read it (a model's answer is a few MB at
#: most): past it the answer is recorded unparsed, and the proxy's own read_result rounds answer a 502.
DECODED_LIMIT = 32 * 1024 * 1024
#: How a compaction summary is sent in a history (a message of its own, or the first user message's start).
SUMMARY_NOTE = (
    "<ctxdesk-summary>\nSummary of the earlier conversation (compacted by ctxdesk):\n{}\n</ctxdesk-summary>"
)

#: (call id, the call's arguments) of each read_result call in one answer.
ReadCalls = list[tuple[Any, dict[str, Any]]]


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


def build_view(
    body: Mapping[str, Any], raw: list[Any], system: str, messages: list[Message], session_id: str | None
) -> RequestView:
    """A request's view from what a wire API read of it itself (its history items, their messages,
    its system text, the agent's session id) and what every API's body holds alike."""
    return RequestView(
        model=body.get("model") if isinstance(body.get("model"), str) else None,
        system=system,
        tools=[t for t in as_list(body.get("tools")) if isinstance(t, dict)],
        messages=messages,
        raw_messages=raw,
        stream=bool(body.get("stream")),
        agent_session_id=session_id,
    )


@dataclass(frozen=True)
class ToolResult:
    """One tool result in a request's history: its call's id and tool, its content as sent, and
    the index of the history item that holds it."""

    tool_use_id: str
    name: str | None
    content: Any
    index: int

    @property
    def text(self) -> str:
        return content_text(self.content)


@dataclass
class ParsedResponse:
    """What the provider answered, from a JSON body or a whole SSE stream."""

    content: list[Any] = field(default_factory=list)  # Anthropic blocks / chat message / Responses items
    stop_reason: str | None = None
    response_id: str | None = None
    model: str | None = None
    usage: dict[str, Any] | None = None
    error_type: str | None = None
    error_message: str | None = None
    complete: bool = False
    #: the provider's own context management on this call (Anthropic's ``applied_edits``)
    context_management: dict[str, Any] | None = None

    @property
    def prompt_too_long(self) -> bool:
        return bool(self.error_message and PROMPT_TOO_LONG.search(self.error_message))

    def as_record(self) -> dict[str, Any]:
        out: dict[str, Any] = {"content": self.content}
        if self.response_id:
            out["id"] = self.response_id
        if self.model:
            out["model"] = self.model
        if not self.complete:
            out["incomplete"] = True
        if self.context_management:
            out["context_management"] = self.context_management
        return out


@dataclass(frozen=True)
class ProviderEdit:
    """Context the provider itself removed on a call (its server-side context management): an
    applied edit (Anthropic ``clear_tool_uses_20250919``, ``clear_thinking_20251015``: what it
    cleared) or a compaction (Anthropic's ``compaction`` block, OpenAI's ``compaction`` item)."""

    kind: str  #: the edit's type, or ``compaction``
    cleared_input_tokens: int | None = None
    cleared: int | None = None  #: tool uses or thinking turns cleared
    summary: str | None = None  #: a compaction's summary, when the provider shows it


def content_text(content: Any) -> str:
    """A tool result's content as one text (JSON for structured content)."""
    if isinstance(content, str):
        return content
    return json.dumps(content, ensure_ascii=False)


def text_of(value: Any) -> str:
    """The text of a system prompt / content given as a string, blocks or parts."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, dict):
        if isinstance(value.get("text"), str):
            return value["text"]
        if "parts" in value:
            return text_of(value["parts"])
        if "content" in value:
            return text_of(value["content"])
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, list):
        return "\n".join(t for t in (text_of(v) for v in value) if t)
    return str(value)


def lenient_message(convert: Callable[[list[Any]], list[Message]], raw: Any, role: str) -> Message:
    """``raw`` converted by ``convert``, or its text as a message of ``role`` when it does not convert."""
    try:
        return convert([raw])[0]
    except (ContextDeskError, IndexError, TypeError, ValueError, AttributeError):
        text = raw.get("content") if isinstance(raw, dict) else raw
        return Message(role=role, content=text_of(text) or json.dumps(raw, ensure_ascii=False, default=str))


def history_role(raw: Any) -> str:
    role = raw.get("role") if isinstance(raw, dict) else None
    return role if role in ("user", "assistant") else "user"


def with_summary(messages: Sequence[Message], summary: str | None) -> list[Message]:
    """A compacted history with its summary first: at the start of the first user message, or as
    a user message of its own."""
    messages = list(messages)
    if not summary:
        return messages
    from engine.messages import TextBlock

    note = SUMMARY_NOTE.format(summary)
    if messages and messages[0].role == "user":
        first = messages[0]
        blocks = [TextBlock(text=first.content)] if isinstance(first.content, str) else list(first.content)
        return [
            first.model_copy(update={"content": [TextBlock(text=note), *blocks], "meta": {}}),
            *messages[1:],
        ]
    return [Message(role="user", content=note), *messages]


def strip_markers(value: Any) -> Any:
    """``value`` without ``cache_control`` markers (a compacted history sets none of its own)."""
    if isinstance(value, dict):
        return {k: strip_markers(v) for k, v in value.items() if k != "cache_control"}
    if isinstance(value, list):
        return [strip_markers(v) for v in value]
    return value


def decode_body(data: bytes, encoding: str | None, *, limit: int = DECODED_LIMIT) -> bytes:
    """The body bytes with a gzip / deflate content-encoding undone (others returned as they are);
    ``ValueError`` when it would inflate past ``limit`` bytes (a decompression bomb)."""
    encoding = (encoding or "").lower().strip()
    if encoding in ("gzip", "x-gzip"):
        return _inflate(data, 16 + zlib.MAX_WBITS, limit)
    if encoding == "deflate":
        try:
            return _inflate(data, zlib.MAX_WBITS, limit)
        except zlib.error:
            return _inflate(data, -zlib.MAX_WBITS, limit)
    return data


def _inflate(data: bytes, wbits: int, limit: int) -> bytes:
    inflater = zlib.decompressobj(wbits)
    out = inflater.decompress(data, limit + 1)
    if len(out) > limit or inflater.unconsumed_tail:
        raise ValueError(f"the answer inflates past {limit:,} bytes")
    return out


def iter_sse(data: bytes) -> Iterator[tuple[str | None, Any]]:
    """(event name, parsed data) of every event in an SSE byte stream; unparsable data is skipped."""
    text = data.decode("utf-8", "replace").replace("\r\n", "\n")
    for chunk in text.split("\n\n"):
        name: str | None = None
        lines: list[str] = []
        for line in chunk.split("\n"):
            if line.startswith("event:"):
                name = line[6:].strip()
            elif line.startswith("data:"):
                lines.append(line[5:].lstrip(" "))
        if not lines:
            continue
        payload = "\n".join(lines)
        if payload.strip() == "[DONE]":
            yield name, "[DONE]"
            continue
        try:
            yield name, json.loads(payload)
        except json.JSONDecodeError:
            continue


def error_from_json(body: Any) -> tuple[str | None, str | None]:
    """(type, message) of a provider's error body, (None, None) when it is not one."""
    if not isinstance(body, dict):
        return None, None
    error = body.get("error")
    if isinstance(error, dict):
        return (str(error.get("type") or error.get("code") or "error"), str(error.get("message") or ""))
    if isinstance(error, str):
        return "error", error
    return None, None


def json_answer(status: int | None, data: bytes) -> tuple[dict[str, Any] | None, ParsedResponse]:
    """A JSON answer's body (None when it is no answer to read further) and what it says so far:
    an error's type and message, else the id, model and usage every API's answer carries."""
    parsed = ParsedResponse()
    try:
        body = json.loads(data) if data else None
    except (json.JSONDecodeError, UnicodeDecodeError):
        parsed.error_message = None if (status or 0) < 400 else data[:2000].decode("utf-8", "replace")
        return None, parsed
    parsed.error_type, parsed.error_message = error_from_json(body)
    if not isinstance(body, dict) or parsed.error_type:
        return None, parsed
    parsed.complete = True
    parsed.response_id = body.get("id")
    parsed.model = body.get("model")
    parsed.usage = body.get("usage") if isinstance(body.get("usage"), dict) else None
    return body, parsed


def whole_int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def compact_json(value: object) -> bytes:
    """``value`` as the compact UTF-8 JSON the proxy sends and answers with."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


def parsed_arguments(arguments: Any) -> dict[str, Any]:
    """A tool call's arguments (a JSON string or an object) as an object ({} when they are not one)."""
    try:
        parsed = json.loads(arguments) if isinstance(arguments, str) else arguments
    except json.JSONDecodeError:
        parsed = None
    return parsed if isinstance(parsed, dict) else {}


#: Headers that carry an agent's own session id, strongest first (the body's own id comes after the
#: first two: Claude Code's ``metadata.user_id``).
SESSION_HEADERS = (
    "x-ctxdesk-session",
    "x-claude-code-session-id",
    "session_id",
    "session-id",
    "conversation_id",
)


def agent_session_id(
    headers: Mapping[str, str], body: Mapping[str, Any] | None, in_body: str | None = None
) -> str | None:
    """The agent's own session id: an X-Ctxdesk-Session or Claude Code header, the id a wire API
    found in the body (``in_body``: Claude Code's ``metadata.user_id``), Codex's ``session-id``
    header, then OpenAI's ``prompt_cache_key`` / ``user``."""
    lowered = {k.lower(): v for k, v in headers.items()}
    for name in SESSION_HEADERS[:2]:
        if lowered.get(name):
            return lowered[name]
    if in_body:
        return in_body
    for name in SESSION_HEADERS[2:]:
        if lowered.get(name):
            return lowered[name]
    if body is not None:
        for key in ("prompt_cache_key", "user"):
            if isinstance(body.get(key), str) and body[key]:
                return body[key]
    return None


def identity_hash(value: Any) -> str:
    """Hash of a message (or a prompt) as the agent means it: key order and ``cache_control`` markers
    ignored, which agents move from call to call (and a string content sent as one text block only
    to carry such a marker)."""
    text = json.dumps(_unmarked(value), ensure_ascii=False, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _unmarked(value: Any) -> Any:
    if isinstance(value, dict):
        out = {k: _unmarked(v) for k, v in value.items() if k != "cache_control"}
        content = out.get("content")
        # Claude Code turns a string content into one text block to put a marker on it
        if (
            isinstance(content, list)
            and len(content) == 1
            and isinstance(content[0], dict)
            and content[0] == {"type": "text", "text": content[0].get("text")}
        ):
            out["content"] = content[0]["text"]
        return out
    if isinstance(value, list):
        return [_unmarked(v) for v in value]
    return value


def as_dict(value: Any) -> dict[str, Any]:
    """``value`` when it is an object, else an empty one (odd input read leniently)."""
    return value if isinstance(value, dict) else {}


def as_index(value: Any, default: int) -> int:
    """A stream event's index when it is a whole number, else ``default``."""
    return (
        value if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 1 << 20 else default
    )


def as_text(value: Any) -> str:
    """``value`` when it is a string, else "" (a stream's odd piece adds nothing)."""
    return value if isinstance(value, str) else ""


def as_list(value: Any) -> list[Any]:
    """``value`` when it is a list, else an empty one (odd input read leniently)."""
    return value if isinstance(value, list) else []
