"""Sessions of a store posted as OTLP/HTTP protobuf traces (``ctxdesk export otlp``).

:func:`engine.otel.spans.session_spans` builds the spans; this module reads the store, batches them
(a session's spans stay in one request unless it alone passes the batch size) and posts each batch.
An endpoint that cannot be reached, answers non-2xx, or rejects spans is an :class:`ExportError`
naming it; a malformed URL a :class:`ValidationError` before anything is sent.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import httpx
from google.protobuf.message import DecodeError
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse
from opentelemetry.proto.trace.v1.trace_pb2 import Span

from engine.errors import ExportError, ValidationError
from engine.otel.spans import session_spans, trace_request

__all__ = ["DEFAULT_BATCH_SPANS", "ExportResult", "export_sessions", "post_spans", "traces_url"]

#: Spans per export request (collectors commonly cap a request at a few MB; a call span is ~1-2 KB).
DEFAULT_BATCH_SPANS = 512
_TRACES_PATH = "/v1/traces"


@dataclass(frozen=True)
class ExportResult:
    """What was sent: sessions, spans (calls and edits), HTTP requests, bytes, to which URL."""

    url: str
    sessions: int
    spans: int
    calls: int
    requests: int
    bytes_sent: int


def traces_url(endpoint: str) -> str:
    """The traces URL of an OTLP/HTTP ``endpoint``: a base (``http://host:4318``) gets ``/v1/traces``,
    as ``OTEL_EXPORTER_OTLP_ENDPOINT`` does; a URL already ending in ``/v1/traces`` is kept."""
    parts = urlsplit(endpoint.strip())
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValidationError(
            f"OTLP endpoint must be an http(s) URL such as http://127.0.0.1:4318, got {endpoint!r}",
            field="endpoint", value=endpoint,
        )  # fmt: skip
    try:
        parts.port  # noqa: B018 - raises on a port that is not a number or out of range
    except ValueError as exc:
        raise ValidationError(f"OTLP endpoint {endpoint!r}: {exc}", field="endpoint", value=endpoint) from exc
    path = parts.path.rstrip("/")
    if not path.endswith(_TRACES_PATH):
        path += _TRACES_PATH
    return urlunsplit((parts.scheme, parts.netloc, path, parts.query, ""))


def _batches(per_session: Sequence[list[Span]], size: int) -> Iterator[list[Span]]:
    batch: list[Span] = []
    for spans in per_session:
        if batch and len(batch) + len(spans) > size:
            yield batch
            batch = []
        for start in range(0, len(spans), size) if len(spans) > size else [None]:
            if start is None:
                batch.extend(spans)
            else:
                yield spans[start : start + size]
    if batch:
        yield batch


def post_spans(client: httpx.Client, url: str, body: bytes, spans: int) -> None:
    """POST one serialised export request of ``spans`` spans; an :class:`ExportError` unless all were taken."""
    try:
        answer = client.post(url, content=body, headers={"content-type": "application/x-protobuf"})
    except httpx.HTTPError as exc:
        raise ExportError(f"OTLP endpoint {url} cannot be reached: {exc}", endpoint=url) from exc
    if not answer.is_success:
        raise ExportError(
            f"OTLP endpoint {url} answered {answer.status_code}: {answer.text[:300]}",
            endpoint=url, status=answer.status_code,
        )  # fmt: skip
    if "protobuf" not in answer.headers.get("content-type", "") or not answer.content:
        return
    response = ExportTraceServiceResponse()
    try:
        response.ParseFromString(answer.content)
    except DecodeError:
        return  # a 2xx whose body is not the response message: the spans were taken
    rejected = response.partial_success.rejected_spans
    if rejected:
        message = response.partial_success.error_message or "no reason given"
        raise ExportError(
            f"OTLP endpoint {url} rejected {rejected} of {spans} spans: {message}",
            endpoint=url, status=answer.status_code,
        )  # fmt: skip


def export_sessions(
    store: Any, session_ids: Sequence[str], endpoint: str, *, headers: Mapping[str, str] | None = None,
    timeout: float = 30.0, batch_spans: int = DEFAULT_BATCH_SPANS, version: str = "",
) -> ExportResult:  # fmt: skip
    """Post every call, compaction and edit of ``session_ids`` to ``endpoint`` as GenAI spans."""
    if batch_spans < 1:
        raise ValidationError("batch_spans must be at least 1", field="batch_spans", value=batch_spans)
    url = traces_url(endpoint)
    per_session = [session_spans(store.get_session(sid), store.list_events(sid)) for sid in session_ids]
    requests = bytes_sent = 0
    with httpx.Client(timeout=timeout, headers=dict(headers or {})) as client:
        for batch in _batches(per_session, batch_spans):
            body = trace_request(batch, version=version).SerializeToString()
            post_spans(client, url, body, len(batch))
            requests += 1
            bytes_sent += len(body)
    spans = [s for group in per_session for s in group]
    return ExportResult(
        url=url, sessions=len(per_session), spans=len(spans),
        calls=sum(s.kind == Span.SPAN_KIND_CLIENT for s in spans), requests=requests, bytes_sent=bytes_sent,
    )  # fmt: skip
