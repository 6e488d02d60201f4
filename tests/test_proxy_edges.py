"""The proxy's edges (#32): who it serves (Origin and Host checked, a browser's foreign page and a
rebinding Host refused, the agents' own requests served), ``OPTIONS *`` and ``CONNECT`` answered."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from model_server import ScriptedServer
from model_server import anthropic as A

from engine.call_failures import failure_of
from engine.proxy import ProxyServer, Upstreams
from engine.proxy.transport.admission import admit
from engine.store import SessionStore

BODY = json.dumps(
    {"model": "claude-sonnet-4-6", "max_tokens": 10, "messages": [{"role": "user", "content": "hi"}]}
)


@pytest.mark.parametrize(
    ("name", "method", "target", "headers", "status"),
    [
        ("an agent: loopback host, no origin", "POST", "/v1/messages", {"host": "127.0.0.1:8788"}, None),
        ("localhost by name", "POST", "/v1/messages", {"host": "localhost:8788"}, None),
        ("IPv6 loopback", "POST", "/v1/messages", {"host": "[::1]:8788"}, None),
        ("no host at all (HTTP/1.0)", "POST", "/v1/messages", {}, None),
        ("a page on this machine", "POST", "/v1/messages",
         {"host": "127.0.0.1:8788", "origin": "http://localhost:8501"}, None),
        ("a foreign web page", "POST", "/v1/messages",
         {"host": "127.0.0.1:8788", "origin": "https://evil.example"}, 403),
        ("a sandboxed page (origin null)", "POST", "/v1/messages", {"host": "127.0.0.1:8788", "origin": "null"}, 403),
        ("a cross-site fetch without origin", "GET", "/v1/models",
         {"host": "127.0.0.1:8788", "sec-fetch-site": "cross-site"}, 403),
        ("a rebinding host", "POST", "/v1/messages", {"host": "evil.example:8788"}, 403),
        ("a host that only starts like loopback", "POST", "/v1/messages", {"host": "127.0.0.1.evil.example"}, 403),
        ("OPTIONS *", "OPTIONS", "*", {"host": "127.0.0.1:8788"}, 204),
        ("CONNECT", "CONNECT", "api.anthropic.com:443", {"host": "api.anthropic.com:443"}, 405),
    ],
)  # fmt: skip
def test_who_the_proxy_serves(
    name: str, method: str, target: str, headers: dict[str, str], status: int | None
) -> None:
    refusal = admit(method, target, headers)
    assert (refusal.status if refusal else None) == status, name


def test_a_remote_proxy_serves_any_host_but_still_no_foreign_page() -> None:
    assert admit("POST", "/v1/messages", {"host": "10.0.0.5:8788"}, allow_remote=True) is None
    refusal = admit(
        "POST", "/v1/messages", {"host": "10.0.0.5:8788", "origin": "https://evil.example"}, allow_remote=True
    )
    assert refusal is not None and refusal.status == 403


@pytest.fixture
def proxy(tmp_path: Path) -> Iterator[tuple[ProxyServer, ScriptedServer]]:
    with (
        A.install(ScriptedServer(default=A.text("ok"))) as upstream,
        ProxyServer(tmp_path / "p.db", upstreams=Upstreams(anthropic=upstream.base_url)) as server,
    ):
        yield server, upstream


def exchange(port: int, head: str, body: str = "") -> bytes:
    """One raw request on its own connection; the whole answer (the proxy closes or we read to the end)."""
    data = body.encode()
    raw = (
        head.replace("\n", "\r\n").encode()
        + (b"content-length: %d\r\n" % len(data) if data else b"")
        + b"\r\n"
        + data
    )
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(raw)
        # no half-close: an agent that stops sending before its answer is taken for gone
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
    return answer


def test_a_web_page_cannot_post_through_the_proxy(proxy: tuple[ProxyServer, ScriptedServer]) -> None:
    server, upstream = proxy
    # a "simple" request any page can send without a CORS preflight
    page = f"POST /v1/messages HTTP/1.1\nhost: 127.0.0.1:{server.port}\norigin: https://evil.example\ncontent-type: text/plain\n"
    rebinding = (
        f"POST /v1/messages HTTP/1.1\nhost: evil.example:{server.port}\ncontent-type: application/json\n"
    )
    for head in (page, rebinding):
        answer = exchange(server.port, head, BODY)
        status, _, body = answer.partition(b"\r\n\r\n")
        assert status.startswith(b"HTTP/1.1 403 "), answer[:200]
        assert json.loads(body)["error"]["type"] == "permission_error"  # Anthropic's error shape
    agent = f"POST /v1/messages HTTP/1.1\nhost: 127.0.0.1:{server.port}\ncontent-type: application/json\nconnection: close\n"
    assert exchange(server.port, agent, BODY).startswith(b"HTTP/1.1 200 ")
    assert server.recorder.flush()
    assert len(upstream.requests) == 1  # only the agent's
    with SessionStore(server.recorder.db_path, read_only=True) as store:
        assert sum(len(store.list_requests(s.id)) for s in store.list_sessions()) == 1  # nothing fake written


def test_options_star_and_connect_get_a_proper_answer(proxy: tuple[ProxyServer, ScriptedServer]) -> None:
    server, upstream = proxy
    options = exchange(server.port, f"OPTIONS * HTTP/1.1\nhost: 127.0.0.1:{server.port}\nconnection: close\n")
    assert options.startswith(b"HTTP/1.1 204 ") and b"allow: GET, POST" in options
    connect = exchange(server.port, "CONNECT api.anthropic.com:443 HTTP/1.1\nhost: api.anthropic.com:443\n")
    status, _, body = connect.partition(b"\r\n\r\n")
    assert (
        status.startswith(b"HTTP/1.1 405 ") and "not a forward proxy" in json.loads(body)["error"]["message"]
    )
    # still serving, nothing sent upstream
    agent = f"POST /v1/messages HTTP/1.1\nhost: 127.0.0.1:{server.port}\ncontent-type: application/json\nconnection: close\n"
    assert exchange(server.port, agent, BODY).startswith(b"HTTP/1.1 200 ")
    assert len(upstream.requests) == 1


class SilentUpstream:
    """An upstream that takes a request and never answers; it notes when the proxy closes on it."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.got_request = threading.Event()
        self.closed = threading.Event()
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        with self.sock:
            conn, _ = self.sock.accept()
        with conn:
            conn.settimeout(30)
            data = b""
            while b"\r\n\r\n" not in data:
                data += conn.recv(65536)
            self.got_request.set()
            try:
                while conn.recv(65536):
                    pass
            except OSError:
                pass
            self.closed.set()


