"""The report's cost sections: per call and per session (cost by part, cache causes), and the
project roll-up (sessions with their sub-agents, per day, per model, per cache cause).

Built from ``engine.store.costs`` (computed from the events, so any database works) and
rendered here as text and HTML; the models are part of the report's JSON contract.
"""

from __future__ import annotations

import html
from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from engine.report.jsonstream import Streamed
from engine.rollup import ProjectCosts, Rebuild, SessionCosts, rollup_project, sum_rows
from engine.textfmt import format_table


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, json_schema_serialization_defaults_required=True)


class CostTotals(_Frozen):
    """Tokens and USD summed over calls (USD at the bundled model table's list prices)."""

    calls: int
    unpriced_calls: int = Field(description="Calls whose model has no known prices (counted at $0).")
    input_tokens: int
    output_tokens: int
    reasoning_tokens: int
    cache_read_tokens: int
    cache_write_5m_tokens: int
    cache_write_1h_tokens: int
    input_usd: float
    output_usd: float
    cache_read_usd: float
    cache_write_5m_usd: float
    cache_write_1h_usd: float
    cache_write_usd: float
    total_usd: float
    uncached_usd: float = Field(description="What the same calls would have cost with no prompt cache.")
    rebuilt_tokens: int = Field(
        description="Cached tokens written again (every cause, expected ones included)."
    )
    lost_usd: float = Field(description="What avoidable cache rebuilds cost over reading from cache.")
    lost_share: float = Field(description="lost_usd / total_usd (0..1).")

    @classmethod
    def of(cls, totals: Mapping[str, Any]) -> CostTotals:
        return cls(**{k: totals[k] for k in cls.model_fields})


class CallCostPoint(_Frozen):
    """One model call: its cost by part and what the prompt cache did."""

    call_index: int
    event_id: int | None
    turn_index: int | None
    call_utc: str | None
    model: str | None
    priced_as: str | None
    input_tokens: int
    output_tokens: int
    cache_read_tokens: int
    cache_write_5m_tokens: int
    cache_write_1h_tokens: int
    total_usd: float
    cache_cause: str | None = Field(description="Why cached tokens were written again (None: normal growth).")
    rebuilt_tokens: int
    lost_usd: float
    cache_explanation: str | None
    fix: str | None


class CauseGroup(_Frozen):
    cause: str
    calls: int
    rebuilt_tokens: int
    lost_usd: float
    fix: str | None


class SessionCostReport(_Frozen):
    """One session's (or sub-agent thread's) cost."""

    totals: CostTotals
    price_sources: list[str] = Field(description="Model table entries and sources the prices came from.")
    by_cause: list[CauseGroup]
    calls: list[CallCostPoint]


class RollupGroup(_Frozen):
    key: str = Field(description="Root session id, UTC day (YYYY-MM-DD) or model name.")
    label: str | None = Field(description="The root session's title.")
    sessions: int = Field(description="Sessions (threads) in the group.")
    totals: CostTotals


class ProjectCostReport(_Frozen):
    """Every reported session together: sub-agents rolled into their parents, per day, per model."""

    sessions: int
    totals: CostTotals
    first_call_utc: str | None
    last_call_utc: str | None
    by_root: list[RollupGroup] = Field(description="Top-level sessions, sub-agent threads included.")
    by_day: list[RollupGroup]
    by_model: list[RollupGroup]
    by_cause: list[RollupGroup]
    top_rebuilds: list[Rebuild]


# -- building ---------------------------------------------------------------------------------------


