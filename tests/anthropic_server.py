"""A local fake of Anthropic's Messages API for tests: ``POST /v1/messages`` with scripted replies.

Runs ``http.server`` on 127.0.0.1 (random port) in a thread. Queue replies with ``success``,
``overloaded`` (529), ``prompt_too_long`` (400 invalid_request_error) or ``slow`` (delays, for
client timeouts); every request received is kept in ``.requests`` with its parsed JSON body.
Point the real SDK at it: ``anthropic.Anthropic(api_key="test", base_url=server.base_url,
max_retries=0, timeout=...)``.

    with FakeAnthropicServer(success("a summary")) as server:
        ...
        assert server.requests[0].body["model"] == "claude-haiku-4-5"
"""

from __future__ import annotations

import json
import threading
from collections import deque
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass(frozen=True)
class ScriptedResponse:
    """One reply: HTTP status, JSON body, and seconds to wait before sending it."""

    status: int = 200
    body: dict[str, Any] = field(default_factory=dict)
    delay: float = 0.0
    headers: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class RecordedRequest:
    method: str
    path: str
    headers: dict[str, str]  # names lower-cased
    body: Any

    @property
    def text(self) -> str:
        """Every string in the body, joined: what a test searches for sent content."""
        return "\n".join(_strings(self.body))


def _strings(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for v in value.values() for s in _strings(v)]
    if isinstance(value, list):
        return [s for v in value for s in _strings(v)]
    return []


def message_body(
    text: str,
    *,
    model: str = "claude-haiku-4-5",
    input_tokens: int = 100,
    output_tokens: int = 20,
    stop_reason: str = "end_turn",
    content: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """A Messages API response body with one text block (or the given content blocks)."""
    return {
        "id": "msg_fake_0001",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content if content is not None else [{"type": "text", "text": text}],
        "stop_reason": stop_reason,
        "stop_sequence": None,
        "usage": {"input_tokens": input_tokens, "output_tokens": output_tokens},
    }


def error_body(error_type: str, message: str) -> dict[str, Any]:
    return {"type": "error", "error": {"type": error_type, "message": message}}


def success(text: str = "A summary.", **kwargs: Any) -> ScriptedResponse:
    return ScriptedResponse(200, message_body(text, **kwargs))


def overloaded() -> ScriptedResponse:
    return ScriptedResponse(529, error_body("overloaded_error", "Overloaded"))


def prompt_too_long(tokens: int = 210_000, maximum: int = 200_000) -> ScriptedResponse:
    return ScriptedResponse(
        400, error_body("invalid_request_error", f"prompt is too long: {tokens} tokens > {maximum} maximum")
    )


def slow(seconds: float, then: ScriptedResponse | None = None) -> ScriptedResponse:
    """``then`` (default: a success), sent only after ``seconds``: longer than a client's timeout."""
    reply = then or success()
    return ScriptedResponse(reply.status, reply.body, seconds, reply.headers)


class FakeAnthropicServer:
    """Serves scripted replies in order; once they run out, ``default`` (a 500 unless given)."""

    def __init__(self, *responses: ScriptedResponse, default: ScriptedResponse | None = None) -> None:
        self._queue: deque[ScriptedResponse] = deque(responses)
        self.default = default or ScriptedResponse(500, error_body("api_error", "no scripted response left"))
        self.requests: list[RecordedRequest] = []
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever,
            kwargs={"poll_interval": 0.05},
            name="fake-anthropic",
            daemon=True,
        )

    @property
    def base_url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def queue(self, *responses: ScriptedResponse) -> None:
        with self._lock:
            self._queue.extend(responses)

    def start(self) -> FakeAnthropicServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopping.set()  # wakes handlers sleeping in a slow reply
        if self._thread.is_alive():
            self._server.shutdown()
        self._server.server_close()

    def __enter__(self) -> FakeAnthropicServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _next(self) -> ScriptedResponse:
        with self._lock:
            return self._queue.popleft() if self._queue else self.default

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:  # keep test output quiet
                return

            def do_POST(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                raw = self.rfile.read(length) if length else b""
                try:
                    body: Any = json.loads(raw) if raw else None
                except json.JSONDecodeError:
                    body = raw.decode("utf-8", "replace")
                path = self.path.split("?", 1)[0]
                with fake._lock:
                    fake.requests.append(
                        RecordedRequest("POST", path, {k.lower(): v for k, v in self.headers.items()}, body)
                    )
                if path != "/v1/messages":
                    self._reply(ScriptedResponse(404, error_body("not_found_error", f"no route {path}")))
                    return
                reply = fake._next()
                if reply.delay and fake._stopping.wait(reply.delay):
                    return
                self._reply(reply)

            def _reply(self, reply: ScriptedResponse) -> None:
                payload = json.dumps(reply.body).encode()
                try:
                    self.send_response(reply.status)
                    self.send_header("content-type", "application/json")
                    self.send_header("content-length", str(len(payload)))
                    self.send_header("request-id", "req_fake_0001")
                    for name, value in reply.headers:
                        self.send_header(name, value)
                    self.end_headers()
                    self.wfile.write(payload)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up (a timeout test): nothing to send to

        return Handler
