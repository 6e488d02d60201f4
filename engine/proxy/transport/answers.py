"""Answers the proxy gives itself instead of the upstream's: a 502/504 in the provider's own
error shape when the upstream cannot be reached or stalls (``fail``), and a policy's refusal
(``refuse``). Each records the exchange as it is answered.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Mapping

from starlette.responses import Response

from engine.proxy.recording.exchange import Exchange, new_exchange
from engine.proxy.recording.recorder import Recorder
from engine.proxy.transport.admission import ALLOWED_METHODS, Refusal, admit, body_refusal
from engine.proxy.transport.http1 import RequestHead, phrase, render_response_head
from engine.proxy.transport.streams import answer_quietly, send
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


def as_http1(response: Response, *, close: bool) -> bytes:
    """A whole Starlette response (the proxy's own answer, never a streaming one) as HTTP/1.1 bytes."""
    status_line = f"HTTP/1.1 {response.status_code} {phrase(response.status_code)}".encode()
    return render_response_head(status_line, list(response.raw_headers), close=close) + bytes(response.body)


class Door:
    """What the relay answers from a request's head alone (:mod:`engine.proxy.transport.admission`): a refused
    request (a foreign page, a rebinding Host, ``CONNECT``), ``OPTIONS *``, a body over the limit."""

    def __init__(self, recorder: Recorder, allow_remote: bool, max_body_bytes: int) -> None:
        self.recorder, self.allow_remote, self.max_body_bytes = recorder, allow_remote, max_body_bytes

    async def answer(
        self, head: RequestHead, headers: Mapping[str, str], api: str, kind: str, writer: asyncio.StreamWriter
    ) -> bool | None:
        """None when the request goes on; else it was answered here, and whether the agent's
        connection can carry another request."""
        refusal = admit(head.method, head.target, headers, allow_remote=self.allow_remote)
        if refusal is not None and refusal.status == 204:  # OPTIONS *
            await send(writer, b"HTTP/1.1 204 No Content\r\nallow: " + ALLOWED_METHODS.encode() + b"\r\n\r\n")
            return head.content_length == 0 and not head.chunked
        if refusal is not None:  # never forwarded nor recorded
            body = json.dumps(error_body(kind, refusal.message, error_type=refusal.error_type)).encode()
            answer_quietly(writer, refusal.status, body=body)
            return False
        too_large = body_refusal(head.content_length, self.max_body_bytes)
        if too_large is None:
            return None
        # answered from the head, the body never read: nothing of it is held in memory
        self.recorder.begin()
        path = head.path + (f"?{head.query}" if head.query else "")
        exchange = new_exchange(api, head.method, path, headers, b"")
        answer = refuse_unread(
            self.recorder, exchange, time.perf_counter(), kind, too_large, head.content_length
        )
        await send(writer, as_http1(answer, close=True))
        return False
