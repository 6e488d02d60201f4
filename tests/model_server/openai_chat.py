"""OpenAI Chat Completions (``POST /v1/chat/completions``) for the scripted model server.

A scripted reply is a :class:`ChatReply`: text, tool calls, or an error. Answers as JSON, or
as SSE chunks when the body says ``"stream": true`` (a final usage chunk when
``stream_options.include_usage`` is set, then ``data: [DONE]``). A reply may carry reasoning,
streamed as ``reasoning_content`` deltas (the field DeepSeek, Qwen and vLLM use). Usage is
reproducible from the request log alone (:func:`reported_usage`): prompt tokens = characters of
the request's messages and tools / 4; cached = the prompt of the previous call of the same
conversation (same first message) when this request is not smaller. Side calls with their own
system prompt (a title generator) therefore never disturb the main conversation's counts.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .core import HttpReply, RecordedRequest, ScriptedServer, sse_events

PATH = "/v1/chat/completions"
CHARS_PER_TOKEN = 4
ANSWERED = "chat_usage"  # server.state key: seq -> the usage answered
Predicate = Callable[[RecordedRequest], bool]


@dataclass(frozen=True)
class ChatReply:
    text: str | None = None
    reasoning: str | None = None
    tool_calls: tuple[tuple[str, dict[str, Any]], ...] = ()
    #: Extra prompt tokens reported (as cache reads): pushes an agent past its compaction threshold
    #: without large files (agents trust the usage they are told).
    pad_tokens: int = 0
    status: int = 200
    error: tuple[str, str] | None = None  # (type, message) for a non-200 status
    delay: float = 0.0
    when: Predicate | None = None


def chat_text(text: str, **kwargs: Any) -> ChatReply:
    return ChatReply(text=text, **kwargs)


def chat_tool_calls(*calls: tuple[str, dict[str, Any]], **kwargs: Any) -> ChatReply:
    return ChatReply(tool_calls=tuple(calls), **kwargs)


def chat_error(status: int, error_type: str, message: str, **kwargs: Any) -> ChatReply:
    return ChatReply(status=status, error=(error_type, message), **kwargs)


def prompt_tokens_of(body: dict[str, Any]) -> int:
    """The prompt size this server reports for a request body."""
    return max(1, len(json.dumps([body.get("messages"), body.get("tools")])) // CHARS_PER_TOKEN)


def conversation_of(body: dict[str, Any]) -> str:
    """What tells one conversation from another: its first message."""
    messages = body.get("messages") or [None]
    return json.dumps(messages[0], sort_keys=True)


def reported_usage(
    body: dict[str, Any], previous_prompt: int, completion: int = 0, reasoning: int = 0
) -> dict[str, Any]:
    """The usage answered to ``body`` when its conversation's previous call had ``previous_prompt``."""
    prompt = prompt_tokens_of(body)
    cached = previous_prompt if previous_prompt <= prompt else 0
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
        "prompt_tokens_details": {"cached_tokens": cached},
        "completion_tokens_details": {"reasoning_tokens": reasoning},
    }


def replay_usages(bodies: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The usages a run of ``bodies`` (in the order received) was answered (completion left 0)."""
    previous: dict[str, int] = {}
    usages = []
    for body in bodies:
        key = conversation_of(body)
        usages.append(reported_usage(body, previous.get(key, 0)))
        previous[key] = usages[-1]["prompt_tokens"]
    return usages


def _usage(
    server: ScriptedServer, seq: int, body: dict[str, Any], completion: int, reasoning: int, pad: int = 0
) -> dict[str, Any]:
    key = conversation_of(body)
    with server._lock:
        chains = server.state.setdefault("chat_prompt", {})
        usage = reported_usage(body, chains.get(key, 0), completion, reasoning)
        chains[key] = usage["prompt_tokens"]
        if pad:
            usage["prompt_tokens"] += pad
            usage["total_tokens"] += pad
            usage["prompt_tokens_details"]["cached_tokens"] += pad
        server.state.setdefault(ANSWERED, {})[seq] = usage
    return usage


def answered_usages(server: ScriptedServer) -> dict[int, dict[str, Any]]:
    """The usage answered to each Chat Completions request, by the request's ``seq``."""
    with server._lock:
        return dict(server.state.get(ANSWERED, {}))


def handle_chat(server: ScriptedServer, request: RecordedRequest) -> HttpReply:
    body = request.body if isinstance(request.body, dict) else {}
    item = server.next_item(request)
    if isinstance(item, str):
        item = ChatReply(text=item)
    if not isinstance(item, ChatReply):
        return HttpReply(500, {"error": {"message": "no scripted reply left", "type": "server_error"}})
    if item.status != 200:
        error_type, message = item.error or ("server_error", "scripted error")
        return HttpReply(
            item.status,
            {"error": {"message": message, "type": error_type, "code": error_type}},
            delay=item.delay,
        )
    n = server.counter("chat")
    calls = [
        {
            "id": f"call_scripted_{n:04d}_{i}",
            "type": "function",
            "function": {"name": name, "arguments": json.dumps(args)},
        }
        for i, (name, args) in enumerate(item.tool_calls)
    ]
    message: dict[str, Any] = {"role": "assistant", "content": item.text, "refusal": None}
    if calls:
        message["tool_calls"] = calls
    finish = "tool_calls" if calls else "stop"
    reasoning = len(item.reasoning) // CHARS_PER_TOKEN if item.reasoning else 0
    completion = max(1, len(json.dumps(message)) // CHARS_PER_TOKEN) + reasoning
    if item.reasoning:
        message["reasoning_content"] = item.reasoning
    usage = _usage(server, request.seq, body, completion, reasoning, item.pad_tokens)
    model = body.get("model") or "gpt-4o"
    head = {
        "id": f"chatcmpl-scripted-{n:04d}",
        "created": 1_790_000_000,
        "model": model,
        "system_fingerprint": None,
    }
    if not body.get("stream"):
        choice = {"index": 0, "message": message, "finish_reason": finish, "logprobs": None}
        return HttpReply(
            200, {**head, "object": "chat.completion", "choices": [choice], "usage": usage}, delay=item.delay
        )
    chunk = {**head, "object": "chat.completion.chunk"}

    def event(delta: dict[str, Any], finish_reason: str | None = None) -> tuple[None, Any]:
        return None, {
            **chunk,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason, "logprobs": None}],
        }

    events: list[tuple[None, Any]] = [event({"role": "assistant", "content": ""})]
    thought = item.reasoning or ""
    events += [event({"reasoning_content": thought[i : i + 20]}) for i in range(0, len(thought), 20)]
    text = item.text or ""
    events += [event({"content": text[i : i + 20]}) for i in range(0, len(text), 20)]
    for i, call in enumerate(calls):
        events.append(
            event(
                {
                    "tool_calls": [
                        {
                            "index": i,
                            "id": call["id"],
                            "type": "function",
                            "function": {"name": call["function"]["name"], "arguments": ""},
                        }
                    ]
                }
            )
        )
        args = call["function"]["arguments"]
        events += [
            event({"tool_calls": [{"index": i, "function": {"arguments": args[j : j + 16]}}]})
            for j in range(0, len(args), 16)
        ]
    events.append(event({}, finish))
    if (body.get("stream_options") or {}).get("include_usage"):
        events.append((None, {**chunk, "choices": [], "usage": usage}))
    chunks = (*sse_events(events), b"data: [DONE]\n\n")
    return HttpReply(200, chunks=chunks, content_type="text/event-stream", delay=item.delay)


def install(server: ScriptedServer) -> ScriptedServer:
    server.add_route("POST", PATH, handle_chat)
    return server
