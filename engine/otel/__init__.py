"""OpenTelemetry in: an OTLP/HTTP receiver for agents' telemetry (``ctxdesk otel``).

``payload`` reads OTLP bodies (pure), ``mapping`` turns agents' events into ctxdesk rows (pure),
``sink`` writes them through the store, ``receiver`` serves the endpoint.
"""

from engine.otel.mapping import OtelItem, items_of
from engine.otel.payload import MAX_OTLP_BYTES, OtlpRecord, parse_otlp
from engine.otel.receiver import OtelReceiver, handle_otlp, otel_app, otel_routes
from engine.otel.sink import OtelSink

__all__ = [
    "MAX_OTLP_BYTES",
    "OtelItem",
    "OtelReceiver",
    "OtelSink",
    "OtlpRecord",
    "handle_otlp",
    "items_of",
    "otel_app",
    "otel_routes",
    "parse_otlp",
]
