"""Anthropic Messages (``POST /v1/messages``) on the wire, and its ``count_tokens`` sibling: the
request's history is ``messages`` (each item one message, ``engine.convert`` lossless both ways),
tool results are ``tool_result`` blocks, answers are a message or its SSE events.

One concept: everything ctxdesk reads or writes of this one wire format, beside its two siblings
(``openai_chat``, ``openai_responses``) that implement the same ``WireApi``; splitting it by size
would scatter one format across modules.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

from engine.convert import from_anthropic, to_anthropic
from engine.messages import Message
from engine.proxy.policy.read_result import READ_RESULT_NAME, READ_RESULT_TOOL
from engine.proxy.wire.api_names import ANTHROPIC_COUNT_TOKENS, ANTHROPIC_MESSAGES
from engine.proxy.wire.shared import (
    ParsedResponse,
    ProviderEdit,
    ReadCalls,
    RequestView,
    ToolResult,
    agent_session_id,
    as_dict,
    as_index,
    as_list,
    as_text,
    build_view,
    compact_json,
    error_from_json,
    history_role,
    iter_sse,
    json_answer,
    lenient_message,
    strip_markers,
    text_of,
    whole_int,
    with_summary,
)

#: Anthropic's own tool-result clearing, and the beta flag that turns context management on.
NATIVE_CLEARING = "clear_tool_uses_20250919"
CONTEXT_MANAGEMENT_BETA = "context-management-2025-06-27"
_USAGE_KEYS = ("input_tokens", "output_tokens", "cache_read_input_tokens", "cache_creation_input_tokens")


class AnthropicMessages:
    """Anthropic's Messages API."""

    name = ANTHROPIC_MESSAGES
    provider = "anthropic"
    model_call = True
    edited = True
    history_key = "messages"
    tokenizer = "anthropic"
    per_item = True

    # -- requests --------------------------------------------------------------------------
    def request_view(self, body: Mapping[str, Any], headers: Mapping[str, str] | None = None) -> RequestView:
        raw = [m for m in as_list(body.get("messages")) if m is not None]
        system = text_of(body.get("system"))
        return build_view(body, raw, system, self.to_messages(raw), self.session_id(headers or {}, body))

    def session_id(self, headers: Mapping[str, str], body: Mapping[str, Any] | None) -> str | None:
        return agent_session_id(headers, body, _metadata_session(body) if body is not None else None)

    def head_length(self, items: Sequence[Any]) -> int:
        return 0  # the system prompt is a field of its own

    def is_system(self, item: Any) -> bool:
        return False

    def one_message(self, item: Any) -> Message:
        return lenient_message(from_anthropic, item, history_role(item))

    def to_messages(self, items: Sequence[Any]) -> list[Message]:
        return [self.one_message(m) for m in items]

    def message_starts(self, items: Sequence[Any]) -> list[int]:
        return list(range(len(items)))

    def render(self, messages: Sequence[Message], summary: str | None, *, keep_meta: bool) -> list[Any]:
        plain = with_summary(messages, summary)
        if not keep_meta:
            plain = [m.model_copy(update={"meta": {}}) for m in plain]
        return strip_markers(to_anthropic(plain))

    def tool_results(self, items: Sequence[Any]) -> list[ToolResult]:
        names: dict[str, str | None] = {}
        found: list[ToolResult] = []
        for i, message in enumerate(items):
            blocks = message.get("content") if isinstance(message, dict) else None
            for block in blocks if isinstance(blocks, list) else ():
                if not isinstance(block, dict):
                    continue
                if block.get("type") == "tool_use" and isinstance(block.get("id"), str):
                    names[block["id"]] = block.get("name")
                elif block.get("type") == "tool_result" and isinstance(block.get("tool_use_id"), str):
                    call = block["tool_use_id"]
                    found.append(ToolResult(call, names.get(call), block.get("content"), i))
        return found

    def with_results(self, items: Sequence[Any], texts: Mapping[str, str]) -> list[Any]:
        return _with_blocks(items, "tool_result", "tool_use_id", lambda b, v: {**b, "content": v}, texts)

    def with_inputs(self, items: Sequence[Any], inputs: Mapping[str, dict[str, Any]]) -> list[Any]:
        return _with_blocks(items, "tool_use", "id", lambda b, v: {**b, "input": v}, inputs)

    def with_native_clearing(
        self, body: Mapping[str, Any], policy: Any
    ) -> tuple[dict[str, Any], tuple[str, ...]] | None:
        """The body asking Anthropic to clear tool results itself (``clear_tool_uses_20250919`` with the
        policy's trigger, keep, clear_at_least, exclude_tools, clear_tool_inputs) and the beta it needs;
        a request that already asks for that edit is left as it is."""
        management = (
            body.get("context_management") if isinstance(body.get("context_management"), dict) else {}
        )
        edits = [e for e in as_list(management.get("edits")) if isinstance(e, dict)]
        if any(e.get("type") == NATIVE_CLEARING for e in edits):
            return dict(body), (CONTEXT_MANAGEMENT_BETA,)
        native: dict[str, Any] = {
            "type": NATIVE_CLEARING,
            "trigger": {"type": "input_tokens", "value": policy.trigger},
            "keep": {"type": "tool_uses", "value": policy.keep},
        }
        if policy.clear_at_least:
            native["clear_at_least"] = {"type": "input_tokens", "value": policy.clear_at_least}
        if policy.exclude_tools:
            native["exclude_tools"] = list(policy.exclude_tools)
        if policy.clear_tool_inputs:
            native["clear_tool_inputs"] = True
        # clear_thinking_20251015 must come first when both are sent
        ordered = sorted([*edits, native], key=lambda e: e.get("type") != "clear_thinking_20251015")
        return {**body, "context_management": {**management, "edits": ordered}}, (CONTEXT_MANAGEMENT_BETA,)

    def with_read_result(self, tools: list[Any] | None) -> list[Any]:
        tools = list(tools or [])
        if any(isinstance(t, dict) and t.get("name") == READ_RESULT_NAME for t in tools):
            return tools
        return [*tools, READ_RESULT_TOOL]

    # -- answers ---------------------------------------------------------------------------
    def error_body(self, message: str, *, error_type: str, code: str | None = None) -> dict[str, Any]:
        return {"type": "error", "error": {"type": error_type, "message": message}}

    def parse_response(self, status: int | None, content_type: str | None, data: bytes) -> ParsedResponse:
        if "text/event-stream" in (content_type or ""):
            return _stream(data)
        body, parsed = json_answer(status, data)
        if body is not None:
            parsed.content = as_list(body.get("content"))
            parsed.stop_reason = body.get("stop_reason")
            if isinstance(body.get("context_management"), dict):
                parsed.context_management = body["context_management"]
        return parsed

    def provider_edits(self, parsed: ParsedResponse) -> list[ProviderEdit]:
        """The applied edits of ``context_management`` and the answer's ``compaction`` blocks."""
        applied = (parsed.context_management or {}).get("applied_edits")
        edits = [
            ProviderEdit(
                str(e.get("type")), whole_int(e.get("cleared_input_tokens")),
                whole_int(e.get("cleared_tool_uses", e.get("cleared_thinking_turns"))),
            )
            for e in applied if isinstance(e, dict)
        ] if isinstance(applied, list) else []  # fmt: skip
        summaries = [
            b.get("content") for b in parsed.content if isinstance(b, dict) and b.get("type") == "compaction"
        ]
        return edits + [
            ProviderEdit("compaction", summary=s if isinstance(s, str) else None) for s in summaries
        ]

    def unbilled_iterations(self, parsed: ParsedResponse) -> list[dict[str, Any]]:
        """``usage.iterations`` entries of compaction: billed, but not in the top-level usage."""
        iterations = (parsed.usage or {}).get("iterations")
        return (
            [i for i in iterations if isinstance(i, dict) and i.get("type") == "compaction"]
            if isinstance(iterations, list)
            else []
        )

    def answer_message(self, parsed: ParsedResponse) -> Message | None:
        if not parsed.content:
            return None
        return lenient_message(from_anthropic, {"role": "assistant", "content": parsed.content}, "assistant")

    def usage_fields(self, usage: Mapping[str, Any] | None) -> dict[str, int | None]:
        fields = _no_usage()
        if not usage:
            return fields
        for key in _USAGE_KEYS:
            fields[key] = whole_int(usage.get(key))
        split = usage.get("cache_creation")
        if isinstance(split, dict):
            fields["cache_creation_5m_tokens"] = whole_int(split.get("ephemeral_5m_input_tokens"))
            fields["cache_creation_1h_tokens"] = whole_int(split.get("ephemeral_1h_input_tokens"))
        return fields

    # -- the proxy's own read_result rounds ----------------------------------------------
    def whole_answer_request(self, body: Mapping[str, Any]) -> dict[str, Any]:
        return {**body, "stream": False}

    def round_answer(self, status: int, content_type: str | None, data: bytes) -> Any | None:
        try:
            answer = json.loads(data) if status == 200 else None
        except (json.JSONDecodeError, UnicodeDecodeError):
            return None
        return answer if isinstance(answer, dict) and answer.get("type") != "error" else None

    def read_calls(self, answer: Any) -> tuple[ReadCalls, bool]:
        blocks = _blocks(answer)
        reads = [
            (b.get("id"), b["input"] if isinstance(b.get("input"), dict) else {})
            for b in blocks
            if _is_read(b)
        ]
        return reads, any(b.get("type") == "tool_use" and not _is_read(b) for b in blocks)

    def continue_with_reads(
        self, body: dict[str, Any], answer: Any, answers: list[tuple[Any, str]]
    ) -> dict[str, Any]:
        results = [
            {"type": "tool_result", "tool_use_id": call_id, "content": text} for call_id, text in answers
        ]
        return {**body, "messages": [*body["messages"], {"role": "assistant", "content": _blocks(answer)},
                                     {"role": "user", "content": results}]}  # fmt: skip

    def final_answer(self, answers: list[Any], asked: Mapping[str, Any]) -> tuple[dict[str, Any], bytes, str]:
        """One message of every round's content but the read_result calls: the first round's id,
        the last one's stop reason and usage with the output tokens summed."""
        usage: dict[str, int] = {}
        for answer in answers:
            for key, value in as_dict(answer.get("usage")).items():
                if isinstance(value, int):
                    usage[key] = value if key != "output_tokens" else usage.get(key, 0) + value
        head = {k: answers[0].get(k) for k in ("id", "type", "role", "model")}
        merged = [b for answer in answers for b in _blocks(answer) if not _is_read(b)]
        message = {**head, "content": merged, "stop_reason": answers[-1].get("stop_reason"), "stop_sequence": None,
                   "usage": usage}  # fmt: skip
        if asked.get("stream"):
            return message, _sse_message(message), "text/event-stream"
        return message, compact_json(message), "application/json"


