"""HTTP/1.1 framing for the proxy's relay: heads parsed by httptools (the C parser uvicorn uses),
bodies passed on as the raw bytes that arrived, the parser saying where each message ends.

Pure parsing and rendering plus :class:`ResponseReader`, which reads one answer from a stream.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from http import HTTPStatus
from urllib.parse import unquote, urlsplit

import httptools

#: The interim answer to ``Expect: 100-continue`` (the relay sends it itself).
CONTINUE_ANSWER = b"HTTP/1.1 100 Continue\r\n\r\n"
#: Longest request or response head accepted.
HEAD_LIMIT = 1 << 20
#: Most bytes read from a socket at once.
READ_SIZE = 1 << 20
#: Headers that belong to one hop (RFC 9110 7.6.1); ``host`` is rewritten, not copied.
HOP_BY_HOP = frozenset(
    {
        b"host", b"connection", b"keep-alive", b"transfer-encoding", b"te", b"trailer", b"upgrade",
        b"proxy-connection", b"proxy-authenticate", b"proxy-authorization", b"expect",
    }
)  # fmt: skip
#: An answer's own framing (its ``transfer-encoding``) is relayed with its bytes.
RESPONSE_HOP_BY_HOP = HOP_BY_HOP - {b"transfer-encoding"}


class HeadError(ValueError):
    """A request or response head that is not valid HTTP/1.1."""


class BrokenAnswer(ConnectionError):
    """The upstream closed or garbled its answer before the end."""


@dataclass
class RequestHead:
    """A request's head as received: names keep their case, values their bytes."""

    method: str
    target: str  # path and query as sent
    headers: list[tuple[bytes, bytes]]
    keep_alive: bool
    upgrade: bool = False
    version: str = "1.1"  # the HTTP version the agent speaks

    @property
    def path(self) -> str:
        return unquote(self.target.split("?", 1)[0])

    @property
    def query(self) -> str:
        return self.target.split("?", 1)[1] if "?" in self.target else ""

    def header(self, name: bytes) -> bytes | None:
        return next((v for k, v in self.headers if k.lower() == name), None)

    @property
    def content_length(self) -> int:
        value = self.header(b"content-length")
        return int(value) if value is not None else 0

    @property
    def chunked(self) -> bool:
        return self.header(b"transfer-encoding") is not None

    @property
    def expects_continue(self) -> bool:
        return (self.header(b"expect") or b"").strip().lower() == b"100-continue"

    @property
    def is_websocket(self) -> bool:
        """A WebSocket upgrade (RFC 6455: a GET asking ``Upgrade: websocket``)."""
        return self.method == "GET" and (self.header(b"upgrade") or b"").lower() == b"websocket"


class _Head:
    """httptools callbacks collecting one head."""

    def __init__(
        self, parser: httptools.HttpRequestParser | httptools.HttpResponseParser | None = None
    ) -> None:
        self.url = b""
        self.headers: list[tuple[bytes, bytes]] = []
        self.done = False
        self.parser = parser
        self.keep_alive = False

    def on_url(self, url: bytes) -> None:
        self.url += url

    def on_header(self, name: bytes, value: bytes) -> None:
        self.headers.append((name, value))

    def on_headers_complete(self) -> None:
        # asked here: once the message is complete, llhttp no longer says
        self.keep_alive = self.parser is not None and self.parser.should_keep_alive()
        self.done = True


def parse_request_head(raw: bytes) -> RequestHead:
    """The head of a request (``raw`` ends with the blank line); :class:`HeadError` when invalid."""
    head = _Head()
    parser = head.parser = httptools.HttpRequestParser(head)
    upgrade = False
    try:
        parser.feed_data(raw)
    except httptools.HttpParserUpgrade:
        upgrade = True
    except httptools.HttpParserError as exc:
        raise HeadError(f"invalid request head: {exc}") from exc
    if not head.done:
        raise HeadError("incomplete request head")
    method = parser.get_method().decode("latin-1")
    try:
        length = next((int(v) for k, v in head.headers if k.lower() == b"content-length"), 0)
    except ValueError as exc:
        raise HeadError("invalid Content-Length") from exc
    if length < 0:
        raise HeadError("invalid Content-Length")
    target = head.url.decode("latin-1")
    if "://" in target.split("?", 1)[0]:  # absolute form (RFC 9112 3.2.2): the path and query are the target
        parts = urlsplit(target)
        target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    return RequestHead(method, target, head.headers, head.keep_alive, upgrade, parser.get_http_version())


