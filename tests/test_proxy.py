"""ctxdesk proxy with the real anthropic and openai SDKs against the scripted model server.

Every request the upstream received is recorded exactly (same JSON body), in the right
session, with per-component tokens beside the provider's usage; streams are relayed as they
come; failures (client gone, upstream stalled or down, database write failing, junk bodies)
never take the proxy down; the API key is nowhere in the database or the logs.
"""

from __future__ import annotations

import hashlib
import json
import logging
import socket
import sqlite3
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import httpx
import openai
import pytest
from model_server import HttpReply, ScriptedServer, sse_events
from model_server import anthropic as A
from model_server import openai_chat as C
from model_server import openai_responses as R
from proxy_support import close_sdk_clients, opened  # noqa: F401 - autouse fixture

from engine.cli import main as cli_main
from engine.proxy import UNPARSED_SESSION, ProxyServer, Upstreams
from engine.store import SessionStore

KEY = "sk-ant-test-PROXYSECRET-0123456789"
MODEL = "claude-sonnet-4-6"
SYSTEM = "You are a careful coding agent."
READ = {"name": "Read", "description": "Read a file", "input_schema": {"type": "object", "properties": {}}}


@pytest.fixture
def upstream() -> Iterator[ScriptedServer]:
    server = ScriptedServer()
    A.install(server)
    C.install(server)
    R.install(server)
    with server:
        yield server


@pytest.fixture
def proxy(tmp_path: Path, upstream: ScriptedServer) -> Iterator[ProxyServer]:
    ups = Upstreams(anthropic=upstream.base_url, openai=upstream.base_url + "/v1", read_timeout_s=3.0)
    with ProxyServer(tmp_path / "proxy.db", upstreams=ups) as server:
        yield server


def flushed(proxy: ProxyServer) -> SessionStore:
    assert proxy.recorder.flush()
    return SessionStore(proxy.recorder.db_path, read_only=True)


def anthropic_client(proxy: ProxyServer, **kwargs: Any) -> anthropic.Anthropic:
    return opened(anthropic.Anthropic(base_url=proxy.base_url, api_key=KEY, max_retries=0, **kwargs))


def openai_client(proxy: ProxyServer) -> openai.OpenAI:
    return opened(openai.OpenAI(base_url=proxy.base_url + "/v1", api_key=KEY, max_retries=0))


def database_bytes(path: Path) -> bytes:
    return b"".join(p.read_bytes() for p in sorted(path.parent.glob(path.name + "*")))


def test_anthropic_sdk_calls_are_recorded_exactly_in_one_session(
    proxy: ProxyServer, upstream: ScriptedServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    upstream.queue(A.text("Hello."), A.tool_calls(("Read", {"file_path": "a.py"})), A.text("It prints hi."))
    client = anthropic_client(proxy)
    history: list[dict[str, Any]] = [{"role": "user", "content": "Hi"}]
    first = client.messages.create(model=MODEL, max_tokens=100, system=SYSTEM, messages=history)
    assert first.content[0].text == "Hello."
    history += [{"role": "assistant", "content": "Hello."}, {"role": "user", "content": "What does a.py do?"}]
    second = client.messages.create(
        model=MODEL, max_tokens=100, system=SYSTEM, messages=history, tools=[READ]
    )
    tool = second.content[0]
    history += [
        {"role": "assistant", "content": [tool.model_dump(exclude_none=True)]},
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": tool.id, "content": "print('hi')"}],
        },
    ]
    with client.messages.stream(
        model=MODEL, max_tokens=100, system=SYSTEM, messages=history, tools=[READ]
    ) as s:
        assert s.get_final_text() == "It prints hi."
    with flushed(proxy) as store:
        (session,) = store.list_sessions()
        assert session.source == "proxy" and session.title == "Hi"
        requests = store.list_requests(session.id, with_body=True)
        assert [r.body for r in requests] == [r.body for r in upstream.requests]
        assert [bool(r.stream) for r in requests] == [False, False, True]
        assert [r.stop_reason for r in requests] == ["end_turn", "tool_use", "end_turn"]
        assert all(
            r.status_code == 200 and r.ttfb_ms is not None and r.latency_ms >= r.ttfb_ms for r in requests
        )
        # transcript: each request's new messages, plus each answer, once
        transcript = store.load_transcript(session.id)
        assert [m.role for m in transcript] == ["user", "assistant"] * 3
        assert transcript[-1].text == "It prints hi."
        events = store.list_events(session.id, kind="request")
        assert [e.outcome for e in events] == ["ok"] * 3
        assert [r.event_id for r in requests] == [e.id for e in events]
        last = events[-1]
        assert last.components.system > 0 and last.components.tools > 0 and last.components.tool_results > 0
        assert last.usage is not None and last.usage.prompt_tokens > 0
        assert last.usage.cache_read_input_tokens == requests[-1].cache_read_input_tokens
    assert KEY.encode() not in database_bytes(proxy.recorder.db_path)
    assert KEY not in caplog.text


