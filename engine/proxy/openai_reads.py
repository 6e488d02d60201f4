"""The proxy's own read_result rounds for OpenAI requests (Chat Completions and Responses).

``serve_reads`` forwards a request that offers read_result, answers the model's read_result
calls from the stored results and calls the upstream again, so the agent gets one answer
(JSON, or the SSE stream it asked for) and never sees the extra rounds; each round is
recorded as the proxy's own call. The pieces are pure: ``read_calls``, ``continue_with_reads``,
``final_answer``, ``answer_payload``.
"""

from __future__ import annotations

import json
import time
from typing import TYPE_CHECKING, Any

from engine.proxy import apis
from engine.proxy.read_result import READ_RESULT_NAME
from engine.proxy.read_rounds import (  # noqa: F401  (MAX_READ_ROUNDS, StoredTexts re-exported)
    MAX_READ_ROUNDS,
    StoredTexts,
    compact_json,
    serve_read_rounds,
)

if TYPE_CHECKING:  # the proxy's request path imports this module lazily
    import httpx
    from starlette.responses import Response

    from engine.proxy.recorder import Exchange, Recorder


def read_calls(api: str, content: list[Any]) -> tuple[list[tuple[str, dict[str, Any]]], bool]:
    """The model's read_result calls in one answer ((call id, arguments)) and whether it also
    called any other tool (then the answer goes to the agent as it is)."""
    if api == apis.OPENAI_CHAT:
        message = content[0] if content and isinstance(content[0], dict) else {}
        calls = [(c.get("id"), (c.get("function") or {}).get("name"), (c.get("function") or {}).get("arguments"))
                 for c in message.get("tool_calls") or [] if isinstance(c, dict)]  # fmt: skip
    else:
        calls = [(i.get("call_id"), i.get("name"), i.get("arguments")) for i in content
                 if isinstance(i, dict) and i.get("type") in ("function_call", "custom_tool_call")]  # fmt: skip
    reads: list[tuple[str, dict[str, Any]]] = []
    others = False
    for call_id, name, arguments in calls:
        if name != READ_RESULT_NAME:
            others = True
            continue
        try:
            parsed = json.loads(arguments) if isinstance(arguments, str) else arguments
        except json.JSONDecodeError:
            parsed = None
        reads.append((str(call_id), parsed if isinstance(parsed, dict) else {}))
    return reads, others


def continue_with_reads(
    api: str, body: dict[str, Any], content: list[Any], answers: list[tuple[str, str]]
) -> dict[str, Any]:
    """The next upstream request: the model's answer and the proxy's read_result answers appended."""
    if api == apis.OPENAI_CHAT:
        message = {k: v for k, v in content[0].items() if k in ("role", "content", "tool_calls")}
        tools = [{"role": "tool", "tool_call_id": call_id, "content": text} for call_id, text in answers]
        return {**body, "messages": [*body["messages"], message, *tools]}
    outputs = [
        {"type": "function_call_output", "call_id": call_id, "output": text} for call_id, text in answers
    ]
    return {**body, "input": [*body["input"], *content, *outputs]}


def final_answer(api: str, rounds: list[apis.ParsedResponse]) -> list[Any]:
    """What the agent gets: the model's output over every round without the read_result calls
    (Chat: one assistant message; Responses: output items)."""
    if api == apis.OPENAI_CHAT:
        messages = [p.content[0] for p in rounds if p.content and isinstance(p.content[0], dict)]
        texts = [m.get("content") for m in messages if isinstance(m.get("content"), str) and m.get("content")]
        calls = [c for m in messages for c in m.get("tool_calls") or []
                 if (c.get("function") or {}).get("name") != READ_RESULT_NAME]  # fmt: skip
        message: dict[str, Any] = {"role": "assistant", "content": "\n\n".join(texts) if texts else None}
        if calls:
            message["tool_calls"] = calls
        return [message]
    read_ids = {call_id for p in rounds for call_id, _ in read_calls(api, p.content)[0]}
    return [i for p in rounds for i in p.content
            if not (isinstance(i, dict) and i.get("call_id") in read_ids and i.get("type") != "message")]  # fmt: skip


def _usage(api: str, rounds: list[apis.ParsedResponse]) -> dict[str, Any]:
    """The last round's usage (its prompt holds every earlier round) with output summed."""
    last = dict(rounds[-1].usage or {})
    out_key = "completion_tokens" if api == apis.OPENAI_CHAT else "output_tokens"
    in_key = "prompt_tokens" if api == apis.OPENAI_CHAT else "input_tokens"
    output = sum(int((p.usage or {}).get(out_key) or 0) for p in rounds)
    last[out_key] = output
    last["total_tokens"] = int(last.get(in_key) or 0) + output
    return last


