"""OpenTelemetry in and out: an OTLP/HTTP receiver for agents' telemetry (``ctxdesk otel``) and an
exporter of stored sessions as GenAI spans (``ctxdesk export otlp``).

In: ``payload`` reads OTLP bodies (pure), ``mapping`` turns agents' events into ctxdesk rows (pure),
``sink`` writes them through the store, ``receiver`` serves the endpoint.
Out: ``spans`` builds a session's spans from its stored rows (pure), ``export`` posts them.
"""

from engine.otel.export import ExportResult, export_sessions, traces_url
from engine.otel.mapping import OtelItem, items_of
from engine.otel.payload import MAX_OTLP_BYTES, OtlpRecord, parse_otlp
from engine.otel.receiver import OtelReceiver, handle_otlp, otel_app, otel_routes
from engine.otel.sink import OtelSink
from engine.otel.spans import session_spans, trace_request

__all__ = [
    "MAX_OTLP_BYTES",
    "ExportResult",
    "OtelItem",
    "OtelReceiver",
    "OtelSink",
    "OtlpRecord",
    "export_sessions",
    "handle_otlp",
    "items_of",
    "otel_app",
    "otel_routes",
    "parse_otlp",
    "session_spans",
    "trace_request",
    "traces_url",
]