def test_an_agent_that_gives_up_before_the_answer_cancels_the_upstream_request(tmp_path: Path) -> None:
    upstream = SilentUpstream()
    with ProxyServer(tmp_path / "p.db", upstreams=Upstreams(anthropic=upstream.url)) as server:
        sock = socket.create_connection(("127.0.0.1", server.port), timeout=10)
        data = BODY.encode()
        sock.sendall(
            f"POST /v1/messages HTTP/1.1\r\nhost: 127.0.0.1\r\nx-ctxdesk-session: gave-up\r\n"
            f"content-type: application/json\r\ncontent-length: {len(data)}\r\n\r\n".encode()
            + data
        )
        assert upstream.got_request.wait(10)
        gone_at = time.monotonic()
        sock.close()  # the agent gives up (Esc, a timeout of its own)
        assert upstream.closed.wait(10)  # the proxy closed the upstream request: cancelled there
        assert time.monotonic() - gone_at < 2  # at once, not after the 600 s read timeout
        assert server.recorder.flush(10)
        with SessionStore(server.recorder.db_path, read_only=True) as store:
            (request,) = store.list_requests("proxy-unparsed") or [
                r for s in store.list_sessions() for r in store.list_requests(s.id)
            ]
            events = [e for s in store.list_sessions() for e in store.list_events(s.id, kind="request")]
    (event,) = events
    assert event.outcome == "client_disconnected" and failure_of(event.details)["cause"] == "interrupted"
    assert request.error_type == "client_disconnected"