def test_openai_sdk_chat_completions_streaming_and_not(proxy: ProxyServer, upstream: ScriptedServer) -> None:
    upstream.queue(C.chat_tool_calls(("shell", {"cmd": "ls"})), C.chat_text("Two files."))
    client = openai_client(proxy)
    tools = [{"type": "function", "function": {"name": "shell", "parameters": {"type": "object"}}}]
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": "List."},
    ]
    first = client.chat.completions.create(model="gpt-4o", messages=messages, tools=tools, user="agent-7")
    call = first.choices[0].message.tool_calls[0]
    messages += [
        first.choices[0].message.model_dump(exclude_none=True),
        {"role": "tool", "tool_call_id": call.id, "content": "a.py b.py"},
    ]
    stream = client.chat.completions.create(
        model="gpt-4o", messages=messages, tools=tools, user="agent-7", stream=True,
        stream_options={"include_usage": True},
    )  # fmt: skip
    text = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
    assert text == "Two files."
    with flushed(proxy) as store:
        (session,) = store.list_sessions()
        assert session.id == "agent-7" and session.provider == "openai"
        requests = store.list_requests(session.id, with_body=True)
        assert [r.body for r in requests] == [r.body for r in upstream.requests]
        assert requests[1].cache_read_input_tokens == requests[0].input_tokens
        assert requests[1].response["content"][0]["content"] == "Two files."
        events = store.list_events(session.id, kind="request")
        assert events[1].components.system > 0 and events[1].components.tool_results > 0
        assert [m.role for m in store.load_transcript(session.id)] == [
            "user",
            "assistant",
            "tool",
            "assistant",
        ]


def test_openai_sdk_responses_stream(proxy: ProxyServer, upstream: ScriptedServer) -> None:
    upstream.queue([{"type": "reasoning", "summary": "thinking"}, {"type": "message", "text": "Done."}])
    client = openai_client(proxy)
    stream = client.responses.create(
        model="gpt-5", instructions=SYSTEM, input="Say done.", prompt_cache_key="run-1", stream=True
    )
    (final,) = [e.response for e in stream if e.type == "response.completed"]
    assert final.output_text == "Done."
    with flushed(proxy) as store:
        (request,) = store.list_requests("run-1", with_body=True)
        assert request.body == upstream.requests[0].body
        assert request.api == "openai_responses" and request.stop_reason == "completed"
        assert request.input_tokens is not None and request.output_tokens
        (event,) = store.list_events("run-1", kind="request")
        assert event.components.system > 0 and event.usage.output_tokens == request.output_tokens


def test_streams_are_relayed_as_they_come_not_buffered(tmp_path: Path, upstream: ScriptedServer) -> None:
    release = threading.Event()

    def slow_stream(server: ScriptedServer, request: Any) -> HttpReply:
        def chunks() -> Iterator[bytes]:
            yield b"event: ping\ndata: {}\n\n"
            release.wait(10)
            yield b"event: done\ndata: {}\n\n"

        return HttpReply(200, chunks=chunks(), content_type="text/event-stream")  # type: ignore[arg-type]

    upstream.add_route("POST", "/slow", slow_stream)
    with ProxyServer(tmp_path / "p.db", upstreams=Upstreams(anthropic=upstream.base_url)) as proxy:
        response_cm = httpx.stream("POST", proxy.base_url + "/slow", json={}, headers={"x-api-key": KEY})
        with response_cm as response:
            chunks = response.iter_raw()
            assert next(chunks).startswith(b"event: ping")  # arrives while the upstream is still held
            release.set()
            assert b"done" in b"".join(chunks)