class AnthropicCountTokens(AnthropicMessages):
    """``POST /v1/messages/count_tokens``: recorded with its count, not a model call."""

    name = ANTHROPIC_COUNT_TOKENS
    model_call = False
    edited = False

    def parse_response(self, status: int | None, content_type: str | None, data: bytes) -> ParsedResponse:
        body, parsed = json_answer(status, data)
        if body is not None:
            parsed.usage = {"input_tokens": body.get("input_tokens")}
        return parsed


def _metadata_session(body: Mapping[str, Any]) -> str | None:
    """Claude Code's session id in ``metadata.user_id`` (JSON, or older ``user_..._session_<uuid>``)."""
    user_id = as_dict(body.get("metadata")).get("user_id") if isinstance(body.get("metadata"), dict) else None
    if isinstance(user_id, str) and user_id.startswith("{"):
        try:
            value = json.loads(user_id).get("session_id")
        except (json.JSONDecodeError, AttributeError):
            return None
        return str(value) if value else None
    match = re.search(r"_session_([0-9a-fA-F-]{8,})$", user_id or "")
    return match.group(1) if match else None


def _with_blocks(
    items: Sequence[Any], kind: str, key: str, replace: Any, values: Mapping[str, Any]
) -> list[Any]:
    """``items`` with each block of ``kind`` whose ``key`` is in ``values`` replaced (others as they are)."""
    out = list(items)
    for i, message in enumerate(out):
        blocks = message.get("content") if isinstance(message, dict) else None
        if not isinstance(blocks, list):
            continue
        hits = [
            j
            for j, b in enumerate(blocks)
            if isinstance(b, dict) and b.get("type") == kind and b.get(key) in values
        ]
        if hits:
            new = list(blocks)
            for j in hits:
                new[j] = replace(blocks[j], values[blocks[j][key]])
            out[i] = {**message, "content": new}
    return out


