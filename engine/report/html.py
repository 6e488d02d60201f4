"""The HTML report: one self-contained file that renders offline.

Plotly's own bundle (``plotly.offline.get_plotlyjs()``) is inlined once; each thread gets the
dashboard's timeline (stacked area per component, the limit and its 80/95/98% lines, the
provider's count, markers for compactions and guard decisions) over its model requests, and
tables of events and findings. Every string from a session is HTML-escaped.
"""

from __future__ import annotations

import html
import json
from typing import Any

import plotly.graph_objects as go
from plotly.offline import get_plotlyjs

from engine.events import COMPONENT_COLORS, COMPONENT_LABELS, COMPONENTS, outcome_marker
from engine.report.costs import project_cost_html, session_cost_html
from engine.report.notes import is_routine
from engine.report.shapes import Report, ReportEvent, SessionReport
from engine.report.text import money_text

PLOT_CONFIG = {"displaylogo": False, "responsive": True}

_STYLE = """
body { font: 14px/1.45 system-ui, sans-serif; margin: 24px; color: #222; }
h1 { font-size: 20px; } h2 { font-size: 17px; margin-top: 36px; border-top: 1px solid #ddd; padding-top: 16px; }
table { border-collapse: collapse; margin: 8px 0 16px; } th, td { border: 1px solid #ddd; padding: 3px 8px; }
th { background: #f4f4f4; text-align: left; } td.num { text-align: right; font-variant-numeric: tabular-nums; }
.meta { color: #555; } .fix { font-family: ui-monospace, monospace; font-size: 12px; }
.timeline { height: 480px; }
"""


def e(value: Any) -> str:
    """Escaped text of any value (None as an en dash)."""
    return "–" if value is None else html.escape(str(value), quote=True)


def _num(value: int | float | None) -> str:
    if value is None:
        return '<td class="num">–</td>'
    text = f"{value:,.1f}" if isinstance(value, float) else f"{value:,}"
    return f'<td class="num">{text}</td>'


def timeline_figure(session: SessionReport) -> go.Figure:
    """Stacked area of tokens by component over the session's model requests, against its limit."""
    fig = go.Figure()
    requests = session.requests
    if not requests:
        fig.add_annotation(text="No request events recorded for this thread", showarrow=False)
        fig.update_layout(height=300)
        return fig
    x = list(range(1, len(requests) + 1))
    turns = [r.turn_index for r in requests]
    for name, label in COMPONENT_LABELS.items():
        fig.add_trace(
            go.Scatter(
                x=x, y=[getattr(r.components, name) if r.components else 0 for r in requests], name=label,
                stackgroup="components", mode="lines", line={"width": 0.5, "color": COMPONENT_COLORS[name]},
                customdata=turns, hovertemplate=f"{label}: %{{y:,}} tokens (turn %{{customdata}})<extra></extra>",
            )
        )  # fmt: skip
    if any(r.provider_usage for r in requests):
        fig.add_trace(
            go.Scatter(
                x=x, y=[r.provider_usage.prompt_tokens if r.provider_usage else None for r in requests],
                name="Provider: prompt tokens (exact)", mode="lines+markers",
                line={"color": "#222", "width": 1.5, "dash": "dot"}, marker={"size": 4},
                hovertemplate="Provider: %{y:,}<extra></extra>",
            )
        )  # fmt: skip
    limit = session.limit
    if limit.limit_tokens:
        fig.add_trace(
            go.Scatter(
                x=x, y=[r.limit_tokens or limit.limit_tokens for r in requests], name="Effective limit",
                mode="lines", line={"color": "black", "width": 2}, hovertemplate="Limit: %{y:,}<extra></extra>",
            )
        )  # fmt: skip
        for share in (limit.note_threshold, limit.compact_threshold, limit.hard_block_threshold):
            fig.add_trace(
                go.Scatter(
                    x=x, y=[round((r.limit_tokens or limit.limit_tokens) * share) for r in requests],
                    name=f"{share:.0%} of limit", mode="lines", line={"color": "grey", "width": 1, "dash": "dot"},
                    hovertemplate=f"{share:.0%}: %{{y:,}}<extra></extra>",
                )
            )  # fmt: skip
    for event in session.events:
        marker = outcome_marker(event.kind, event.outcome)
        if marker is None:
            continue
        label, color = marker
        position = sum(1 for r in requests if r.event_seq < event.seq) + 0.5
        fig.add_vline(
            x=position, line={"color": color, "dash": "dash", "width": 1.5},
            annotation={"text": e(label), "textangle": -90, "font": {"color": color, "size": 11}},
            annotation_position="top left",
        )  # fmt: skip
    fig.update_layout(
        height=480, hovermode="x unified", legend={"orientation": "h", "y": -0.2},
        xaxis={"title": "Model request"},
        yaxis={"title": "Tokens (reconciled to the provider's count where known)", "rangemode": "tozero"},
        margin={"t": 30, "r": 10, "l": 10, "b": 10},
    )  # fmt: skip
    return fig


def _events_tables(events: list[ReportEvent]) -> str:
    if not events:
        return "<p class='meta'>No guard, compaction or other context events.</p>"
    notable = [ev for ev in events if not is_routine(ev)]
    routine = [ev for ev in events if is_routine(ev)]
    html_out = _events_table(notable) if notable else "<p class='meta'>Only guard checks that passed.</p>"
    if routine:
        html_out += f"<details><summary>{len(routine):,} guard checks that passed</summary>{_events_table(routine)}</details>"
    return html_out


