"""OTLP/HTTP request bodies (protobuf or JSON) read into plain, typed records (pure).

Both encodings go through ``opentelemetry-proto``'s messages, so a JSON body is held to the same
schema as a protobuf one; anything that does not parse is a :class:`~engine.errors.ValidationError`
naming the signal and what was wrong, and nothing of it is recorded.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Literal

from google.protobuf import json_format
from google.protobuf.message import DecodeError, Message
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceRequest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue

from engine.errors import ValidationError

__all__ = [
    "MAX_OTLP_BYTES",
    "OtlpRecord",
    "Signal",
    "attributes_of",
    "decode_request",
    "parse_otlp",
    "value_of",
]

Signal = Literal["logs", "traces", "metrics"]
#: A log body that is an event name: a dotted identifier ("claude_code.api_request"), not a sentence.
_EVENT_NAME = re.compile(r"^[A-Za-z_]\w*(\.\w+)+$")
#: Largest body accepted (Claude Code's raw-body events are cut at 60 KB each; a batch holds many).
MAX_OTLP_BYTES = 16 * 1024 * 1024
_MESSAGES: dict[str, type[Message]] = {
    "logs": ExportLogsServiceRequest,
    "traces": ExportTraceServiceRequest,
    "metrics": ExportMetricsServiceRequest,
}


@dataclass(frozen=True)
class OtlpRecord:
    """One log record or span: its name (a log's event name or body, a span's name), time, attributes."""

    signal: Signal
    name: str
    time_unix_nano: int
    attributes: dict[str, Any]
    resource: dict[str, Any] = field(default_factory=dict)
    body: Any = None


def value_of(value: AnyValue) -> Any:
    """An OTLP ``AnyValue`` as Python (strings, ints, floats, bools, lists, dicts, bytes)."""
    kind = value.WhichOneof("value")
    if kind is None:
        return None
    if kind == "array_value":
        return [value_of(v) for v in value.array_value.values]
    if kind == "kvlist_value":
        return attributes_of(value.kvlist_value.values)
    return getattr(value, kind)


def attributes_of(pairs: Any) -> dict[str, Any]:
    return {kv.key: value_of(kv.value) for kv in pairs if isinstance(kv, KeyValue)}


def decode_request(signal: Signal, body: bytes, content_type: str) -> Message:
    """The export request ``body`` as its protobuf message; JSON when the content type says so."""
    if signal not in _MESSAGES:
        raise ValidationError(f"unknown OTLP signal {signal!r}", field="signal", value=signal)
    if len(body) > MAX_OTLP_BYTES:
        raise ValidationError(
            f"OTLP {signal} body of {len(body)} bytes is over the {MAX_OTLP_BYTES}-byte limit", field="body"
        )
    message = _MESSAGES[signal]()
    is_json = "json" in (content_type or "").lower()
    try:
        if is_json:
            json_format.Parse(body.decode("utf-8"), message, ignore_unknown_fields=True)
        else:
            message.ParseFromString(body)
    except (json_format.ParseError, DecodeError, UnicodeDecodeError, ValueError, RecursionError) as exc:
        encoding = "JSON" if is_json else "protobuf"
        raise ValidationError(f"OTLP {signal} body is not valid {encoding}: {exc}", field="body") from exc
    return message


def parse_otlp(signal: Signal, body: bytes, content_type: str) -> list[OtlpRecord]:
    """Every log record (logs), span (traces) or data point's metric (metrics) of one export request."""
    message = decode_request(signal, body, content_type)
    records: list[OtlpRecord] = []
    if signal == "logs":
        for resource_logs in message.resource_logs:
            resource = attributes_of(resource_logs.resource.attributes)
            for scope in resource_logs.scope_logs:
                for log in scope.log_records:
                    attrs = attributes_of(log.attributes)
                    body_value = value_of(log.body) if log.HasField("body") else None
                    # the first dotted name of: the body (Claude Code's full "claude_code.api_request", its
                    # event.name the short one), event.name (Codex's body and event_name are its source line
                    # "event otel/src/...rs:803", Gemini CLI's body a sentence), the record's event_name
                    named = [body_value, attrs.get("event.name"), log.event_name]
                    name = next((n for n in named if isinstance(n, str) and _EVENT_NAME.match(n)), None)
                    name = name or str(log.event_name or attrs.get("event.name") or "")
                    records.append(
                        OtlpRecord(
                            "logs",
                            name,
                            log.time_unix_nano or log.observed_time_unix_nano,
                            attrs,
                            resource,
                            body_value,
                        )
                    )
    elif signal == "traces":
        for resource_spans in message.resource_spans:
            resource = attributes_of(resource_spans.resource.attributes)
            for scope in resource_spans.scope_spans:
                for span in scope.spans:
                    attrs = attributes_of(span.attributes)
                    attrs.setdefault("span.trace_id", span.trace_id.hex())
                    attrs.setdefault("span.span_id", span.span_id.hex())
                    records.append(OtlpRecord("traces", span.name, span.end_time_unix_nano, attrs, resource))
    else:
        for resource_metrics in message.resource_metrics:
            resource = attributes_of(resource_metrics.resource.attributes)
            for scope in resource_metrics.scope_metrics:
                for metric in scope.metrics:
                    records.append(OtlpRecord("metrics", metric.name, 0, {}, resource))
    return records
