"""Building a :class:`Report` from the store: per turn and per request the component breakdown
(our estimate, by the session's tokenizer) beside the provider's usage (exact), the non-request
context events, and the findings. Reads the store, never writes.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from typing import Any

from engine.findings import SessionView, analyze, load_session_view
from engine.limit import recorded_limit
from engine.report.costs import project_cost_report, session_cost_report
from engine.report.shapes import (
    Components,
    Limit,
    Report,
    ReportEvent,
    RequestPoint,
    SessionReport,
    TurnPoint,
    Usage,
)
from engine.settings import Settings, resolve_model_settings
from engine.store import SessionStore, StoredEvent
from engine.store.costs import session_costs

#: Model name used to resolve the limit of a session that names no model (built-in defaults).
UNKNOWN_MODEL = "unknown"


def build_report(
    store: SessionStore,
    session_ids: Sequence[str],
    *,
    source: str,
    settings: Settings | None = None,
) -> Report:
    """A report of ``session_ids`` (in that order); reads the store only."""
    from engine import __version__

    costs = {sid: session_costs(store, sid) for sid in session_ids}
    sessions = [
        session_report(store, sid, settings=settings).model_copy(
            update={"costs": session_cost_report(costs[sid])}
        )
        for sid in session_ids
    ]
    peaks = [s.peak_usage_pct for s in sessions if s.peak_usage_pct is not None]
    return Report(
        generator=f"ctxdesk {__version__}",
        source=source,
        sessions=sessions,
        peak_usage_pct=max(peaks) if peaks else None,
        findings_count=sum(len(s.findings) for s in sessions),
        project=project_cost_report(list(costs.values())),
    )


def session_report(
    store: SessionStore, session_id: str, *, settings: Settings | None = None
) -> SessionReport:
    view = load_session_view(store, session_id, settings=settings)
    events = list(view.events)
    limit = session_limit(view, settings)
    sent = sent_counts(view)
    requests = [
        request_point(e, limit.limit_tokens, messages_sent=sent.get(e.seq))
        for e in events
        if e.kind == "request"
    ]
    peak = max(requests, key=peak_key, default=None)
    return SessionReport(
        **session_fields(view, limit, analyze(view), peak, len(requests)),
        turns=turn_points(requests),
        requests=requests,
        events=[report_event(e) for e in events if e.kind != "request"],
    )


def session_limit(view: SessionView, settings: Settings | None) -> Limit:
    """The limit a session's percentages use: the last request event's (``engine.limit.recorded_limit``:
    the limit it recorded, else its model window less the reserve and buffer), else the settings'."""
    resolved = view.settings or resolve_model_settings(UNKNOWN_MODEL, settings=settings)
    events = view.events
    last = next((e for e in reversed(events) if e.kind == "request" and recorded_limit(e)), None)
    if last is not None:
        source = "request events" if last.limit_tokens else "model window in request events"
    else:
        source = resolved.sources.get("context_window", "built-in") + (
            "" if view.settings else " (model unknown)"
        )
    return Limit(
        limit_tokens=recorded_limit(last) if last is not None else resolved.limit.tokens,
        context_window=next((e.context_window for e in reversed(events) if e.context_window), None)
        or resolved.context_window,
        source=source,
        note_threshold=resolved.note_threshold,
        compact_threshold=resolved.compact_threshold,
        hard_block_threshold=resolved.hard_block_threshold,
    )


def peak_key(point: RequestPoint) -> tuple[float, int]:
    """The order that picks a session's peak request (highest percentage, then tokens)."""
    return (point.used_pct or 0, point.used_tokens)


def session_fields(
    view: SessionView, limit: Limit, findings: list[Any], peak: RequestPoint | None, request_count: int
) -> dict[str, Any]:
    """A :class:`SessionReport`'s fields but its lists (turns, requests, events) and costs."""
    session = view.session
    priced = [f.money for f in findings if f.money is not None]
    return dict(
        id=session.id,
        parent_session_id=session.parent_session_id,
        title=session.title,
        model=session.model,
        provider=session.provider,
        source=session.source,
        tokenizer=view.tokenizer.id,
        exact=view.tokenizer.exact,
        message_count=len(view.messages),
        request_count=request_count,
        limit=limit,
        findings=findings,
        peak_usage_pct=peak.used_pct if peak else None,
        peak_used_tokens=peak.used_tokens if peak else None,
        peak_turn_index=peak.turn_index if peak else None,
        peak_source=peak.used_source if peak else None,
        findings_tokens=sum(f.tokens for f in findings),
        findings_money=round(sum(priced), 6) if priced else None,
    )