def _no_usage() -> dict[str, int | None]:
    return dict.fromkeys(
        (*_USAGE_KEYS, "cache_creation_5m_tokens", "cache_creation_1h_tokens", "reasoning_tokens"), None
    )


def _blocks(answer: Mapping[str, Any]) -> list[dict[str, Any]]:
    return [b for b in as_list(answer.get("content")) if isinstance(b, dict)]


def _is_read(block: Mapping[str, Any]) -> bool:
    return block.get("type") == "tool_use" and block.get("name") == READ_RESULT_NAME


def _stream(data: bytes) -> ParsedResponse:
    """A whole SSE stream of a Messages answer."""
    parsed = ParsedResponse()
    blocks: dict[int, dict[str, Any]] = {}
    partial: dict[int, list[str]] = {}
    usage: dict[str, Any] = {}
    for name, event in iter_sse(data):
        if not isinstance(event, dict):
            continue
        kind = event.get("type") or name
        if kind == "message_start":
            message = as_dict(event.get("message"))
            parsed.response_id, parsed.model = message.get("id"), message.get("model")
            usage.update(as_dict(message.get("usage")))
        elif kind == "content_block_start":
            blocks[as_index(event.get("index"), len(blocks))] = dict(as_dict(event.get("content_block")))
        elif kind == "content_block_delta":
            index = as_index(event.get("index"), 0)
            _add_delta(blocks.setdefault(index, {"type": "text", "text": ""}), as_dict(event.get("delta")),
                       partial.setdefault(index, []))  # fmt: skip
        elif kind == "content_block_stop":
            index = as_index(event.get("index"), 0)
            if partial.get(index):
                text = "".join(partial.pop(index))
                try:
                    blocks[index]["input"] = json.loads(text) if text else {}
                except json.JSONDecodeError:
                    blocks[index]["input"] = {"_unparsed": text}
        elif kind == "message_delta":
            delta = as_dict(event.get("delta"))
            parsed.stop_reason = delta.get("stop_reason", parsed.stop_reason)
            if isinstance(event.get("context_management"), dict):
                parsed.context_management = event["context_management"]
            usage.update({k: v for k, v in as_dict(event.get("usage")).items() if v is not None})
        elif kind == "message_stop":
            parsed.complete = True
        elif kind == "error":
            parsed.error_type, parsed.error_message = error_from_json(event)
    parsed.content = [blocks[i] for i in sorted(blocks)]
    parsed.usage = usage or None
    return parsed