class RequestTracker:
    """Follows the bytes of one request as they are passed on: ``feed`` says whether it is complete."""

    def __init__(self) -> None:
        self.complete = False
        self._parser = httptools.HttpRequestParser(self)

    def on_message_complete(self) -> None:
        self.complete = True

    def feed(self, data: bytes) -> bool:
        try:
            self._parser.feed_data(data)
        except (httptools.HttpParserError, httptools.HttpParserUpgrade):
            self.complete = True  # past what HTTP/1.1 frames (an upgrade): the origin decides
        return self.complete


def without_expect(head: RequestHead) -> bytes:
    """The head as received, less ``Expect`` (the relay answers 100 Continue itself)."""
    lines = [f"{head.method} {head.target} HTTP/1.1".encode("latin-1")]
    lines += [k + b": " + v for k, v in head.headers if k.lower() != b"expect"]
    return b"\r\n".join(lines) + b"\r\n\r\n"


def render_request_head(
    method: str,
    target: str,
    host: str,
    headers: list[tuple[bytes, bytes]],
    *,
    content_length: int | None = None,
) -> bytes:
    """A request head for the upstream: its own ``host``, hop-by-hop headers left out, the body's
    ``content-length`` replaced when given (a policy edited the body)."""
    lines = [f"{method} {target} HTTP/1.1".encode("latin-1"), b"host: " + host.encode("latin-1")]
    skip = HOP_BY_HOP | {b"content-length"} if content_length is not None else HOP_BY_HOP
    lines += [k + b": " + v for k, v in headers if k.lower() not in skip]
    if content_length is not None:
        lines.append(b"content-length: %d" % content_length)
    return b"\r\n".join(lines) + b"\r\n\r\n"


def render_response_head(
    status_line: bytes, headers: list[tuple[bytes, bytes]], *, close: bool, unframed: bool = False
) -> bytes:
    """An upstream answer's head for the agent: hop-by-hop headers out, ``connection: close`` when
    the relay will close after it; ``unframed``: its body goes out without chunked framing (an
    HTTP/1.0 agent: the close ends it)."""
    dropped = RESPONSE_HOP_BY_HOP | {b"transfer-encoding"} if unframed else RESPONSE_HOP_BY_HOP
    lines = [status_line] + [k + b": " + v for k, v in headers if k.lower() not in dropped]
    if close:
        lines.append(b"connection: close")
    return b"\r\n".join(lines) + b"\r\n\r\n"


def phrase(status: int) -> str:
    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return "Client Closed Request" if status == 499 else "Error"


def render_answer(
    status: int, body: bytes, *, close: bool = False, content_type: str = "application/json"
) -> bytes:
    """A whole answer the relay gives itself (errors)."""
    head = [
        f"HTTP/1.1 {status} {phrase(status)}".encode(),
        f"content-type: {content_type}".encode(),
        f"content-length: {len(body)}".encode(),
    ]
    if close:
        head.append(b"connection: close")
    return b"\r\n".join(head) + b"\r\n\r\n" + body


@dataclass
class ResponseHead:
    status: int
    status_line: bytes
    headers: list[tuple[bytes, bytes]]
    raw: bytes

    def header_map(self) -> dict[str, str]:
        """Names lowercased; a repeated header's values joined by ``, `` (as httpx does)."""
        joined: dict[str, str] = {}
        for k, v in self.headers:
            name, value = k.decode("latin-1").lower(), v.decode("latin-1")
            joined[name] = f"{joined[name]}, {value}" if name in joined else value
        return joined


