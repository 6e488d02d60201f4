"""ScriptedServer: a threaded HTTP server on 127.0.0.1 that plays scripted model replies.

The core knows nothing of any provider's API: it routes requests to handlers registered by
per-API modules (``anthropic.install(server)``; others add their own modules), keeps every
request it receives in ``.requests`` and, when given ``log_path``, appends each one to a JSON
Lines log (headers without secrets, the exact JSON body, the status answered). Script items
are taken in order; an item with a ``when`` predicate is only taken by a request it matches,
so replies for interleaved callers (a sub-agent beside its parent) can be queued up front.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

#: Request headers never written to the log (credentials).
SECRET_HEADERS = frozenset({"x-api-key", "authorization", "cookie", "proxy-authorization", "x-goog-api-key"})


@dataclass(frozen=True)
class RecordedRequest:
    """One request as received: method, path (no query), query, headers (lower-cased), body."""

    method: str
    path: str
    headers: dict[str, str]
    body: Any
    query: dict[str, list[str]] = field(default_factory=dict)
    seq: int = 0

    @property
    def text(self) -> str:
        """Every string in the body, joined: what a test searches for sent content."""
        return "\n".join(_strings(self.body))

    def log_record(self) -> dict[str, Any]:
        headers = {k: v for k, v in sorted(self.headers.items()) if k not in SECRET_HEADERS}
        return {
            "seq": self.seq,
            "method": self.method,
            "path": self.path,
            "query": self.query,
            "headers": headers,
            "body": self.body,
        }


def _strings(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for v in value.values() for s in _strings(v)]
    if isinstance(value, list):
        return [s for v in value for s in _strings(v)]
    return []


@dataclass(frozen=True)
class HttpReply:
    """What a handler answers: status, headers, and a JSON body or a stream of byte chunks."""

    status: int = 200
    body: Any = None
    headers: tuple[tuple[str, str], ...] = ()
    delay: float = 0.0
    chunks: tuple[bytes, ...] | None = None  # server-sent events, written one by one
    content_type: str = "application/json"


Handler = Callable[["ScriptedServer", RecordedRequest], HttpReply]


class ScriptedServer:
    """Routes ``(method, path)`` to API handlers; hands them script items in order.

    ``default`` (any script item, or None) is what ``next_item`` returns once the script has
    nothing for a request. Use as a context manager, or ``start()`` / ``stop()``.
    """

    def __init__(
        self,
        *items: Any,
        default: Any = None,
        log_path: str | Path | None = None,
        name: str = "scripted-model-server",
    ) -> None:
        self._items: list[Any] = list(items)
        self.default = default
        self.log_path = Path(log_path) if log_path else None
        self.requests: list[RecordedRequest] = []
        self.routes: list[tuple[str, str, Handler]] = []
        self.state: dict[str, Any] = {}  # per-API bookkeeping (counters, cache prefixes)
        self._lock = threading.RLock()
        self._stopping = threading.Event()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, name=name, daemon=True
        )

    # -- set-up -------------------------------------------------------------------------
    @property
    def base_url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def add_route(self, method: str, path: str, handler: Handler) -> None:
        """``path`` matches exactly, or as a prefix when it ends with ``*``."""
        self.routes.append((method.upper(), path, handler))

    def queue(self, *items: Any) -> None:
        with self._lock:
            self._items.extend(items)

    @property
    def pending(self) -> list[Any]:
        with self._lock:
            return list(self._items)

    def next_item(self, request: RecordedRequest) -> Any:
        """The first queued item this request may take (its ``when`` matches, or it has none)."""
        with self._lock:
            for i, item in enumerate(self._items):
                when = getattr(item, "when", None)
                if when is None or when(request):
                    return self._items.pop(i)
            return self.default

    def start(self) -> ScriptedServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopping.set()  # wakes handlers sleeping in a delayed reply
        if self._thread.is_alive():
            self._server.shutdown()
        self._server.server_close()

    def __enter__(self) -> ScriptedServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def counter(self, name: str) -> int:
        """A per-server counter (ids that are stable across runs of the same script)."""
        with self._lock:
            value = self.state.get(name, 0) + 1
            self.state[name] = value
            return value

    # -- serving ------------------------------------------------------------------------
    def _route(self, method: str, path: str) -> Handler | None:
        for m, p, handler in self.routes:
            if m == method and (path == p or (p.endswith("*") and path.startswith(p[:-1]))):
                return handler
        return None

    def _record(self, request: RecordedRequest, reply: HttpReply) -> None:
        if self.log_path is None:
            return
        record = request.log_record()
        record["status"] = reply.status
        line = json.dumps(record, ensure_ascii=False, sort_keys=False)
        with self._lock, self.log_path.open("a", encoding="utf-8") as fh:
            fh.write(line + "\n")

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:  # keep test output quiet
                return

            def do_GET(self) -> None:
                self._serve("GET")

            def do_POST(self) -> None:
                self._serve("POST")

            def _serve(self, method: str) -> None:
                length = int(self.headers.get("content-length") or 0)
                raw = self.rfile.read(length) if length else b""
                try:
                    body: Any = json.loads(raw) if raw else None
                except json.JSONDecodeError:
                    body = raw.decode("utf-8", "replace")
                parts = urlsplit(self.path)
                with server._lock:
                    request = RecordedRequest(
                        method,
                        parts.path,
                        {k.lower(): v for k, v in self.headers.items()},
                        body,
                        parse_qs(parts.query),
                        seq=len(server.requests) + 1,
                    )
                    server.requests.append(request)
                handler = server._route(method, parts.path)
                if handler is None:
                    reply = HttpReply(
                        404, {"type": "error", "error": {"type": "not_found_error", "message": parts.path}}
                    )
                else:
                    reply = handler(server, request)
                server._record(request, reply)
                if reply.delay and server._stopping.wait(reply.delay):
                    return
                self._reply(reply)

            def _reply(self, reply: HttpReply) -> None:
                try:
                    self.send_response(reply.status)
                    self.send_header("content-type", reply.content_type)
                    self.send_header("request-id", f"req_scripted_{server.counter('request-id'):04d}")
                    for name, value in reply.headers:
                        self.send_header(name, value)
                    if reply.chunks is not None:
                        self.send_header("cache-control", "no-cache")
                        self.send_header("connection", "close")
                        self.end_headers()
                        for chunk in reply.chunks:
                            self.wfile.write(chunk)
                            self.wfile.flush()
                        self.close_connection = True
                        return
                    payload = json.dumps(reply.body).encode()
                    self.send_header("content-length", str(len(payload)))
                    self.end_headers()
                    self.wfile.write(payload)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up (a timeout test): nothing to send to

        return Handler


def sse_events(events: Iterable[tuple[str | None, Any]]) -> tuple[bytes, ...]:
    """``(event name or None, data)`` pairs as server-sent-event chunks."""
    return tuple(_sse(name, data) for name, data in events)


def _sse(name: str | None, data: Any) -> bytes:
    head = f"event: {name}\n" if name else ""
    return f"{head}data: {json.dumps(data)}\n\n".encode()


def read_log(path: str | Path) -> Iterator[dict[str, Any]]:
    """The records of a request log written with ``log_path``."""
    with Path(path).open(encoding="utf-8") as fh:
        for line in fh:
            if line.strip():
                yield json.loads(line)
