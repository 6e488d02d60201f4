"""OpenAI Responses (``POST /v1/responses``) on the wire: the history is ``input`` items (system and
developer messages at its head are the system prompt; consecutive items of one role make one of
our messages), tool results are ``function_call_output`` items, answers a response or its events.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence
from typing import Any

from engine.messages import Message, TextBlock, ThinkingBlock, ToolResultBlock, ToolUseBlock
from engine.proxy.policy.read_result import READ_RESULT_NAME, READ_RESULT_TOOL
from engine.proxy.wire.api_names import OPENAI_RESPONSES, OPENAI_RESPONSES_COMPACT
from engine.proxy.wire.openai_chat import SYSTEM_ROLES, OpenAIWire, summed_usage
from engine.proxy.wire.shared import (
    SUMMARY_NOTE,
    ParsedResponse,
    ReadCalls,
    RequestView,
    ToolResult,
    as_dict,
    as_index,
    as_list,
    build_view,
    compact_json,
    error_from_json,
    iter_sse,
    json_answer,
    parsed_arguments,
    text_of,
)

_CALLS = ("function_call", "custom_tool_call", "local_shell_call", "web_search_call")
_OUTPUTS = ("function_call_output", "custom_tool_call_output")


class OpenAIResponses(OpenAIWire):
    """OpenAI's Responses API."""

    name = OPENAI_RESPONSES
    model_call = True
    edited = True
    history_key = "input"
    per_item = False  # items merge into messages by role

    # -- requests --------------------------------------------------------------------------
    def request_view(self, body: Mapping[str, Any], headers: Mapping[str, str] | None = None) -> RequestView:
        raw_input = body.get("input")
        raw = raw_input if isinstance(raw_input, list) else [{"role": "user", "content": raw_input or ""}]
        system = [
            text_of(body.get("instructions")),
            *(text_of(i.get("content")) for i in raw if self.is_system(i)),
        ]
        text = "\n".join(t for t in system if t)
        return build_view(body, raw, text, self.to_messages(raw), self.session_id(headers or {}, body))

    def is_system(self, item: Any) -> bool:
        return (
            isinstance(item, dict)
            and item.get("role") in SYSTEM_ROLES
            and item.get("type", "message") == "message"
        )

    def one_message(self, item: Any) -> Message:
        return self.to_messages([item])[0]

    def to_messages(self, items: Sequence[Any]) -> list[Message]:
        out: list[tuple[str, list[Any]]] = []
        for item in items:
            role = _role(item)
            if role is None:
                continue
            block = _block(item)
            if out and out[-1][0] == role:
                out[-1][1].append(block)
            else:
                out.append((role, [block]))
        return [Message(role=role, content=blocks) for role, blocks in out]

    def message_starts(self, items: Sequence[Any]) -> list[int]:
        starts: list[int] = []
        previous: str | None = None
        for index, item in enumerate(items):
            role = _role(item)
            if role is None:
                continue
            if role != previous:
                starts.append(index)
            previous = role
        return starts

    def render(self, messages: Sequence[Message], summary: str | None, *, keep_meta: bool) -> list[Any]:
        """Our messages as input items, the summary first (reasoning items are dropped: they cannot
        be sent again without the provider's own encrypted content)."""
        items: list[dict[str, Any]] = []
        if summary:
            items.append(_text_item("user", SUMMARY_NOTE.format(summary)))
        for message in messages:
            blocks = (
                [TextBlock(text=message.content)] if isinstance(message.content, str) else message.content
            )
            for block in blocks:
                if isinstance(block, TextBlock) and block.text:
                    items.append(
                        _text_item("assistant" if message.role == "assistant" else "user", block.text)
                    )
                elif isinstance(block, ToolUseBlock):
                    items.append({"type": "function_call", "call_id": block.id, "name": block.name,
                                  "arguments": json.dumps(block.input, ensure_ascii=False)})  # fmt: skip
                elif isinstance(block, ToolResultBlock):
                    items.append(
                        {"type": "function_call_output", "call_id": block.tool_use_id, "output": block.text}
                    )
                elif not isinstance(block, ThinkingBlock):
                    items.append(
                        _text_item("user", json.dumps(block.model_dump(), ensure_ascii=False, default=str))
                    )
        return items

    def tool_results(self, items: Sequence[Any]) -> list[ToolResult]:
        names: dict[str, str | None] = {}
        found: list[ToolResult] = []
        for i, item in enumerate(items):
            if not isinstance(item, dict) or not isinstance(item.get("call_id"), str) or not item["call_id"]:
                continue
            if item.get("type") in ("function_call", "custom_tool_call"):
                names[item["call_id"]] = item.get("name")
            elif item.get("type") in _OUTPUTS:
                found.append(ToolResult(item["call_id"], names.get(item["call_id"]), item.get("output"), i))
        return found

    def with_results(self, items: Sequence[Any], texts: Mapping[str, str]) -> list[Any]:
        return [
            {**i, "output": texts[i["call_id"]]}
            if isinstance(i, dict) and i.get("type") in _OUTPUTS and i.get("call_id") in texts
            else i
            for i in items
        ]

    def with_inputs(self, items: Sequence[Any], inputs: Mapping[str, dict[str, Any]]) -> list[Any]:
        return [
            {**i, "arguments": json.dumps(inputs[i["call_id"]], ensure_ascii=False)}
            if isinstance(i, dict) and i.get("type") == "function_call" and i.get("call_id") in inputs
            else i
            for i in items
        ]

    def with_read_result(self, tools: list[Any] | None) -> list[Any]:
        tools = list(tools or [])
        if any(isinstance(t, dict) and t.get("name") == READ_RESULT_NAME for t in tools):
            return tools
        spec = READ_RESULT_TOOL
        return [*tools, {"type": "function", "name": spec["name"], "description": spec["description"],
                         "parameters": spec["input_schema"]}]  # fmt: skip

    # -- answers ---------------------------------------------------------------------------
    def parse_response(self, status: int | None, content_type: str | None, data: bytes) -> ParsedResponse:
        if "text/event-stream" in (content_type or ""):
            return _stream(data)
        body, parsed = json_answer(status, data)
        if body is not None:
            parsed.content = as_list(body.get("output"))
            parsed.stop_reason = body.get("status")
        return parsed

    def answer_message(self, parsed: ParsedResponse) -> Message | None:
        items = [i | {"role": "assistant"} if i.get("type") == "message" else i
                 for i in parsed.content if isinstance(i, dict)]  # fmt: skip
        blocks = [
            b for m in self.to_messages(items) for b in (m.content if isinstance(m.content, list) else [])
        ]
        return Message(role="assistant", content=blocks) if blocks else None

    # -- the proxy's own read_result rounds ----------------------------------------------
    def read_calls(self, answer: Any) -> tuple[ReadCalls, bool]:
        calls = [
            i
            for i in answer.content
            if isinstance(i, dict) and i.get("type") in ("function_call", "custom_tool_call")
        ]
        reads = [(str(c.get("call_id")), parsed_arguments(c.get("arguments"))) for c in calls
                 if c.get("name") == READ_RESULT_NAME]  # fmt: skip
        return reads, len(reads) < len(calls)

    def continue_with_reads(
        self, body: dict[str, Any], answer: Any, answers: list[tuple[Any, str]]
    ) -> dict[str, Any]:
        outputs = [
            {"type": "function_call_output", "call_id": call_id, "output": text} for call_id, text in answers
        ]
        return {**body, "input": [*body["input"], *answer.content, *outputs]}

    def final_answer(self, answers: list[Any], asked: Mapping[str, Any]) -> tuple[dict[str, Any], bytes, str]:
        """Every round's output items but the read_result calls and their outputs."""
        read_ids = {call_id for p in answers for call_id, _ in self.read_calls(p)[0]}
        content = [i for p in answers for i in p.content
                   if not (isinstance(i, dict) and i.get("call_id") in read_ids and i.get("type") != "message")]  # fmt: skip
        last = answers[-1]
        response = {"id": last.response_id or "resp_ctxdesk", "object": "response", "created_at": int(time.time()),
                    "model": last.model, "status": "completed", "output": content,
                    "usage": summed_usage(answers, "input_tokens", "output_tokens")}  # fmt: skip
        if not asked.get("stream"):
            return {"content": content}, compact_json(response), "application/json"
        return {"content": content}, _events(response), "text/event-stream"


