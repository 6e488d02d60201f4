"""``ctxdesk proxy --export-otlp URL``: each call the proxy records is sent, as it is recorded, as the same
GenAI span ``ctxdesk export otlp`` writes (same ids, same attributes), to a real local OTLP endpoint and
to a real Phoenix; a dead or slow collector never breaks or holds up the proxy (drops counted)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import anthropic
import httpx
import pytest
from model_server import ScriptedServer
from model_server import anthropic as A
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.trace.v1.trace_pb2 import Span
from proxy_support import close_sdk_clients, opened  # noqa: F401 - autouse fixture
from starlette.responses import Response
from test_otel_export import CaptureEndpoint, _free_port, phoenix, phoenix_bin  # noqa: F401 - fixture

from engine.errors import ValidationError
from engine.otel.live import LiveExporter
from engine.otel.spans import session_spans
from engine.proxy import ProxyServer, Upstreams
from engine.store import SessionStore

ROOT = Path(__file__).parent.parent
PROMPTS = ("what is in README.md?", "and in main.py?", "thanks")


def _spans_of(bodies: list[bytes]) -> list[Span]:
    spans = []
    for body in bodies:
        request = ExportTraceServiceRequest()
        request.ParseFromString(body)
        spans += [s for rs in request.resource_spans for ss in rs.scope_spans for s in ss.spans]
    return spans


def _usage(n: int) -> dict[str, int]:
    return {
        "input_tokens": 40 + n,
        "output_tokens": 7 + n,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 0,
    }


def _converse(base_url: str, upstream: ScriptedServer, prompts: tuple[str, ...] = PROMPTS) -> None:
    """One conversation through the proxy: each prompt sent with the history so far (one session)."""
    client = opened(anthropic.Anthropic(base_url=base_url, api_key="sk-test", max_retries=0))
    messages: list[dict[str, str]] = []
    for n, prompt in enumerate(prompts):
        upstream.queue(A.text(f"answer {n}", usage=_usage(n)))
        messages.append({"role": "user", "content": prompt})
        reply = client.messages.create(model="claude-sonnet-4-6", max_tokens=50, messages=messages)
        messages.append({"role": "assistant", "content": reply.content[0].text})


def test_each_recorded_call_is_exported_as_the_span_export_otlp_writes(tmp_path: Path) -> None:
    db = tmp_path / "proxy.db"
    with ScriptedServer() as upstream, CaptureEndpoint() as collector:
        A.install(upstream)
        with (
            LiveExporter(db, collector.url) as exporter,
            ProxyServer(
                db, upstreams=Upstreams(anthropic=upstream.base_url), on_recorded=exporter.submit
            ) as proxy,
        ):
            _converse(proxy.base_url, upstream)
            assert proxy.recorder.flush(30)
            assert exporter.flush(30)
        stats = exporter.stats()
    live = _spans_of(collector.bodies)
    with SessionStore(db, read_only=True) as store:
        (session,) = store.list_sessions()
        expected = session_spans(session, store.list_events(session.id))
    calls = [s for s in live if s.kind == Span.SPAN_KIND_CLIENT]
    assert len(calls) == len(PROMPTS) and stats.exported_spans == len(live) == len(PROMPTS) + 1
    assert (stats.dropped_events, stats.failed_spans) == (0, 0)
    (root,) = [s for s in live if not s.parent_span_id]  # sent once, with the session's first call
    assert root.span_id == expected[0].span_id and root.trace_id == expected[0].trace_id
    by_id = {s.span_id: s for s in expected[1:]}
    for span in calls:  # the very span `ctxdesk export otlp` sends for that call
        assert span.parent_span_id == root.span_id
        assert span == by_id[span.span_id]
    tokens = [{a.key: a.value.int_value for a in s.attributes}["gen_ai.usage.input_tokens"] for s in calls]
    assert tokens == [40, 41, 42]  # the provider's usage, as the scripted upstream answered it


def test_a_dead_collector_never_breaks_the_proxy_and_its_losses_are_counted(tmp_path: Path) -> None:
    db, dead = tmp_path / "proxy.db", f"http://127.0.0.1:{_free_port()}"
    with ScriptedServer() as upstream:
        A.install(upstream)
        with (
            LiveExporter(db, dead, timeout=1.0) as exporter,
            ProxyServer(
                db, upstreams=Upstreams(anthropic=upstream.base_url), on_recorded=exporter.submit
            ) as proxy,
        ):
            _converse(proxy.base_url, upstream)
            assert proxy.recorder.flush(30)
            assert exporter.flush(30)
        stats = exporter.stats()
    assert stats.exported_spans == 0 and stats.failed_spans == len(PROMPTS) + 1  # the root and each call
    assert "cannot be reached" in (stats.last_error or "")
    with SessionStore(db, read_only=True) as store:  # everything recorded all the same
        (session,) = store.list_sessions()
        assert len(store.list_events(session.id, kind="request")) == len(PROMPTS)


def test_a_collector_that_falls_behind_makes_the_exporter_drop_not_the_proxy_wait(tmp_path: Path) -> None:
    db = tmp_path / "proxy.db"
    release = threading.Event()

    def stuck(body: bytes) -> Response:  # holds every export request until the test lets it go
        release.wait(30)
        return Response(status_code=200)

    with ScriptedServer() as upstream, CaptureEndpoint(stuck) as collector:
        A.install(upstream)
        prompts = tuple(f"question {n}" for n in range(6))
        with (
            LiveExporter(db, collector.url, queue_limit=1, timeout=30) as exporter,
            ProxyServer(
                db, upstreams=Upstreams(anthropic=upstream.base_url), on_recorded=exporter.submit
            ) as proxy,
        ):
            _converse(proxy.base_url, upstream, prompts)  # answered while the collector holds the first post
            assert proxy.recorder.flush(30)
            assert proxy.recorder.recorded == len(prompts)
            dropped = exporter.stats().dropped_events
            release.set()
            assert exporter.flush(30)
        stats = exporter.stats()
    # one post in flight, one write queued: the rest of the six calls dropped, counted, none lost silently
    assert dropped >= len(prompts) - 2 and stats.dropped_events == dropped
    assert stats.exported_spans + stats.dropped_events == len(prompts) + 1  # + the session's root span


def test_a_malformed_export_url_is_refused_before_the_proxy_starts(tmp_path: Path) -> None:
    with pytest.raises(ValidationError, match="OTLP endpoint"):
        LiveExporter(tmp_path / "p.db", "127.0.0.1:4318")
    with pytest.raises(ValidationError, match="queue_limit"):
        LiveExporter(tmp_path / "p.db", "http://127.0.0.1:4318", queue_limit=0)


def test_the_proxy_command_exports_live_and_says_what_it_sent(tmp_path: Path) -> None:
    db, port = tmp_path / "proxy.db", _free_port()
    with ScriptedServer() as upstream, CaptureEndpoint() as collector:
        A.install(upstream)
        command = [sys.executable, "-m", "engine.cli", "proxy", "--port", str(port), "--db", str(db),
                   "--anthropic-upstream", upstream.base_url, "--export-otlp", collector.url,
                   "--export-otlp-header", "authorization=Bearer team-key"]  # fmt: skip
        with subprocess.Popen(
            command, cwd=ROOT, env={**os.environ, "PYTHONUNBUFFERED": "1"}, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, text=True,
        ) as process:  # fmt: skip
            try:
                banner = [process.stdout.readline() for _ in range(6)]
                assert any(
                    f"exported as a GenAI span to {collector.url}/v1/traces" in line for line in banner
                )
                _converse(f"http://127.0.0.1:{port}", upstream, PROMPTS[:2])
            finally:
                process.send_signal(signal.SIGINT)  # Ctrl-C: the proxy finishes recording and exporting
                stdout, stderr = process.communicate(timeout=60)
    assert "Traceback" not in stderr, stderr
    assert f"exported 3 span(s) to {collector.url}/v1/traces" in stdout, stdout
    assert {h["authorization"] for h in collector.headers} == {"Bearer team-key"}
    assert len([s for s in _spans_of(collector.bodies) if s.kind == Span.SPAN_KIND_CLIENT]) == 2


@pytest.mark.slow
@pytest.mark.skipif(phoenix_bin() is None, reason="arize-phoenix not installed (set $CTXDESK_PHOENIX_BIN)")
def test_a_real_phoenix_shows_the_proxys_calls_as_they_happen(tmp_path: Path, phoenix: str) -> None:  # noqa: F811
    db = tmp_path / "proxy.db"
    with ScriptedServer() as upstream:
        A.install(upstream)
        with (
            LiveExporter(db, phoenix) as exporter,
            ProxyServer(
                db, upstreams=Upstreams(anthropic=upstream.base_url), on_recorded=exporter.submit
            ) as proxy,
        ):
            _converse(proxy.base_url, upstream)
            assert proxy.recorder.flush(30) and exporter.flush(60)
    assert exporter.stats().failed_spans == 0
    deadline = time.monotonic() + 60
    while True:  # Phoenix inserts what it received in the background
        answer = httpx.get(f"{phoenix}/v1/projects/default/spans", params={"limit": 100}, timeout=10)
        spans = answer.json()["data"]
        if len(spans) == len(PROMPTS) + 1 or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    calls = [s for s in spans if s["span_kind"] == "LLM"]  # each call's tokens (order: the local test's)
    assert sorted(c["attributes"]["llm.token_count.prompt"] for c in calls) == [40, 41, 42]
    (root,) = [s for s in spans if s["parent_id"] is None]
    assert all(c["parent_id"] == root["context"]["span_id"] for c in calls)