@dataclass
class _Answer:
    """httptools callbacks for one connection's answers."""

    keep: list[bytes] | None
    head: _Head = field(default_factory=_Head)
    complete: bool = False
    parser: httptools.HttpResponseParser | None = None
    unframed: list[bytes] | None = None  # the body without its framing, when it is relayed so

    def on_message_begin(self) -> None:
        self.head = _Head(self.parser)
        self.complete = False

    def on_header(self, name: bytes, value: bytes) -> None:
        self.head.on_header(name, value)

    def on_headers_complete(self) -> None:
        self.head.on_headers_complete()

    def on_body(self, data: bytes) -> None:
        if self.keep is not None:
            self.keep.append(data)
        if self.unframed is not None:
            self.unframed.append(data)

    def on_message_complete(self) -> None:
        self.complete = True


class ResponseReader:
    """One answer read from ``reader``: :meth:`read_head` (interim 1xx heads come first), then
    :meth:`body`, the raw bytes as they arrive. ``keep`` receives the body without its framing."""

    def __init__(
        self, reader: asyncio.StreamReader, *, head_request: bool = False, keep: list[bytes] | None = None
    ) -> None:
        self.reader = reader
        self.head_request = head_request
        self._answer = _Answer(keep)
        self._parser = self._answer.parser = httptools.HttpResponseParser(self._answer)
        self._until_close = False
        self.closed_by_upstream = False

    async def read_head(self, timeout: float | None) -> ResponseHead:
        """The next head; ``asyncio.IncompleteReadError`` when the connection closed first."""
        try:
            raw = await asyncio.wait_for(self.reader.readuntil(b"\r\n\r\n"), timeout)
        except asyncio.LimitOverrunError as exc:
            raise BrokenAnswer(f"answer head over {HEAD_LIMIT} bytes") from exc
        self._answer.complete = False
        try:
            self._parser.feed_data(raw)
        except (httptools.HttpParserError, httptools.HttpParserUpgrade) as exc:
            raise BrokenAnswer(f"invalid answer head: {exc!r}") from exc
        status = self._parser.get_status_code()
        headers = self._answer.head.headers
        names = {k.lower() for k, _ in headers}
        has_framing = b"content-length" in names or b"transfer-encoding" in names
        no_body = self.head_request or status in (204, 304) or 100 <= status < 200
        if self.head_request and not self._answer.complete:
            self._answer.complete = True
            self._parser = self._answer.parser = httptools.HttpResponseParser(
                self._answer
            )  # it expected a body
        self._until_close = not has_framing and not no_body
        return ResponseHead(status, raw.split(b"\r\n", 1)[0], headers, raw)

    @property
    def closes(self) -> bool:
        """The answer ends when the upstream closes (no length, not chunked)."""
        return self._until_close

    @property
    def chunked(self) -> bool:
        return any(k.lower() == b"transfer-encoding" for k, _ in self._answer.head.headers)

    async def body(self, timeout: float | None, *, unframed: bool = False) -> AsyncIterator[bytes]:
        """The body's raw bytes (framing included) as they arrive, until the answer is complete;
        ``unframed``: its content only (chunked framing taken off, for an HTTP/1.0 agent)."""
        if unframed:
            self._answer.unframed = []
        while not self._answer.complete:
            data = await asyncio.wait_for(self.reader.read(READ_SIZE), timeout)
            if not data:
                if self._until_close:
                    self.closed_by_upstream = self._answer.complete = True
                    return
                raise BrokenAnswer("the upstream closed the connection mid-answer")
            try:
                self._parser.feed_data(data)
            except (httptools.HttpParserError, httptools.HttpParserUpgrade) as exc:
                raise BrokenAnswer(f"invalid answer body: {exc!r}") from exc
            if not unframed:
                yield data
            elif pieces := self._answer.unframed:
                self._answer.unframed = []
                yield b"".join(pieces)

    def stop_keeping(self) -> None:
        """Relay the rest without keeping it."""
        self._answer.keep = None

    @property
    def reusable(self) -> bool:
        """The connection may carry another request (answer complete, keep-alive, not read to close)."""
        return self._answer.complete and not self._until_close and self._answer.head.keep_alive
