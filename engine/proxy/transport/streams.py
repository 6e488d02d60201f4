"""Moving bytes between the agent and an origin for the relay: writes that notice a client gone,
bodies copied as they arrive, a connection spliced both ways, the proxy's own short answers, and
the wait for an answer's head that notices the agent leaving."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Callable

from engine.proxy.transport.connections import Connection
from engine.proxy.transport.http1 import READ_SIZE, ResponseHead, ResponseReader, render_answer

#: Longest an origin may leave a request body unread before the relay gives up (a 504).
WRITE_TIMEOUT_S = 60.0


class ClientGone(ConnectionError):
    """The agent closed its connection."""


def put(writer: asyncio.StreamWriter, data: bytes) -> None:
    """``writer.write`` that raises ``ConnectionResetError`` when the connection is gone (uvloop
    raises ``RuntimeError`` on a closed transport, asyncio ignores the write)."""
    if writer.is_closing():
        raise ConnectionResetError("the connection is closed")
    try:
        writer.write(data)
    except RuntimeError as exc:
        raise ConnectionResetError(str(exc)) from exc


async def send(writer: asyncio.StreamWriter, data: bytes) -> None:
    """Write to the agent and wait until it takes it; :class:`ClientGone` when it went away."""
    try:
        put(writer, data)
        await writer.drain()
    except ConnectionError as exc:
        raise ClientGone("the client went away") from exc


async def drained(writer: asyncio.StreamWriter) -> None:
    with contextlib.suppress(ConnectionError):
        await writer.drain()


async def read_body(reader: asyncio.StreamReader, remaining: int, keep: Callable[[bytes], object]) -> None:
    """Read (and keep) the rest of a body nobody will take, so the recorded request is whole."""
    with contextlib.suppress(ConnectionError):
        while remaining > 0:
            data = await reader.read(min(remaining, READ_SIZE))
            if not data:
                return
            remaining -= len(data)
            keep(data)


async def forward_body(
    reader: asyncio.StreamReader, conn: Connection, length: int, keep: Callable[[bytes], object] | None
) -> None:
    """Copy ``length`` body bytes from the agent to ``conn`` as they arrive (kept by ``keep``)."""
    remaining = length
    while remaining > 0:
        try:
            data = await reader.read(min(remaining, READ_SIZE))
        except ConnectionError as exc:
            raise ClientGone("the client went away while sending its body") from exc
        if not data:
            raise ClientGone("the client went away while sending its body")
        remaining -= len(data)
        if keep is not None:
            keep(data)
        put(conn.writer, data)
        if conn.writer.transport.get_write_buffer_size():  # the origin is not keeping up
            await asyncio.wait_for(conn.writer.drain(), WRITE_TIMEOUT_S)


async def splice(
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    conn: Connection,
    request_done: Callable[[bytes], bool],
) -> None:
    """Both directions copied until the origin's side ends (an agent that only stopped sending
    still gets the rest of the answer). ``request_done`` sees each chunk the agent sends and says
    whether its request is complete: an agent gone before that aborts the origin's connection."""

    async def forward() -> None:
        # an end of input is not passed on: uvicorn takes a half-closed connection for a client gone
        with contextlib.suppress(ConnectionError):
            done = False
            while data := await reader.read(READ_SIZE):
                done = request_done(data)
                put(conn.writer, data)
                await conn.writer.drain()
            if not done:
                conn.writer.transport.abort()

    async def answer() -> None:
        with contextlib.suppress(ConnectionError):
            while data := await conn.reader.read(READ_SIZE):
                put(writer, data)
                await writer.drain()

    sending = asyncio.ensure_future(forward())
    try:
        await answer()
    finally:
        sending.cancel()
        conn.close()


def answer_quietly(
    writer: asyncio.StreamWriter,
    status: int,
    message: str = "",
    *,
    body: bytes | None = None,
    close: bool = True,
) -> None:
    """The proxy's own answer, if the agent is still there to get it."""
    payload = body if body is not None else json.dumps({"error": message}).encode()
    with contextlib.suppress(ConnectionError):
        put(writer, render_answer(status, payload, close=close))


#: How often the relay looks whether the agent is still there while the upstream has not answered.
AGENT_CHECK_S = 0.05


async def head_unless_gone(
    answer: ResponseReader, agent: asyncio.StreamReader, timeout: float | None
) -> ResponseHead:
    """The upstream's answer head, unless the agent hangs up first: then :class:`ClientGone` (the
    caller closes the upstream connection, which cancels the request there). An agent that only
    stopped sending is taken for gone, as uvicorn takes it: HTTP agents do not half-close."""
    head = asyncio.ensure_future(answer.read_head(timeout))
    try:
        while True:
            done, _ = await asyncio.wait((head,), timeout=AGENT_CHECK_S)
            if done:
                return head.result()
            if agent.at_eof():
                raise ClientGone("the client went away while waiting for the answer")
    finally:
        if not head.done():
            head.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await head