class OpenAIResponsesCompact(OpenAIResponses):
    """``POST /v1/responses/compact``: the provider compacts a history; its answer is the compacted
    list (the user's messages, then one ``compaction`` item) and the usage of the compaction pass.
    Recorded as a call (its usage priced) and a compaction event; no policy edits it, and its answer
    is no message of the conversation."""

    name = OPENAI_RESPONSES_COMPACT
    edited = False

    def parse_response(self, status: int | None, content_type: str | None, data: bytes) -> ParsedResponse:
        body, parsed = json_answer(status, data)
        if body is not None:
            parsed.content = as_list(body.get("output"))
            parsed.stop_reason = "compacted"
        return parsed

    def answer_message(self, parsed: ParsedResponse) -> Message | None:
        return None


def _kind(item: dict[str, Any]) -> str:
    kind = item.get("type", "message")
    return kind if isinstance(kind, str) else ""


def _role(item: Any) -> str | None:
    """The role of the message an item joins (None: a system item, not part of the history)."""
    if not isinstance(item, dict):
        return "user"
    kind = _kind(item)
    if kind == "message":
        if item.get("role") in SYSTEM_ROLES:
            return None
        return "assistant" if item.get("role") == "assistant" else "user"
    return "assistant" if kind in (*_CALLS, "reasoning") else "user"


