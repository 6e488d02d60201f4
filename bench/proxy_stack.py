"""Minimal relays for the proxy's stack-floor table: what each layer of an HTTP relay adds to the
time to first byte, measured beside ``ctxdesk proxy`` in the same run (``bench_proxy --stack``).

``python -m bench.proxy_stack LAYERS PORT UPSTREAM`` serves ``POST`` with a ``Content-Length`` body and
relays the upstream's chunked answer, nothing else (these are yardsticks, not proxies):

- ``raw``: asyncio streams on uvloop, bytes copied as they arrive (the floor of one more hop);
- ``asgi-socket``: uvicorn (httptools, uvloop) with a bare ASGI app, upstream over a raw socket;
- ``asgi-aiohttp``: the same app, upstream through aiohttp's client;
- ``asgi-httpx``: the same app, upstream through httpx;
- ``starlette-httpx``: Starlette routing and responses over the same (the proxy's stack until its relay);
- ``aiohttp``: aiohttp's server and client, another well-kept async stack.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import urlsplit

LAYERS = ("raw", "asgi-socket", "asgi-aiohttp", "asgi-httpx", "starlette-httpx", "aiohttp")
_READ = 8 << 20
_SKIP = (b"host", b"connection", b"transfer-encoding")


async def _chunked(reader: asyncio.StreamReader) -> AsyncIterator[bytes]:
    """A chunked answer's chunks, framing included, up to and with the last one."""
    while True:
        line = await reader.readuntil(b"\r\n")
        size = int(line.split(b";")[0], 16)
        yield line + await reader.readexactly(size + 2)
        if size == 0:
            return


def _content_length(head: bytes) -> int:
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            return int(value)
    return 0


async def _serve_raw(port: int, host: str, up_port: int) -> None:
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        upstream: tuple[asyncio.StreamReader, asyncio.StreamWriter] | None = None
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                upstream = upstream or await asyncio.open_connection(host, up_port)
                up_reader, up_writer = upstream
                up_writer.write(head)
                remaining = _content_length(head)
                while remaining:
                    chunk = await reader.read(min(remaining, _READ))
                    if not chunk:
                        return
                    remaining -= len(chunk)
                    up_writer.write(chunk)
                    await up_writer.drain()
                writer.write(await up_reader.readuntil(b"\r\n\r\n"))
                while True:
                    line = await up_reader.readuntil(b"\r\n")
                    size = int(line.strip(), 16)
                    writer.write(line + await up_reader.readexactly(size + 2))
                    await writer.drain()
                    if size == 0:
                        break
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            if upstream:
                upstream[1].close()
            writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", port, limit=_READ)
    async with server:
        await server.serve_forever()


