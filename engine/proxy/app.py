"""The proxy's HTTP side: Starlette routes, forwarding to the upstream, streaming relay.

Every request is forwarded with its headers and body as received (hop-by-hop headers aside)
and the answer is relayed chunk by chunk as it arrives (``aiter_raw``: never decoded, never
buffered whole); upstream errors come back as they were. When the upstream cannot be
reached or stalls before answering, the agent gets a 502/504 in the provider's own error
shape. Each finished exchange goes to the recorder's queue; nothing is written on this path.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

import httpx
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

from engine.proxy import apis
from engine.proxy.policies import Controller
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
RESPONSE_HOP_BY_HOP = frozenset({"connection", "keep-alive", "transfer-encoding", "te", "trailer", "upgrade"})
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

    async def forward(request: Request) -> Response:
        started = time.perf_counter()
        body = await request.body()
        path = request.url.path
        api = apis.detect_api(request.method, path)
        kind = apis.upstream_kind(api, request.headers, path)
        base = upstreams.anthropic if kind == "anthropic" else upstreams.openai
        query = request.url.query
        exchange = new_exchange(
            api, request.method, path + (f"?{query}" if query else ""), request.headers, body
        )
        recorder.begin()
        if controller is not None:
            outcome = controller.apply(api, body, request.headers)
            exchange.policy = outcome
            if outcome.refusal is not None:
                return _refuse(recorder, exchange, started, *outcome.refusal)
            if outcome.body is not None:
                body = json.dumps(outcome.body, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
                exchange.sent_body = body
        headers = [(k, v) for k, v in request.headers.raw if k.decode("latin-1").lower() not in HOP_BY_HOP]
        client = state["client"]
        upstream_request = client.build_request(
            request.method, upstream_url(base, path, query), headers=headers, content=body
        )
        try:
            upstream = await client.send(upstream_request, stream=True)
        except httpx.TimeoutException as exc:
            return _fail(recorder, exchange, started, kind, 504, "upstream_timeout", exc)
        except httpx.HTTPError as exc:
            return _fail(recorder, exchange, started, kind, 502, "upstream_unreachable", exc)
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

    routes = [
        Route("/{path:path}", forward, methods=["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"])
    ]
    app = Starlette(routes=routes, lifespan=lifespan)
    app.state.recorder = recorder
    return app


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