def test_a_body_over_the_limit_is_refused_unread_in_the_providers_shape(tmp_path: Path) -> None:
    with (
        A.install(ScriptedServer(default=A.text("ok"))) as upstream,
        ProxyServer(
            tmp_path / "p.db", upstreams=Upstreams(anthropic=upstream.base_url), max_body_bytes=1000
        ) as server,
    ):
        big = json.dumps({"model": "claude-sonnet-4-6", "max_tokens": 5, "messages": [
            {"role": "user", "content": "x" * 5000}]})  # fmt: skip
        head = "POST /v1/messages HTTP/1.1\nhost: 127.0.0.1\nx-api-key: k\ncontent-type: application/json\n"
        status, _, body = exchange(server.port, head, big).partition(b"\r\n\r\n")
        chunked = (
            f"POST /v1/messages HTTP/1.1\r\nhost: 127.0.0.1\r\nx-api-key: k\r\ntransfer-encoding: chunked\r\n\r\n"
            f"{len(big):x}\r\n{big}\r\n0\r\n\r\n"
        )
        with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
            sock.sendall(chunked.encode())
            chunked_answer = sock.recv(65536)
        small = (
            "POST /v1/messages HTTP/1.1\nhost: 127.0.0.1\ncontent-type: application/json\nconnection: close\n"
        )
        assert exchange(server.port, small, BODY).startswith(b"HTTP/1.1 200 ")
        assert server.recorder.flush(10)
        with SessionStore(server.recorder.db_path, read_only=True) as store:
            refused = [r for r in store.list_requests("proxy-unparsed") if r.status_code == 413]
    assert status.startswith(b"HTTP/1.1 413 ")
    error = json.loads(body)["error"]
    assert (
        error["type"] == "request_too_large"
        and "5,0" in error["message"]
        and "--max-body-mb" in error["message"]
    )
    assert chunked_answer.startswith(b"HTTP/1.1 413 ")  # a chunked body stops being read at the limit too
    assert len(upstream.requests) == 1  # only the small one went upstream
    # refused heads recorded with their size
    assert len(refused) == 2 and refused[0].request_bytes == len(big)
    assert refused[0].request_sha256 is None  # never read: no hash claimed


@pytest.mark.parametrize(
    ("name", "size", "inflates"), [("an answer", 1 << 20, True), ("a bomb", (32 << 20) + 1, False)]
)
def test_an_answer_is_inflated_only_up_to_the_limit(name: str, size: int, inflates: bool) -> None:
    import asyncio
    import gzip

    import httpx

    from engine.proxy.transport.read_rounds import AnswerTooLarge, read_decoded
    from engine.proxy.wire.shared import DECODED_LIMIT, decode_body

    packed = gzip.compress(b"\0" * size)
    assert len(packed) < size // 100
    reply = httpx.Response(200, headers={"content-encoding": "gzip"}, stream=httpx.ByteStream(packed))
    if inflates:
        assert len(decode_body(packed, "gzip")) == size
        assert len(asyncio.run(read_decoded(reply, DECODED_LIMIT))) == size
        return
    with pytest.raises(ValueError, match="inflates past"):
        decode_body(packed, "gzip")
    with pytest.raises(AnswerTooLarge):
        asyncio.run(read_decoded(reply, DECODED_LIMIT))


def test_the_clis_default_body_limit_is_the_proxys() -> None:
    from engine.cli.proxy import MAX_BODY_MB
    from engine.proxy.transport.admission import MAX_BODY_BYTES

    assert MAX_BODY_MB * 1024 * 1024 == MAX_BODY_BYTES