def answer_payload(api: str, rounds: list[apis.ParsedResponse], content: list[Any], *, stream: bool,
                   include_usage: bool = False) -> tuple[bytes, str]:  # fmt: skip
    """The agent's answer as JSON or as the SSE stream it asked for: (bytes, media type)."""
    last = rounds[-1]
    usage = _usage(api, rounds)
    created = int(time.time())
    if api == apis.OPENAI_CHAT:
        message = content[0]
        finish = "tool_calls" if message.get("tool_calls") else (last.stop_reason or "stop")
        head = {"id": last.response_id or "chatcmpl-ctxdesk", "created": created, "model": last.model}
        if not stream:
            choice = {"index": 0, "message": message, "finish_reason": finish, "logprobs": None}
            data = {**head, "object": "chat.completion", "choices": [choice], "usage": usage}
            return _json(data), "application/json"
        chunk = {**head, "object": "chat.completion.chunk"}
        deltas: list[tuple[dict[str, Any], str | None]] = [({"role": "assistant", "content": ""}, None)]
        if message.get("content"):
            deltas.append(({"content": message["content"]}, None))
        for i, call in enumerate(message.get("tool_calls") or []):
            deltas.append(({"tool_calls": [{"index": i, **call}]}, None))
        deltas.append(({}, finish))
        events = [{**chunk, "choices": [{"index": 0, "delta": d, "finish_reason": f, "logprobs": None}]}
                  for d, f in deltas]  # fmt: skip
        if include_usage:
            events.append({**chunk, "choices": [], "usage": usage})
        body = b"".join(b"data: " + _json(e) + b"\n\n" for e in events) + b"data: [DONE]\n\n"
        return body, "text/event-stream"
    response = {"id": last.response_id or "resp_ctxdesk", "object": "response", "created_at": created,
                "model": last.model, "status": "completed", "output": content, "usage": usage}  # fmt: skip
    if not stream:
        return _json(response), "application/json"
    named: list[tuple[str, dict[str, Any]]] = [
        ("response.created", {"response": {**response, "status": "in_progress", "output": [], "usage": None}})
    ]
    for index, item in enumerate(content):
        named.append(("response.output_item.added", {"output_index": index, "item": item}))
        if item.get("type") == "message":
            for part_index, part in enumerate(item.get("content") or []):
                if part.get("type") == "output_text":
                    at = {"item_id": item.get("id"), "output_index": index, "content_index": part_index}
                    named.append(("response.output_text.delta", {**at, "delta": part.get("text", "")}))
                    named.append(("response.output_text.done", {**at, "text": part.get("text", "")}))
        named.append(("response.output_item.done", {"output_index": index, "item": item}))
    named.append(("response.completed", {"response": response}))
    body = b"".join(
        f"event: {name}\n".encode()
        + b"data: "
        + _json({"type": name, "sequence_number": n, **data})
        + b"\n\n"
        for n, (name, data) in enumerate(named)
    )
    return body, "text/event-stream"


_json = compact_json


async def serve_reads(
    client: httpx.AsyncClient, recorder: Recorder, controller: StoredTexts, exchange: Exchange, started: float,
    kind: str, url: str, headers: list[tuple[bytes, bytes]], body: dict[str, Any],
) -> Response:  # fmt: skip
    """Forward an OpenAI request that offers read_result; answer the model's read_result calls
    here and call the upstream again, so the agent gets one answer and never sees the extra
    rounds (the upstream is asked for whole answers; the agent gets SSE when it asked to stream)."""
    api = exchange.api
    wants_stream = bool(body.get("stream"))
    include_usage = bool((body.get("stream_options") or {}).get("include_usage"))

    def parse(reply: httpx.Response) -> apis.ParsedResponse | None:
        parsed = apis.parse_response(api, reply.status_code, reply.headers.get("content-type"), reply.content)
        return None if reply.status_code != 200 or parsed.error_type or not parsed.content else parsed

    def finish(rounds: list[apis.ParsedResponse]) -> tuple[object, bytes, str]:
        content = final_answer(api, rounds)
        data, media_type = answer_payload(
            api, rounds, content, stream=wants_stream, include_usage=include_usage
        )
        return {"content": content}, data, media_type

    return await serve_read_rounds(
        client, recorder, controller, exchange, started, kind, url, headers,
        {k: v for k, v in body.items() if k != "stream_options"} | {"stream": False},
        parse=parse,
        read_calls=lambda parsed: read_calls(api, parsed.content),
        follow=lambda current, parsed, answers: continue_with_reads(api, current, parsed.content, answers),
        finish=finish,
    )  # fmt: skip