def _events_table(events: list[ReportEvent]) -> str:
    rows = []
    for ev in events:
        details = json.dumps(ev.details, ensure_ascii=False, default=str)
        rows.append(
            f"<tr>{_num(ev.seq)}{_num(ev.turn_index)}<td>{e(ev.kind)}</td><td>{e(ev.trigger)}</td>"
            f"<td>{e(ev.outcome)}</td><td>{e(ev.reason)}</td>{_num(ev.projected_tokens)}{_num(ev.limit_tokens)}"
            f"<td><details><summary>details</summary><pre>{e(details)}</pre></details></td></tr>"
        )
    head = "<tr><th>event</th><th>turn</th><th>kind</th><th>trigger</th><th>outcome</th><th>reason</th><th>projected</th><th>limit</th><th></th></tr>"
    return f"<table class='events'>{head}{''.join(rows)}</table>"


def _findings_table(session: SessionReport) -> str:
    if not session.findings:
        return "<p class='meta'>No findings.</p>"
    rows = []
    for f in session.findings:
        exactness = f"{'exact' if f.exact else 'estimate'}, {f.tokenizer}"
        rows.append(
            f"<tr><td>{e(f.kind)}</td>{_num(f.turn_index)}<td><b>{e(f.title)}</b><br>"
            f"<span class='meta'>{e(f.detail)}</span></td>{_num(f.tokens)}{_num(f.context_tokens)}"
            f"{_num(f.requests)}<td class='num'>{e(money_text(f.money))}</td><td>{e(exactness)}</td>"
            f"<td class='fix'>{e(f.fix)}</td><td>{e(', '.join(map(str, f.message_seqs)))}</td></tr>"
        )
    head = (
        "<tr><th>kind</th><th>turn</th><th>finding</th><th>tokens saved</th><th>per request</th>"
        "<th>requests</th><th>USD</th><th>numbers</th><th>fix</th><th>message seqs</th></tr>"
    )
    return f"<table class='findings'>{head}{''.join(rows)}</table>"


def _turns_table(session: SessionReport) -> str:
    head = "".join(
        f"<th>{e(c)}</th>"
        for c in ("turn", "requests", *COMPONENTS, "total", "basis", "estimate", "provider", "used %")
    )
    rows = []
    for t in session.turns:
        values = [getattr(t.components, c) if t.components else None for c in COMPONENTS]
        rows.append(
            "<tr>" + _num(t.turn_index) + _num(t.requests) + "".join(_num(v) for v in values)
            + _num(t.components.total if t.components else None) + f"<td>{e(t.components_basis or '-')}</td>"
            + _num(t.estimate_tokens)
            + _num(t.provider_usage.prompt_tokens if t.provider_usage else None) + _num(t.used_pct) + "</tr>"
        )  # fmt: skip
    return f"<details><summary>Per turn</summary><table class='turns'><tr>{head}</tr>{''.join(rows)}</table></details>"


def _section(index: int, session: SessionReport) -> str:
    kind = f"Sub-agent thread of {e(session.parent_session_id)}" if session.parent_session_id else "Session"
    peak = (
        f"peak {session.peak_usage_pct:.1f}% of the limit ({session.peak_used_tokens:,} tokens, "
        f"{e(session.peak_source)}) at turn {session.peak_turn_index}"
        if session.peak_usage_pct is not None
        else "no requests recorded"
    )
    figure = timeline_figure(session).to_html(
        full_html=False, include_plotlyjs=False, div_id=f"timeline-{index}", config=PLOT_CONFIG,
        default_height="480px",
    )  # fmt: skip
    return f"""
<section class="thread" id="thread-{index}">
<h2>{kind} <code>{e(session.id)}</code></h2>
<p><b>{e(session.title)}</b></p>
<p class="meta">model {e(session.model)} · provider {e(session.provider)} · {session.message_count:,} messages ·
{session.request_count:,} requests · limit {e(f"{session.limit.limit_tokens:,}" if session.limit.limit_tokens else None)} tokens
(from {e(session.limit.source)}) · {peak}</p>
<p class="meta">Components are {"exact counts" if session.exact else "estimates"} by tokenizer <b>{e(session.tokenizer)}</b>;
the provider line is the provider's own count (exact).</p>
<div class="timeline">{figure}</div>
{_turns_table(session)}
{session_cost_html(session.costs) if session.costs is not None and session.costs.calls else ""}
<h3>Findings ({len(session.findings)}, {session.findings_tokens:,} tokens, {e(money_text(session.findings_money))})</h3>
{_findings_table(session)}
<h3>Context events</h3>
{_events_tables(session.events)}
</section>"""


def render_html(report: Report) -> str:
    """The whole report as one HTML document (plotly.js inlined; no network needed)."""
    sections = "".join(_section(i, s) for i, s in enumerate(report.sessions))
    peak = f"{report.peak_usage_pct:.1f}%" if report.peak_usage_pct is not None else "–"
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta name="generator" content="{e(report.generator)}">
<title>ctxdesk report: {e(report.source)}</title>
<style>{_STYLE}</style>
<script type="text/javascript">{get_plotlyjs()}</script>
</head><body>
<h1>ctxdesk report: {e(report.source)}</h1>
<p class="meta">{len(report.sessions)} thread(s) · {report.findings_count} finding(s) · peak usage {peak} ·
report_version {report.report_version} · {e(report.generator)}</p>
{project_cost_html(report.project) if report.project is not None and report.project.totals.calls else ""}
{sections}
</body></html>
"""