def _block(item: Any) -> Any:
    """One input item as a block of our message."""
    if not isinstance(item, dict):
        return TextBlock(text=text_of(item))
    kind = _kind(item)
    if kind == "message":
        return TextBlock(text=text_of(item.get("content")))
    if kind in _CALLS:
        raw_args = item.get("arguments", item.get("input", item.get("action")))
        try:
            args = json.loads(raw_args) if isinstance(raw_args, str) else raw_args
        except json.JSONDecodeError:
            args = None
        call_id = str(item.get("call_id") or item.get("id") or "call")
        return ToolUseBlock(id=call_id, name=str(item.get("name") or kind),
                            input=args if isinstance(args, dict) else {"input": raw_args})  # fmt: skip
    if kind.endswith("_output"):
        output = item.get("output")
        return ToolResultBlock(tool_use_id=str(item.get("call_id") or "call"),
                               content=output if isinstance(output, str) else json.dumps(output, ensure_ascii=False))  # fmt: skip
    if kind == "reasoning":
        return ThinkingBlock(thinking=text_of(item.get("summary")))
    return TextBlock(text=json.dumps(item, ensure_ascii=False, default=str))


def _text_item(role: str, text: str) -> dict[str, Any]:
    kind = "output_text" if role == "assistant" else "input_text"
    return {"type": "message", "role": role, "content": [{"type": kind, "text": text}]}


def _stream(data: bytes) -> ParsedResponse:
    """A whole SSE stream of response events."""
    parsed = ParsedResponse()
    items: dict[int, Any] = {}
    for name, event in iter_sse(data):
        if not isinstance(event, dict):
            continue
        kind = event.get("type") or name
        if kind == "response.output_item.done":
            items[as_index(event.get("output_index"), len(items))] = event.get("item")
        elif kind in ("response.completed", "response.incomplete", "response.failed", "response.created"):
            response = as_dict(event.get("response"))
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
                parsed.error_type, parsed.error_message = error_from_json(response)
        elif kind == "error":
            parsed.error_type = str(event.get("code") or event.get("type") or "error")
            parsed.error_message = str(event.get("message") or "")
    parsed.content = [items[i] for i in sorted(items)]
    return parsed


def _events(response: dict[str, Any]) -> bytes:
    """A whole response as the SSE events of a stream."""
    named: list[tuple[str, dict[str, Any]]] = [
        ("response.created", {"response": {**response, "status": "in_progress", "output": [], "usage": None}})
    ]
    for index, item in enumerate(response["output"]):
        named.append(("response.output_item.added", {"output_index": index, "item": item}))
        if item.get("type") == "message":
            for part_index, part in enumerate(as_list(item.get("content"))):
                if part.get("type") == "output_text":
                    at = {"item_id": item.get("id"), "output_index": index, "content_index": part_index}
                    named.append(("response.output_text.delta", {**at, "delta": part.get("text", "")}))
                    named.append(("response.output_text.done", {**at, "text": part.get("text", "")}))
        named.append(("response.output_item.done", {"output_index": index, "item": item}))
    named.append(("response.completed", {"response": response}))
    return b"".join(
        f"event: {name}\n".encode()
        + b"data: "
        + compact_json({"type": name, "sequence_number": n, **data})
        + b"\n\n"
        for n, (name, data) in enumerate(named)
    )
