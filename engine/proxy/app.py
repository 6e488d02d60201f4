"""The proxy's HTTP side: Starlette routes, forwarding to the upstream, streaming relay.

Every request is forwarded with its headers and body as received (hop-by-hop headers aside)
and the answer is relayed chunk by chunk as it arrives (``aiter_raw``: never decoded, never
buffered whole); upstream errors come back as they were. When the upstream cannot be
reached or stalls before answering, the agent gets a 502/504 in the provider's own error
shape. Each finished exchange goes to the recorder's queue; nothing is written on this path.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

import httpx
from starlette.applications import Starlette
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

from engine.proxy import apis, openai_policies
from engine.proxy.controller import Controller
from engine.proxy.read_result import READ_RESULT_NAME, read_stored
from engine.proxy.recorder import Exchange, Recorder, new_exchange

ANTHROPIC_UPSTREAM = "https://api.anthropic.com"
OPENAI_UPSTREAM = "https://api.openai.com/v1"
#: Headers that belong to one hop (RFC 9110 7.6.1) and are not forwarded.
HOP_BY_HOP = frozenset(
    {
        "host", "content-length", "connection", "keep-alive", "transfer-encoding", "te", "trailer", "upgrade",
        "proxy-connection", "proxy-authenticate", "proxy-authorization",
    }
)  # fmt: skip
#: Forwarding a body as it arrives keeps the agent's own Content-Length (the upstream gets the same framing).
STREAMED_HOP_BY_HOP = HOP_BY_HOP - {"content-length"}
RESPONSE_HOP_BY_HOP = frozenset({"connection", "keep-alive", "transfer-encoding", "te", "trailer", "upgrade"})
#: Longest the proxy waits at shutdown for answered requests to be recorded.
SHUTDOWN_FLUSH_S = 15.0
#: Answers larger than this are relayed whole but recorded only up to it.
RECORD_RESPONSE_LIMIT = 64 * 1024 * 1024


@dataclass(frozen=True)
class Upstreams:
    anthropic: str = ANTHROPIC_UPSTREAM
    openai: str = OPENAI_UPSTREAM
    connect_timeout_s: float = 10.0
    read_timeout_s: float = 600.0


def upstream_url(base: str, path: str, query: str) -> str:
    """``base`` + the request path (``/v1`` not doubled when the base already ends with it)."""
    base = base.rstrip("/")
    if base.endswith("/v1") and (path == "/v1" or path.startswith("/v1/")):
        path = path[3:]
    return f"{base}{path}" + (f"?{query}" if query else "")


def _error_body(kind: str, status: int, message: str) -> bytes:
    if kind == "anthropic":
        error = {"type": "error", "error": {"type": "api_error", "message": message}}
    else:
        error = {"error": {"message": message, "type": "api_error", "code": f"upstream_{status}"}}
    return json.dumps(error).encode()


def create_app(
    recorder: Recorder, upstreams: Upstreams | None = None, controller: Controller | None = None
) -> Starlette:
    """The proxy as an ASGI app; ``recorder`` receives every exchange, ``controller`` applies policies."""
    upstreams = upstreams or Upstreams()
    state: dict[str, httpx.AsyncClient] = {}

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        timeout = httpx.Timeout(
            connect=upstreams.connect_timeout_s, read=upstreams.read_timeout_s, write=60.0, pool=None
        )
        limits = httpx.Limits(max_connections=1000, max_keepalive_connections=200)
        async with httpx.AsyncClient(timeout=timeout, limits=limits, follow_redirects=False) as client:
            state["client"] = client
            yield
        # shutting down (Ctrl-C, SIGTERM): record what was answered before the process goes
        await asyncio.to_thread(recorder.flush, SHUTDOWN_FLUSH_S)

    async def forward(request: Request) -> Response:
        recorder.hold()  # the writer thread waits until the upstream has answered
        try:
            return await _forward(request)
        finally:
            recorder.release()

    async def _forward(request: Request) -> Response:
        started = time.perf_counter()
        path = request.url.path
        api = apis.detect_api(request.method, path)
        kind = apis.upstream_kind(api, request.headers, path)
        base = upstreams.anthropic if kind == "anthropic" else upstreams.openai
        query = request.url.query
        recorder.begin()
        if "content-length" in request.headers and (
            controller is None or not controller.needs_body(api, request.headers)
        ):
            # nothing edits this request: its body goes upstream chunk by chunk as it arrives,
            # teed into the exchange for the recorder (joined in the writer thread, not here)
            exchange = new_exchange(
                api, request.method, path + (f"?{query}" if query else ""), request.headers, b""
            )
            exchange.request_chunks = []
            headers = [
                (k, v)
                for k, v in request.headers.raw
                if k.decode("latin-1").lower() not in STREAMED_HOP_BY_HOP
            ]
            return await _send(
                recorder, state["client"], exchange, started, kind, request.method, upstream_url(base, path, query),
                headers, _tee(request, exchange.request_chunks),
            )  # fmt: skip
        body = await request.body()
        exchange = new_exchange(
            api, request.method, path + (f"?{query}" if query else ""), request.headers, body
        )
        if controller is not None:
            outcome = controller.apply(api, body, request.headers)
            exchange.policy = outcome
            if outcome.refusal is not None:
                return _refuse(recorder, exchange, started, *outcome.refusal)
            if outcome.serve_read_result and outcome.body is not None:
                headers = [
                    (k, v) for k, v in request.headers.raw
                    if k.decode("latin-1").lower() not in HOP_BY_HOP | {b"accept-encoding".decode()}
                ]  # fmt: skip
                serve = _serve_reads if api == apis.ANTHROPIC_MESSAGES else openai_policies.serve_reads
                return await serve(
                    state["client"], recorder, controller, exchange, started, kind,
                    upstream_url(base, path, query), headers, outcome.body,
                )  # fmt: skip
            if outcome.body is not None:
                body = json.dumps(outcome.body, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
                exchange.sent_body = body
        headers = [(k, v) for k, v in request.headers.raw if k.decode("latin-1").lower() not in HOP_BY_HOP]
        return await _send(
            recorder, state["client"], exchange, started, kind, request.method, upstream_url(base, path, query),
            headers, body,
        )  # fmt: skip

    routes = [
        Route("/{path:path}", forward, methods=["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"])
    ]
    app = Starlette(routes=routes, lifespan=lifespan)
    app.state.recorder = recorder
    return app


async def _tee(request: Request, chunks: list[bytes]) -> AsyncIterator[bytes]:
    """The request body as it arrives, each chunk kept for the recorder as it is forwarded."""
    async for chunk in request.stream():
        if chunk:
            chunks.append(chunk)
            yield chunk


async def _drain(content: bytes | AsyncIterator[bytes]) -> None:
    """Read the rest of a streamed body the upstream did not take, so the recorded request is whole."""
    if isinstance(content, bytes):
        return
    with contextlib.suppress(ClientDisconnect, RuntimeError):
        async for _ in content:
            pass


async def _send(
    recorder: Recorder, client: httpx.AsyncClient, exchange: Exchange, started: float, kind: str, method: str,
    url: str, headers: list[tuple[bytes, bytes]], content: bytes | AsyncIterator[bytes],
) -> Response:  # fmt: skip
    """Forward one request and relay the answer as it streams (502/504 when the upstream fails)."""
    try:
        upstream = await client.send(
            client.build_request(method, url, headers=headers, content=content), stream=True
        )
    except httpx.TimeoutException as exc:
        await _drain(content)
        return _fail(recorder, exchange, started, kind, 504, "upstream_timeout", exc)
    except httpx.HTTPError as exc:
        await _drain(content)
        return _fail(recorder, exchange, started, kind, 502, "upstream_unreachable", exc)
    except ClientDisconnect as exc:  # the agent went away while sending its body
        return _fail(recorder, exchange, started, kind, 499, "client_disconnected", exc)
    exchange.status = upstream.status_code
    exchange.ttfb_ms = (time.perf_counter() - started) * 1000
    exchange.response_headers = {k.lower(): v for k, v in upstream.headers.items()}
    response_headers = {
        k.decode("latin-1"): v.decode("latin-1")
        for k, v in upstream.headers.raw
        if k.decode("latin-1").lower() not in RESPONSE_HOP_BY_HOP
    }
    return StreamingResponse(
        _relay(recorder, exchange, upstream, started),
        status_code=upstream.status_code,
        headers=response_headers,
    )


async def _relay(
    recorder: Recorder, exchange: Exchange, upstream: httpx.Response, started: float
) -> AsyncIterator[bytes]:
    recorded = 0
    try:
        async for chunk in upstream.aiter_raw():
            if recorded + len(chunk) <= RECORD_RESPONSE_LIMIT:
                exchange.response_chunks.append(chunk)
                recorded += len(chunk)
            yield chunk
    except httpx.TimeoutException as exc:
        exchange.proxy_error, exchange.proxy_error_detail = (
            "upstream_timeout",
            f"upstream stalled mid-answer ({exc})",
        )
    except httpx.HTTPError as exc:
        exchange.proxy_error, exchange.proxy_error_detail = "upstream_error", f"upstream broke off ({exc})"
    except (asyncio.CancelledError, GeneratorExit):
        exchange.proxy_error, exchange.proxy_error_detail = (
            "client_disconnected",
            "the client went away mid-answer",
        )
        raise
    finally:
        await upstream.aclose()
        exchange.latency_ms = (time.perf_counter() - started) * 1000
        recorder.submit(exchange)


def _fail(
    recorder: Recorder, exchange: Exchange, started: float, kind: str, status: int, error: str, exc: Exception
) -> Response:
    message = f"ctxdesk proxy: {error.replace('_', ' ')} ({type(exc).__name__}: {exc})"
    exchange.proxy_error, exchange.proxy_error_detail = error, message
    exchange.latency_ms = (time.perf_counter() - started) * 1000
    recorder.submit(exchange)
    return Response(_error_body(kind, status, message), status_code=status, media_type="application/json")


def _refuse(
    recorder: Recorder, exchange: Exchange, started: float, status: int, error: dict[str, object]
) -> Response:
    """Answer for the provider (a policy refused the request); the upstream never sees it."""
    payload = json.dumps(error).encode()
    exchange.status = status
    exchange.response_headers = {"content-type": "application/json"}
    exchange.response_chunks = [payload]
    exchange.ttfb_ms = exchange.latency_ms = (time.perf_counter() - started) * 1000
    recorder.submit(exchange)
    return Response(payload, status_code=status, media_type="application/json")


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


async def _serve_reads(
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
            return _fail(recorder, ex, started, kind, status, error, exc)
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
