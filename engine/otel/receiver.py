"""The OTLP/HTTP receiver: ``/v1/logs``, ``/v1/traces``, ``/v1/metrics`` (protobuf or JSON) into a store.

:func:`otel_routes` gives the Starlette routes (the proxy mounts them beside its own);
:func:`otel_app` a standalone app; :class:`OtelReceiver` serves it on 127.0.0.1 (``ctxdesk otel``).
A body too large (or inflating past the limit) is answered 413, one not OTLP 400, and neither is
recorded; a browser's request from a web page or under a foreign Host is refused 403, as by the proxy.
"""

from __future__ import annotations

import asyncio
import socket
import threading
import time
import zlib
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from engine.errors import ValidationError
from engine.otel.mapping import items_of
from engine.otel.payload import MAX_OTLP_BYTES, Signal, parse_otlp
from engine.otel.sink import OtelSink
from engine.proxy.transport.admission import admit

__all__ = ["OtelReceiver", "handle_otlp", "otel_app", "otel_routes"]


def handle_otlp(sink: OtelSink, signal: Signal, body: bytes, content_type: str) -> tuple[int, dict[str, Any]]:
    """Decode, map and record one export request: ``(HTTP status, JSON answer)``. Blocking (store writes)."""
    try:
        records = parse_otlp(signal, body, content_type)
    except ValidationError as exc:
        return 400, {"error": str(exc)}
    written = sink.write(items_of(records))
    return 200, {"partialSuccess": {}, "ctxdesk": {"records": len(records), "written": written}}


async def _read_bounded(request: Request) -> bytes | None:
    declared = request.headers.get("content-length")
    if declared and declared.isdigit() and int(declared) > MAX_OTLP_BYTES:
        return None
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > MAX_OTLP_BYTES:
            return None
        chunks.append(chunk)
    return b"".join(chunks)


def gunzip_bounded(body: bytes, limit: int = MAX_OTLP_BYTES) -> bytes | None:
    """``body`` inflated, or None when it inflates past ``limit`` (a gzip bomb costs at most ``limit``).
    Raises ``zlib.error`` / ``EOFError`` for a body that is not gzip."""
    inflater = zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)
    out = inflater.decompress(body, limit + 1)
    if len(out) > limit or inflater.unconsumed_tail:
        return None
    if not inflater.eof:
        raise EOFError("the gzip stream ends early")
    return out


def _endpoint(sink: OtelSink, signal: Signal) -> Any:
    async def receive(request: Request) -> Response:
        # a web page (Origin, cross-site fetch) or a foreign Host (DNS rebinding) is refused, as by the proxy
        refusal = admit(request.method, request.url.path, {k.lower(): v for k, v in request.headers.items()})
        if refusal is not None:
            return JSONResponse({"error": refusal.message}, status_code=refusal.status)
        body = await _read_bounded(request)
        if body is None:
            return JSONResponse({"error": f"body over {MAX_OTLP_BYTES} bytes"}, status_code=413)
        if request.headers.get("content-encoding", "").lower() == "gzip":
            try:
                body = gunzip_bounded(body)
            except (zlib.error, EOFError) as exc:
                return JSONResponse({"error": f"gzip body cannot be read: {exc}"}, status_code=400)
            if body is None:
                return JSONResponse(
                    {"error": f"gzip body inflates over {MAX_OTLP_BYTES} bytes"}, status_code=413
                )
        content_type = request.headers.get("content-type", "application/x-protobuf")
        status, answer = await asyncio.to_thread(handle_otlp, sink, signal, body, content_type)
        return JSONResponse(answer, status_code=status)

    return receive


def otel_routes(sink: OtelSink) -> list[Route]:
    """``POST /v1/logs``, ``/v1/traces``, ``/v1/metrics`` recording into ``sink`` (mountable in the proxy)."""
    signals: tuple[Signal, ...] = ("logs", "traces", "metrics")
    return [Route(f"/v1/{signal}", _endpoint(sink, signal), methods=["POST"]) for signal in signals]


def otel_app(store: Any) -> Starlette:
    return Starlette(routes=otel_routes(OtelSink(store)))


class OtelReceiver:
    """``otel_app(store)`` under uvicorn on 127.0.0.1 (``port=0``: any free port), in a thread or the foreground."""

    def __init__(self, store: Any, *, port: int = 4318) -> None:
        import uvicorn

        config = uvicorn.Config(
            otel_app(store), host="127.0.0.1", port=port, log_level="warning", lifespan="off"
        )
        self.server = uvicorn.Server(config)
        self._thread: threading.Thread | None = None
        self._socket: socket.socket | None = None

    @property
    def port(self) -> int:
        return self.server.servers[0].sockets[0].getsockname()[1]

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout: float = 20.0) -> OtelReceiver:
        self._thread = threading.Thread(target=self.server.run, name="ctxdesk-otel", daemon=True)
        self._thread.start()
        deadline = time.monotonic() + timeout
        while not self.server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("the OTLP receiver did not start")
            time.sleep(0.02)
        return self

    def stop(self) -> None:
        self.server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout=10)

    def __enter__(self) -> OtelReceiver:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def bind(self) -> socket.socket:
        """Bind the listening socket now (``port=0``: a free port, told by :attr:`bound_port`) for :meth:`run`."""
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((self.server.config.host, self.server.config.port))
        # Listening now, not when uvicorn starts serving: the port is printed at once, and a client that
        # connects before the app is loaded must queue, not be refused (seen on a loaded machine).
        sock.listen(self.server.config.backlog)
        self._socket = sock
        return sock

    @property
    def bound_port(self) -> int:
        if self._socket is None:
            raise RuntimeError("bind() the receiver first")
        return self._socket.getsockname()[1]

    def run(self) -> None:
        """Serve in the foreground until interrupted (SIGINT/SIGTERM: uvicorn stops cleanly)."""
        self.server.run(sockets=[self._socket] if self._socket is not None else None)