def sent_counts(view: SessionView) -> dict[int, int]:
    """Request event seq -> transcript messages it sent, by the one rule (:mod:`engine.sent`)."""
    # Counted by bisection (messages before sent_end, less those removed before it), not by
    # asking every request about every message: 100k requests x 200k messages never finished.
    seqs = sorted(m.seq for m in view.messages)
    present = set(seqs)
    removed_sorted: dict[int, list[int]] = {}  # by id of the (shared) removed set
    out: dict[int, int] = {}
    for r in view.requests:
        if r.event_seq < 0:
            continue
        gone = removed_sorted.get(id(r.removed))
        if gone is None:
            gone = removed_sorted[id(r.removed)] = sorted(s for s in r.removed if s in present)
        out[r.event_seq] = bisect.bisect_left(seqs, r.sent_end) - bisect.bisect_left(gone, r.sent_end)
    return out


def messages_sent(store: SessionStore, session_id: str) -> dict[int, int]:
    """Request event seq -> transcript messages it sent (what ``ctxdesk inspect`` shows)."""
    return sent_counts(load_session_view(store, session_id))


def request_point(
    event: StoredEvent, session_limit: int | None, *, messages_sent: int | None = None
) -> RequestPoint:
    components = Components.of(event.components) if event.components else None
    usage = Usage.of(event.usage) if event.usage else None
    if usage is not None and usage.prompt_tokens:
        used, used_source = usage.prompt_tokens, "provider"
    else:
        used, used_source = (components.total if components else event.projected_tokens or 0), "estimate"
    limit = recorded_limit(event) or session_limit
    estimate = event.details.get("estimate_total", event.projected_tokens)
    return RequestPoint(
        event_seq=event.seq,
        turn_index=event.turn_index or 0,
        message_seq=event.message_seq,
        components=components,
        components_basis=event.components_basis,
        estimate_tokens=int(estimate) if isinstance(estimate, int | float) else None,
        provider_usage=usage,
        used_tokens=used,
        used_source=used_source,  # type: ignore[arg-type]
        used_pct=round(100 * used / limit, 1) if limit else None,
        limit_tokens=limit,
        messages_sent=messages_sent,
    )


def turn_points(requests: Sequence[RequestPoint]) -> list[TurnPoint]:
    by_turn: dict[int, list[RequestPoint]] = {}
    for r in requests:
        by_turn.setdefault(r.turn_index, []).append(r)
    points = []
    for _, rs in sorted(by_turn.items()):
        pcts = [r.used_pct for r in rs if r.used_pct is not None]
        points.append(
            TurnPoint(**rs[-1].model_dump(), requests=len(rs), peak_used_pct=max(pcts) if pcts else None)
        )
    return points


def report_event(event: StoredEvent) -> ReportEvent:
    """The stored event's fields a report shows (every ReportEvent field is a StoredEvent one)."""
    return ReportEvent(**{name: getattr(event, name) for name in ReportEvent.model_fields})


def gate_failure(report: Report, *, fail_over: float | None, fail_on_findings: int | None) -> str | None:
    """The one-line reason a CI gate fails, or None when the report passes."""
    if fail_over is not None and report.peak_usage_pct is not None and report.peak_usage_pct > fail_over:
        worst = max(report.sessions, key=lambda s: s.peak_usage_pct or 0)
        return (
            f"peak context usage {worst.peak_usage_pct:.1f}% of the limit (session {worst.id}, turn "
            f"{worst.peak_turn_index}, {worst.peak_source}) is over --fail-over {fail_over:g}%"
        )
    if fail_on_findings is not None and report.findings_count >= fail_on_findings:
        kinds = sorted({f.kind for s in report.sessions for f in s.findings})
        return f"{report.findings_count} finding(s) ({', '.join(kinds)}) reach --fail-on-findings {fail_on_findings}"
    return None
