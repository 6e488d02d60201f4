"""The proxy's front door: an HTTP/1.1 relay on asyncio streams.

A request nothing will edit (no policy on, no live compaction for its session) goes straight to
the provider: its head with the upstream's ``host`` and without hop-by-hop headers, its body as
the bytes arrive, the answer relayed back the same way, chunk by chunk, teed into an
:class:`Exchange` for the recorder. Every other request (a policy needs its body, a chunked or
upgrade request, an ``HTTP_PROXY`` in the environment) is passed, bytes unchanged, to the proxy's
Starlette app (:mod:`engine.proxy.transport.app`) on an internal loopback port.

Every request begun is recorded once, whatever fails (:meth:`Recorder.submit` takes an exchange once),
and the agent gets an answer in the provider's shape whenever its connection is still there.

Why not uvicorn + httpx for the direct path too: measured on this stack, they add 3.4 ms to the
time to first byte of a 200k-token request where this relay adds ~1.3 ms (docs/proxy.md); the
parsing is httptools', the C parser uvicorn itself uses.
"""

from __future__ import annotations

import asyncio
import contextlib
import time

import httpx
from starlette.datastructures import Headers
from starlette.responses import Response

from engine.proxy.policy.controller import Controller
from engine.proxy.recording.exchange import Exchange, KeptBody, new_exchange
from engine.proxy.recording.recorder import Hold, Recorder
from engine.proxy.transport.admission import MAX_BODY_BYTES
from engine.proxy.transport.answers import Door, as_http1, record_failure
from engine.proxy.transport.app import RECORD_RESPONSE_LIMIT
from engine.proxy.transport.connections import (
    Connection,
    ConnectionPool,
    Origin,
    split_url,
    upstream_url,
    uses_env_proxy,
)
from engine.proxy.transport.handoff import via_app
from engine.proxy.transport.http1 import (
    CONTINUE_ANSWER,
    BrokenAnswer,
    HeadError,
    RequestHead,
    ResponseReader,
    parse_request_head,
    render_request_head,
    render_response_head,
)  # fmt: skip
from engine.proxy.transport.policy_step import apply_policies, upstream_headers
from engine.proxy.transport.streams import (
    ClientGone,
    answer_quietly,
    drained,
    forward_body,
    head_unless_gone,
    put,
    read_body,
    send,
)
from engine.proxy.transport.websocket import relay_websocket
from engine.proxy.wire import detect_api, upstream_kind
from engine.proxy.wire.api_names import OPENAI_RESPONSES


def route(
    head: RequestHead, api: str, headers: Headers, controller: Controller | None, origin: Origin
) -> str:
    """``direct`` (nothing edits it: streamed to the provider), ``policies`` (read whole, through the
    in-flight policies, then sent), or ``app`` (framing the relay does not follow, or an env proxy)."""
    if head.method in ("HEAD", "CONNECT") or head.upgrade or head.chunked or uses_env_proxy(origin):
        return "app"
    if controller is None or not controller.needs_body(api, headers):
        return "direct"
    return "policies"


