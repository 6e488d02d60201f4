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
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass

import httpx
from starlette.applications import Starlette
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import BaseRoute, Route

from engine.proxy.policy.controller import Controller
from engine.proxy.recording.exchange import Exchange, KeptBody, new_exchange
from engine.proxy.recording.recorder import Hold, Recorder
from engine.proxy.transport.admission import MAX_BODY_BYTES, admit, body_refusal
from engine.proxy.transport.answers import RESPONSE_HOP_BY_HOP, fail, refuse_unread
from engine.proxy.transport.connections import upstream_url
from engine.proxy.transport.policy_step import apply_policies, upstream_headers
from engine.proxy.wire import detect_api, error_body, upstream_kind

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
#: Longest a streamed answer keeps the writer waiting when its relay never starts (client gone).
HOLD_FALLBACK_S = 0.05
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


def create_app(
    recorder: Recorder,
    upstreams: Upstreams | None = None,
    controller: Controller | None = None,
    *,
    allow_remote: bool = False,
    max_body_bytes: int = MAX_BODY_BYTES,
    extra_routes: Sequence[BaseRoute] = (),
) -> Starlette:
    """The proxy as an ASGI app; ``recorder`` receives every exchange, ``controller`` applies policies,
    requests :func:`engine.proxy.transport.admission.admit` refuses get their answer (a browser's, a rebinding Host);
    ``extra_routes`` are served before forwarding (the OTLP receiver's ``/v1/logs``, ``/v1/traces``, ...)."""
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
        refusal = admit(request.method, request.url.path, request.headers, allow_remote=allow_remote)
        if refusal is not None:
            kind = upstream_kind(
                detect_api(request.method, request.url.path), request.headers, request.url.path
            )
            payload = json.dumps(error_body(kind, refusal.message, error_type=refusal.error_type)).encode()
            return Response(payload, status_code=refusal.status, media_type="application/json")
        # the writer thread keeps off the GIL until the answer's headers are out: a streamed
        # answer releases the hold as its relay starts (or after HOLD_FALLBACK_S if it never does)
        hold = recorder.hold()
        try:
            response = await _forward(request, hold)
        except BaseException:
            hold.release()
            raise
        if isinstance(response, StreamingResponse):
            asyncio.get_running_loop().call_later(HOLD_FALLBACK_S, hold.release)
        else:
            hold.release()
        return response

    async def _forward(request: Request, hold: Hold) -> Response:
        started = time.perf_counter()
        path = request.url.path
        api = detect_api(request.method, path)
        kind = upstream_kind(api, request.headers, path)
        base = upstreams.anthropic if kind == "anthropic" else upstreams.openai
        query = request.url.query
        recorder.begin()
        declared = _declared_length(request)
        if declared is not None and (too_large := body_refusal(declared, max_body_bytes)) is not None:
            exchange = new_exchange(
                api, request.method, path + (f"?{query}" if query else ""), request.headers, b""
            )
            return refuse_unread(recorder, exchange, started, kind, too_large, declared)
        if "content-length" in request.headers and (
            controller is None or not controller.needs_body(api, request.headers)
        ):
            # nothing edits this request: its body goes upstream chunk by chunk as it arrives,
            # teed into the exchange for the recorder (joined in the writer thread, not here)
            exchange = new_exchange(
                api, request.method, path + (f"?{query}" if query else ""), request.headers, b""
            )
            exchange.request_chunks = KeptBody()
            headers = [
                (k, v)
                for k, v in request.headers.raw
                if k.decode("latin-1").lower() not in STREAMED_HOP_BY_HOP
            ]
            return await _send(
                recorder, state["client"], exchange, started, kind, request.method, upstream_url(base, path, query),
                headers, _tee(request, exchange.request_chunks), hold,
            )  # fmt: skip
        try:
            body, size = await _capped_body(request, max_body_bytes)
        except ClientDisconnect as exc:  # the agent went away before its body was whole
            exchange = new_exchange(
                api, request.method, path + (f"?{query}" if query else ""), request.headers, b""
            )
            return fail(recorder, exchange, started, kind, 499, "client_disconnected", exc)
        if (too_large := body_refusal(size, max_body_bytes)) is not None:  # chunked, past the limit
            exchange = new_exchange(
                api, request.method, path + (f"?{query}" if query else ""), request.headers, b""
            )
            return refuse_unread(recorder, exchange, started, kind, too_large, size)
        exchange = new_exchange(
            api, request.method, path + (f"?{query}" if query else ""), request.headers, body
        )
        if controller is not None:
            answer = await apply_policies(
                state["client"], recorder, controller, exchange, started, kind, upstream_url(base, path, query),
                request.headers, request.headers.raw, body,
            )  # fmt: skip
            if isinstance(answer, Response):
                return answer
            body = answer
        betas = exchange.policy.betas if exchange.policy is not None else ()
        headers = [
            (k, v)
            for k, v in upstream_headers(request.headers.raw, betas)
            if k.decode("latin-1").lower() not in HOP_BY_HOP
        ]
        return await _send(
            recorder, state["client"], exchange, started, kind, request.method, upstream_url(base, path, query),
            headers, body, hold,
        )  # fmt: skip

    routes = [
        *extra_routes,
        Route("/{path:path}", forward, methods=["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"]),
    ]
    app = Starlette(routes=routes, lifespan=lifespan)
    app.state.recorder = recorder
    return app


def _declared_length(request: Request) -> int | None:
    try:
        return int(request.headers["content-length"])
    except (KeyError, ValueError):
        return None


async def _capped_body(request: Request, limit: int) -> tuple[bytes, int]:
    """The body read whole, unless it passes ``limit``: then b"" and the size read when it did
    (the rest is left unread; the connection closes with the 413)."""
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            return b"", size
        chunks.append(chunk)
    return b"".join(chunks), size


async def _tee(request: Request, chunks: KeptBody) -> AsyncIterator[bytes]:
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
    url: str, headers: list[tuple[bytes, bytes]], content: bytes | AsyncIterator[bytes], hold: Hold,
) -> Response:  # fmt: skip
    """Forward one request and relay the answer as it streams (502/504 when the upstream fails)."""
    try:
        upstream = await client.send(
            client.build_request(method, url, headers=headers, content=content), stream=True
        )
    except httpx.TimeoutException as exc:
        await _drain(content)
        return fail(recorder, exchange, started, kind, 504, "upstream_timeout", exc)
    except httpx.HTTPError as exc:
        await _drain(content)
        return fail(recorder, exchange, started, kind, 502, "upstream_unreachable", exc)
    except ClientDisconnect as exc:  # the agent went away while sending its body
        return fail(recorder, exchange, started, kind, 499, "client_disconnected", exc)
    exchange.status = upstream.status_code
    exchange.ttfb_ms = (time.perf_counter() - started) * 1000
    exchange.response_headers = {k.lower(): v for k, v in upstream.headers.items()}
    response_headers = {
        k.decode("latin-1"): v.decode("latin-1")
        for k, v in upstream.headers.raw
        if k.decode("latin-1").lower() not in RESPONSE_HOP_BY_HOP
    }
    return StreamingResponse(
        _relay(recorder, exchange, upstream, started, hold),
        status_code=upstream.status_code,
        headers=response_headers,
    )


async def _relay(
    recorder: Recorder, exchange: Exchange, upstream: httpx.Response, started: float, hold: Hold
) -> AsyncIterator[bytes]:
    hold.release()  # the answer's status and headers have been sent: the writer may run
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