def session_cost_report(costs: SessionCosts, *, stream_calls: bool = False) -> SessionCostReport:
    """The session's cost section; with ``stream_calls`` its calls are made one at a time as the
    JSON writer reaches them (:class:`engine.report.jsonstream.Streamed`), never held as a list."""
    rows = costs.rows
    by_cause: dict[str, list[Mapping[str, Any]]] = {}
    for r in rows:
        if r.get("cache_cause"):
            by_cause.setdefault(r["cache_cause"], []).append(r)
    fields: dict[str, Any] = dict(
        totals=CostTotals.of(sum_rows(rows)),
        price_sources=sorted({f"{r['priced_as']} ({r['price_source']})" for r in rows if r.get("priced_as")}),
        by_cause=[
            CauseGroup(
                cause=c,
                calls=len(rs),
                rebuilt_tokens=sum(r["rebuilt_tokens"] for r in rs),
                lost_usd=sum(r["lost_usd"] for r in rs),
                fix=rs[0].get("fix"),
            )
            for c, rs in sorted(by_cause.items(), key=lambda kv: (-sum(r["lost_usd"] for r in kv[1]), kv[0]))
        ],
    )
    if stream_calls:
        return SessionCostReport.model_construct(**fields, calls=Streamed(lambda: map(_call_point, rows)))
    return SessionCostReport(**fields, calls=[_call_point(r) for r in rows])


def _call_point(row: Mapping[str, Any]) -> CallCostPoint:
    return CallCostPoint(**{k: row.get(k) for k in CallCostPoint.model_fields})


def project_cost_report(sessions: Sequence[SessionCosts]) -> ProjectCostReport:
    return project_report_of(rollup_project(sessions))


def project_report_of(p: ProjectCosts) -> ProjectCostReport:
    def groups(gs: Sequence[Any]) -> list[RollupGroup]:
        return [
            RollupGroup(key=g.key, label=g.label, sessions=g.sessions, totals=CostTotals.of(g.totals))
            for g in gs
        ]

    return ProjectCostReport(
        sessions=p.sessions,
        totals=CostTotals.of(p.totals),
        first_call_utc=p.first_call_utc,
        last_call_utc=p.last_call_utc,
        by_root=groups(p.by_root),
        by_day=groups(p.by_day),
        by_model=groups(p.by_model),
        by_cause=groups(p.by_cause),
        top_rebuilds=list(p.top_rebuilds),
    )


# -- text ---------------------------------------------------------------------------------------------


def usd(value: float) -> str:
    return f"${value:,.4f}"


def cost_line(t: CostTotals) -> str:
    """One line: total and its parts."""
    line = (
        f"{usd(t.total_usd)} over {t.calls:,} call(s): input {usd(t.input_usd)}, output {usd(t.output_usd)}, "
        f"cache read {usd(t.cache_read_usd)}, cache write {usd(t.cache_write_5m_usd)} (5m) + "
        f"{usd(t.cache_write_1h_usd)} (1h); without caching {usd(t.uncached_usd)}"
    )
    if t.lost_usd:
        line += f"; cache rebuilds lost {usd(t.lost_usd)} ({100 * t.lost_share:.1f}%)"
    if t.unpriced_calls:
        line += f"; {t.unpriced_calls} call(s) of unknown models at $0"
    return line


def session_cost_text(c: SessionCostReport) -> list[str]:
    out = ["\ncost: " + cost_line(c.totals)]
    if c.price_sources:
        out.append("prices: " + ", ".join(c.price_sources))
    if c.by_cause:
        rows = [(g.cause, g.calls, g.rebuilt_tokens, usd(g.lost_usd), g.fix or "") for g in c.by_cause]
        out.append(format_table(("cache cause", "calls", "rebuilt tokens", "lost", "fix"), rows))
    rows = [
        (p.call_index + 1, p.turn_index, p.input_tokens, p.cache_read_tokens,
         p.cache_write_5m_tokens + p.cache_write_1h_tokens, p.output_tokens, usd(p.total_usd),
         p.cache_cause or "", usd(p.lost_usd) if p.lost_usd else "")
        for p in c.calls
    ]  # fmt: skip
    if rows:
        out.append("\nper call (provider usage priced at list prices)")
        out.append(
            format_table(
                ("call", "turn", "input", "cache read", "cache write", "output", "cost", "cause", "lost"),
                rows,
            )
        )
    return out


