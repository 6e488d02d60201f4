"""Handing a request the relay does not frame itself (a chunked body, ``HEAD``, an upgrade other
than the Responses WebSocket, an ``HTTP_PROXY`` that applies) to the proxy's own Starlette app on
its internal port, bytes as received; the app records it."""

from __future__ import annotations

import asyncio

from engine.proxy.transport.connections import Connection, ConnectionPool, Origin
from engine.proxy.transport.http1 import (
    CONTINUE_ANSWER,
    RequestHead,
    RequestTracker,
    ResponseReader,
    render_response_head,
    without_expect,
)
from engine.proxy.transport.streams import ClientGone, answer_quietly, forward_body, put, send, splice


async def via_app(
    pool: ConnectionPool, app_origin: Origin, head: RequestHead, raw: bytes, reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
) -> bool:  # fmt: skip
    """Pass the request to the proxy's app at ``app_origin`` (connections from ``pool``), bytes as
    received (the app records it); whether the agent's connection can carry another request."""
    conn: Connection | None = None
    try:
        conn = await pool.acquire(app_origin)
        if head.expects_continue:  # answered here: the app would send it only once it reads the body
            await send(writer, CONTINUE_ANSWER)
            raw = without_expect(head)
        if head.chunked or head.upgrade:
            # framing the relay does not follow: the rest of the connection goes through as it is
            tracker = RequestTracker()
            tracker.feed(raw)
            put(conn.writer, raw)
            await splice(reader, writer, conn, tracker.feed)
            return False
        put(conn.writer, raw)
        await forward_body(reader, conn, head.content_length, None)
        answer = ResponseReader(conn.reader, head_request=head.method == "HEAD")
        response = await answer.read_head(None)
        while 100 <= response.status < 200:
            await send(writer, response.raw)
            response = await answer.read_head(None)
        unframed = head.version != "1.1" and answer.chunked  # HTTP/1.0 has no chunked coding
        if unframed:
            await send(writer, render_response_head(response.status_line, response.headers, close=True,
                                                    unframed=True))  # fmt: skip
        else:
            await send(writer, response.raw)
        async for data in answer.body(None, unframed=unframed):
            await send(writer, data)
    except ClientGone:
        if conn is not None:
            conn.close()
        return False
    except Exception as exc:
        if conn is not None:
            conn.close()
        answer_quietly(writer, 502, f"ctxdesk proxy: its app did not answer ({type(exc).__name__}: {exc})")
        return False
    except BaseException:
        if conn is not None:
            conn.close()
        raise
    if not answer.reusable:
        conn.close()
        return False
    pool.release(conn)
    return not unframed  # an unframed body ends when the agent's connection closes
