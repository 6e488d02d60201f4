"""Moving bytes between the agent and an origin for the relay: writes that notice a client gone,
bodies copied as they arrive, a connection spliced both ways."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable

from engine.proxy.connections import Connection
from engine.proxy.http1 import READ_SIZE

#: Longest an origin may leave a request body unread before the relay gives up (a 504).
WRITE_TIMEOUT_S = 60.0


class ClientGone(ConnectionError):
    """The agent closed its connection."""


async def send(writer: asyncio.StreamWriter, data: bytes) -> None:
    if writer.is_closing():
        raise ClientGone("the client went away")
    writer.write(data)
    try:
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
        conn.writer.write(data)
        if conn.writer.transport.get_write_buffer_size():  # the origin is not keeping up
            await asyncio.wait_for(conn.writer.drain(), WRITE_TIMEOUT_S)


async def splice(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, conn: Connection) -> None:
    """Both directions copied until the origin's side ends (an agent that only stopped sending
    still gets the rest of the answer)."""

    async def pump(source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
        # an end of input is not passed on: uvicorn takes a half-closed connection for a client gone
        with contextlib.suppress(ConnectionError):
            while data := await source.read(READ_SIZE):
                sink.write(data)
                await sink.drain()

    sending = asyncio.ensure_future(pump(reader, conn.writer))
    try:
        await pump(conn.reader, writer)
    finally:
        sending.cancel()
        conn.close()