def rollup_rows(
    key: str, groups: Sequence[RollupGroup], *, label: bool
) -> tuple[tuple[str, ...], list[tuple[object, ...]]]:
    """(headers, rows) of a roll-up table, for the text and the HTML report alike: ``label`` adds
    the root session's title (only the per-session table has one)."""
    headers = (key, *(("title",) if label else ()), "sessions", "calls", "cost", "cache read", "cache write",
               "output", "lost to rebuilds")  # fmt: skip
    rows: list[tuple[object, ...]] = [
        (g.key, *((g.label or "",) if label else ()), g.sessions, g.totals.calls, usd(g.totals.total_usd),
         usd(g.totals.cache_read_usd), usd(g.totals.cache_write_usd), usd(g.totals.output_usd),
         usd(g.totals.lost_usd))
        for g in groups
    ]  # fmt: skip
    return headers, rows


def project_cost_text(p: ProjectCostReport) -> list[str]:
    span = f" from {p.first_call_utc} to {p.last_call_utc}" if p.first_call_utc else ""
    out = [f"== project: {p.sessions} session(s){span}", "cost: " + cost_line(p.totals)]

    def table(title: str, key: str, groups: Sequence[RollupGroup], label: bool = False) -> None:
        headers, rows = rollup_rows(key, groups, label=label)
        out.extend(["", title, format_table(headers, rows) if rows else "(none)"])

    table("per session (sub-agents rolled into their parent)", "session", p.by_root, label=True)
    table("per day (UTC)", "day", p.by_day)
    table("per model", "model", p.by_model)
    if p.by_cause:
        rows = [(g.key, g.totals.calls, g.totals.rebuilt_tokens, usd(g.totals.lost_usd)) for g in p.by_cause]
        out.extend(
            ["", "cache rebuilds by cause", format_table(("cause", "calls", "rebuilt tokens", "lost"), rows)]
        )
    for b in p.top_rebuilds:
        out.append(
            f"  - {usd(b.lost_usd)} {b.session_id} call {b.call_index + 1}: {b.explanation}\n    fix: {b.fix}"
        )
    return out


# -- HTML ---------------------------------------------------------------------------------------------


def _table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(_cell(v))}</td>" for v in r) + "</tr>" for r in rows)
    return f"<table class='costs'><tr>{head}</tr>{body}</table>"


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


def session_cost_html(c: SessionCostReport) -> str:
    parts = [f"<h3>Cost</h3><p class='meta'>{html.escape(cost_line(c.totals))}</p>"]
    if c.by_cause:
        parts.append(
            _table(
                ("cache cause", "calls", "rebuilt tokens", "lost", "fix"),
                [(g.cause, g.calls, g.rebuilt_tokens, usd(g.lost_usd), g.fix or "") for g in c.by_cause],
            )
        )
    rows = [
        (p.call_index + 1, p.turn_index, p.input_tokens, p.cache_read_tokens,
         p.cache_write_5m_tokens + p.cache_write_1h_tokens, p.output_tokens, usd(p.total_usd),
         p.cache_cause or "", p.cache_explanation or "")
        for p in c.calls
    ]  # fmt: skip
    if rows:
        parts.append(
            "<details><summary>Per call</summary>"
            + _table(
                ("call", "turn", "input", "cache read", "cache write", "output", "cost", "cause", "why"), rows
            )
            + "</details>"
        )
    return "".join(parts)


def project_cost_html(p: ProjectCostReport) -> str:
    def groups(key: str, gs: Sequence[RollupGroup], label: bool = False) -> str:
        return _table(*rollup_rows(key, gs, label=label))

    rebuilds = "".join(
        f"<li>{html.escape(usd(b.lost_usd))} <code>{html.escape(b.session_id)}</code> call {b.call_index + 1}: "
        f"{html.escape(b.explanation)}<br><em>fix: {html.escape(b.fix or '')}</em></li>"
        for b in p.top_rebuilds
    )
    return (
        f"<section class='project'><h2>Project: {p.sessions} session(s)</h2>"
        f"<p class='meta'>{html.escape(cost_line(p.totals))}</p>"
        f"<h3>Per session (sub-agents rolled into their parent)</h3>{groups('session', p.by_root, label=True)}"
        f"<h3>Per day (UTC)</h3>{groups('day', p.by_day)}"
        f"<h3>Per model</h3>{groups('model', p.by_model)}"
        + (f"<h3>Largest cache rebuilds</h3><ul>{rebuilds}</ul>" if rebuilds else "")
        + "</section>"
    )