def test_a_body_past_the_record_limit_is_forwarded_whole_and_recorded_as_its_prefix_size_and_hash(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import hashlib

    from engine.proxy.recording import exchange as exchange_module

    monkeypatch.setattr(exchange_module, "RECORD_REQUEST_LIMIT", 10_000)
    big = json.dumps({"model": "claude-sonnet-4-6", "max_tokens": 5, "messages": [
        {"role": "user", "content": "y" * 200_000}]})  # fmt: skip
    with (
        A.install(ScriptedServer(default=A.text("ok"))) as upstream,
        ProxyServer(tmp_path / "p.db", upstreams=Upstreams(anthropic=upstream.base_url)) as server,
    ):
        head = (
            "POST /v1/messages HTTP/1.1\nhost: 127.0.0.1\ncontent-type: application/json\nconnection: close\n"
        )
        assert exchange(server.port, head, big).startswith(b"HTTP/1.1 200 ")
        assert server.recorder.flush(10)
        with SessionStore(server.recorder.db_path, read_only=True) as store:
            (recorded,) = store.list_requests("proxy-unparsed", with_body=True)
    assert json.dumps(upstream.requests[0].body) == big  # the model got all of it
    assert (
        recorded.request_bytes == len(big)
        and recorded.request_sha256 == hashlib.sha256(big.encode()).hexdigest()
    )
    assert recorded.raw_body == big.encode()[: exchange_module.RECORDED_PREFIX]


def test_a_settings_file_rewritten_badly_keeps_the_last_good_settings_and_no_request_is_dropped(
    tmp_path: Path,
) -> None:
    import anthropic
    from proxy_support import opened

    settings = tmp_path / "settings.toml"
    small = (
        '[models."claude-sonnet-4-6"]\ncontext_window = 2000\nmax_output_tokens = 100\nbuffer_tokens = 0\n'
    )
    settings.write_text(small + '[policies]\nguard = { action = "error" }\n', encoding="utf-8")
    long_prompt = {
        "model": "claude-sonnet-4-6",
        "max_tokens": 5,
        "messages": [{"role": "user", "content": "word " * 3000}],
    }
    with (
        A.install(ScriptedServer(default=A.text("ok"))) as upstream,
        ProxyServer(
            tmp_path / "p.db", upstreams=Upstreams(anthropic=upstream.base_url), settings_file=settings
        ) as server,
    ):
        client = opened(anthropic.Anthropic(base_url=server.base_url, api_key="sk-x", max_retries=0,
                                            default_headers={"X-Ctxdesk-Session": "s"}))  # fmt: skip
        for bad, why in (
            ("a = " + "[" * 100_000 + "]" * 100_000 + "\n", "nested too deeply"),
            ("# padding\n" * 500_000, "over 1,048,576 bytes"),
            ('[policies]\nguard = { action = "nonsense" }\n', "guard"),
        ):
            settings.write_text(bad, encoding="utf-8")
            for _ in range(
                8
            ):  # requests while the file is being re-read: each answered, by the last good guard
                with pytest.raises(anthropic.BadRequestError, match="prompt is too long"):
                    client.messages.create(**long_prompt)
                time.sleep(0.1)
            assert server.policy_file.error is not None and why in server.policy_file.error
        settings.write_text(small.replace("2000", "200000"), encoding="utf-8")  # valid again: no policies
        deadline = time.monotonic() + 5
        while server.policy_file.error is not None and time.monotonic() < deadline:
            time.sleep(0.1)
        assert client.messages.create(**long_prompt).content[0].text == "ok"
        assert server.recorder.flush(10)
        with SessionStore(server.recorder.db_path, read_only=True) as store:
            (event,) = store.list_events("s", kind="request")
    assert event.context_window == 200_000  # the recorder reads the settings in force too
    assert len(upstream.requests) == 1


def test_a_settings_file_emptied_while_an_editor_saves_it_keeps_the_settings_until_it_stays_empty(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from engine.proxy.policy import policy_file

    monkeypatch.setattr(policy_file, "EMPTY_SETTLED_S", 1.5)
    settings = tmp_path / "settings.toml"
    window = '[models."claude-sonnet-4-6"]\ncontext_window = {}\n'
    settings.write_text(window.format(2000) + '[policies]\nguard = { action = "error" }\n', encoding="utf-8")
    watched = policy_file.PolicyFile(settings)
    try:

        def window_in_force() -> int | None:
            entry = watched.settings.models.get("claude-sonnet-4-6") if watched.settings else None
            return entry.context_window if entry else None

        settings.write_bytes(b"")  # truncated: an editor saving in place, paused before it writes
        time.sleep(0.8)  # three looks at the empty file
        assert window_in_force() == 2000 and watched.config.active and watched.error is None
        settings.write_text(window.format(200_000), encoding="utf-8")  # written: read as usual
        deadline = time.monotonic() + 5
        while window_in_force() != 200_000 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert window_in_force() == 200_000
        settings.write_bytes(b"")  # emptied for good: no settings once it stays empty
        deadline = time.monotonic() + 5
        while window_in_force() is not None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert window_in_force() is None and watched.error is None
    finally:
        watched.close()
