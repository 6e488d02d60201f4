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
from test_otel_export import CaptureEndpoint, _free_port, phoenix, phoenix_expected  # noqa: F401 - fixture

from engine.errors import ValidationError
from engine.events import ContextEvent, ProviderUsage
from engine.otel.live import LiveExporter, LiveExportStats
from engine.otel.spans import session_spans, span_id_of
from engine.proxy import ProxyServer, Upstreams
from engine.store import SessionStore

ROOT = Path(__file__).parent.parent
PROMPTS = ("what is in README.md?", "and in main.py?", "thanks")
MODEL = "claude-sonnet-4-6"


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
def _call(store: SessionStore, session_id: str, n: int) -> tuple[str, int]:
    """Record one model call of the session the way the proxy does; its (session, event) ids."""
    usage = ProviderUsage(input_tokens=100 + n, output_tokens=5)
    return session_id, store.record_event(session_id, ContextEvent(kind="request", model=MODEL, usage=usage))


def _session(store: SessionStore) -> str:
    return store.create_session(model=MODEL, provider="anthropic", source="proxy")


def _roots_and_calls(bodies: list[bytes]) -> tuple[list[Span], list[Span]]:
    spans = _spans_of(bodies)
    return [s for s in spans if not s.parent_span_id], [s for s in spans if s.parent_span_id]


def _export(db: Path, url: str, *batches: list[tuple[str, int]]) -> LiveExportStats:
    """One exporter's life: each batch submitted and posted before the next."""
    with LiveExporter(db, url) as exporter:
        for batch in batches:
            exporter.submit(batch)
            assert exporter.flush(30)
        return exporter.stats()


@pytest.mark.parametrize(
    ("written_first", "reads"),
    [
        # as the proxy does: each call written then handed over; the first read takes the guard too
        pytest.param(False, [2, 3, 4, 5, 6, 7], id="written-as-handed-over"),
        # the exporter fell behind the writer: the first read takes every row, later batches none
        pytest.param(True, [7] * 6, id="exporter-behind"),
    ],
)
def test_each_event_row_is_read_once(tmp_path: Path, written_first: bool, reads: list[int]) -> None:
    db = tmp_path / "proxy.db"
    with SessionStore(db) as store:
        sid = _session(store)
        store.record_event(sid, ContextEvent(kind="offload"))  # not a span, never handed over
        calls = [_call(store, sid, n) for n in range(6)] if written_first else []
    seen = []
    with CaptureEndpoint() as collector, LiveExporter(db, collector.url) as exporter:
        for n in range(6):
            if not written_first:
                with SessionStore(db) as store:
                    calls.append(_call(store, sid, n))
            exporter.submit([calls[n]])
            assert exporter.flush(30)
            seen.append(exporter.stats().read_events)
    roots, children = _roots_and_calls(collector.bodies)
    assert seen == reads
    assert len(roots) == 1 and [s.span_id for s in children] == [span_id_of(sid, i) for _, i in calls]
    assert [_attrs(s)["gen_ai.usage.input_tokens"] for s in children] == [100, 101, 102, 103, 104, 105]


def test_a_restarted_exporter_sends_new_calls_but_not_a_second_root(tmp_path: Path) -> None:
    db = tmp_path / "proxy.db"
    with SessionStore(db) as store:
        old = _session(store)
        before = [_call(store, old, n) for n in range(2)]
    with CaptureEndpoint() as collector:
        first = _export(db, collector.url, before)
        with SessionStore(
            db
        ) as store:  # the proxy restarted; the same conversation goes on, a new one starts
            new = _session(store)
            after = [_call(store, old, 2), _call(store, new, 0), _call(store, old, 3)]
        second = _export(db, collector.url, after[:1], after[1:])
    roots, children = _roots_and_calls(collector.bodies)
    assert sorted(r.span_id for r in roots) == sorted([span_id_of(old, None), span_id_of(new, None)])
    sent = [s.span_id for s in children]
    assert len(sent) == len(set(sent)) == 5
    assert set(sent) == {span_id_of(sid, i) for sid, i in before + after}
    assert (first.exported_spans, second.exported_spans) == (3, 4)  # 2 calls + root; 3 calls + the new root


def test_an_event_handed_over_after_a_later_one_is_still_exported(tmp_path: Path) -> None:
    db = tmp_path / "proxy.db"
    with SessionStore(db) as store:
        sid = _session(store)
        calls = [_call(store, sid, n) for n in range(3)]
    with CaptureEndpoint() as collector:  # two writers raced: the second call's ids arrive last
        stats = _export(db, collector.url, [calls[0]], [calls[2]], [calls[1]])
    roots, children = _roots_and_calls(collector.bodies)
    assert len(roots) == 1 and sorted(s.span_id for s in children) == sorted(
        span_id_of(sid, i) for _, i in calls
    )
    assert stats.exported_spans == 4 and stats.failed_spans == 0


def test_a_session_whose_first_call_was_dropped_gets_its_root_with_the_next(tmp_path: Path) -> None:
    db = tmp_path / "proxy.db"
    with SessionStore(db) as store:
        other, sid = _session(store), _session(store)
        filler, first, second = _call(store, other, 0), _call(store, sid, 0), _call(store, sid, 1)
    with CaptureEndpoint() as collector:
        exporter = LiveExporter(db, collector.url, queue_limit=1)
        exporter.submit([filler])  # the queue is full (the thread is not started yet)
        exporter.submit([first])  # dropped
        with exporter:
            assert exporter.flush(30)
            exporter.submit([second])
            assert exporter.flush(30)
        stats = exporter.stats()
    roots, children = _roots_and_calls(collector.bodies)
    assert stats.dropped_events == 1
    assert sorted(r.span_id for r in roots) == sorted([span_id_of(other, None), span_id_of(sid, None)])
    assert sorted(s.span_id for s in children) == sorted([span_id_of(*filler), span_id_of(*second)])


def _attrs(span: Span) -> dict[str, int]:
    return {a.key: a.value.int_value for a in span.attributes}


@pytest.mark.skipif(
    not phoenix_expected(), reason="arize-phoenix not installed: python -m bench.peers install --only phoenix"
)
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
