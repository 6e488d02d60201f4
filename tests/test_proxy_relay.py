"""The proxy's relay (engine.proxy.transport.relay, http1, connections): HTTP/1.1 framing, keep-alive,
the routes a request takes, and what the agent and the upstream see — against real sockets."""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import socketserver
import ssl
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from engine.errors import ConfigError
from engine.proxy.transport import connections
from engine.proxy.transport.app import Upstreams
from engine.proxy.transport.connections import Origin, split_url
from engine.proxy.transport.http1 import (
    BrokenAnswer,
    HeadError,
    RequestHead,
    ResponseReader,
    parse_request_head,
    render_request_head,
    render_response_head,
)  # fmt: skip
from engine.proxy.transport.relay import route
from engine.proxy.transport.server import ProxyServer
from engine.store import SessionStore

SSE = b'event: message_stop\ndata: {"type":"message_stop"}\n\n'
HEADERS = {
    "x-api-key": "sk-relay-secret",
    "anthropic-version": "2023-06-01",
    "content-type": "application/json",
}


# -- framing (pure) ----------------------------------------------------------------------------
def test_a_request_head_is_parsed_with_its_framing_and_keep_alive() -> None:
    head = parse_request_head(
        b"POST /v1/messages%3Fx?beta=true HTTP/1.1\r\nHost: a\r\nContent-Length: 12\r\nExpect: 100-continue\r\n\r\n"
    )
    assert (head.method, head.path, head.query) == ("POST", "/v1/messages?x", "beta=true")
    assert head.content_length == 12 and head.expects_continue and head.keep_alive and not head.chunked
    assert not parse_request_head(b"GET / HTTP/1.1\r\nConnection: close\r\n\r\n").keep_alive
    assert not parse_request_head(b"GET / HTTP/1.0\r\n\r\n").keep_alive
    assert parse_request_head(b"GET / HTTP/1.1\r\nHost: a\r\n\r\n").keep_alive
    assert parse_request_head(b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n").chunked
    assert parse_request_head(b"GET / HTTP/1.1\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n").upgrade


@pytest.mark.parametrize(
    "raw", [b"NOT HTTP\r\n\r\n", b"POST / HTTP/1.1\r\nContent-Length: x\r\n\r\n", b"POST / HTTP/1.1\r\n"]
)
def test_an_invalid_request_head_is_a_head_error(raw: bytes) -> None:
    with pytest.raises(HeadError):
        parse_request_head(raw)


def test_the_upstream_gets_its_own_host_and_no_hop_by_hop_headers() -> None:
    headers = [(b"Host", b"127.0.0.1:8788"), (b"Connection", b"keep-alive"), (b"X-Api-Key", b"k"),
               (b"Content-Length", b"5"), (b"Expect", b"100-continue"), (b"Proxy-Authorization", b"p")]  # fmt: skip
    head = render_request_head("POST", "/v1/messages?beta=true", "api.anthropic.com", headers)
    assert head == (
        b"POST /v1/messages?beta=true HTTP/1.1\r\nhost: api.anthropic.com\r\nX-Api-Key: k\r\nContent-Length: 5\r\n\r\n"
    )
    edited = render_request_head("POST", "/", "h", headers, content_length=42)
    assert b"Content-Length: 5" not in edited and edited.endswith(b"content-length: 42\r\n\r\n")
    answer = render_response_head(
        b"HTTP/1.1 200 OK", [(b"Transfer-Encoding", b"chunked"), (b"Connection", b"keep-alive")], close=True
    )
    assert answer == b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nconnection: close\r\n\r\n"


def test_an_origin_and_target_come_from_the_upstream_url() -> None:
    assert split_url("https://api.anthropic.com/v1/messages?beta=true") == (
        Origin("https", "api.anthropic.com", 443),
        "/v1/messages?beta=true",
    )
    origin, target = split_url("http://127.0.0.1:9000")
    assert (origin.netloc, target) == ("127.0.0.1:9000", "/")
    assert Origin("https", "h", 8443).netloc == "h:8443"
    assert split_url("http://[::1]:9000/v1")[0].netloc == "[::1]:9000"


async def _read(raw: bytes, *, head_request: bool = False) -> tuple[list[int], bytes, bytes, ResponseReader]:
    reader = asyncio.StreamReader()
    reader.feed_data(raw)
    reader.feed_eof()
    kept: list[bytes] = []
    answer = ResponseReader(reader, head_request=head_request, keep=kept)
    statuses = [(await answer.read_head(5)).status]
    while statuses[-1] < 200:
        statuses.append((await answer.read_head(5)).status)
    relayed = b"".join([chunk async for chunk in answer.body(5)])
    return statuses, relayed, b"".join(kept), answer


@pytest.mark.parametrize(
    ("raw", "statuses", "body", "reusable"),
    [
        (
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
            [200],
            b"hello",
            True,
        ),
        (b"HTTP/1.1 400 Bad\r\nContent-Length: 3\r\n\r\nbad", [400], b"bad", True),
        (b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\nok", [200], b"ok", False),
        (b"HTTP/1.1 200 OK\r\n\r\nuntil close", [200], b"until close", False),
        (b"HTTP/1.1 204 No Content\r\n\r\n", [204], b"", True),
        (
            b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok",
            [100, 200],
            b"ok",
            True,
        ),
        (b"HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nok", [200], b"ok", False),
    ],
)
def test_an_answer_is_relayed_raw_and_kept_without_its_framing(
    raw: bytes, statuses: list[int], body: bytes, reusable: bool
) -> None:
    seen, relayed, kept, answer = asyncio.run(_read(raw))
    assert seen == statuses and kept == body and answer.reusable is reusable
    assert raw.endswith(relayed)


def test_a_head_answer_has_no_body_whatever_its_length_says() -> None:
    seen, relayed, kept, answer = asyncio.run(
        _read(b"HTTP/1.1 200 OK\r\nContent-Length: 99\r\n\r\n", head_request=True)
    )
    assert (seen, relayed, kept, answer.reusable) == ([200], b"", b"", True)


def test_an_answer_cut_short_is_a_broken_answer() -> None:
    with pytest.raises(BrokenAnswer):
        asyncio.run(_read(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nshort"))


# -- routes (pure) ------------------------------------------------------------------------------
class _Controller:
    def __init__(self, needs: bool) -> None:
        self.needs = needs

    def needs_body(self, api: str, headers: object) -> bool:
        return self.needs


def test_a_request_takes_the_direct_path_unless_something_needs_it(monkeypatch: pytest.MonkeyPatch) -> None:
    post = parse_request_head(b"POST /v1/messages HTTP/1.1\r\nContent-Length: 2\r\n\r\n")
    origin = Origin("https", "api.anthropic.com", 443)
    for name in ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy", "NO_PROXY", "no_proxy"):
        monkeypatch.delenv(name, raising=False)
    connections.uses_env_proxy.cache_clear()
    assert route(post, "anthropic_messages", {}, None, origin) == "direct"  # type: ignore[arg-type]
    assert route(post, "anthropic_messages", {}, _Controller(False), origin) == "direct"  # type: ignore[arg-type]
    assert route(post, "anthropic_messages", {}, _Controller(True), origin) == "policies"  # type: ignore[arg-type]
    head = parse_request_head(b"HEAD / HTTP/1.1\r\n\r\n")
    chunked = parse_request_head(b"POST /v1/messages HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n")
    assert route(head, "passthrough", {}, None, origin) == "app"  # type: ignore[arg-type]
    assert route(chunked, "anthropic_messages", {}, None, origin) == "app"  # type: ignore[arg-type]
    monkeypatch.setenv("HTTPS_PROXY", "http://corporate:3128")
    connections.uses_env_proxy.cache_clear()
    try:
        assert route(post, "anthropic_messages", {}, None, origin) == "app"  # type: ignore[arg-type]
        monkeypatch.setenv("NO_PROXY", "api.anthropic.com")
        connections.uses_env_proxy.cache_clear()
        assert route(post, "anthropic_messages", {}, None, origin) == "direct"  # type: ignore[arg-type]
    finally:
        connections.uses_env_proxy.cache_clear()


# -- against real sockets -----------------------------------------------------------------------
class RawUpstream(socketserver.ThreadingTCPServer):
    """An upstream speaking raw HTTP/1.1: answers each request with a chunked SSE answer, counts
    connections, keeps every request's bytes; ``close_after`` hangs up after each answer without
    saying so (a kept-alive connection the upstream dropped)."""

    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, *, close_after: bool = False, tls: ssl.SSLContext | None = None) -> None:
        self.close_after = close_after
        self.tls = tls
        self.connections = 0
        self.requests: list[tuple[bytes, bytes]] = []
        super().__init__(("127.0.0.1", 0), _RawHandler)
        threading.Thread(target=self.serve_forever, daemon=True).start()

    def get_request(self) -> tuple[socket.socket, object]:
        sock, address = super().get_request()
        return (self.tls.wrap_socket(sock, server_side=True) if self.tls else sock), address

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class _RawHandler(socketserver.StreamRequestHandler):
    server: RawUpstream

    def handle(self) -> None:
        self.server.connections += 1
        while True:
            head = b""
            while not head.endswith(b"\r\n\r\n"):
                line = self.rfile.readline()
                if not line:
                    return
                head += line
            request = parse_request_head(head)
            if request.method == "HEAD":
                self.wfile.write(b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\n")
                self.wfile.flush()
                continue
            if request.chunked:
                body = b""
                while size := int(self.rfile.readline().strip(), 16):
                    body += self.rfile.read(size + 2)[:-2]
                self.rfile.readline()
            else:
                body = self.rfile.read(request.content_length)
            self.server.requests.append((head, body))
            data = SSE
            self.wfile.write(
                b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n"
                b"connection: keep-alive\r\n\r\n" + b"%x\r\n%s\r\n0\r\n\r\n" % (len(data), data)
            )
            self.wfile.flush()
            if self.server.close_after:
                return


@pytest.fixture
def raw_upstream() -> Iterator[RawUpstream]:
    server = RawUpstream()
    yield server
    server.shutdown()
    server.server_close()


def _body(n: int) -> bytes:
    return json.dumps(
        {
            "model": "claude-sonnet-4-6",
            "max_tokens": 64,
            "stream": True,
            "messages": [{"role": "user", "content": f"question {n}"}],
        }
    ).encode()


def test_one_agent_connection_reuses_one_upstream_connection(
    tmp_path: Path, raw_upstream: RawUpstream
) -> None:
    with ProxyServer(tmp_path / "p.db", upstreams=Upstreams(anthropic=raw_upstream.url)) as proxy:
        with httpx.Client(base_url=proxy.base_url) as client:
            answers = [client.post("/v1/messages", content=_body(n), headers=HEADERS) for n in range(4)]
        assert proxy.recorder.flush(10)
        assert proxy.recorder.recorded == 4
    assert [a.status_code for a in answers] == [200] * 4 and all(a.content == SSE for a in answers)
    assert raw_upstream.connections == 1
    heads = [head for head, _ in raw_upstream.requests]
    assert all(f"host: 127.0.0.1:{raw_upstream.server_address[1]}".encode() in h for h in heads)
    assert [body for _, body in raw_upstream.requests] == [_body(n) for n in range(4)]
    store = SessionStore(tmp_path / "p.db")
    try:  # four unrelated questions: four sessions, each call with its request as sent
        sessions = store.list_sessions()
        assert sorted(s.title for s in sessions) == [f"question {n}" for n in range(4)]
    finally:
        store.close()
    assert b"sk-relay-secret" not in (tmp_path / "p.db").read_bytes()


def test_a_kept_alive_connection_the_upstream_dropped_is_retried_on_a_new_one(tmp_path: Path) -> None:
    upstream = RawUpstream(close_after=True)
    try:
        with ProxyServer(tmp_path / "p.db", upstreams=Upstreams(anthropic=upstream.url)) as proxy:
            with httpx.Client(base_url=proxy.base_url) as client:
                for n in range(3):
                    answer = client.post("/v1/messages", content=_body(n), headers=HEADERS)
                    assert (answer.status_code, answer.content) == (200, SSE)
                    # the upstream drops the idle connection (a request racing its close could not be
                    # sent again once written: that race is not what this pins)
                    time.sleep(0.05)
            assert proxy.recorder.flush(10)
            assert proxy.recorder.recorded == 3
        assert [body for _, body in upstream.requests] == [_body(n) for n in range(3)]
    finally:
        upstream.shutdown()
        upstream.server_close()


def _exchange(port: int, raw: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(raw)
        # no half-close: an agent that stops sending before its answer is taken for gone
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
        return data


def test_expect_continue_chunked_bodies_and_head_requests_are_served(
    tmp_path: Path, raw_upstream: RawUpstream
) -> None:
    body = _body(7)
    with ProxyServer(tmp_path / "p.db", upstreams=Upstreams(anthropic=raw_upstream.url)) as proxy:
        continued = _exchange(
            proxy.port,
            b"POST /v1/messages HTTP/1.1\r\nhost: 127.0.0.1\r\nx-api-key: k\r\ncontent-length: %d\r\n"
            b"expect: 100-continue\r\nconnection: close\r\n\r\n%s" % (len(body), body),
        )
        chunked = _exchange(
            proxy.port,
            b"POST /v1/messages HTTP/1.1\r\nhost: 127.0.0.1\r\nx-api-key: k\r\ntransfer-encoding: chunked\r\n"
            b"connection: close\r\n\r\n%x\r\n%s\r\n0\r\n\r\n" % (len(body), body),
        )
        head = _exchange(proxy.port, b"HEAD / HTTP/1.1\r\nhost: 127.0.0.1\r\nconnection: close\r\n\r\n")
        assert proxy.recorder.flush(10)
    assert continued.startswith(b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\n") and continued.endswith(
        b"0\r\n\r\n"
    )
    assert b"expect" not in raw_upstream.requests[0][0].lower()
    assert chunked.startswith(b"HTTP/1.1 200 OK\r\n") and SSE in chunked
    assert [b for _, b in raw_upstream.requests] == [body, body]
    assert head.startswith(b"HTTP/1.1 200 OK\r\n") and head.endswith(b"\r\n\r\n")  # no body, not hung
    assert _exchange_invalid(tmp_path, raw_upstream).startswith(b"HTTP/1.1 400 Bad Request\r\n")


def _exchange_invalid(tmp_path: Path, upstream: RawUpstream) -> bytes:
    with ProxyServer(tmp_path / "q.db", upstreams=Upstreams(anthropic=upstream.url)) as proxy:
        return _exchange(proxy.port, b"NOT HTTP AT ALL\r\n\r\n")


def test_a_port_in_use_is_a_config_error_naming_it(tmp_path: Path) -> None:
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    port = taken.getsockname()[1]
    try:
        proxy = ProxyServer(tmp_path / "p.db", port=port)
        with pytest.raises(ConfigError, match=f"127.0.0.1:{port}"):
            proxy.run()
    finally:
        taken.close()


@pytest.fixture
def certificate(tmp_path: Path) -> tuple[Path, ssl.SSLContext]:
    """A test CA's certificate file and a server context for localhost signed by it (trustme)."""
    import trustme

    ca = trustme.CA()
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ca.issue_cert("localhost", "127.0.0.1").configure_cert(context)
    cert = tmp_path / "ca.pem"
    ca.cert_pem.write_to_path(str(cert))
    return cert, context


def test_an_https_upstream_is_verified_and_served(
    tmp_path: Path, certificate: tuple[Path, ssl.SSLContext], monkeypatch: pytest.MonkeyPatch
) -> None:
    cert, context = certificate
    upstream = RawUpstream(tls=context)
    url = f"https://localhost:{upstream.server_address[1]}"
    try:
        for trusted in (True, False):
            monkeypatch.delenv("SSL_CERT_DIR", raising=False)
            if trusted:
                monkeypatch.setenv("SSL_CERT_FILE", str(cert))
            else:
                monkeypatch.delenv("SSL_CERT_FILE", raising=False)
            connections._tls.cache_clear()
            with ProxyServer(tmp_path / f"{trusted}.db", upstreams=Upstreams(anthropic=url)) as proxy:
                with httpx.Client(base_url=proxy.base_url) as client:
                    answer = client.post("/v1/messages", content=_body(1), headers=HEADERS)
                assert proxy.recorder.flush(10)
            if trusted:
                assert (answer.status_code, answer.content) == (200, SSE)
            else:  # a certificate nobody vouches for: the provider's own error shape, naming why
                assert answer.status_code == 502
                assert "CERTIFICATE_VERIFY_FAILED" in answer.json()["error"]["message"]
        assert [body for _, body in upstream.requests] == [_body(1)]
        assert (
            upstream.requests[0][0].split(b"\r\n")[1]
            == f"host: localhost:{upstream.server_address[1]}".encode()
        )
    finally:
        connections._tls.cache_clear()
        upstream.shutdown()
        upstream.server_close()


# -- failures a real upstream or agent causes ------------------------------------------------------
class ScriptedUpstream(socketserver.ThreadingTCPServer):
    """An upstream whose every connection runs ``script(handler, connection_number)``."""

    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, script: Callable[[_ScriptHandler, int], None]) -> None:
        self.script = script
        self.connections = 0
        self.requests: list[tuple[int, bytes]] = []
        super().__init__(("127.0.0.1", 0), _ScriptHandler)
        threading.Thread(target=self.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def close(self) -> None:
        self.shutdown()
        self.server_close()


class _ScriptHandler(socketserver.StreamRequestHandler):
    server: ScriptedUpstream

    def handle(self) -> None:
        self.server.connections += 1
        self.server.script(self, self.server.connections)

    def head(self) -> RequestHead | None:
        raw = b""
        while not raw.endswith(b"\r\n\r\n"):
            line = self.rfile.readline()
            if not line:
                return None
            raw += line
        return parse_request_head(raw)

    def ok(self) -> None:
        self.wfile.write(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 2\r\n\r\n{}")
        self.wfile.flush()


def _request(body: bytes, extra: bytes = b"") -> bytes:
    return (
        b"POST /v1/messages HTTP/1.1\r\nhost: 127.0.0.1\r\nx-api-key: k\r\nanthropic-version: 2023-06-01\r\n"
        b"content-type: application/json\r\ncontent-length: %d\r\n%s\r\n%s" % (len(body), extra, body)
    )


def _answer(sock: socket.socket) -> bytes:
    data = b""
    while not (b"\r\n\r\n" in data and data.endswith(b"}")):
        chunk = sock.recv(65536)
        if not chunk:
            break
        data += chunk
    return data


@contextlib.contextmanager
def _after_one_call(proxy: ProxyServer) -> Iterator[socket.socket]:
    """An agent connection to the proxy whose first call was answered (its upstream connection kept alive)."""
    with socket.create_connection(("127.0.0.1", proxy.port), timeout=10) as sock:
        sock.sendall(_request(_body(1)))
        assert _answer(sock).startswith(b"HTTP/1.1 200 OK")
        yield sock


def test_a_kept_alive_connection_dropped_before_the_whole_request_went_out_is_retried(tmp_path: Path) -> None:
    def script(h: _ScriptHandler, n: int) -> None:
        while (head := h.head()) is not None:
            h.server.requests.append((n, b""))
            if n == 1 and len(h.server.requests) == 2:
                h.connection.close()  # the body unread: the kernel answers the rest with a reset
                return
            h.rfile.read(head.content_length)
            h.ok()

    upstream = ScriptedUpstream(script)
    try:
        with ProxyServer(tmp_path / "p.db", upstreams=Upstreams(anthropic=upstream.url)) as proxy:
            with _after_one_call(proxy) as sock:
                head, body = _request(_body(2)).split(b"\r\n\r\n", 1)
                sock.sendall(head + b"\r\n\r\n" + body[:10])
                time.sleep(0.3)  # the upstream drops the connection while the body is on its way
                for i in range(10, len(body), 20):
                    sock.sendall(body[i : i + 20])
                    time.sleep(0.02)
                assert _answer(sock).startswith(b"HTTP/1.1 200 OK")
            assert proxy.recorder.flush(10)
        assert [n for n, _ in upstream.requests] == [1, 1, 2]
    finally:
        upstream.close()


def test_a_request_the_upstream_took_whole_is_never_sent_twice(tmp_path: Path) -> None:
    def script(h: _ScriptHandler, n: int) -> None:
        while (head := h.head()) is not None:
            h.server.requests.append((n, h.rfile.read(head.content_length)))
            if len(h.server.requests) == 2:
                time.sleep(0.3)  # "works" on it, then the connection drops
                return
            h.ok()

    upstream = ScriptedUpstream(script)
    try:
        with ProxyServer(tmp_path / "p.db", upstreams=Upstreams(anthropic=upstream.url)) as proxy:
            with _after_one_call(proxy) as sock:
                sock.sendall(_request(_body(2)))
                second = _answer(sock)
            assert proxy.recorder.flush(10)
        assert second.startswith(b"HTTP/1.1 502 Bad Gateway") and b"without answering" in second
        assert len(upstream.requests) == 2  # not replayed: the model would have run it twice
    finally:
        upstream.close()


def test_an_upstream_that_refuses_a_large_body_early_still_gets_the_agent_an_answer(tmp_path: Path) -> None:
    def script(h: _ScriptHandler, n: int) -> None:
        h.head()
        h.wfile.write(b"HTTP/1.1 413 Too Large\r\ncontent-length: 2\r\nconnection: close\r\n\r\n{}")
        h.wfile.flush()
        h.connection.close()

    upstream = ScriptedUpstream(script)
    big = json.dumps({"model": "m", "messages": [{"role": "user", "content": "x" * (12 << 20)}]}).encode()
    try:
        with ProxyServer(tmp_path / "p.db", upstreams=Upstreams(anthropic=upstream.url)) as proxy:
            with socket.create_connection(("127.0.0.1", proxy.port), timeout=60) as sock:
                sender = threading.Thread(target=lambda: _send_quietly(sock, _request(big)), daemon=True)
                sender.start()
                answer = _answer(sock)
                sender.join(30)
            assert proxy.recorder.flush(10)  # recorded once, nothing left hanging
        assert answer.split(b"\r\n")[0] in (b"HTTP/1.1 502 Bad Gateway", b"HTTP/1.1 413 Too Large")
    finally:
        upstream.close()


def _send_quietly(sock: socket.socket, data: bytes) -> None:
    with contextlib.suppress(OSError):
        sock.sendall(data)


def test_expect_continue_is_answered_at_once_on_the_apps_route_too(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def script(h: _ScriptHandler, n: int) -> None:
        while (head := h.head()) is not None:
            h.server.requests.append((n, h.rfile.read(head.content_length)))
            h.ok()

    upstream = ScriptedUpstream(script)
    monkeypatch.setenv("HTTP_PROXY", upstream.url)  # a corporate proxy: the request goes through the app
    monkeypatch.setenv("NO_PROXY", "")
    connections.uses_env_proxy.cache_clear()
    try:
        with ProxyServer(tmp_path / "p.db", upstreams=Upstreams(anthropic=upstream.url)) as proxy:
            with socket.create_connection(("127.0.0.1", proxy.port), timeout=5) as sock:
                head, body = _request(_body(3), b"expect: 100-continue\r\n").split(b"\r\n\r\n", 1)
                sock.sendall(head + b"\r\n\r\n")
                assert sock.recv(100) == b"HTTP/1.1 100 Continue\r\n\r\n"
                sock.sendall(body)
                assert _answer(sock).startswith(b"HTTP/1.1 200 OK")
            assert proxy.recorder.flush(10)
        assert [b for _, b in upstream.requests] == [_body(3)]
    finally:
        connections.uses_env_proxy.cache_clear()
        upstream.close()


def test_an_agent_gone_mid_chunked_body_leaves_nothing_hanging(tmp_path: Path) -> None:
    upstream = ScriptedUpstream(lambda h, n: None)
    try:
        with ProxyServer(tmp_path / "p.db", upstreams=Upstreams(anthropic=upstream.url)) as proxy:
            with socket.create_connection(("127.0.0.1", proxy.port), timeout=5) as sock:
                sock.sendall(
                    b"POST /v1/messages HTTP/1.1\r\nhost: 127.0.0.1\r\nx-api-key: k\r\ntransfer-encoding: chunked\r\n\r\n"
                    b'10\r\n{"model":"m","'
                )
                time.sleep(0.3)
            deadline = time.monotonic() + 5
            while proxy.relay is not None and proxy.relay._serving and time.monotonic() < deadline:
                time.sleep(0.05)
            assert proxy.relay is not None and not proxy.relay._serving
            assert proxy.recorder.flush(5)  # the app recorded the disconnect: every request begun is written
    finally:
        upstream.close()


def _post_as_http_1_0(port: int, body: bytes) -> bytes:
    return _exchange(
        port,
        b"POST /v1/messages HTTP/1.0\r\nhost: 127.0.0.1\r\nx-api-key: k\r\ncontent-length: %d\r\n\r\n%s"
        % (len(body), body),
    )


def test_an_http_1_0_agent_gets_an_answer_framed_for_http_1_0(
    tmp_path: Path, raw_upstream: RawUpstream
) -> None:
    body = _body(5)
    with ProxyServer(tmp_path / "p.db", upstreams=Upstreams(anthropic=raw_upstream.url)) as proxy:
        answer = _post_as_http_1_0(proxy.port, body)
        assert proxy.recorder.flush(10)
    head, _, streamed = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200 OK\r\n")  # any 1.x status line; what matters is the framing
    assert (
        b"transfer-encoding" not in head.lower()
    )  # HTTP/1.0 has no chunked coding: the body ends with the close
    assert streamed == SSE and [b for _, b in raw_upstream.requests] == [body]


def test_an_http_1_0_agent_on_the_apps_route_gets_its_answer_unframed_too(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def script(h: _ScriptHandler, n: int) -> None:
        while (head := h.head()) is not None:
            h.server.requests.append((n, h.rfile.read(head.content_length)))
            h.wfile.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
                          b"%x\r\n%s\r\n0\r\n\r\n" % (len(SSE), SSE))  # fmt: skip
            h.wfile.flush()

    upstream = ScriptedUpstream(script)
    monkeypatch.setenv(
        "HTTP_PROXY", upstream.url
    )  # the request goes through the app (uvicorn chunks its answer)
    monkeypatch.setenv("NO_PROXY", "")
    connections.uses_env_proxy.cache_clear()
    try:
        with ProxyServer(tmp_path / "p.db", upstreams=Upstreams(anthropic=upstream.url)) as proxy:
            body = _body(3)
            answer = _post_as_http_1_0(proxy.port, body)
            assert proxy.recorder.flush(10)
    finally:
        connections.uses_env_proxy.cache_clear()
        upstream.close()
    head, _, content = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200 OK\r\n") and b"transfer-encoding" not in head.lower()
    assert b"connection: close" in head.lower()
    assert content == SSE  # the upstream's stream, whole, ended by the close
