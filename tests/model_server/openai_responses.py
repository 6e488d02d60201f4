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
call's input when this request extends it. A reply ``{"output": [...items], "pad": N}`` reports N
more input tokens, as cache reads (an agent trusts the usage it is told: this crosses its
auto-compaction threshold without large files).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .core import HttpReply, RecordedRequest, ScriptedServer, sse_events

PATH = "/v1/responses"
CHARS_PER_TOKEN = 4
ANSWERED = "responses_usage"  # server.state key: seq -> the usage answered


@dataclass(frozen=True)
class When:
    """A scripted reply only a request matching ``when`` may take (a sub-agent beside its parent,
    the agent's own compaction call)."""

    reply: Any
    when: Callable[[RecordedRequest], bool]


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
                    **({"namespace": item["namespace"]} if item.get("namespace") else {}),
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
        elif kind == "raw":  # an output item exactly as given (a web_search_call with an empty id)
            items.append(dict(item["item"]))
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
    output = full_items(reply, call_index=call_index)
    base = {
        "id": _id("resp", call_index, model), "object": "response", "created_at": 1_790_000_000 + call_index,
        "model": model,
    }  # fmt: skip
    events = [_event("created", response={**base, "status": "in_progress", "output": []})]
    for index, item in enumerate(output):
        kind, at = item["type"], {"item_id": item["id"], "output_index": index}
        started = {**item, **_EMPTY_WHEN_STARTED.get(kind, {})}
        events.append(_event("output_item.added", output_index=index, item=started))
        if kind == "message":
            text = item["content"][0]["text"]
            events += [_event("output_text.delta", **at, content_index=0, delta=c) for c in _chunks(text)]
            events.append(_event("output_text.done", **at, content_index=0, text=text))
        elif kind == "reasoning":
            events += [
                _event("reasoning_summary_text.delta", **at, summary_index=i, delta=part["text"])
                for i, part in enumerate(item["summary"])
            ]
        elif kind == "function_call":
            events += [
                _event("function_call_arguments.delta", **at, delta=c) for c in _chunks(item["arguments"])
            ]
            events.append(_event("function_call_arguments.done", **at, arguments=item["arguments"]))
        elif kind == "custom_tool_call":
            events += [_event("custom_tool_call_input.delta", **at, delta=c) for c in _chunks(item["input"])]
        events.append(_event("output_item.done", output_index=index, item=item))
    usage = usage_for(request, previous_input, output)
    events.append(
        _event("completed", response={**base, "status": "completed", "output": output, "usage": usage})
    )
    return events


#: What an output item holds when announced, before its content streams.
_EMPTY_WHEN_STARTED: dict[str, dict[str, Any]] = {
    "message": {"content": [], "status": "in_progress"},
    "function_call": {"arguments": ""},
    "custom_tool_call": {"input": ""},
}


def _event(name: str, **data: Any) -> tuple[str, dict[str, Any]]:
    kind = f"response.{name}"
    return kind, {"type": kind, **data}


def handle_responses(server: ScriptedServer, request: RecordedRequest) -> HttpReply:
    """Stream the next scripted reply (a list of short-form items; a plain string is a message)."""
    item = server.next_item(request)
    if isinstance(item, When):
        item = item.reply
    if item is None:
        return HttpReply(500, {"error": {"message": "the script has no reply left", "type": "server_error"}})
    if isinstance(item, dict) and "error" in item:  # {"error": {"status", "code", "message"}}
        error = item["error"]
        status = int(error.get("status") or 500)
        code = str(error.get("code") or "server_error")
        body = {"error": {"message": error.get("message") or code, "type": error.get("type") or code,
                          "param": None, "code": code}}  # fmt: skip
        return HttpReply(status, body)
    pad = 0
    if isinstance(item, dict) and "output" in item:  # {"output": [...], "pad": N}
        pad, item = int(item.get("pad") or 0), item["output"]
    reply = [{"type": "message", "text": item}] if isinstance(item, str) else list(item)
    body = request.body if isinstance(request.body, dict) else {}
    index = server.counter("responses") - 1
    events = reply_events(
        body, reply, call_index=index, previous_input=server.state.get("responses_input", 0)
    )
    if pad:  # extra prompt tokens reported as cache reads: pushes the agent past its threshold
        usage = events[-1][1]["response"]["usage"]
        usage["input_tokens"] += pad
        usage["input_tokens_details"]["cached_tokens"] += pad
        usage["total_tokens"] += pad
    usage = events[-1][1]["response"]["usage"]
    server.state["responses_input"] = usage["input_tokens"]
    server.state.setdefault(ANSWERED, {})[request.seq] = usage
    return HttpReply(200, chunks=sse_events(events), content_type="text/event-stream")


def answered_usages(server: ScriptedServer) -> dict[int, dict[str, Any]]:
    """The usage answered to each streamed Responses request, by the request's ``seq``."""
    with server._lock:
        return dict(server.state.get(ANSWERED, {}))


def install(server: ScriptedServer) -> ScriptedServer:
    server.add_route("POST", PATH, handle_responses)
    return server


def _chunks(text: str, size: int = 40) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), size)] or [""]
