"""The answers of the APIs the proxy understands: a JSON body or a whole SSE stream (Anthropic
Messages, OpenAI Chat Completions, OpenAI Responses) read into content, stop reason, usage and
error, leniently (``parse_response`` never raises on malformed input). Pure functions over
bytes and dicts; no I/O. (``engine.proxy.apis`` re-exports these names and turns an answer
into our message.)
"""

from __future__ import annotations

import json
import re
import zlib
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from engine.proxy.api_names import ANTHROPIC_COUNT_TOKENS, ANTHROPIC_MESSAGES, OPENAI_CHAT, OPENAI_RESPONSES

PROMPT_TOO_LONG = re.compile(
    r"prompt is too long|exceed(s|ed)? (the )?context (window|length)|context_length_exceeded|maximum context length",
    re.IGNORECASE,
)


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

    def usage_fields(self, api: str) -> dict[str, int | None]:
        """Usage as the columns of model_requests (input = uncached input only)."""
        return usage_fields(api, self.usage)

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
        return out


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def usage_fields(api: str, usage: Mapping[str, Any] | None) -> dict[str, int | None]:
    fields: dict[str, int | None] = {
        "input_tokens": None, "output_tokens": None, "cache_read_input_tokens": None,
        "cache_creation_input_tokens": None, "cache_creation_5m_tokens": None, "cache_creation_1h_tokens": None,
        "reasoning_tokens": None,
    }  # fmt: skip
    if not usage:
        return fields
    if api in (ANTHROPIC_MESSAGES, ANTHROPIC_COUNT_TOKENS):
        for key in (
            "input_tokens",
            "output_tokens",
            "cache_read_input_tokens",
            "cache_creation_input_tokens",
        ):
            fields[key] = _int(usage.get(key))
        split = usage.get("cache_creation")
        if isinstance(split, dict):
            fields["cache_creation_5m_tokens"] = _int(split.get("ephemeral_5m_input_tokens"))
            fields["cache_creation_1h_tokens"] = _int(split.get("ephemeral_1h_input_tokens"))
        return fields
    prompt = _int(usage.get("prompt_tokens", usage.get("input_tokens")))
    details = usage.get("prompt_tokens_details") or usage.get("input_tokens_details") or {}
    cached = _int(details.get("cached_tokens")) if isinstance(details, dict) else None
    out_details = usage.get("completion_tokens_details") or usage.get("output_tokens_details") or {}
    fields["output_tokens"] = _int(usage.get("completion_tokens", usage.get("output_tokens")))
    fields["input_tokens"] = None if prompt is None else prompt - (cached or 0)
    fields["cache_read_input_tokens"] = cached
    fields["cache_creation_input_tokens"] = 0 if prompt is not None else None
    fields["reasoning_tokens"] = (
        _int(out_details.get("reasoning_tokens")) if isinstance(out_details, dict) else None
    )
    return fields


def decode_body(data: bytes, encoding: str | None) -> bytes:
    """The body bytes with a gzip / deflate content-encoding undone (others returned as they are)."""
    encoding = (encoding or "").lower().strip()
    if encoding in ("gzip", "x-gzip"):
        return zlib.decompress(data, 16 + zlib.MAX_WBITS)
    if encoding == "deflate":
        try:
            return zlib.decompress(data)
        except zlib.error:
            return zlib.decompress(data, -zlib.MAX_WBITS)
    return data


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


def _error_from_json(body: Any) -> tuple[str | None, str | None]:
    if not isinstance(body, dict):
        return None, None
    error = body.get("error")
    if isinstance(error, dict):
        return (str(error.get("type") or error.get("code") or "error"), str(error.get("message") or ""))
    if isinstance(error, str):
        return "error", error
    return None, None


def parse_response(api: str, status: int | None, content_type: str | None, data: bytes) -> ParsedResponse:
    """Read an answer (JSON or SSE) of one of the known APIs; never raises on malformed input."""
    parsed = ParsedResponse()
    if "text/event-stream" in (content_type or ""):
        events = list(iter_sse(data))
        if api == ANTHROPIC_MESSAGES:
            _anthropic_stream(events, parsed)
        elif api == OPENAI_CHAT:
            _chat_stream(events, parsed)
        elif api == OPENAI_RESPONSES:
            _responses_stream(events, parsed)
        return parsed
    try:
        body = json.loads(data) if data else None
    except (json.JSONDecodeError, UnicodeDecodeError):
        parsed.error_message = None if (status or 0) < 400 else data[:2000].decode("utf-8", "replace")
        return parsed
    parsed.error_type, parsed.error_message = _error_from_json(body)
    if not isinstance(body, dict) or parsed.error_type:
        return parsed
    parsed.complete = True
    parsed.response_id = body.get("id")
    parsed.model = body.get("model")
    parsed.usage = body.get("usage") if isinstance(body.get("usage"), dict) else None
    if api == ANTHROPIC_MESSAGES:
        parsed.content = body.get("content") or []
        parsed.stop_reason = body.get("stop_reason")
    elif api == ANTHROPIC_COUNT_TOKENS:
        parsed.usage = {"input_tokens": body.get("input_tokens")}
    elif api == OPENAI_CHAT:
        choice = (body.get("choices") or [{}])[0] or {}
        parsed.content = [choice.get("message") or {}]
        parsed.stop_reason = choice.get("finish_reason")
    elif api == OPENAI_RESPONSES:
        parsed.content = body.get("output") or []
        parsed.stop_reason = body.get("status")
    return parsed


