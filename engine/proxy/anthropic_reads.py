"""The proxy's own read_result rounds for Anthropic Messages: ``serve_reads`` forwards a request
that offers read_result, answers the model's read_result calls from the stored results and
calls the upstream again, so the agent gets one answer (JSON, or the SSE stream it asked for)
and never sees the extra rounds; each round is recorded. (OpenAI's: engine.proxy.openai_reads.)
"""

from __future__ import annotations

import json
from typing import Any

import httpx
from starlette.responses import Response

from engine.proxy.controller import Controller
from engine.proxy.read_result import READ_RESULT_NAME
from engine.proxy.read_rounds import MAX_READ_ROUNDS, ReadCalls, compact_json, serve_read_rounds  # noqa: F401
from engine.proxy.recorder import Exchange, Recorder


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


def _parse(reply: httpx.Response) -> dict[str, Any] | None:
    """A 200 reply's message, or None (an error or a body that is not one: relayed as it is)."""
    try:
        answer = json.loads(reply.content) if reply.status_code == 200 else None
    except (json.JSONDecodeError, UnicodeDecodeError):
        return None
    return answer if isinstance(answer, dict) and answer.get("type") != "error" else None


def _blocks(answer: dict[str, Any]) -> list[dict[str, Any]]:
    return [b for b in answer.get("content") or [] if isinstance(b, dict)]


def _is_read(block: dict[str, Any]) -> bool:
    return block.get("type") == "tool_use" and block.get("name") == READ_RESULT_NAME


def read_calls(answer: dict[str, Any]) -> tuple[ReadCalls, bool]:
    """The model's read_result calls in one message ((tool_use id, input)) and whether it also
    called any other tool (then the message goes to the agent as it is)."""
    blocks = _blocks(answer)
    reads = [
        (b.get("id"), b["input"] if isinstance(b.get("input"), dict) else {}) for b in blocks if _is_read(b)
    ]
    return reads, any(b.get("type") == "tool_use" and not _is_read(b) for b in blocks)


def continue_with_reads(
    body: dict[str, Any], answer: dict[str, Any], answers: list[tuple[Any, str]]
) -> dict[str, Any]:
    """The next upstream request: the model's message and the proxy's read_result answers appended."""
    results = [{"type": "tool_result", "tool_use_id": call_id, "content": text} for call_id, text in answers]
    return {**body, "messages": [*body["messages"], {"role": "assistant", "content": _blocks(answer)},
                                 {"role": "user", "content": results}]}  # fmt: skip


def final_message(answers: list[dict[str, Any]]) -> dict[str, Any]:
    """What the agent gets: one message of every round's content but the read_result calls, the
    first round's id, the last one's stop reason and usage with the output tokens summed."""
    usage: dict[str, int] = {}
    for answer in answers:
        for key, value in (answer.get("usage") or {}).items():
            if isinstance(value, int):
                usage[key] = value if key != "output_tokens" else usage.get(key, 0) + value
    head = {k: answers[0].get(k) for k in ("id", "type", "role", "model")}
    merged = [b for answer in answers for b in _blocks(answer) if not _is_read(b)]
    return {**head, "content": merged, "stop_reason": answers[-1].get("stop_reason"), "stop_sequence": None,
            "usage": usage}  # fmt: skip


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

    def finish(answers: list[dict[str, Any]]) -> tuple[object, bytes, str]:
        message = final_message(answers)
        if wants_stream:
            return message, _sse_message(message), "text/event-stream"
        return message, compact_json(message), "application/json"

    return await serve_read_rounds(
        client, recorder, controller, exchange, started, kind, url, headers, {**body, "stream": False},
        parse=_parse, read_calls=read_calls, follow=continue_with_reads, finish=finish,
    )  # fmt: skip