def _asgi_app(layers: str, upstream: str) -> Any:
    host, up_port = urlsplit(upstream).hostname or "127.0.0.1", urlsplit(upstream).port or 80
    pool: list[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = []
    clients: dict[str, Any] = {}

    async def body(receive: Any) -> AsyncIterator[bytes]:
        while True:
            message = await receive()
            if message.get("body"):
                yield message["body"]
            if not message.get("more_body"):
                return

    async def over_socket(scope: dict[str, Any], receive: Any, send: Any) -> None:
        reader, writer = pool.pop() if pool else await asyncio.open_connection(host, up_port, limit=_READ)
        head = [f"{scope['method']} {scope['path']} HTTP/1.1".encode(), f"host: {host}:{up_port}".encode()]
        head += [k + b": " + v for k, v in scope["headers"] if k not in _SKIP]
        writer.write(b"\r\n".join(head) + b"\r\n\r\n")
        async for chunk in body(receive):
            writer.write(chunk)
            await writer.drain()
        lines = (await reader.readuntil(b"\r\n\r\n")).split(b"\r\n")
        headers = [tuple(p.strip() for p in line.split(b":", 1)) for line in lines[1:] if line]
        await send({"type": "http.response.start", "status": int(lines[0].split()[1]),
                    "headers": [(k.lower(), v) for k, v in headers if k.lower() not in _SKIP]})  # fmt: skip
        async for framed in _chunked(reader):
            data = framed.split(b"\r\n", 1)[1][:-2]
            if data:
                await send({"type": "http.response.body", "body": data, "more_body": True})
        await send({"type": "http.response.body", "body": b""})
        pool.append((reader, writer))

    async def over_httpx(scope: dict[str, Any], receive: Any, send: Any) -> None:
        import httpx

        client = clients.get("httpx") or clients.setdefault("httpx", httpx.AsyncClient(timeout=60))
        headers = [(k, v) for k, v in scope["headers"] if k not in _SKIP]
        request = client.build_request(
            scope["method"], upstream + scope["path"], headers=headers, content=body(receive)
        )
        answer = await client.send(request, stream=True)
        await send({"type": "http.response.start", "status": answer.status_code,
                    "headers": [(k, v) for k, v in answer.headers.raw if k.lower() not in _SKIP]})  # fmt: skip
        async for chunk in answer.aiter_raw():
            await send({"type": "http.response.body", "body": chunk, "more_body": True})
        await send({"type": "http.response.body", "body": b""})
        await answer.aclose()

    async def over_aiohttp(scope: dict[str, Any], receive: Any, send: Any) -> None:
        import aiohttp

        session = clients.get("aiohttp") or clients.setdefault(
            "aiohttp", aiohttp.ClientSession(auto_decompress=False, timeout=aiohttp.ClientTimeout(total=60))
        )
        headers = [(k.decode("latin-1"), v.decode("latin-1")) for k, v in scope["headers"] if k not in _SKIP]
        async with session.request(
            scope["method"],
            upstream + scope["path"],
            headers=headers,
            data=body(receive),
            skip_auto_headers=("user-agent",),
        ) as answer:
            await send({"type": "http.response.start", "status": answer.status,
                        "headers": [(k, v) for k, v in answer.raw_headers if k.lower() not in _SKIP]})  # fmt: skip
            async for chunk in answer.content.iter_any():
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
        await send({"type": "http.response.body", "body": b""})

    relay = {"asgi-socket": over_socket, "asgi-aiohttp": over_aiohttp}.get(layers, over_httpx)

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            while (await receive())["type"] != "lifespan.shutdown":
                await send({"type": "lifespan.startup.complete"})
            await send({"type": "lifespan.shutdown.complete"})
            return
        await relay(scope, receive, send)

    if layers != "starlette-httpx":
        return app
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import StreamingResponse
    from starlette.routing import Route

    async def forward(request: Request) -> StreamingResponse:
        import httpx

        client = clients.get("httpx") or clients.setdefault("httpx", httpx.AsyncClient(timeout=60))
        headers = [(k, v) for k, v in request.headers.raw if k not in _SKIP]
        sent = client.build_request(
            "POST", upstream + request.url.path, headers=headers, content=request.stream()
        )
        answer = await client.send(sent, stream=True)

        async def relay_answer() -> AsyncIterator[bytes]:
            async for chunk in answer.aiter_raw():
                yield chunk
            await answer.aclose()

        kept = {k: v for k, v in answer.headers.items() if k.encode() not in _SKIP}
        return StreamingResponse(relay_answer(), status_code=answer.status_code, headers=kept)

    return Starlette(routes=[Route("/{path:path}", forward, methods=["POST"])])


def _serve_aiohttp(port: int, upstream: str) -> None:
    import aiohttp
    import uvloop
    from aiohttp import web

    clients: dict[str, aiohttp.ClientSession] = {}

    async def forward(request: web.Request) -> web.StreamResponse:
        session = clients.get("s") or clients.setdefault(
            "s", aiohttp.ClientSession(auto_decompress=False, timeout=aiohttp.ClientTimeout(total=60))
        )
        headers = [(k, v) for k, v in request.headers.items() if k.lower().encode() not in _SKIP]
        async with session.request(
            request.method,
            upstream + request.path,
            headers=headers,
            data=request.content,
            skip_auto_headers=("user-agent",),
        ) as answer:
            response = web.StreamResponse(status=answer.status)
            for k, v in answer.headers.items():
                if k.lower().encode() not in _SKIP and k.lower() != "content-length":
                    response.headers.add(k, v)
            await response.prepare(request)
            async for chunk in answer.content.iter_any():
                await response.write(chunk)
            await response.write_eof()
            return response

    app = web.Application(client_max_size=1 << 30)
    app.router.add_route("*", "/{path:.*}", forward)
    uvloop.install()
    web.run_app(app, host="127.0.0.1", port=port, print=None, access_log=None)


def main() -> None:
    layers, port, upstream = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    if layers not in LAYERS:
        raise SystemExit(f"layers must be one of {', '.join(LAYERS)}, not {layers!r}")
    if layers == "aiohttp":
        _serve_aiohttp(port, upstream)
        return
    if layers == "raw":
        import uvloop

        parts = urlsplit(upstream)
        uvloop.install()
        asyncio.run(_serve_raw(port, parts.hostname or "127.0.0.1", parts.port or 80))
        return
    import uvicorn

    uvicorn.run(_asgi_app(layers, upstream), host="127.0.0.1", port=port, log_level="warning", access_log=False,
                http="httptools", loop="uvloop", lifespan="on")  # fmt: skip


if __name__ == "__main__":
    main()
