"""``report --format json`` written while it is read: the same text as rendering
:func:`engine.report.build.build_report`'s :class:`Report`, without ever holding it.

Per session, the view the findings need is loaded, its requests, turns and events are written
one point at a time from it (the roll-ups that come after them computed in one pass first), and it
is released before the session's calls are priced; its cost calls are written one at a time. So
the peak is the larger of one session's view and one session's costs, not the whole report on top
of both. The project roll-up at the end keeps each session's cost rows.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from engine.findings import analyze, load_session_view
from engine.report.build import (
    peak_key,
    report_event,
    request_point,
    sent_counts,
    session_fields,
    session_limit,
)
from engine.report.costs import SessionCostReport, project_cost_report, session_cost_report
from engine.report.jsonstream import Deferred, Streamed, json_pieces
from engine.report.shapes import Report, RequestPoint, SessionReport, TurnPoint
from engine.rollup import SessionCosts
from engine.settings import Settings
from engine.store import SessionStore
from engine.store.costs import session_costs

__all__ = ["report_json_pieces", "summary_report"]


def report_json_pieces(
    store: SessionStore,
    session_ids: Sequence[str],
    *,
    source: str,
    settings: Settings | None = None,
    summaries: list[SessionReport] | None = None,
) -> Iterator[str]:
    """The report's JSON in pieces (with the closing newline ``render`` adds). ``summaries``, when
    given, receives each session's report without its lists (turns, requests, events, cost calls),
    for the CI gates."""
    from engine import __version__

    costs: list[SessionCosts] = []
    written: list[SessionReport] = [] if summaries is None else summaries

    def sessions() -> Iterator[SessionReport]:
        for sid in session_ids:
            stream = _SessionStream(store, sid, settings, costs)
            written.append(stream.summary)
            yield stream.report()

    report = Report.model_construct(
        generator=f"ctxdesk {__version__}",
        source=source,
        sessions=Streamed(sessions),
        peak_usage_pct=Deferred(lambda: summary_report(written, source=source).peak_usage_pct),
        findings_count=Deferred(lambda: summary_report(written, source=source).findings_count),
        project=Deferred(lambda: project_cost_report(costs)),
    )
    yield from json_pieces(report)
    yield "\n"


def summary_report(summaries: Sequence[SessionReport], *, source: str) -> Report:
    """The report's roll-ups over the sessions' summaries (what the CI gates read), no lists."""
    peaks = [s.peak_usage_pct for s in summaries if s.peak_usage_pct is not None]
    return Report.model_construct(
        generator="",
        source=source,
        sessions=list(summaries),
        peak_usage_pct=max(peaks) if peaks else None,
        findings_count=sum(len(s.findings) for s in summaries),
    )


class _SessionStream:
    """One session's report: its summary computed on construction, its lists written on demand."""

    def __init__(
        self, store: SessionStore, session_id: str, settings: Settings | None, costs: list[SessionCosts]
    ) -> None:
        self.store, self.session_id, self.costs = store, session_id, costs
        self.view: Any = load_session_view(store, session_id, settings=settings)
        self.limit = session_limit(self.view, settings)
        self.sent = sent_counts(self.view)
        # one pass: the peak request, and per turn its last request, count and highest percentage
        self.turns: dict[int, tuple[int, int, float | None]] = {}
        peak: RequestPoint | None = None
        count = 0
        for i, point in self._points():
            count += 1
            if peak is None or peak_key(point) > peak_key(peak):
                peak = point
            _, n, best = self.turns.get(point.turn_index, (i, 0, None))
            pct = point.used_pct
            best = pct if best is None else (best if pct is None else max(best, pct))
            self.turns[point.turn_index] = (i, n + 1, best)
        fields = session_fields(self.view, self.limit, analyze(self.view), peak, count)
        self.summary = SessionReport.model_construct(**fields, turns=[], requests=[], events=[], costs=None)

    def report(self) -> SessionReport:
        return self.summary.model_copy(
            update={
                "turns": Streamed(self._turn_points),
                "requests": Streamed(lambda: (p for _, p in self._points())),
                "events": Streamed(self._events),
                "costs": Deferred(self._costs),
            }
        )

    def _points(self) -> Iterator[tuple[int, RequestPoint]]:
        for i, e in enumerate(self.view.events):
            if e.kind == "request":
                yield i, request_point(e, self.limit.limit_tokens, messages_sent=self.sent.get(e.seq))

    def _turn_points(self) -> Iterator[TurnPoint]:
        events = self.view.events
        for _, (i, n, best) in sorted(self.turns.items()):
            e = events[i]
            last = request_point(e, self.limit.limit_tokens, messages_sent=self.sent.get(e.seq))
            yield TurnPoint(**last.model_dump(), requests=n, peak_used_pct=best)

    def _events(self) -> Iterator[Any]:
        return (report_event(e) for e in self.view.events if e.kind != "request")

    def _costs(self) -> SessionCostReport:
        self.view = self.sent = self.turns = None  # every list from the view is written: let it go
        costs = session_costs(self.store, self.session_id)
        self.costs.append(costs)
        return session_cost_report(costs, stream_calls=True)