def test_upstream_errors_come_back_as_they_were_and_prompt_too_long_is_an_event(
    proxy: ProxyServer, upstream: ScriptedServer
) -> None:
    upstream.queue(A.prompt_too_long(), A.overloaded())
    client = anthropic_client(proxy)
    with pytest.raises(anthropic.BadRequestError, match="prompt is too long"):
        client.messages.create(model=MODEL, max_tokens=10, messages=[{"role": "user", "content": "x"}])
    with pytest.raises(anthropic.APIStatusError) as overloaded:
        client.messages.create(model=MODEL, max_tokens=10, messages=[{"role": "user", "content": "y"}])
    assert overloaded.value.status_code == 529
    with flushed(proxy) as store:
        events = [e for s in store.list_sessions() for e in store.list_events(s.id, kind="request")]
        assert sorted(e.outcome for e in events) == ["context_length_exceeded", "provider_error"]
        too_long = next(e for e in events if e.outcome == "context_length_exceeded")
        assert "prompt is too long" in too_long.reason and too_long.components.conversation > 0


def test_a_client_that_goes_away_mid_stream_leaves_the_proxy_serving(
    proxy: ProxyServer, upstream: ScriptedServer
) -> None:
    def endless(server: ScriptedServer, request: Any) -> HttpReply:
        def chunks() -> Iterator[bytes]:
            start = {
                "type": "message_start",
                "message": {"id": "m", "model": MODEL, "content": [], "usage": {}},
            }
            yield from sse_events([("message_start", start)])
            while True:
                time.sleep(0.01)
                yield b'event: ping\ndata: {"type": "ping"}\n\n'

        return HttpReply(200, chunks=chunks(), content_type="text/event-stream")  # type: ignore[arg-type]

    upstream.routes.insert(0, ("POST", "/v1/messages", endless))
    body = {"model": MODEL, "max_tokens": 10, "stream": True, "messages": [{"role": "user", "content": "go"}]}
    with httpx.stream(
        "POST", proxy.base_url + "/v1/messages", json=body, headers={"x-api-key": KEY}
    ) as response:
        assert next(response.iter_raw())  # read a little, then hang up
    upstream.routes.pop(0)
    upstream.queue(A.text("still here"))
    reply = anthropic_client(proxy).messages.create(
        model=MODEL, max_tokens=10, messages=[{"role": "user", "content": "hi"}]
    )
    assert reply.content[0].text == "still here"
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        with flushed(proxy) as store:
            outcomes = {
                e.outcome for s in store.list_sessions() for e in store.list_events(s.id, kind="request")
            }
        if "client_disconnected" in outcomes:
            break
        time.sleep(0.1)
    assert outcomes == {"client_disconnected", "ok"}


def test_a_client_that_hangs_up_after_the_whole_answer_has_it_recorded(
    proxy: ProxyServer, upstream: ScriptedServer
) -> None:
    """Codex closes its stream on response.completed, sometimes before the upstream's last bytes:
    the answer was whole, so it is recorded (outcome ok), not dropped as a disconnect."""
    done = threading.Event()

    def whole_then_lingers(server: ScriptedServer, request: Any) -> HttpReply:
        def chunks() -> Iterator[bytes]:
            yield from sse_events([
                ("message_start", {"type": "message_start", "message": {
                    "id": "m", "model": MODEL, "content": [], "usage": {"input_tokens": 5}}}),
                ("content_block_start", {"type": "content_block_start", "index": 0,
                                         "content_block": {"type": "text", "text": ""}}),
                ("content_block_delta", {"type": "content_block_delta", "index": 0,
                                         "delta": {"type": "text_delta", "text": "Clean."}}),
                ("content_block_stop", {"type": "content_block_stop", "index": 0}),
                ("message_delta", {"type": "message_delta", "delta": {"stop_reason": "end_turn"},
                                   "usage": {"output_tokens": 2}}),
                ("message_stop", {"type": "message_stop"}),
            ])  # fmt: skip
            while not done.wait(0.01):  # the upstream keeps its stream open a moment longer
                yield b": keep-alive\n\n"

        return HttpReply(200, chunks=chunks(), content_type="text/event-stream")  # type: ignore[arg-type]

    upstream.routes.insert(0, ("POST", "/v1/messages", whole_then_lingers))
    body = {"model": MODEL, "max_tokens": 10, "stream": True, "messages": [{"role": "user", "content": "go"}]}
    try:
        with httpx.stream(
            "POST", proxy.base_url + "/v1/messages", json=body, headers={"x-api-key": KEY}
        ) as response:
            for line in response.iter_lines():
                if line == "event: message_stop":
                    break  # the whole answer is here: hang up, as Codex does
        deadline = time.monotonic() + 10
        events: list[Any] = []
        while time.monotonic() < deadline and not events:
            with flushed(proxy) as store:
                events = [e for s in store.list_sessions() for e in store.list_events(s.id, kind="request")]
                texts = [m.text for s in store.list_sessions() for m in store.load_transcript(s.id)]
            time.sleep(0.1)
    finally:
        done.set()
        upstream.routes.pop(0)
    assert [e.outcome for e in events] == ["ok"]
    assert events[0].details["client_closed_after_answer"] is True
    assert texts == ["go", "Clean."]


