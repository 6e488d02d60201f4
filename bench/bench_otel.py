"""OpenTelemetry in and out: the receiver's throughput and the exporter's, against a baseline in the same run.

In: the real Claude Code capture (tests/fixtures/otel, its three log batches holding two calls and a
tool result) posted as N sessions (its session id rewritten per copy) through ``handle_otlp`` into a
fresh SQLite store: records/s, against decoding the same bodies alone (``parse_otlp``).
Out: the real Claude Code imports of tests/fixtures/real_agents turned into spans and serialised
(``session_spans`` + protobuf): spans/s, against serialising the already built spans alone.
Live: ``ctxdesk proxy --export-otlp`` (a local collector; a dead one) against the same proxy without
export, calls interleaved so every proxy shares the machine's load: the added time to first byte.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest

from bench.bench_proxy import _body, _free_port, _pct, _ttfb, _Upstream
from bench.common import ROOT
from bench.report import Table, ratio, timed
from engine.importers import import_file
from engine.otel import OtelSink, handle_otlp, parse_otlp, session_spans, trace_request
from engine.store import SessionStore

CAPTURE = ROOT / "tests" / "fixtures" / "otel" / "claude-code"
CLAUDE_CODE = ROOT / "tests" / "fixtures" / "real_agents" / "claude-code"
SESSIONS = 200
QUICK_SESSIONS = 20


def capture_copies(count: int) -> list[bytes]:
    """The capture's log batches ``count`` times, each copy under a session id of its own."""
    batches = [
        ExportLogsServiceRequest.FromString(p.read_bytes())
        for p in sorted(CAPTURE.glob("protobuf-*_v1_logs.pb"))
    ]
    copies = []
    for i, original in ((i, b) for i in range(count) for b in batches):
        copy = ExportLogsServiceRequest()
        copy.CopyFrom(original)
        for resource in copy.resource_logs:
            for scope in resource.scope_logs:
                for record in scope.log_records:
                    for kv in record.attributes:
                        if kv.key == "session.id":
                            kv.value.string_value = f"bench-{i:05d}-{kv.value.string_value}"
        copies.append(copy.SerializeToString())
    return copies


def receiver_table(quick: bool) -> Table:
    sessions = QUICK_SESSIONS if quick else SESSIONS
    bodies = capture_copies(sessions)
    records = sum(len(parse_otlp("logs", b, "application/x-protobuf")) for b in bodies)
    decode_s = timed(lambda: [parse_otlp("logs", b, "application/x-protobuf") for b in bodies], repeat=3)
    written = 0
    with tempfile.TemporaryDirectory(prefix="ctxdesk-bench-otel-") as tmp:
        runs = iter(range(1_000))

        def receive() -> None:
            nonlocal written
            with SessionStore(Path(tmp) / f"otel-{next(runs)}.db") as store:
                sink = OtelSink(store)
                written = sum(handle_otlp(sink, "logs", b, "application/x-protobuf")[1]["ctxdesk"]["written"]
                              for b in bodies)  # fmt: skip

        receive_s = timed(receive, repeat=3)
    table = Table(
        "OTLP receiver: a real Claude Code capture into a SQLite store",
        ["sessions", "records", "rows written", "records/s received", "records/s decoded only", "x decode"],
        baseline="decoding the same protobuf bodies alone (parse_otlp)",
    )
    table.add(
        len(bodies) // 3,
        records,
        written,
        records / receive_s,
        records / decode_s,
        ratio(receive_s, decode_s),
    )
    return table


def export_table() -> Table:
    with (
        tempfile.TemporaryDirectory(prefix="ctxdesk-bench-otel-") as tmp,
        SessionStore(Path(tmp) / "x.db") as store,
    ):
        for transcript in sorted(CLAUDE_CODE.glob("*/transcripts/*.jsonl")):
            import_file(transcript, store)
        rows = [(s, store.list_events(s.id)) for s in store.list_sessions()]
    spans = [span for session, events in rows for span in session_spans(session, events)]
    build_s = timed(lambda: trace_request(
        [span for session, events in rows for span in session_spans(session, events)]
    ).SerializeToString(), repeat=5)  # fmt: skip
    serialise_s = timed(lambda: trace_request(spans).SerializeToString(), repeat=5)
    table = Table(
        "OTLP export: real Claude Code imports as GenAI spans",
        ["sessions", "spans", "spans/s built and serialised", "spans/s serialised only", "x serialise"],
        baseline="serialising the already built spans alone",
    )
    table.add(
        len(rows), len(spans), len(spans) / build_s, len(spans) / serialise_s, ratio(build_s, serialise_s)
    )
    return table


