"""OpenAI Chat Completions (``POST /v1/chat/completions``) on the wire: the history is ``messages``
(system and developer messages at its head are the system prompt; each other item one message,
``engine.convert`` lossless both ways), tool results are ``tool`` messages, answers a completion
or its chunks. OpenAI's usage shape (shared with Responses) is read here too.
"""

from __future__ import annotations

import json
import time
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from typing import Any

from engine.convert import from_openai, to_openai
from engine.messages import Message
from engine.proxy.policy.read_result import READ_RESULT_NAME, READ_RESULT_TOOL
from engine.proxy.wire.api_names import OPENAI_CHAT
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
    parsed_arguments,
    strip_markers,
    text_of,
    whole_int,
    with_summary,
)

SYSTEM_ROLES = ("system", "developer")


class OpenAIWire(ABC):
    """What OpenAI's two APIs share: the session id (headers, ``prompt_cache_key``, ``user``), a
    system/developer head, the error and usage shapes, and whole answers for read_result rounds.
    Each API says what a system item is and how its answers read."""

    provider = "openai"
    tokenizer = "o200k_base"

    @abstractmethod
    def is_system(self, item: Any) -> bool: ...

    @abstractmethod
    def parse_response(self, status: int | None, content_type: str | None, data: bytes) -> ParsedResponse: ...

    def session_id(self, headers: Mapping[str, str], body: Mapping[str, Any] | None) -> str | None:
        return agent_session_id(headers, body)

    def head_length(self, items: Sequence[Any]) -> int:
        n = 0
        while n < len(items) and self.is_system(items[n]):
            n += 1
        return n

    def error_body(self, message: str, *, error_type: str, code: str | None = None) -> dict[str, Any]:
        return openai_error(message, error_type=error_type, code=code)

    def usage_fields(self, usage: Mapping[str, Any] | None) -> dict[str, int | None]:
        return openai_usage_fields(usage)

    def provider_edits(self, parsed: ParsedResponse) -> list[ProviderEdit]:
        """Compaction items in a Responses answer (Chat Completions has none)."""
        return [
            ProviderEdit("compaction")
            for item in parsed.content
            if isinstance(item, dict) and item.get("type") == "compaction"
        ]

    def unbilled_iterations(self, parsed: ParsedResponse) -> list[dict[str, Any]]:
        return []  # OpenAI's usage counts everything it bills

    def with_native_clearing(
        self, body: Mapping[str, Any], policy: Any
    ) -> tuple[dict[str, Any], tuple[str, ...]] | None:
        return None  # OpenAI offers server-side compaction, not tool-result clearing

    def whole_answer_request(self, body: Mapping[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in body.items() if k != "stream_options"} | {"stream": False}

    def round_answer(self, status: int, content_type: str | None, data: bytes) -> Any | None:
        parsed = self.parse_response(status, content_type, data)
        return None if status != 200 or parsed.error_type or not parsed.content else parsed


class OpenAIChat(OpenAIWire):
    """OpenAI's Chat Completions API."""

    name = OPENAI_CHAT
    model_call = True
    edited = True
    history_key = "messages"
    per_item = True

    # -- requests --------------------------------------------------------------------------
    def request_view(self, body: Mapping[str, Any], headers: Mapping[str, str] | None = None) -> RequestView:
        raw = [m for m in as_list(body.get("messages")) if m is not None]
        system = "\n".join(text_of(m.get("content")) for m in raw if self.is_system(m))
        return build_view(body, raw, system, self.to_messages(raw), self.session_id(headers or {}, body))

    def is_system(self, item: Any) -> bool:
        return isinstance(item, dict) and item.get("role") in SYSTEM_ROLES

    def one_message(self, item: Any) -> Message:
        return lenient_message(from_openai, item, history_role(item))

    def to_messages(self, items: Sequence[Any]) -> list[Message]:
        return [self.one_message(m) for m in items if not self.is_system(m)]

    def message_starts(self, items: Sequence[Any]) -> list[int]:
        return [i for i, item in enumerate(items) if not self.is_system(item)]

    def render(self, messages: Sequence[Message], summary: str | None, *, keep_meta: bool) -> list[Any]:
        plain = with_summary(messages, summary)
        if not keep_meta:
            plain = [m.model_copy(update={"meta": {}}) for m in plain]
        return strip_markers(to_openai(plain))

    def tool_results(self, items: Sequence[Any]) -> list[ToolResult]:
        names: dict[str, str | None] = {}
        found: list[ToolResult] = []
        for i, message in enumerate(items):
            if not isinstance(message, dict):
                continue
            for call in as_list(message.get("tool_calls")):
                if isinstance(call, dict) and isinstance(call.get("id"), str):
                    names[call["id"]] = as_dict(call.get("function")).get("name")
            if message.get("role") == "tool" and isinstance(message.get("tool_call_id"), str):
                call_id = message["tool_call_id"]
                found.append(ToolResult(call_id, names.get(call_id), message.get("content"), i))
        return found

    def with_results(self, items: Sequence[Any], texts: Mapping[str, str]) -> list[Any]:
        return [
            {**m, "content": texts[m["tool_call_id"]]}
            if isinstance(m, dict) and m.get("role") == "tool" and m.get("tool_call_id") in texts
            else m
            for m in items
        ]

    def with_inputs(self, items: Sequence[Any], inputs: Mapping[str, dict[str, Any]]) -> list[Any]:
        out = list(items)
        for i, message in enumerate(out):
            calls = message.get("tool_calls") if isinstance(message, dict) else None
            if not calls or not any(isinstance(c, dict) and c.get("id") in inputs for c in calls):
                continue
            out[i] = {**message, "tool_calls": [
                {**c, "function": {**as_dict(c.get("function")), "arguments": json.dumps(inputs[c["id"]], ensure_ascii=False)}}
                if isinstance(c, dict) and c.get("id") in inputs else c
                for c in calls
            ]}  # fmt: skip
        return out

    def with_read_result(self, tools: list[Any] | None) -> list[Any]:
        tools = list(tools or [])
        if any(_tool_name(t) == READ_RESULT_NAME for t in tools):
            return tools
        spec = READ_RESULT_TOOL
        function = {
            "name": spec["name"],
            "description": spec["description"],
            "parameters": spec["input_schema"],
        }
        return [*tools, {"type": "function", "function": function}]

    # -- answers ---------------------------------------------------------------------------
    def parse_response(self, status: int | None, content_type: str | None, data: bytes) -> ParsedResponse:
        if "text/event-stream" in (content_type or ""):
            return _stream(data)
        body, parsed = json_answer(status, data)
        if body is not None:
            choices = as_list(body.get("choices"))
            choice = as_dict(choices[0]) if choices else {}
            parsed.content = [as_dict(choice.get("message"))]
            parsed.stop_reason = choice.get("finish_reason")
        return parsed

    def answer_message(self, parsed: ParsedResponse) -> Message | None:
        return lenient_message(from_openai, parsed.content[0], "assistant") if parsed.content else None

    # -- the proxy's own read_result rounds ----------------------------------------------
    def read_calls(self, answer: Any) -> tuple[ReadCalls, bool]:
        message = answer.content[0] if answer.content and isinstance(answer.content[0], dict) else {}
        calls = [c for c in as_list(message.get("tool_calls")) if isinstance(c, dict)]
        reads = [(str(c.get("id")), parsed_arguments(as_dict(c.get("function")).get("arguments")))
                 for c in calls if as_dict(c.get("function")).get("name") == READ_RESULT_NAME]  # fmt: skip
        return reads, len(reads) < len(calls)

    def continue_with_reads(
        self, body: dict[str, Any], answer: Any, answers: list[tuple[Any, str]]
    ) -> dict[str, Any]:
        message = {k: v for k, v in answer.content[0].items() if k in ("role", "content", "tool_calls")}
        tools = [{"role": "tool", "tool_call_id": call_id, "content": text} for call_id, text in answers]
        return {**body, "messages": [*body["messages"], message, *tools]}

    def final_answer(self, answers: list[Any], asked: Mapping[str, Any]) -> tuple[dict[str, Any], bytes, str]:
        """One assistant message of every round's text and calls but the read_result ones."""
        messages = [p.content[0] for p in answers if p.content and isinstance(p.content[0], dict)]
        texts = [m.get("content") for m in messages if isinstance(m.get("content"), str) and m.get("content")]
        calls = [c for m in messages for c in as_list(m.get("tool_calls"))
                 if as_dict(c.get("function")).get("name") != READ_RESULT_NAME]  # fmt: skip
        message: dict[str, Any] = {"role": "assistant", "content": "\n\n".join(texts) if texts else None}
        if calls:
            message["tool_calls"] = calls
        last = answers[-1]
        usage = summed_usage(answers, "prompt_tokens", "completion_tokens")
        finish = "tool_calls" if message.get("tool_calls") else (last.stop_reason or "stop")
        head = {
            "id": last.response_id or "chatcmpl-ctxdesk",
            "created": int(time.time()),
            "model": last.model,
        }
        recorded = {"content": [message]}
        if not asked.get("stream"):
            choice = {"index": 0, "message": message, "finish_reason": finish, "logprobs": None}
            data = {**head, "object": "chat.completion", "choices": [choice], "usage": usage}
            return recorded, compact_json(data), "application/json"
        chunk = {**head, "object": "chat.completion.chunk"}
        deltas: list[tuple[dict[str, Any], str | None]] = [({"role": "assistant", "content": ""}, None)]
        if message.get("content"):
            deltas.append(({"content": message["content"]}, None))
        for i, call in enumerate(calls):
            deltas.append(({"tool_calls": [{"index": i, **call}]}, None))
        deltas.append(({}, finish))
        events = [{**chunk, "choices": [{"index": 0, "delta": d, "finish_reason": f, "logprobs": None}]}
                  for d, f in deltas]  # fmt: skip
        if as_dict(asked.get("stream_options")).get("include_usage"):
            events.append({**chunk, "choices": [], "usage": usage})
        body = b"".join(b"data: " + compact_json(e) + b"\n\n" for e in events) + b"data: [DONE]\n\n"
        return recorded, body, "text/event-stream"


def openai_error(message: str, *, error_type: str, code: str | None = None) -> dict[str, Any]:
    """An error in OpenAI's shape (a prompt too long names the ``messages`` parameter, as OpenAI does)."""
    param = "messages" if code == "context_length_exceeded" else None
    return {"error": {"message": message, "type": error_type, "param": param, "code": code}}


def openai_usage_fields(usage: Mapping[str, Any] | None) -> dict[str, int | None]:
    """OpenAI usage (Chat's ``prompt_tokens`` or Responses' ``input_tokens``) as our columns."""
    fields: dict[str, int | None] = dict.fromkeys(
        ("input_tokens", "output_tokens", "cache_read_input_tokens", "cache_creation_input_tokens",
         "cache_creation_5m_tokens", "cache_creation_1h_tokens", "reasoning_tokens")
    )  # fmt: skip
    if not usage:
        return fields
    prompt = whole_int(usage.get("prompt_tokens", usage.get("input_tokens")))
    details = as_dict(usage.get("prompt_tokens_details") or usage.get("input_tokens_details"))
    cached = whole_int(details.get("cached_tokens")) if isinstance(details, dict) else None
    out_details = as_dict(usage.get("completion_tokens_details") or usage.get("output_tokens_details"))
    fields["output_tokens"] = whole_int(usage.get("completion_tokens", usage.get("output_tokens")))
    fields["input_tokens"] = None if prompt is None else prompt - (cached or 0)
    fields["cache_read_input_tokens"] = cached
    fields["cache_creation_input_tokens"] = 0 if prompt is not None else None
    fields["reasoning_tokens"] = (
        whole_int(out_details.get("reasoning_tokens")) if isinstance(out_details, dict) else None
    )
    return fields


def summed_usage(rounds: list[ParsedResponse], in_key: str, out_key: str) -> dict[str, Any]:
    """The last round's usage (its prompt holds every earlier round) with the output summed."""
    last = dict(rounds[-1].usage or {})
    output = sum(int((p.usage or {}).get(out_key) or 0) for p in rounds)
    last[out_key] = output
    last["total_tokens"] = int(last.get(in_key) or 0) + output
    return last


def _tool_name(tool: Any) -> str | None:
    if not isinstance(tool, dict):
        return None
    function = tool.get("function")
    return function.get("name") if isinstance(function, dict) else tool.get("name")


def _stream(data: bytes) -> ParsedResponse:
    """A whole SSE stream of completion chunks."""
    parsed = ParsedResponse()
    text: list[str] = []
    calls: dict[int, dict[str, Any]] = {}
    role = "assistant"
    for _, event in iter_sse(data):
        if event == "[DONE]":
            parsed.complete = True
            continue
        if not isinstance(event, dict):
            continue
        if "error" in event:
            parsed.error_type, parsed.error_message = error_from_json(event)
            continue
        parsed.response_id = parsed.response_id or event.get("id")
        parsed.model = parsed.model or event.get("model")
        if isinstance(event.get("usage"), dict):
            parsed.usage = event["usage"]
        for choice in map(as_dict, as_list(event.get("choices"))):
            delta = as_dict(choice.get("delta"))
            role = delta["role"] if isinstance(delta.get("role"), str) else role
            if isinstance(delta.get("content"), str):
                text.append(delta["content"])
            for call in map(as_dict, as_list(delta.get("tool_calls"))):
                entry = calls.setdefault(as_index(call.get("index"), len(calls)),
                                         {"id": None, "type": "function", "function": {"name": "", "arguments": ""}})  # fmt: skip
                entry["id"] = call.get("id") or entry["id"]
                fn = as_dict(call.get("function"))
                entry["function"]["name"] += as_text(fn.get("name"))
                entry["function"]["arguments"] += as_text(fn.get("arguments"))
            if choice.get("finish_reason"):
                parsed.stop_reason = choice["finish_reason"]
    message: dict[str, Any] = {"role": role, "content": "".join(text) if text else None}
    if calls:
        message["tool_calls"] = [calls[i] for i in sorted(calls)]
    parsed.content = [message]
    return parsed
