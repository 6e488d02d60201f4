"""The Responses API over WebSocket (Codex's ``supports_websockets``), relayed and recorded like HTTP.

The agent's upgrade goes to the provider with its own headers (less ``Sec-WebSocket-Extensions``:
no compression is negotiated, so the frames can be read as they pass); after the provider's
``101`` every byte is copied both ways as it arrives. Beside the copy, :class:`FrameReader` reads
each direction's frames (RFC 6455: masking, fragments, control frames) into messages: each
``response.create`` the agent sends opens an :class:`Exchange` (its payload the request body), the
provider's events fill its answer (kept as the SSE stream the HTTP API would send, so the recorder
reads both alike) until ``response.completed`` / ``failed`` / ``incomplete`` / ``error`` submits
it. A call still open when either side closes is recorded as interrupted. Policies do not edit
WebSocket calls (the agent's frames are relayed unchanged).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import Callable
from typing import Any

from starlette.datastructures import Headers

from engine.proxy.recording.exchange import Exchange, new_exchange
from engine.proxy.recording.recorder import Recorder
from engine.proxy.transport.connections import ConnectionPool, Origin
from engine.proxy.transport.http1 import READ_SIZE, RequestHead
from engine.proxy.transport.streams import answer_quietly, put
from engine.proxy.wire import error_body
from engine.proxy.wire.api_names import OPENAI_RESPONSES

#: Largest message kept for the recorder (bigger ones are relayed, not recorded).
MAX_MESSAGE_BYTES = 32 * 1024 * 1024
#: Provider events that end one response.
FINAL_EVENTS = frozenset({"response.completed", "response.failed", "response.incomplete", "error"})
_CLOSE, _TEXT, _CONTINUATION = 0x8, 0x1, 0x0
#: Request headers not sent upstream on the upgrade (the relay's own host; no compression).
_DROPPED = frozenset({b"host", b"sec-websocket-extensions", b"proxy-connection", b"proxy-authorization"})


class FrameReader:
    """The messages of one direction of a WebSocket, fed the bytes as they pass: ``feed`` returns the
    (opcode, payload) of each message completed (fragments joined, masks removed; ping/pong left out)."""

    def __init__(self, limit: int = MAX_MESSAGE_BYTES) -> None:
        self.limit = limit
        self._buffer = bytearray()
        self._parts: list[bytes] = []
        self._size = 0
        self._opcode = _TEXT
        self._skip = 0  # bytes of a frame too large to keep, still to pass
        self._skipping_message = False

    def feed(self, data: bytes) -> list[tuple[int, bytes]]:
        out: list[tuple[int, bytes]] = []
        if self._skip:
            passed = min(self._skip, len(data))
            self._skip -= passed
            data = data[passed:]
        self._buffer += data
        while (frame := self._next_frame()) is not None:
            fin, opcode, payload, oversized = frame
            if opcode >= _CLOSE:
                if opcode == _CLOSE:
                    out.append((opcode, payload))
                continue
            if opcode != _CONTINUATION:
                self._opcode, self._parts, self._size, self._skipping_message = opcode, [], 0, False
            self._size += len(payload)
            if oversized or self._size > self.limit:
                self._skipping_message, self._parts = True, []
            elif not self._skipping_message:
                self._parts.append(payload)
            if fin:
                if not self._skipping_message:
                    out.append((self._opcode, b"".join(self._parts)))
                self._parts, self._size, self._skipping_message = [], 0, False
        return out

    def _next_frame(self) -> tuple[bool, int, bytes, bool] | None:
        """(fin, opcode, payload, too large to keep) of the next whole frame in the buffer."""
        buffer = self._buffer
        if self._skip or len(buffer) < 2:
            return None
        fin, opcode, masked, length = (
            bool(buffer[0] & 0x80),
            buffer[0] & 0x0F,
            bool(buffer[1] & 0x80),
            buffer[1] & 0x7F,
        )
        start = 2
        if length == 126:
            if len(buffer) < 4:
                return None
            length, start = int.from_bytes(buffer[2:4], "big"), 4
        elif length == 127:
            if len(buffer) < 10:
                return None
            length, start = int.from_bytes(buffer[2:10], "big"), 10
        key = b""
        if masked:
            if len(buffer) < start + 4:
                return None
            key, start = bytes(buffer[start : start + 4]), start + 4
        if length > self.limit:  # passed on, never held: only its frame boundary is followed
            self._skip = max(0, start + length - len(buffer))
            del buffer[: start + length]
            return fin, opcode, b"", True
        if len(buffer) < start + length:
            return None
        payload = bytes(buffer[start : start + length])
        del buffer[: start + length]
        return fin, opcode, unmask(payload, key) if key else payload, False


def unmask(payload: bytes, key: bytes) -> bytes:
    """A client frame's payload with its 4-byte mask removed."""
    if not payload:
        return payload
    mask = (key * (len(payload) // 4 + 1))[: len(payload)]
    return (int.from_bytes(payload, "big") ^ int.from_bytes(mask, "big")).to_bytes(len(payload), "big")


class ResponsesCalls:
    """The calls of one WebSocket: each ``response.create`` and the events that answer it, as exchanges."""

    def __init__(self, recorder: Recorder, path: str, headers: Headers) -> None:
        self.recorder = recorder
        self.path = path
        self.headers = headers
        self.open: Exchange | None = None
        self.closed_by: str | None = None  # "agent" or "provider": who sent the first close frame
        self._started = 0.0

    def from_agent(self, opcode: int, payload: bytes) -> None:
        if opcode == _CLOSE:
            self.closed_by = self.closed_by or "agent"
        message = _json(opcode, payload)
        if message is None or message.get("type") != "response.create":
            return
        self.close_open("client_disconnected", "the agent asked for another response before this one ended")
        body = {k: v for k, v in message.items() if k != "type"}
        self.recorder.begin()
        exchange = new_exchange(OPENAI_RESPONSES, "POST", self.path, self.headers, json.dumps(body).encode())
        exchange.status, exchange.response_headers = 200, {"content-type": "text/event-stream"}
        exchange.via = "websocket"
        self.open, self._started = exchange, time.perf_counter()

    def from_provider(self, opcode: int, payload: bytes) -> None:
        if opcode == _CLOSE:
            self.closed_by = self.closed_by or "provider"
        event = _json(opcode, payload)
        exchange = self.open
        if event is None or exchange is None:
            return
        kind = str(event.get("type") or "")
        if exchange.ttfb_ms is None:
            exchange.ttfb_ms = (time.perf_counter() - self._started) * 1000
        exchange.response_chunks.append(f"event: {kind}\ndata: ".encode() + payload + b"\n\n")
        if kind in FINAL_EVENTS:
            self._submit()

    def close_open(self, error: str, detail: str) -> None:
        """The call still waiting for its end, recorded as cut short."""
        if self.open is not None:
            self.open.proxy_error, self.open.proxy_error_detail = error, detail
            self._submit()

    def _submit(self) -> None:
        exchange, self.open = self.open, None
        if exchange is not None:
            exchange.latency_ms = (time.perf_counter() - self._started) * 1000
            self.recorder.submit(exchange)


def _json(opcode: int, payload: bytes) -> dict[str, Any] | None:
    if opcode != _TEXT:
        return None
    try:
        value = json.loads(payload)
    except (json.JSONDecodeError, UnicodeDecodeError):
        return None
    return value if isinstance(value, dict) else None


def upgrade_head(head: RequestHead, target: str, host: str) -> bytes:
    """The agent's upgrade for the provider: its host, no compression offered, every other header kept."""
    lines = [f"GET {target} HTTP/1.1".encode("latin-1"), b"host: " + host.encode("latin-1")]
    lines += [k + b": " + v for k, v in head.headers if k.lower() not in _DROPPED]
    return b"\r\n".join(lines) + b"\r\n\r\n"


async def relay_websocket(
    pool: ConnectionPool, recorder: Recorder, head: RequestHead, origin: Origin, target: str, timeout: float,
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, kind: str,
) -> None:  # fmt: skip
    """One WebSocket from the agent to the provider, relayed until either side closes, each call
    recorded; the agent gets a 502 in ``kind``'s (the provider's) error shape when it cannot be reached."""

    def refuse(status: int, message: str) -> None:
        answer_quietly(writer, status, body=json.dumps(error_body(kind, message)).encode())

    try:
        conn = await pool.acquire(origin, fresh=True)
    except (OSError, TimeoutError) as exc:
        refuse(502, f"ctxdesk proxy: upstream unreachable ({type(exc).__name__}: {exc})")
        return
    try:
        put(conn.writer, upgrade_head(head, target, origin.netloc))
        answer = await asyncio.wait_for(conn.reader.readuntil(b"\r\n\r\n"), timeout)
        put(writer, answer)
        if answer.split(b" ", 2)[1:2] != [b"101"]:  # refused: the rest of its answer, then done
            while data := await conn.reader.read(READ_SIZE):
                put(writer, data)
            return
        path = head.path + (f"?{head.query}" if head.query else "")
        calls = ResponsesCalls(recorder, path, Headers(raw=[(k.lower(), v) for k, v in head.headers]))
        agent = asyncio.ensure_future(_pump(reader, conn.writer, FrameReader(), calls.from_agent))
        provider = asyncio.ensure_future(_pump(conn.reader, writer, FrameReader(), calls.from_provider))
        done, pending = await asyncio.wait((agent, provider), return_when=asyncio.FIRST_COMPLETED)
        for task in pending:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        if calls.closed_by == "agent" or (calls.closed_by is None and agent in done):
            calls.close_open("client_disconnected", "the agent closed the WebSocket mid-answer")
        else:
            calls.close_open("upstream_error", "the provider closed the WebSocket mid-answer")
    except (OSError, TimeoutError, asyncio.IncompleteReadError, asyncio.LimitOverrunError) as exc:
        refuse(502, f"ctxdesk proxy: the provider's WebSocket failed ({type(exc).__name__}: {exc})")
    finally:
        conn.close()


async def _pump(
    source: asyncio.StreamReader, sink: asyncio.StreamWriter, frames: FrameReader,
    on_message: Callable[[int, bytes], None],
) -> None:  # fmt: skip
    """Copy ``source`` to ``sink`` as it arrives; each message it completes goes to ``on_message``."""
    with contextlib.suppress(ConnectionError):
        while data := await source.read(READ_SIZE):
            put(sink, data)
            await sink.drain()
            for opcode, payload in frames.feed(data):
                on_message(opcode, payload)