LIVE_CALLS = 200
QUICK_LIVE_CALLS = 30
#: Request size of the live-export rows: a mid-session Claude Code call.
LIVE_TOKENS = 20_000


class _Collector(BaseHTTPRequestHandler):
    """An OTLP/HTTP traces endpoint that takes every body and counts the bytes."""

    protocol_version = "HTTP/1.1"
    received = 0

    def log_message(self, format: str, *args: Any) -> None:
        return

    def do_POST(self) -> None:
        _Collector.received += len(self.rfile.read(int(self.headers.get("content-length") or 0)))
        self.send_response(200)
        self.send_header("content-length", "0")
        self.end_headers()


def _serve(handler: type[BaseHTTPRequestHandler]) -> ThreadingHTTPServer:
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


class _ExportingProxy:
    """``ctxdesk proxy`` as its own process, with ``--export-otlp URL`` when given."""

    def __init__(self, upstream: str, db: Path, export: str | None) -> None:
        self.port = _free_port()
        cmd = [sys.executable, "-m", "engine.cli", "proxy", "--port", str(self.port), "--db", str(db),
               "--anthropic-upstream", upstream, *(["--export-otlp", export] if export else [])]  # fmt: skip
        self.process = subprocess.Popen(
            cmd, env={**os.environ, "PYTHONPATH": str(ROOT)}, cwd=ROOT, stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL, text=True,
        )  # fmt: skip
        deadline = time.monotonic() + 30
        while True:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.2):
                    break
            except OSError:
                if self.process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("proxy did not start") from None
                time.sleep(0.05)
        self.url = f"http://127.0.0.1:{self.port}"

    def stop(self) -> str:
        """Ctrl-C (the proxy finishes recording and exporting); what it printed."""
        self.process.send_signal(2)
        try:
            out, _ = self.process.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            self.process.kill()
            out, _ = self.process.communicate()
        return out


def live_export_table(quick: bool) -> Table:
    calls = QUICK_LIVE_CALLS if quick else LIVE_CALLS
    upstream, collector = _serve(_Upstream), _serve(_Collector)
    upstream_url = f"http://127.0.0.1:{upstream.server_address[1]}"
    dead = f"http://127.0.0.1:{_free_port()}"  # nothing listens there
    headers = {"x-api-key": "bench", "anthropic-version": "2023-06-01", "content-type": "application/json"}
    table = Table(
        f"Proxy with live OTLP export: time to first byte, ~{LIVE_TOKENS // 1000}k-token requests",
        [
            "export",
            "calls",
            "p50 ms",
            "p95 ms",
            "added p50 ms",
            "added p95 ms",
            "x p50",
            "what the proxy said",
        ],
        baseline="the same proxy without --export-otlp, calls interleaved",
    )
    with tempfile.TemporaryDirectory(prefix="ctxdesk-bench-otel-live-") as tmp:
        variants = [("off", None), ("on, local collector", f"http://127.0.0.1:{collector.server_address[1]}"),
                    ("on, dead collector", dead)]  # fmt: skip
        proxies = [
            _ExportingProxy(upstream_url, Path(tmp) / f"p{i}.db", url) for i, (_, url) in enumerate(variants)
        ]
        times: list[list[float]] = [[] for _ in proxies]
        try:
            with httpx.Client(timeout=60) as client:
                for n in range(calls + 3):
                    body = _body(
                        LIVE_TOKENS, n
                    )  # a new conversation each call: a session and its root span each
                    for i, proxy in enumerate(proxies):
                        ms = _ttfb(client, proxy.url, body, headers)
                        if n >= 3:  # the first calls warm the proxies up
                            times[i].append(ms)
        finally:
            said = [proxy.stop().strip().splitlines() for proxy in proxies]
            upstream.shutdown()
            collector.shutdown()
    base50, base95 = _pct(times[0], 50), _pct(times[0], 95)
    for (name, _), row, lines in zip(variants, times, said, strict=True):
        p50, p95 = _pct(row, 50), _pct(row, 95)
        last = next((line for line in reversed(lines) if line.startswith("exported")), "")
        table.add(name, len(row), p50, p95, p50 - base50, p95 - base95, ratio(p50, base50), last)
    return table


def run(quick: bool = False) -> list[Table]:
    return [receiver_table(quick), export_table(), live_export_table(quick)]


if __name__ == "__main__":
    from bench.report import render_table

    for t in run(quick=True):
        print(render_table(t))