def _add_delta(block: dict[str, Any], delta: Mapping[str, Any], partial_json: list[str]) -> None:
    kind = delta.get("type")
    if kind == "text_delta":
        block["text"] = as_text(block.get("text")) + as_text(delta.get("text"))
    elif kind == "input_json_delta":
        partial_json.append(as_text(delta.get("partial_json")))
    elif kind == "thinking_delta":
        block["thinking"] = as_text(block.get("thinking")) + as_text(delta.get("thinking"))
    elif kind == "signature_delta":
        block["signature"] = as_text(block.get("signature")) + as_text(delta.get("signature"))
    elif kind == "citations_delta":
        citations = block["citations"] = as_list(block.get("citations"))
        citations.append(delta.get("citation"))
    elif kind == "compaction_delta":  # a server-side compaction's summary, as it streams
        if isinstance(delta.get("content"), str):
            block["content"] = as_text(block.get("content")) + delta["content"]
        if delta.get("encrypted_content") is not None:
            block["encrypted_content"] = delta["encrypted_content"]


def _sse_message(message: dict[str, Any]) -> bytes:
    """A whole message as the SSE events of a stream."""
    events: list[tuple[str, dict[str, Any]]] = []
    usage = dict(as_dict(message.get("usage")))
    start = {**message, "content": [], "stop_reason": None, "usage": {**usage, "output_tokens": 0}}
    events.append(("message_start", {"type": "message_start", "message": start}))
    for index, block in enumerate(as_list(message.get("content"))):
        kind = block.get("type")
        empty = {"text": {"type": "text", "text": ""}, "thinking": {"type": "thinking", "thinking": ""}}.get(
            kind,
            {k: v for k, v in block.items() if k != "input"} | ({"input": {}} if kind == "tool_use" else {}),
        )
        events.append(
            ("content_block_start", {"type": "content_block_start", "index": index, "content_block": empty})
        )
        deltas: list[dict[str, Any]] = []
        if kind == "text":
            deltas = [{"type": "text_delta", "text": block.get("text", "")}]
        elif kind == "thinking":
            deltas = [{"type": "thinking_delta", "thinking": block.get("thinking", "")},
                      {"type": "signature_delta", "signature": block.get("signature", "")}]  # fmt: skip
        elif kind == "tool_use":
            deltas = [{"type": "input_json_delta", "partial_json": json.dumps(as_dict(block.get("input")))}]
        events += [
            ("content_block_delta", {"type": "content_block_delta", "index": index, "delta": d})
            for d in deltas
        ]
        events.append(("content_block_stop", {"type": "content_block_stop", "index": index}))
    tail = {"type": "message_delta", "delta": {"stop_reason": message.get("stop_reason"), "stop_sequence": None},
            "usage": {"output_tokens": usage.get("output_tokens", 0)}}  # fmt: skip
    events += [("message_delta", tail), ("message_stop", {"type": "message_stop"})]
    return b"".join(f"event: {name}\ndata: {json.dumps(data)}\n\n".encode() for name, data in events)
