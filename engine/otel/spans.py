"""Stored sessions as OpenTelemetry GenAI spans (pure: session rows and events in, OTLP protobuf out).

One trace per session: a root ``invoke_agent`` span, a ``chat`` span per model call with the GenAI
semantic conventions' attributes (``gen_ai.usage.input_tokens`` counts every prompt token, cached
ones included, as the conventions say; the cache's parts beside it), and a span per compaction,
policy edit or guard refusal. What no convention carries is under ``ctxdesk.*``: the window, the
limit, the components, the share used, the compaction's tokens before and after, the policy.
Ids are derived from the session and event ids, so exporting a session twice gives the same spans.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, InstrumentationScope, KeyValue
from opentelemetry.proto.resource.v1.resource_pb2 import Resource
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans, Span, Status

from engine.store.records import SessionRecord, StoredEvent

__all__ = [
    "EXPORTED_KINDS",
    "PROVIDER_NAMES",
    "attribute",
    "call_attributes",
    "provider_of_model",
    "session_spans",
    "span_id_of",
    "trace_id_of",
    "trace_request",
]

#: ctxdesk provider -> ``gen_ai.provider.name`` (the conventions' well-known values).
PROVIDER_NAMES = {
    "anthropic": "anthropic", "openai": "openai", "google": "gcp.gemini", "gemini": "gcp.gemini",
    "bedrock": "aws.bedrock", "vertex": "gcp.vertex_ai", "vertex_ai": "gcp.vertex_ai", "azure": "azure.ai.openai", "mistral": "mistral_ai",
    "deepseek": "deepseek", "groq": "groq", "xai": "x_ai", "cohere": "cohere", "perplexity": "perplexity",
}  # fmt: skip
#: Event kinds that become spans: calls, compactions (an agent's, ours, a policy edit, the provider's), guards.
EXPORTED_KINDS = ("request", "compaction", "guard")
_SCOPE = "ctxdesk"


def trace_id_of(session_id: str) -> bytes:
    return hashlib.sha256(f"ctxdesk-trace\0{session_id}".encode()).digest()[:16]


def span_id_of(session_id: str, event_id: int | None) -> bytes:
    """The span of event ``event_id`` of the session (None: the session's root span); never all zero."""
    digest = hashlib.sha256(f"ctxdesk-span\0{session_id}\0{event_id}".encode()).digest()
    return digest[:8] if any(digest[:8]) else digest[8:16]


def attribute(key: str, value: Any) -> KeyValue:
    """One OTLP attribute; bools, ints, floats, strings, and lists of one of these."""
    return KeyValue(key=key, value=_any(value))


def _any(value: Any) -> AnyValue:
    if isinstance(value, bool):
        return AnyValue(bool_value=value)
    if isinstance(value, int):
        return AnyValue(int_value=value)
    if isinstance(value, float):
        return AnyValue(double_value=value)
    if isinstance(value, list | tuple):
        out = AnyValue()
        out.array_value.values.extend(_any(v) for v in value)
        return out
    return AnyValue(string_value=str(value))


def _nanos(utc: Any) -> int | None:
    if not isinstance(utc, str) or not utc:
        return None
    try:
        moment = datetime.fromisoformat(utc.replace("Z", "+00:00"))
    except ValueError:
        return None
    if moment.tzinfo is None:  # the store writes UTC without an offset
        from datetime import UTC

        moment = moment.replace(tzinfo=UTC)
    return int(moment.timestamp() * 1_000_000) * 1000


def _duration_ns(details: dict[str, Any]) -> int:
    for key in ("duration_ms", "latency_ms"):
        try:
            return max(0, int(float(details[key]) * 1_000_000))
        except (KeyError, TypeError, ValueError):
            continue
    return 0


def _event_times(events: Sequence[StoredEvent]) -> list[tuple[int, int]]:
    """(start, end) of each event's span. A call ends when it answered and starts its recorded duration
    earlier (zero when unknown). An imported session's times are the transcript's (``call_utc``), not
    the import's: an event without one there (an agent's compaction) sits between the calls around it."""
    own = [_nanos(e.details.get("call_utc")) for e in events]
    if not any(own):  # live sources (proxy, session manager): recorded as they happened
        own = [_nanos(e.created_utc) for e in events]
    times = []
    for i, (event, end) in enumerate(zip(events, own, strict=True)):
        if end:
            times.append((max(0, end - _duration_ns(event.details)), end))
            continue
        before = next((t for t in reversed(own[:i]) if t), None)
        after = next((t for t in own[i + 1 :] if t), None)
        start = before or after or 0
        times.append((start, max(start, after or start)))
    return times


def _set(attrs: list[KeyValue], key: str, value: Any) -> None:
    if value is not None and value != "":
        attrs.append(attribute(key, value))


def _context_attributes(attrs: list[KeyValue], event: StoredEvent) -> None:
    _set(attrs, "ctxdesk.context.window", event.context_window)
    limit = event.effective_limit
    _set(attrs, "ctxdesk.context.limit", limit)
    _set(attrs, "ctxdesk.context.max_output_tokens", event.max_output_tokens)
    used = event.usage.prompt_tokens if event.usage is not None else event.projected_tokens
    _set(attrs, "ctxdesk.context.used_tokens", used)
    if used is not None and limit:
        attrs.append(attribute("ctxdesk.context.share", used / limit))
    if event.components is not None:
        for name, tokens in event.components.model_dump().items():
            attrs.append(attribute(f"ctxdesk.components.{name}", int(tokens)))
        attrs.append(attribute("ctxdesk.components.total", event.components.total))
        _set(attrs, "ctxdesk.components.basis", event.components_basis)


def call_attributes(session: SessionRecord, event: StoredEvent) -> list[KeyValue]:
    """A model call's span attributes: GenAI conventions, OpenInference's (Phoenix), then ``ctxdesk.*``."""
    model = event.model or session.model
    provider = event.provider or session.provider or provider_of_model(model)
    attrs = [attribute("gen_ai.operation.name", "chat"), attribute("gen_ai.conversation.id", session.id)]
    _set(attrs, "gen_ai.provider.name", PROVIDER_NAMES.get(provider or "", provider))
    _set(attrs, "gen_ai.request.model", model)
    _set(attrs, "gen_ai.request.max_tokens", event.max_output_tokens)
    # the provider's id of the answer (Anthropic's msg_..., OpenAI's resp_...), not its HTTP request id
    _set(attrs, "gen_ai.response.id", event.details.get("response_id") or event.details.get("message_id"))
    attrs += [attribute("openinference.span.kind", "LLM"), attribute("session.id", session.id)]
    _set(attrs, "llm.model_name", model)
    _set(attrs, "llm.provider", provider)
    usage = event.usage
    if usage is not None:
        attrs += [
            attribute("gen_ai.usage.input_tokens", usage.prompt_tokens),
            attribute("gen_ai.usage.output_tokens", usage.output_tokens),
            attribute("gen_ai.usage.cache_read.input_tokens", usage.cache_read_input_tokens),
            attribute("gen_ai.usage.cache_creation.input_tokens", usage.cache_creation_input_tokens),
            attribute("llm.token_count.prompt", usage.prompt_tokens),
            attribute("llm.token_count.completion", usage.output_tokens),
            attribute("llm.token_count.total", usage.prompt_tokens + usage.output_tokens),
            attribute("llm.token_count.prompt_details.cache_read", usage.cache_read_input_tokens),
            attribute("llm.token_count.prompt_details.cache_write", usage.cache_creation_input_tokens),
        ]
    _set(attrs, "gen_ai.usage.reasoning.output_tokens", event.details.get("reasoning_tokens"))
    failure = event.details.get("failure")
    if isinstance(failure, dict):
        _set(attrs, "error.type", failure.get("cause"))
        _set(attrs, "http.response.status_code", failure.get("status"))
    _common_attributes(attrs, event)
    _context_attributes(attrs, event)
    _set(attrs, "ctxdesk.call.trigger", event.trigger)
    _set(attrs, "ctxdesk.call.request_id", event.details.get("request_id"))
    _set(attrs, "ctxdesk.call.segment", event.details.get("segment"))
    _set(attrs, "ctxdesk.agent_cost_usd", _float(event.details.get("agent_cost_usd")))
    return attrs


def provider_of_model(model: str | None) -> str | None:
    """The model table's provider of ``model``, for a call whose source did not say (a run whose every call failed)."""
    if not model:
        return None
    from engine.model_table import load_model_table

    info = load_model_table().lookup(model)
    return info.provider if info is not None else None


def _float(value: Any) -> float | None:
    try:
        return float(value) if value is not None else None
    except (TypeError, ValueError):
        return None


def _common_attributes(attrs: list[KeyValue], event: StoredEvent) -> None:
    attrs += [attribute("ctxdesk.event.id", event.id), attribute("ctxdesk.event.seq", event.seq)]
    _set(attrs, "ctxdesk.event.kind", event.kind)
    _set(attrs, "ctxdesk.event.outcome", event.outcome)
    _set(attrs, "ctxdesk.message_seq", event.message_seq)
    _set(attrs, "ctxdesk.turn_index", event.turn_index)


def edit_attributes(session: SessionRecord, event: StoredEvent) -> list[KeyValue]:
    """A compaction's, policy edit's or guard's span attributes: who, why, tokens before and after."""
    details = event.details
    attrs = [attribute("gen_ai.conversation.id", session.id), attribute("session.id", session.id)]
    attrs.append(attribute("openinference.span.kind", "CHAIN"))
    _common_attributes(attrs, event)
    _set(attrs, "ctxdesk.edit.trigger", event.trigger)
    _set(attrs, "ctxdesk.edit.reason", event.reason)
    for key in ("by", "trigger_kind", "policy", "edit", "before_tokens", "after_tokens", "threshold_tokens",
                "instructions", "after_failed_call", "cleared", "cleared_input_tokens"):  # fmt: skip
        value = details.get(key)
        if isinstance(value, bool | int | float | str):
            attrs.append(attribute(f"ctxdesk.edit.{key}", value))
    strategies = details.get("strategies_run")
    if isinstance(strategies, list) and strategies:
        attrs.append(attribute("ctxdesk.edit.strategies", [str(s) for s in strategies]))
    removed = details.get("removed_message_seqs")
    if isinstance(removed, list):
        attrs.append(attribute("ctxdesk.edit.removed_messages", len(removed)))
    _context_attributes(attrs, event)
    return attrs


def _edit_name(event: StoredEvent) -> str:
    if event.kind == "guard":
        return f"ctxdesk.guard {event.outcome or ''}".rstrip()
    who = event.details.get("by") or ("proxy" if event.trigger == "proxy_policy" else None)
    policy = event.details.get("policy") or event.details.get("edit")
    return " ".join(str(p) for p in ("ctxdesk.compaction", who, policy) if p)


def _is_failed(event: StoredEvent) -> bool:
    return event.kind == "request" and event.outcome not in (None, "ok")


def session_spans(session: SessionRecord, events: Iterable[StoredEvent]) -> list[Span]:
    """The session's spans: its root first, then one per exported event in the order they were recorded."""
    trace_id, root_id = trace_id_of(session.id), span_id_of(session.id, None)
    children: list[Span] = []
    exported = [e for e in events if e.kind in EXPORTED_KINDS]
    for event, (start, end) in zip(exported, _event_times(exported), strict=True):
        is_call = event.kind == "request"
        model = event.model or session.model
        span = Span(
            trace_id=trace_id, span_id=span_id_of(session.id, event.id), parent_span_id=root_id,
            name=(f"chat {model}" if model else "chat") if is_call else _edit_name(event),
            kind=Span.SPAN_KIND_CLIENT if is_call else Span.SPAN_KIND_INTERNAL,
            start_time_unix_nano=start, end_time_unix_nano=end,
            attributes=call_attributes(session, event) if is_call else edit_attributes(session, event),
        )  # fmt: skip
        if _is_failed(event):
            span.status.CopyFrom(
                Status(code=Status.STATUS_CODE_ERROR, message=event.reason or event.outcome or "")
            )
        children.append(span)
    times = [t for s in children for t in (s.start_time_unix_nano, s.end_time_unix_nano) if t]
    fallback = _nanos(session.created_utc) or 0
    root = Span(
        trace_id=trace_id, span_id=root_id, name=f"invoke_agent {_agent(session)}".rstrip(),
        kind=Span.SPAN_KIND_INTERNAL,
        start_time_unix_nano=min(times, default=fallback), end_time_unix_nano=max(times, default=fallback),
        attributes=_root_attributes(session, children),
    )  # fmt: skip
    return [root, *children]


def _agent(session: SessionRecord) -> str:
    agent = session.metadata.get("agent") or session.source
    return str(agent).removeprefix("import:").removeprefix("otel:") if agent else ""


def _root_attributes(session: SessionRecord, children: Sequence[Span]) -> list[KeyValue]:
    attrs = [
        attribute("gen_ai.operation.name", "invoke_agent"),
        attribute("gen_ai.conversation.id", session.id),
        attribute("openinference.span.kind", "AGENT"),
        attribute("session.id", session.id),
    ]
    _set(attrs, "gen_ai.agent.name", _agent(session))
    _set(attrs, "gen_ai.provider.name", PROVIDER_NAMES.get(session.provider or "", session.provider))
    _set(attrs, "gen_ai.request.model", session.model)
    _set(attrs, "ctxdesk.session.title", session.title)
    _set(attrs, "ctxdesk.session.source", session.source)
    _set(attrs, "ctxdesk.session.parent_id", session.parent_session_id)
    calls = [s for s in children if s.kind == Span.SPAN_KIND_CLIENT]
    attrs += [
        attribute("ctxdesk.session.calls", len(calls)),
        attribute(
            "ctxdesk.session.failed_calls", sum(s.status.code == Status.STATUS_CODE_ERROR for s in calls)
        ),
        attribute("ctxdesk.session.edits", len(children) - len(calls)),
    ]
    return attrs


def trace_request(spans: Sequence[Span], *, version: str = "") -> ExportTraceServiceRequest:
    """One OTLP export request holding ``spans`` (service ``ctxdesk``)."""
    resource = Resource(attributes=[attribute("service.name", "ctxdesk")])
    if version:
        resource.attributes.append(attribute("service.version", version))
    scope = ScopeSpans(scope=InstrumentationScope(name=_SCOPE, version=version), spans=spans)
    return ExportTraceServiceRequest(resource_spans=[ResourceSpans(resource=resource, scope_spans=[scope])])