def _anthropic_stream(events: Iterable[tuple[str | None, Any]], parsed: ParsedResponse) -> None:
    blocks: dict[int, dict[str, Any]] = {}
    partial: dict[int, list[str]] = {}
    usage: dict[str, Any] = {}
    for name, data in events:
        if not isinstance(data, dict):
            continue
        kind = data.get("type") or name
        if kind == "message_start":
            message = data.get("message") or {}
            parsed.response_id, parsed.model = message.get("id"), message.get("model")
            usage.update(message.get("usage") or {})
        elif kind == "content_block_start":
            blocks[int(data.get("index", len(blocks)))] = dict(data.get("content_block") or {})
        elif kind == "content_block_delta":
            index = int(data.get("index", 0))
            block = blocks.setdefault(index, {"type": "text", "text": ""})
            delta = data.get("delta") or {}
            dtype = delta.get("type")
            if dtype == "text_delta":
                block["text"] = block.get("text", "") + delta.get("text", "")
            elif dtype == "input_json_delta":
                partial.setdefault(index, []).append(delta.get("partial_json", ""))
            elif dtype == "thinking_delta":
                block["thinking"] = block.get("thinking", "") + delta.get("thinking", "")
            elif dtype == "signature_delta":
                block["signature"] = block.get("signature", "") + delta.get("signature", "")
            elif dtype == "citations_delta":
                block.setdefault("citations", []).append(delta.get("citation"))
        elif kind == "content_block_stop":
            index = int(data.get("index", 0))
            if index in partial:
                text = "".join(partial.pop(index))
                try:
                    blocks[index]["input"] = json.loads(text) if text else {}
                except json.JSONDecodeError:
                    blocks[index]["input"] = {"_unparsed": text}
        elif kind == "message_delta":
            delta = data.get("delta") or {}
            parsed.stop_reason = delta.get("stop_reason", parsed.stop_reason)
            usage.update({k: v for k, v in (data.get("usage") or {}).items() if v is not None})
        elif kind == "message_stop":
            parsed.complete = True
        elif kind == "error":
            parsed.error_type, parsed.error_message = _error_from_json(data)
    parsed.content = [blocks[i] for i in sorted(blocks)]
    parsed.usage = usage or None


def _chat_stream(events: Iterable[tuple[str | None, Any]], parsed: ParsedResponse) -> None:
    text: list[str] = []
    calls: dict[int, dict[str, Any]] = {}
    role = "assistant"
    for _, data in events:
        if data == "[DONE]":
            parsed.complete = True
            continue
        if not isinstance(data, dict):
            continue
        if "error" in data:
            parsed.error_type, parsed.error_message = _error_from_json(data)
            continue
        parsed.response_id = parsed.response_id or data.get("id")
        parsed.model = parsed.model or data.get("model")
        if isinstance(data.get("usage"), dict):
            parsed.usage = data["usage"]
        for choice in data.get("choices") or []:
            delta = choice.get("delta") or {}
            role = delta.get("role") or role
            if isinstance(delta.get("content"), str):
                text.append(delta["content"])
            for call in delta.get("tool_calls") or []:
                entry = calls.setdefault(
                    int(call.get("index", len(calls))),
                    {"id": None, "type": "function", "function": {"name": "", "arguments": ""}},
                )
                entry["id"] = call.get("id") or entry["id"]
                fn = call.get("function") or {}
                entry["function"]["name"] += fn.get("name") or ""
                entry["function"]["arguments"] += fn.get("arguments") or ""
            if choice.get("finish_reason"):
                parsed.stop_reason = choice["finish_reason"]
    message: dict[str, Any] = {"role": role, "content": "".join(text) if text else None}
    if calls:
        message["tool_calls"] = [calls[i] for i in sorted(calls)]
    parsed.content = [message]


def _responses_stream(events: Iterable[tuple[str | None, Any]], parsed: ParsedResponse) -> None:
    items: dict[int, Any] = {}
    for name, data in events:
        if not isinstance(data, dict):
            continue
        kind = data.get("type") or name
        if kind == "response.output_item.done":
            items[int(data.get("output_index", len(items)))] = data.get("item")
        elif kind in ("response.completed", "response.incomplete", "response.failed", "response.created"):
            response = data.get("response") or {}
            parsed.response_id = response.get("id") or parsed.response_id
            parsed.model = response.get("model") or parsed.model
            parsed.stop_reason = response.get("status") or parsed.stop_reason
            if isinstance(response.get("usage"), dict):
                parsed.usage = response["usage"]
            if response.get("output"):
                items = dict(enumerate(response["output"]))
            if kind != "response.created":
                parsed.complete = True
            if isinstance(response.get("error"), dict):
                parsed.error_type, parsed.error_message = _error_from_json(response)
        elif kind == "error":
            parsed.error_type = str(data.get("code") or data.get("type") or "error")
            parsed.error_message = str(data.get("message") or "")
    parsed.content = [items[i] for i in sorted(items)]
