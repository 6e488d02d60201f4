"""OpenTelemetry in and out: the receiver's throughput and the exporter's, against a baseline in the same run.

In: the real Claude Code capture (tests/fixtures/otel, its three log batches holding two calls and a
tool result) posted as N sessions (its session id rewritten per copy) through ``handle_otlp`` into a
fresh SQLite store: records/s, against decoding the same bodies alone (``parse_otlp``).
Out: the real Claude Code imports of tests/fixtures/real_agents turned into spans and serialised
(``session_spans`` + protobuf): spans/s, against serialising the already built spans alone.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest

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


def run(quick: bool = False) -> list[Table]:
    return [receiver_table(quick), export_table()]


if __name__ == "__main__":
    from bench.report import render_table

    for t in run(quick=True):
        print(render_table(t))