def test_a_stalled_upstream_gets_a_timeout_in_the_providers_shape(
    tmp_path: Path, upstream: ScriptedServer
) -> None:
    upstream.queue(A.reply(A.text_block("late"), delay=5.0), A.text("fine"))
    ups = Upstreams(anthropic=upstream.base_url, read_timeout_s=0.3)
    with ProxyServer(tmp_path / "p.db", upstreams=ups) as proxy:
        client = anthropic_client(proxy)
        with pytest.raises(anthropic.APIStatusError) as stalled:
            client.messages.create(model=MODEL, max_tokens=10, messages=[{"role": "user", "content": "a"}])
        assert stalled.value.status_code == 504 and "upstream timeout" in str(stalled.value)
        assert client.messages.create(model=MODEL, max_tokens=10, messages=[{"role": "user", "content": "b"}])
        with flushed(proxy) as store:
            outcomes = sorted(
                e.outcome for s in store.list_sessions() for e in store.list_events(s.id, kind="request")
            )
    assert outcomes == ["ok", "upstream_timeout"]


def test_an_unreachable_upstream_is_a_502(tmp_path: Path) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{sock.getsockname()[1]}"
    with ProxyServer(tmp_path / "p.db", upstreams=Upstreams(anthropic=dead, openai=dead)) as proxy:
        with pytest.raises(anthropic.APIStatusError) as down:
            anthropic_client(proxy).messages.create(
                model=MODEL, max_tokens=5, messages=[{"role": "user", "content": "x"}]
            )
        assert down.value.status_code == 502
        with flushed(proxy) as store:
            (session,) = store.list_sessions()
            (request,) = store.list_requests(session.id, with_body=True)
    # the body streamed towards an upstream that never took it is still recorded whole
    assert request.body == {"model": MODEL, "max_tokens": 5, "messages": [{"role": "user", "content": "x"}]}
    assert request.error_type == "upstream_unreachable"


