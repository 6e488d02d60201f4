"""Answers the proxy gives itself instead of the upstream's: a 502/504 in the provider's own
error shape when the upstream cannot be reached or stalls (``fail``), and a policy's refusal
(``refuse``). Each records the exchange as it is answered.
"""

from __future__ import annotations

import json
import time

from starlette.responses import Response

from engine.proxy.admission import Refusal
from engine.proxy.exchange import Exchange
from engine.proxy.recorder import Recorder
from engine.proxy.wire import error_body

#: Headers of an upstream answer that belong to one hop (RFC 9110 7.6.1) and are not relayed.
RESPONSE_HOP_BY_HOP = frozenset({"connection", "keep-alive", "transfer-encoding", "te", "trailer", "upgrade"})


def _error_body(kind: str, status: int, message: str) -> bytes:
    return json.dumps(error_body(kind, message, code=f"upstream_{status}")).encode()


def record_failure(
    recorder: Recorder,
    exchange: Exchange,
    started: float,
    kind: str,
    status: int,
    error: str,
    exc: BaseException,
) -> bytes:
    """Record the proxy's failure to get an answer; the error body the agent gets instead."""
    detail = str(exc) or "no detail"
    message = f"ctxdesk proxy: {error.replace('_', ' ')} ({type(exc).__name__}: {detail})"
    exchange.proxy_error, exchange.proxy_error_detail = error, message
    exchange.latency_ms = (time.perf_counter() - started) * 1000
    recorder.submit(exchange)
    return _error_body(kind, status, message)


def fail(
    recorder: Recorder, exchange: Exchange, started: float, kind: str, status: int, error: str, exc: Exception
) -> Response:
    body = record_failure(recorder, exchange, started, kind, status, error, exc)
    return Response(body, status_code=status, media_type="application/json")


def refuse_unread(
    recorder: Recorder, exchange: Exchange, started: float, kind: str, refusal: Refusal, size: int
) -> Response:
    """Answer a request refused before its body was read (too large), recording its head and size."""
    exchange.request_size = size
    return refuse(
        recorder, exchange, started, refusal.status,
        error_body(kind, refusal.message, error_type=refusal.error_type, code=refusal.error_type),
    )  # fmt: skip


def refuse(
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
