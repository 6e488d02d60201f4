"""The proxy's own read_result rounds for Anthropic Messages: ``serve_reads`` forwards a request
that offers read_result, answers the model's read_result calls from the stored results and
calls the upstream again, so the agent gets one answer (JSON, or the SSE stream it asked for)
and never sees the extra rounds; each round is recorded. (OpenAI's: engine.proxy.openai_reads.)
"""

from __future__ import annotations

import json
import time

import httpx
from starlette.responses import Response

from engine.proxy.answers import RESPONSE_HOP_BY_HOP, fail
from engine.proxy.controller import Controller
from engine.proxy.read_result import READ_RESULT_NAME, read_stored
from engine.proxy.recorder import Exchange, Recorder, new_exchange

#: read_result rounds the proxy answers itself before giving the agent the model's answer.
MAX_READ_ROUNDS = 8


def _compact(value: object) -> bytes:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


def _sse_message(message: dict[str, object]) -> bytes:
    """A whole Anthropic message as the SSE events of a stream."""
    events: list[tuple[str, dict[str, object]]] = []
    usage = dict(message.get("usage") or {})  # type: ignore[call-overload]
    start = {**message, "content": [], "stop_reason": None, "usage": {**usage, "output_tokens": 0}}
    events.append(("message_start", {"type": "message_start", "message": start}))
    for index, block in enumerate(message.get("content") or []):  # type: ignore[arg-type]
        kind = block.get("type")
        empty = {"text": {"type": "text", "text": ""}, "thinking": {"type": "thinking", "thinking": ""}}.get(
            kind,
            {k: v for k, v in block.items() if k != "input"} | ({"input": {}} if kind == "tool_use" else {}),
        )
        events.append(
            ("content_block_start", {"type": "content_block_start", "index": index, "content_block": empty})
        )
        if kind == "text":
            delta = {"type": "text_delta", "text": block.get("text", "")}
            events.append(
                ("content_block_delta", {"type": "content_block_delta", "index": index, "delta": delta})
            )
        elif kind == "thinking":
            for delta in ({"type": "thinking_delta", "thinking": block.get("thinking", "")},
                          {"type": "signature_delta", "signature": block.get("signature", "")}):  # fmt: skip
                events.append(
                    ("content_block_delta", {"type": "content_block_delta", "index": index, "delta": delta})
                )
        elif kind == "tool_use":
            delta = {"type": "input_json_delta", "partial_json": json.dumps(block.get("input") or {})}
            events.append(
                ("content_block_delta", {"type": "content_block_delta", "index": index, "delta": delta})
            )
        events.append(("content_block_stop", {"type": "content_block_stop", "index": index}))
    tail = {"type": "message_delta", "delta": {"stop_reason": message.get("stop_reason"), "stop_sequence": None},
            "usage": {"output_tokens": usage.get("output_tokens", 0)}}  # fmt: skip
    events += [("message_delta", tail), ("message_stop", {"type": "message_stop"})]
    return b"".join(f"event: {name}\ndata: {json.dumps(data)}\n\n".encode() for name, data in events)


async def serve_reads(
    client: httpx.AsyncClient, recorder: Recorder, controller: Controller, exchange: Exchange, started: float,
    kind: str, url: str, headers: list[tuple[bytes, bytes]], body: dict[str, object],
) -> Response:  # fmt: skip
    """Forward a request that offers read_result; answer the model's read_result calls here and
    call the upstream again, so the agent gets one answer and never sees the extra rounds.

    The upstream is asked for whole answers (``stream`` off) and the final one is given to the
    agent the way it asked (SSE when it asked to stream): this path buffers each answer.
    """
    wants_stream = bool(body.get("stream"))
    current = {**body, "stream": False}
    rounds: list[Exchange] = []
    merged: list[dict[str, object]] = []
    usage: dict[str, int] = {}
    head: dict[str, object] = {}
    stop_reason: object = None
    for round_no in range(MAX_READ_ROUNDS + 1):
        payload = _compact(current)
        ex = exchange if round_no == 0 else new_exchange(exchange.api, "POST", exchange.path, {}, payload)
        ex.sent_body = payload if round_no == 0 else None
        ex.request_headers = exchange.request_headers
        if round_no:
            ex.parent = exchange
            recorder.begin()
        rounds.append(ex)
        try:
            reply = await client.send(client.build_request("POST", url, headers=headers, content=payload))
        except httpx.HTTPError as exc:
            for other in rounds[:-1]:
                recorder.submit(other)
            status, error = (
                (504, "upstream_timeout")
                if isinstance(exc, httpx.TimeoutException)
                else (502, "upstream_unreachable")
            )
            return fail(recorder, ex, started, kind, status, error, exc)
        ex.status = reply.status_code
        ex.ttfb_ms = ex.latency_ms = (time.perf_counter() - started) * 1000
        ex.response_headers = {k.lower(): v for k, v in reply.headers.items()}
        ex.response_chunks = [reply.content]
        try:
            answer = json.loads(reply.content) if reply.status_code == 200 else None
        except (json.JSONDecodeError, UnicodeDecodeError):
            answer = None
        if not isinstance(answer, dict) or answer.get("type") == "error":
            for other in rounds:
                recorder.submit(other)
            passthrough = {
                k: v
                for k, v in reply.headers.items()
                if k.lower() not in RESPONSE_HOP_BY_HOP | {"content-length", "content-encoding"}
            }
            return Response(reply.content, status_code=reply.status_code, headers=passthrough)
        content = [b for b in answer.get("content") or [] if isinstance(b, dict)]
        reads = [b for b in content if b.get("type") == "tool_use" and b.get("name") == READ_RESULT_NAME]
        others = [b for b in content if b.get("type") == "tool_use" and b.get("name") != READ_RESULT_NAME]
        merged += [b for b in content if b not in reads]
        head = head or {k: answer.get(k) for k in ("id", "type", "role", "model")}
        for key, value in (answer.get("usage") or {}).items():
            if isinstance(value, int):
                usage[key] = value if key != "output_tokens" else usage.get(key, 0) + value
        stop_reason = answer.get("stop_reason")
        if not reads or others or round_no == MAX_READ_ROUNDS:
            break
        results = []
        for call in reads:
            arguments = call.get("input") if isinstance(call.get("input"), dict) else {}
            text = controller.stored_text(str(arguments.get("ref_id")))
            results.append({
                "type": "tool_result", "tool_use_id": call.get("id"),
                "content": read_stored(text, arguments) if text is not None else f"Error: no stored result {arguments.get('ref_id')!r}",
            })  # fmt: skip
        current = {**current, "messages": [*current["messages"], {"role": "assistant", "content": content},
                                           {"role": "user", "content": results}]}  # fmt: skip
    message = {**head, "content": merged, "stop_reason": stop_reason, "stop_sequence": None, "usage": usage}
    exchange.agent_answer = message
    for ex in rounds:
        recorder.submit(ex)
    if wants_stream:
        return Response(_sse_message(message), media_type="text/event-stream")
    return Response(_compact(message), media_type="application/json")