class Relay:
    """Serves agents' connections (:meth:`serve`); ``app_origin`` is the proxy's own app."""

    def __init__(
        self,
        recorder: Recorder,
        controller: Controller | None,
        *,
        anthropic: str,
        openai: str,
        app_origin: Origin,
        connect_timeout_s: float,
        read_timeout_s: float,
        allow_remote: bool = False,
        max_body_bytes: int = MAX_BODY_BYTES,
        app_paths: frozenset[str] = frozenset(),
    ) -> None:
        self.recorder = recorder
        self.app_paths = app_paths  # the app's own endpoints (OTLP /v1/logs, ...): never forwarded
        self.allow_remote = allow_remote
        self.max_body_bytes = max_body_bytes
        self.controller = controller
        self.bases = {"anthropic": anthropic, "openai": openai}
        self.app_origin = app_origin
        self.read_timeout_s = read_timeout_s
        self.upstream = ConnectionPool(connect_timeout_s)
        self.app = ConnectionPool(connect_timeout_s)
        self.closing = False
        self._idle: set[asyncio.Task[None]] = set()
        self._serving: set[asyncio.Task[None]] = set()
        self._httpx: httpx.AsyncClient | None = None

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """One agent connection: requests in turn until it closes (or the proxy does)."""
        task = asyncio.current_task()
        if task is not None:
            self._serving.add(task)  # the loop keeps only weak references to tasks
        try:
            while not self.closing:
                if task is not None:
                    self._idle.add(task)
                try:
                    raw = await reader.readuntil(b"\r\n\r\n")
                except (asyncio.IncompleteReadError, ConnectionError, asyncio.CancelledError):
                    return
                except asyncio.LimitOverrunError:
                    answer_quietly(writer, 431, "request head too large")
                    return
                finally:
                    self._idle.discard(task)  # type: ignore[arg-type]
                try:
                    head = parse_request_head(raw)
                except HeadError as exc:
                    answer_quietly(writer, 400, str(exc))
                    return
                if not await self._one(head, raw, reader, writer) or not head.keep_alive:
                    return
        except ClientGone:
            return
        finally:
            self._serving.discard(task)  # type: ignore[arg-type]
            with contextlib.suppress(Exception):
                writer.close()

    def close(self) -> None:
        """Stop taking requests: idle agent connections close, requests under way finish."""
        self.closing = True
        for task in list(self._idle):
            task.cancel()
        self.upstream.close()
        self.app.close()

    async def aclose(self) -> None:
        if self._httpx is not None:
            await self._httpx.aclose()

    async def _one(
        self, head: RequestHead, raw: bytes, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> bool:
        """Relay one request; whether the agent's connection can carry another."""
        headers = Headers(raw=[(k.lower(), v) for k, v in head.headers])
        api = detect_api(head.method, head.path)
        kind = upstream_kind(api, headers, head.path)
        door = Door(self.recorder, self.allow_remote, self.max_body_bytes)
        if (answered := await door.answer(head, headers, api, kind, writer)) is not None:
            return answered  # refused, or OPTIONS *: nothing forwarded
        origin, target = split_url(upstream_url(self.bases[kind], head.target.split("?", 1)[0], head.query))
        # the Responses API over WebSocket (its path, upgraded): relayed both ways, each call recorded
        if head.is_websocket and detect_api("POST", head.path) == OPENAI_RESPONSES:
            await relay_websocket(
                self.upstream, self.recorder, head, origin, target, self.read_timeout_s, reader, writer, kind
            )
            return False
        way = "app" if head.path in self.app_paths else route(head, api, headers, self.controller, origin)
        if way == "app":
            return await via_app(self.app, self.app_origin, head, raw, reader, writer)
        started = time.perf_counter()
        self.recorder.begin()
        hold = self.recorder.hold()
        path = head.path + (f"?{head.query}" if head.query else "")
        exchange = new_exchange(api, head.method, path, headers, b"")
        try:
            if head.expects_continue:
                await send(writer, CONTINUE_ANSWER)
            if way == "direct":
                exchange.request_chunks = KeptBody()
                upstream_head = render_request_head(head.method, target, origin.netloc, head.headers)
                return await self._exchange(
                    head, kind, origin, upstream_head, None, exchange, started, hold, reader, writer
                )
            return await self._with_policies(
                head, kind, headers, origin, target, exchange, started, hold, reader, writer
            )
        except ClientGone as exc:
            if not exchange.submitted:
                record_failure(self.recorder, exchange, started, kind, 499, "client_disconnected", exc)
            return False
        except Exception as exc:  # a failure of the proxy's own: recorded, and the agent told
            if not exchange.submitted:
                body = record_failure(self.recorder, exchange, started, kind, 502, "proxy_error", exc)
                answer_quietly(writer, 502, body=body)
            return False
        except asyncio.CancelledError:  # the proxy is stopping
            if not exchange.submitted:
                exchange.proxy_error = "client_disconnected"
                exchange.proxy_error_detail = "the proxy stopped mid-request"
                self.recorder.submit(exchange)
            raise
        finally:
            hold.release()

    async def _with_policies(
        self, head: RequestHead, kind: str, headers: Headers, origin: Origin, target: str, exchange: Exchange,
        started: float, hold: Hold, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
    ) -> bool:  # fmt: skip
        """Read the body whole, run the policies, then answer or send it on."""
        assert self.controller is not None
        chunks: list[bytes] = []
        await read_body(reader, head.content_length, chunks.append)
        body = exchange.request_body = b"".join(chunks)
        if len(body) < head.content_length:
            raise ClientGone("the client went away while sending its body")
        url = f"{origin.scheme}://{origin.netloc}{target}"
        answer = await apply_policies(
            self._client(), self.recorder, self.controller, exchange, started, kind, url, headers, head.headers, body
        )  # fmt: skip
        if isinstance(answer, Response):
            await send(writer, as_http1(answer, close=not head.keep_alive))
            return head.keep_alive
        betas = exchange.policy.betas if exchange.policy is not None else ()
        upstream_head = render_request_head(
            head.method,
            target,
            origin.netloc,
            upstream_headers(head.headers, betas),
            content_length=len(answer),
        )
        return await self._exchange(
            head, kind, origin, upstream_head, answer, exchange, started, hold, reader, writer
        )

    def _client(self) -> httpx.AsyncClient:
        """httpx for the proxy's own read_result rounds (whole answers, not relayed as they stream)."""
        if self._httpx is None:
            timeout = httpx.Timeout(
                connect=self.upstream.connect_timeout_s, read=self.read_timeout_s, write=60.0, pool=None
            )
            self._httpx = httpx.AsyncClient(timeout=timeout, follow_redirects=False)
        return self._httpx

    # -- to the provider ------------------------------------------------------------------------
    async def _exchange(
        self, head: RequestHead, kind: str, origin: Origin, upstream_head: bytes, body: bytes | None,
        exchange: Exchange, started: float, hold: Hold, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
    ) -> bool:  # fmt: skip
        """Send one request (``body``, else the agent's body as it arrives) and relay the answer."""
        chunks = exchange.request_chunks if body is None else None

        async def failed(status: int, error: str, exc: BaseException) -> bool:
            if chunks is not None:
                await read_body(reader, head.content_length - chunks.size, chunks.append)
            error_body = record_failure(self.recorder, exchange, started, kind, status, error, exc)
            answer_quietly(writer, status, body=error_body, close=not head.keep_alive)
            await drained(writer)
            return head.keep_alive

        conn: Connection | None = None
        sent = False  # the whole request is out: from then on it is never sent twice
        try:
            conn = await self.upstream.acquire(origin)
            try:
                if chunks is not None:
                    put(conn.writer, upstream_head)
                    await forward_body(reader, conn, head.content_length, chunks.append)
                else:
                    put(conn.writer, upstream_head + body)
                sent = True
                answer = ResponseReader(conn.reader, keep=exchange.response_chunks)
                response = await head_unless_gone(answer, reader, self.read_timeout_s)
            except ConnectionError as exc:
                if (
                    isinstance(exc, ClientGone)
                    or not conn.reused
                    or sent
                    or (chunks is not None and not chunks.whole)
                ):
                    raise  # (a body past the record limit is no longer whole here: it cannot go again)
                # the upstream had closed this kept-alive connection before taking the whole request:
                # the request once more, on a new connection
                conn.close()
                if chunks is not None:
                    await read_body(reader, head.content_length - chunks.size, chunks.append)
                conn = await self.upstream.acquire(origin, fresh=True)
                put(conn.writer, upstream_head + (chunks.data() if chunks is not None else body or b""))
                sent = True
                answer = ResponseReader(conn.reader, keep=exchange.response_chunks)
                response = await head_unless_gone(answer, reader, self.read_timeout_s)
            while 100 <= response.status < 200:  # interim answers pass through
                await send(writer, response.raw)
                response = await answer.read_head(self.read_timeout_s)
        except ClientGone:
            if conn is not None:
                conn.close()
            raise
        except TimeoutError as exc:
            if conn is not None:
                conn.close()
            return await failed(504, "upstream_timeout", exc)
        except (OSError, BrokenAnswer, asyncio.IncompleteReadError) as exc:
            if conn is not None:
                conn.close()
            if isinstance(exc, asyncio.IncompleteReadError):
                exc = BrokenAnswer("the upstream closed the connection without answering")
            return await failed(502, "upstream_unreachable", exc)
        except BaseException:
            if conn is not None:
                conn.close()
            raise
        exchange.status = response.status
        exchange.ttfb_ms = (time.perf_counter() - started) * 1000
        exchange.response_headers = response.header_map()
        unframed = head.version != "1.1" and answer.chunked  # HTTP/1.0 has no chunked coding
        close = answer.closes or not head.keep_alive or unframed
        keep_alive = False
        try:
            await send(
                writer,
                render_response_head(response.status_line, response.headers, close=close, unframed=unframed),
            )
            hold.release()  # the answer's head is out: the writer may run
            recorded = 0
            async for data in answer.body(self.read_timeout_s, unframed=unframed):
                await send(writer, data)
                recorded += len(data)
                if recorded > RECORD_RESPONSE_LIMIT:
                    answer.stop_keeping()  # relayed whole, recorded up to the limit
            keep_alive = not close
        except ClientGone:
            exchange.proxy_error = "client_disconnected"
            exchange.proxy_error_detail = "the client went away mid-answer"
        except TimeoutError as exc:
            exchange.proxy_error = "upstream_timeout"
            exchange.proxy_error_detail = f"upstream stalled mid-answer ({exc})"
        except Exception as exc:
            exchange.proxy_error = "upstream_error"
            exchange.proxy_error_detail = f"upstream broke off ({type(exc).__name__}: {exc})"
        except asyncio.CancelledError:
            exchange.proxy_error = "client_disconnected"
            exchange.proxy_error_detail = "the proxy stopped mid-answer"
            raise
        finally:
            if keep_alive and answer.reusable:
                self.upstream.release(conn)
            else:
                conn.close()
            exchange.latency_ms = (time.perf_counter() - started) * 1000
            self.recorder.submit(exchange)
        return keep_alive