def _raw_upstream(answer: bytes, half: int) -> tuple[str, threading.Event, bytearray, threading.Thread]:
    """A one-shot HTTP upstream on a raw socket: it notes when ``half`` body bytes have arrived."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    arrived, received = threading.Event(), bytearray()

    def serve() -> None:
        conn, _ = listener.accept()
        with conn, listener:
            data = b""
            while b"\r\n\r\n" not in data:
                data += conn.recv(65536)
            head, rest = data.split(b"\r\n\r\n", 1)
            received.extend(rest)
            length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n")
                          if line.lower().startswith(b"content-length:"))  # fmt: skip
            while len(received) < length:
                if len(received) >= half:
                    arrived.set()
                chunk = conn.recv(65536)
                if not chunk:
                    break
                received.extend(chunk)
            arrived.set()
            conn.sendall(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\nconnection: close\r\n"
                         + f"content-length: {len(answer)}\r\n\r\n".encode() + answer)  # fmt: skip

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    return f"http://127.0.0.1:{listener.getsockname()[1]}", arrived, received, thread


def test_the_request_body_streams_upstream_as_it_arrives_and_is_recorded_whole(tmp_path: Path) -> None:
    body = json.dumps(
        {"model": MODEL, "max_tokens": 5, "messages": [{"role": "user", "content": "lorem ipsum " * 200_000}]}
    ).encode()
    half = len(body) // 2
    answer = json.dumps({
        "id": "msg_1", "type": "message", "role": "assistant", "model": MODEL, "stop_reason": "end_turn",
        "content": [{"type": "text", "text": "ok"}], "usage": {"input_tokens": 3, "output_tokens": 1},
    }).encode()  # fmt: skip
    base, arrived, received, thread = _raw_upstream(answer, half)
    seen_before_the_rest: list[bool] = []

    def agent_body() -> Iterator[bytes]:
        for start in range(0, half, 65536):
            yield body[start : min(half, start + 65536)]
        # the upstream must already hold the first half: the proxy forwards as the body arrives
        seen_before_the_rest.append(arrived.wait(10))
        yield body[half:]

    with ProxyServer(tmp_path / "p.db", upstreams=Upstreams(anthropic=base)) as proxy:
        reply = httpx.post(
            proxy.base_url + "/v1/messages", content=agent_body(), timeout=30,
            headers={"x-api-key": KEY, "anthropic-version": "2023-06-01", "content-type": "application/json",
                     "content-length": str(len(body))},
        )  # fmt: skip
        thread.join(10)
        assert reply.status_code == 200 and reply.json()["content"][0]["text"] == "ok"
        assert seen_before_the_rest == [True]
        assert bytes(received) == body
        with flushed(proxy) as store:
            (session,) = store.list_sessions()
            (request,) = store.list_requests(session.id, with_body=True)
    assert request.request_bytes == len(body)
    assert request.request_sha256 == hashlib.sha256(body).hexdigest()
    assert request.body == json.loads(body) and request.stop_reason == "end_turn"


def test_a_failing_database_write_is_retried_then_degraded_and_the_agent_is_answered(
    proxy: ProxyServer, upstream: ScriptedServer
) -> None:
    upstream.queue(A.text("one"), A.text("two"))
    client = anthropic_client(proxy)
    client.messages.create(model=MODEL, max_tokens=5, messages=[{"role": "user", "content": "first"}])
    assert proxy.recorder.flush()
    with sqlite3.connect(proxy.recorder.db_path) as conn:
        conn.execute("DROP TABLE model_requests")
    reply = client.messages.create(
        model=MODEL, max_tokens=5, messages=[{"role": "user", "content": "second"}]
    )
    assert reply.content[0].text == "two"
    assert proxy.recorder.flush()
    assert proxy.recorder.failed == 1
    with sqlite3.connect(proxy.recorder.db_path) as conn:
        rows = conn.execute(
            "SELECT kind, outcome, reason FROM context_events WHERE kind = 'degraded'"
        ).fetchall()
    assert len(rows) == 1 and "model_requests" in rows[0][2]


def test_non_json_bodies_and_unknown_paths_pass_through_and_are_recorded_unparsed(
    proxy: ProxyServer, upstream: ScriptedServer
) -> None:
    headers = {"x-api-key": KEY, "content-type": "application/json"}
    junk = httpx.post(proxy.base_url + "/v1/messages", content=b"not json{", headers=headers)
    direct = httpx.post(upstream.base_url + "/v1/messages", content=b"not json{", headers=headers)
    assert (junk.status_code, junk.content) == (direct.status_code, direct.content)
    other = httpx.get(proxy.base_url + "/v1/models?limit=5", headers={"Authorization": f"Bearer {KEY}"})
    assert other.status_code == 404 and other.json()["error"]["message"] == "/v1/models"
    assert upstream.requests[-1].path == "/v1/models" and upstream.requests[-1].query == {"limit": ["5"]}
    with flushed(proxy) as store:
        requests = store.list_requests(UNPARSED_SESSION, with_body=True)
    assert [(r.api, r.parsed, r.status_code) for r in requests] == [
        ("anthropic_messages", False, direct.status_code),
        ("passthrough", False, 404),
    ]
    assert requests[0].raw_body == b"not json{" and requests[1].path == "/v1/models?limit=5"
    assert KEY.encode() not in database_bytes(proxy.recorder.db_path)


def test_sessions_follow_the_agents_own_ids_and_sub_agents_become_child_sessions(
    proxy: ProxyServer, upstream: ScriptedServer
) -> None:
    upstream.queue(*(A.text(f"r{i}") for i in range(5)))
    client = anthropic_client(proxy, default_headers={"X-Claude-Code-Session-Id": "cc-1"})
    meta = {"user_id": json.dumps({"device_id": "d", "session_id": "cc-1"})}
    main = [{"role": "user", "content": "main task"}]
    client.messages.create(
        model=MODEL, max_tokens=5, system=SYSTEM, messages=main, tools=[READ], metadata=meta
    )
    client.messages.create(
        model=MODEL, max_tokens=5, system="You are a sub-agent.", messages=[{"role": "user", "content": "sub task"}],
        metadata=meta,
    )  # fmt: skip
    main += [{"role": "assistant", "content": "r0"}, {"role": "user", "content": "next"}]
    client.messages.create(
        model=MODEL, max_tokens=5, system=SYSTEM, messages=main, tools=[READ], metadata=meta
    )
    other = anthropic_client(proxy, default_headers={"X-Ctxdesk-Session": "mine"})
    other.messages.create(model=MODEL, max_tokens=5, messages=[{"role": "user", "content": "other"}])
    anonymous = anthropic_client(proxy)
    anonymous.messages.create(model=MODEL, max_tokens=5, messages=[{"role": "user", "content": "anon"}])
    with flushed(proxy) as store:
        sessions = {s.id: s for s in store.list_sessions()}
        anon_id = next(i for i in sessions if i.startswith("proxy-"))
        assert set(sessions) == {"cc-1", "cc-1.sub1", "mine", anon_id}
        assert sessions["cc-1.sub1"].parent_session_id == "cc-1"
        assert len(store.list_requests("cc-1")) == 2 and len(store.list_requests("cc-1.sub1")) == 1
        assert [m.text for m in store.load_transcript("cc-1")] == ["main task", "r0", "next", "r2"]
        assert [t.name for t in store.list_tools("cc-1")] == ["Read"]


def test_count_tokens_is_forwarded_and_recorded_beside_its_session(proxy: ProxyServer) -> None:
    client = anthropic_client(proxy, default_headers={"X-Claude-Code-Session-Id": "cc-2"})
    messages = [{"role": "user", "content": "count me"}]
    counted = client.messages.count_tokens(model=MODEL, messages=messages)
    assert counted.input_tokens > 0
    with flushed(proxy) as store:
        (request,) = [r for s in store.list_sessions() for r in store.list_requests(s.id)]
    assert request.api == "anthropic_count_tokens" and request.input_tokens == counted.input_tokens


def test_the_cli_refuses_a_remote_host_without_allow_remote(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli_main(["proxy", "--host", "0.0.0.0", "--db", "/tmp/never.db"]) == 1
    assert "--allow-remote" in capsys.readouterr().err
    assert not Path("/tmp/never.db").exists()


def test_secret_query_parameters_are_masked_in_what_is_recorded(
    proxy: ProxyServer, upstream: ScriptedServer
) -> None:
    response = httpx.post(
        proxy.base_url + f"/v1beta/models/x:generateContent?key={KEY}&alt=sse", content=b"{}"
    )
    assert upstream.requests[-1].query["key"] == [KEY]  # forwarded as sent
    assert response.status_code == 404
    with flushed(proxy) as store:
        (request,) = store.list_requests(UNPARSED_SESSION)
    assert request.path == "/v1beta/models/x:generateContent?key=***&alt=sse"
    assert KEY.encode() not in database_bytes(proxy.recorder.db_path)


def test_the_command_on_a_port_in_use_prints_only_its_error(tmp_path: Path) -> None:
    import os
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[1]
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = subprocess.run(
            [sys.executable, "-m", "engine.cli", "proxy", "--port", str(port), "--db", str(tmp_path / "cli.db")],
            cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(root)}, capture_output=True, text=True, timeout=60,
        )  # fmt: skip
    assert done.returncode == 1
    assert done.stdout == ""  # no "listening on" banner for a port it never got
    assert f"cannot listen on 127.0.0.1:{port}" in done.stderr and "address already in use" in done.stderr


def test_the_command_prints_where_it_listens_and_the_environment_line(
    tmp_path: Path, upstream: ScriptedServer
) -> None:
    import os
    import subprocess
    import sys

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    root = Path(__file__).resolve().parents[1]
    cmd = [sys.executable, "-m", "engine.cli", "proxy", "--port", str(port), "--db", str(tmp_path / "cli.db"),
           "--anthropic-upstream", upstream.base_url]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(root)}
    with subprocess.Popen(
        cmd, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True
    ) as process:
        try:
            lines = [process.stdout.readline() for _ in range(4)]
            assert lines[0].startswith(f"ctxdesk proxy listening on http://127.0.0.1:{port}")
            url = f"http://127.0.0.1:{port}"
            assert any(f"export ANTHROPIC_BASE_URL={url} OPENAI_BASE_URL={url}/v1" in line for line in lines)
            upstream.queue(A.text("via the command"))
            client = opened(anthropic.Anthropic(base_url=url, api_key=KEY, max_retries=0))
            for _ in range(200):
                try:
                    reply = client.messages.create(
                        model=MODEL, max_tokens=5, messages=[{"role": "user", "content": "hi"}]
                    )
                    break
                except anthropic.APIConnectionError:
                    time.sleep(0.1)
            assert reply.content[0].text == "via the command"
        finally:
            process.terminate()  # SIGTERM: what was answered is recorded before the process ends
            process.wait(30)
    with SessionStore(tmp_path / "cli.db", read_only=True) as store:
        assert [r.status_code for s in store.list_sessions() for r in store.list_requests(s.id)] == [200]
