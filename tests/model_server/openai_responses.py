"""OpenAI Responses API (``POST /v1/responses``, streamed) for the scripted model server.

A scripted reply is a list of output items, written in a short form::

    [{"type": "reasoning", "summary": "Looking at the files"},
     {"type": "function_call", "name": "shell", "arguments": {"command": ["ls"]}},
     {"type": "custom_tool_call", "name": "apply_patch", "input": "*** Begin Patch ..."},
     {"type": "message", "text": "Done."}]

``reply_events`` turns one into the SSE events Codex CLI reads (``response.created``, per item
``response.output_item.added`` / deltas / ``.done``, ``response.completed`` with usage that
counts input, cached input, output and reasoning tokens). Usage is derived from the request
so it is reproducible: input = characters of the request body / 4, cached = the previous
call's input when this request extends it.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from .core import HttpReply, RecordedRequest, ScriptedServer, sse_events

PATH = "/v1/responses"
CHARS_PER_TOKEN = 4


def _id(prefix: str, *parts: Any) -> str:
    return f"{prefix}_{hashlib.sha1(json.dumps(parts, default=str).encode()).hexdigest()[:24]}"


def full_items(reply: list[dict[str, Any]], *, call_index: int) -> list[dict[str, Any]]:
    """The short-form items of one reply as complete Responses output items."""
    items: list[dict[str, Any]] = []
    for n, item in enumerate(reply):
        kind = item["type"]
        key = (call_index, n)
        if kind == "message":
            items.append(
                {
                    "type": "message", "id": _id("msg", key), "status": "completed", "role": "assistant",
                    "content": [{"type": "output_text", "text": item["text"], "annotations": []}],
                }
            )  # fmt: skip
        elif kind == "reasoning":
            items.append(
                {
                    "type": "reasoning", "id": _id("rs", key),
                    "summary": [{"type": "summary_text", "text": item.get("summary", "")}],
                    "encrypted_content": "gAAAA" + hashlib.sha256(repr(key).encode()).hexdigest() * 4,
                }
            )  # fmt: skip
        elif kind == "function_call":
            arguments = item["arguments"]
            items.append(
                {
                    "type": "function_call", "id": _id("fc", key), "status": "completed",
                    "call_id": item.get("call_id") or _id("call", key), "name": item["name"],
                    "arguments": arguments if isinstance(arguments, str) else json.dumps(arguments),
                }
            )  # fmt: skip
        elif kind == "custom_tool_call":
            items.append(
                {
                    "type": "custom_tool_call", "id": _id("ctc", key), "status": "completed",
                    "call_id": item.get("call_id") or _id("call", key), "name": item["name"],
                    "input": item["input"],
                }
            )  # fmt: skip
        else:
            raise ValueError(f"unknown scripted item type {kind!r}")
    return items


def usage_for(request: dict[str, Any], previous_input: int, output: list[dict[str, Any]]) -> dict[str, Any]:
    """Reproducible usage: input from the request's size, cached = the previous call's input."""
    input_tokens = max(1, len(json.dumps(request, ensure_ascii=False)) // CHARS_PER_TOKEN)
    cached = min(previous_input, input_tokens)
    reasoning = sum(
        max(1, len(s["text"]) // CHARS_PER_TOKEN) + 16
        for item in output
        if item["type"] == "reasoning"
        for s in item["summary"]
    )
    visible = sum(
        max(1, len(json.dumps(item, ensure_ascii=False)) // CHARS_PER_TOKEN)
        for item in output
        if item["type"] != "reasoning"
    )
    return {
        "input_tokens": input_tokens,
        "input_tokens_details": {"cached_tokens": cached},
        "output_tokens": visible + reasoning,
        "output_tokens_details": {"reasoning_tokens": reasoning},
        "total_tokens": input_tokens + visible + reasoning,
    }


def reply_events(
    request: dict[str, Any], reply: list[dict[str, Any]], *, call_index: int, previous_input: int = 0
) -> list[tuple[str, dict[str, Any]]]:
    """(event name, data) of the SSE stream answering ``request`` with ``reply``."""
    model = str(request.get("model") or "gpt-5.5")
    response_id = _id("resp", call_index, model)
    output = full_items(reply, call_index=call_index)
    base = {"id": response_id, "object": "response", "created_at": 1_790_000_000 + call_index, "model": model}
    events: list[tuple[str, dict[str, Any]]] = [
        (
            "response.created",
            {"type": "response.created", "response": {**base, "status": "in_progress", "output": []}},
        )
    ]
    for index, item in enumerate(output):
        started = dict(item)
        if item["type"] == "message":
            started["content"] = []
            started["status"] = "in_progress"
        elif item["type"] == "function_call":
            started["arguments"] = ""
        elif item["type"] == "custom_tool_call":
            started["input"] = ""
        events.append(
            (
                "response.output_item.added",
                {"type": "response.output_item.added", "output_index": index, "item": started},
            )
        )
        if item["type"] == "message":
            text = item["content"][0]["text"]
            for chunk in _chunks(text):
                events.append(
                    (
                        "response.output_text.delta",
                        {
                            "type": "response.output_text.delta", "item_id": item["id"], "output_index": index,
                            "content_index": 0, "delta": chunk,
                        },
                    )
                )  # fmt: skip
            events.append(
                (
                    "response.output_text.done",
                    {
                        "type": "response.output_text.done", "item_id": item["id"], "output_index": index,
                        "content_index": 0, "text": text,
                    },
                )
            )  # fmt: skip
        elif item["type"] == "reasoning":
            for s_index, part in enumerate(item["summary"]):
                events.append(
                    (
                        "response.reasoning_summary_text.delta",
                        {
                            "type": "response.reasoning_summary_text.delta", "item_id": item["id"],
                            "output_index": index, "summary_index": s_index, "delta": part["text"],
                        },
                    )
                )  # fmt: skip
        elif item["type"] == "function_call":
            for chunk in _chunks(item["arguments"]):
                events.append(
                    (
                        "response.function_call_arguments.delta",
                        {
                            "type": "response.function_call_arguments.delta", "item_id": item["id"],
                            "output_index": index, "delta": chunk,
                        },
                    )
                )  # fmt: skip
            events.append(
                (
                    "response.function_call_arguments.done",
                    {
                        "type": "response.function_call_arguments.done", "item_id": item["id"],
                        "output_index": index, "arguments": item["arguments"],
                    },
                )
            )  # fmt: skip
        elif item["type"] == "custom_tool_call":
            for chunk in _chunks(item["input"]):
                events.append(
                    (
                        "response.custom_tool_call_input.delta",
                        {
                            "type": "response.custom_tool_call_input.delta", "item_id": item["id"],
                            "output_index": index, "delta": chunk,
                        },
                    )
                )  # fmt: skip
        events.append(
            (
                "response.output_item.done",
                {"type": "response.output_item.done", "output_index": index, "item": item},
            )
        )
    usage = usage_for(request, previous_input, output)
    events.append(
        (
            "response.completed",
            {
                "type": "response.completed",
                "response": {**base, "status": "completed", "output": output, "usage": usage},
            },
        )
    )
    return events


def handle_responses(server: ScriptedServer, request: RecordedRequest) -> HttpReply:
    """Stream the next scripted reply (a list of short-form items; a plain string is a message)."""
    item = server.next_item(request)
    if item is None:
        return HttpReply(500, {"error": {"message": "the script has no reply left", "type": "server_error"}})
    reply = [{"type": "message", "text": item}] if isinstance(item, str) else list(item)
    body = request.body if isinstance(request.body, dict) else {}
    index = server.counter("responses") - 1
    events = reply_events(
        body, reply, call_index=index, previous_input=server.state.get("responses_input", 0)
    )
    server.state["responses_input"] = events[-1][1]["response"]["usage"]["input_tokens"]
    return HttpReply(200, chunks=sse_events(events), content_type="text/event-stream")


def install(server: ScriptedServer) -> ScriptedServer:
    server.add_route("POST", PATH, handle_responses)
    return server


def _chunks(text: str, size: int = 40) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), size)] or [""]
