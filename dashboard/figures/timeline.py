"""The context timeline figure: tokens by component per turn or call against the limit, the
provider's own counts, the limit's thresholds, an edited settings' projection, and the symbols
drawn over it (findings at the top with their titles in the hover; a symbol on each step a
compaction or a policy edit changed, its reason in the hover).

Every string that came from a session is HTML-escaped (dashboard.display.escape) before it
reaches hover text or annotations, because plotly renders a subset of HTML there.
"""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd
import plotly.graph_objects as go

from dashboard.analysis.projection import Projection
from dashboard.display import BASIS_WORDS, clipped, escape, wrapped
from engine.events import COMPONENT_COLORS, COMPONENT_LABELS, OUTCOME_MARKERS

USAGE_LABELS = {
    "provider_input_tokens": ("Provider: input", "dot"),
    "provider_cache_read_tokens": ("Provider: cache reads", "dash"),
    "provider_cache_creation_tokens": ("Provider: cache writes", "dashdot"),
    "provider_output_tokens": ("Provider: output", "longdash"),
}
PROVIDER_PROMPT_LABEL = "Provider: whole prompt"
PROVIDER_PARTS_LABEL = "Provider: input, cache reads/writes, output"
DEFAULT_THRESHOLDS = (0.80, 0.95, 0.98)
REFUSED_TEXT = {
    "rejected": "Tool result refused (final turn forced)",
    "forced_final": "Final turn forced",
    "skipped_provider": "Provider skipped",
}
FINDINGS_STYLE = {
    "symbol": "diamond",
    "size": 13,
    "color": "#f2b701",
    "line": {"color": "#7a5c00", "width": 1},
}
#: Where finding markers sit: a share of the plot's height on an invisible axis over the main one;
#: the token axis then gets headroom so they sit above the limit line.
FINDINGS_Y = 0.965
FINDINGS_HEADROOM = 1.12
#: Lines of finding titles in one marker's hover text, and characters per title.
HOVER_FINDINGS = 4
HOVER_TITLE_CHARS = 90
#: The marker label of an edit a proxy policy made (recorded as a compaction).
POLICY_EDIT = "Policy edit"
#: Characters per line of a reason in a hover.
HOVER_WRAP = 90


def marker_label(kind: str, outcome: str | None, trigger: object) -> tuple[str, str]:
    """(label, colour) of a marked event: a proxy policy's edit is a "Policy edit"."""
    label, color = OUTCOME_MARKERS.get((kind, outcome if kind != "restore" else None), (str(kind), "#555"))
    return (POLICY_EDIT if trigger == "proxy_policy" else label), color


def reasons_trace(marks: pd.DataFrame, totals: pd.Series, x: list[int]) -> go.Scatter:
    """A symbol on each marked step whose event gives a reason (a policy edit's, a compaction's),
    on the step's total, the reason in the hover."""
    at = dict(zip(x, totals.tolist(), strict=True))
    ys, hover, colors = [], [], []
    for m in marks.itertuples():
        label, color = marker_label(m.kind, m.outcome, m.trigger)
        ys.append(at.get(int(m.turn), 0))
        hover.append(f"{escape(label)} · {escape(m.trigger)}<br>{wrapped(m.reason, HOVER_WRAP)}")
        colors.append(color)
    return go.Scatter(
        x=marks["turn"].astype(int).tolist(), y=ys, name="Edits and compactions (hover for why)",
        mode="markers", marker={"symbol": "diamond-open", "size": 11, "color": colors, "line": {"width": 2}},
        text=hover, hovertemplate="%{text}<extra></extra>",
    )  # fmt: skip


def findings_trace(findings: pd.DataFrame, unit: str = "turn") -> go.Scatter:
    """Symbols at the top of the timeline for turns with findings; hover lists their (escaped) titles."""
    hover = []
    for count, tokens, titles in zip(findings["count"], findings["tokens"], findings["titles"], strict=True):
        lines = [f"• {clipped(t, HOVER_TITLE_CHARS)}" for t in list(titles)[:HOVER_FINDINGS]]
        if len(titles) > HOVER_FINDINGS:
            lines.append(f"… and {len(titles) - HOVER_FINDINGS} more")
        head = f"{int(count)} finding(s), {int(tokens):,} tokens to save"
        hover.append("<br>".join([head, *lines]))
    return go.Scatter(
        x=findings["turn"].astype(int).tolist(), y=[FINDINGS_Y] * len(findings), yaxis="y2",
        name=f"Findings (hover; click the {unit} for details)", mode="markers", marker=FINDINGS_STYLE,
        text=hover, hovertemplate="%{text}<extra></extra>",
    )  # fmt: skip


def timeline_figure(
    turns: pd.DataFrame,
    markers: pd.DataFrame | None = None,
    *,
    thresholds: Sequence[float] = DEFAULT_THRESHOLDS,
    show_usage: bool = True,
    projection: Projection | None = None,
    selected_turn: int | None = None,
    title: str | None = None,
    unit: str = "turn",
    findings: pd.DataFrame | None = None,
) -> go.Figure:
    """Stacked area of tokens by component, turn by turn, against the effective limit.

    ``turns`` is :func:`dashboard.data.timeline`; ``markers`` :func:`dashboard.data.markers`;
    ``findings`` :func:`dashboard.analysis.findings_markers` (a symbol at the top of each turn with
    findings, their titles in the hover). Threshold lines are shares of the recorded limit; a
    ``projection`` adds the limit and the compact / final-turn points under edited settings.
    """
    fig = go.Figure()
    if turns.empty:
        fig.add_annotation(text="No request events recorded for this session", showarrow=False)
        fig.update_layout(height=420, title=escape(title) if title else None)
        return fig
    x = turns["turn"].astype(int).tolist()
    has_findings = findings is not None and not findings.empty
    # A frame from before a component existed (the harness residual) lacks its column: it is 0.
    present = [name for name in COMPONENT_LABELS if name in turns]
    for name in present:
        label = COMPONENT_LABELS[name]
        if not turns[name].any():
            continue  # a component the session never had: no legend entry for it
        fig.add_trace(
            go.Scatter(
                x=x, y=turns[name].tolist(), name=label, stackgroup="components", mode="lines",
                line={"width": 0.5, "color": COMPONENT_COLORS[name]},
                hovertemplate=f"{label}: %{{y:,}} tokens<extra></extra>",
            )
        )  # fmt: skip
    totals = turns[present].sum(axis=1)
    # each step against its own limit (engine.limit, in the query): no limit is carried to a step without one
    limit = pd.to_numeric(turns["limit_tokens"], errors="coerce")
    pct = [
        f"{100 * t / lim:.1f}%" if lim and lim == lim else "n/a" for t, lim in zip(totals, limit, strict=True)
    ]
    # how each step's components were known: exact, reconciled to the provider's count, or our estimate
    recorded = turns["components_basis"] if "components_basis" in turns else [None] * len(turns)
    basis = [BASIS_WORDS.get(b, "estimate") if isinstance(b, str) else "estimate" for b in recorded]
    fig.add_trace(
        go.Scatter(
            x=x, y=totals.tolist(), name=f"{unit.capitalize()} (click to inspect)", mode="markers",
            marker={"size": 9, "color": "#222", "symbol": "circle-open"},
            customdata=list(zip(pct, turns["requests"].astype(int).tolist(), basis, strict=True)),
            hovertemplate=f"{unit.capitalize()} %{{x}}: %{{y:,}} tokens (%{{customdata[0]}} of limit, "
            "%{customdata[2]}), %{customdata[1]} call(s)<extra></extra>",
        )
    )  # fmt: skip
    if limit.notna().any():
        fig.add_trace(
            go.Scatter(
                x=x, y=limit.tolist(), name="Effective limit", mode="lines", line={"color": "black", "width": 2},
                hovertemplate="Limit: %{y:,}<extra></extra>",
            )
        )  # fmt: skip
        shares = " / ".join(f"{share:.0%}" for share in thresholds)
        for i, share in enumerate(thresholds):
            # One legend entry for the three threshold lines (note, compact, hard block).
            fig.add_trace(
                go.Scatter(
                    x=x, y=(limit * share).round().tolist(), name=f"{shares} of limit", mode="lines",
                    line={"color": "grey", "width": 1, "dash": "dot"}, legendgroup="thresholds", showlegend=i == 0,
                    hovertemplate=f"{share:.0%}: %{{y:,}}<extra></extra>",
                )
            )  # fmt: skip
    if show_usage:
        prompt_columns = [c for c in USAGE_LABELS if c != "provider_output_tokens"]
        if all(c in turns for c in prompt_columns) and turns[prompt_columns].notna().all(axis=1).any():
            # The provider's whole prompt is what compares with our estimate; its parts are one click away.
            prompt = turns[prompt_columns].sum(axis=1, min_count=len(prompt_columns))
            fig.add_trace(
                go.Scatter(
                    x=x, y=prompt.tolist(), name=PROVIDER_PROMPT_LABEL, mode="lines",
                    line={"width": 2, "dash": "dot", "color": "#333"},
                    hovertemplate=f"{PROVIDER_PROMPT_LABEL}: %{{y:,}}<extra></extra>",
                )
            )  # fmt: skip
        parts = [c for c in USAGE_LABELS if c in turns and turns[c].notna().any()]
        for i, column in enumerate(parts):
            # The provider's parts toggle together under one legend entry.
            label, dash = USAGE_LABELS[column]
            fig.add_trace(
                go.Scatter(
                    x=x, y=turns[column].tolist(), name=PROVIDER_PARTS_LABEL, mode="lines",
                    line={"width": 1.5, "dash": dash}, visible="legendonly", legendgroup="provider_parts",
                    showlegend=i == 0, hovertemplate=f"{label}: %{{y:,}}<extra></extra>",
                )
            )  # fmt: skip
    if markers is not None and not markers.empty:
        for _, m in markers.iterrows():
            if m["kind"] == "guard" and m["outcome"] == "rejected":
                continue  # drawn as the refused projection below; the forced final has the line
            label, color = marker_label(m["kind"], m["outcome"], m.get("trigger"))
            fig.add_vline(
                x=int(m["turn"]), line={"color": color, "dash": "dash", "width": 1.5},
                annotation={"text": escape(label), "textangle": -90, "font": {"color": color, "size": 11},
                            "yshift": -22 if has_findings else 0},
                annotation_position="top left",
            )  # fmt: skip
    if markers is not None and not markers.empty and "reason" in markers:
        explained = markers[markers["reason"].notna() & (markers["kind"] != "guard")]
        if not explained.empty:
            fig.add_trace(reasons_trace(explained, totals, x))
    if markers is not None and not markers.empty and "projected_tokens" in markers:
        refused = markers[(markers["kind"] == "guard") & markers["projected_tokens"].notna()]
        if not refused.empty:
            # What the guard refused: the request (or tool result) that would not have fit.
            what = [REFUSED_TEXT.get(str(o), str(o)) for o in refused["outcome"]]
            fig.add_trace(
                go.Scatter(
                    x=refused["turn"].astype(int).tolist(), y=refused["projected_tokens"].tolist(),
                    name="Refused: projected tokens", mode="markers", customdata=what,
                    marker={"symbol": "x", "size": 12, "color": "#d62728", "line": {"width": 1}},
                    hovertemplate="%{customdata}: %{y:,} tokens projected<extra></extra>",
                )
            )  # fmt: skip
    if projection is not None:
        fig.add_trace(
            go.Scatter(
                x=x, y=[projection.limit] * len(x), name="Limit (edited settings)", mode="lines",
                line={"color": "#9467bd", "width": 2, "dash": "dash"},
                hovertemplate="Edited limit: %{y:,}<extra></extra>",
            )
        )  # fmt: skip
        fig.add_trace(
            go.Scatter(
                x=x, y=[round(projection.limit * projection.thresholds[1])] * len(x),
                name=f"Compaction at {projection.thresholds[1]:.0%} (edited)", mode="lines",
                line={"color": "#9467bd", "width": 1, "dash": "dot"},
                hovertemplate="Edited compaction point: %{y:,}<extra></extra>",
            )
        )  # fmt: skip
        for turn in projection.compact_turns[:1]:
            fig.add_annotation(
                x=turn, y=projection.limit * projection.thresholds[1], text=f"would compact ({unit} {turn})",
                showarrow=True, arrowcolor="#9467bd", font={"color": "#9467bd"},
            )  # fmt: skip
        for turn in projection.block_turns[:1]:
            fig.add_annotation(
                x=turn, y=projection.limit * projection.thresholds[2], text=f"would force final ({unit} {turn})",
                showarrow=True, arrowcolor="#d62728", font={"color": "#d62728"}, ay=-60,
            )  # fmt: skip
        fig.add_annotation(
            xref="paper", yref="paper", x=0, y=1.12, showarrow=False, align="left",
            text=escape(projection.headline), font={"color": "#9467bd"},
        )  # fmt: skip
    if has_findings:
        top = max((v for t in fig.data for v in (t.y or ()) if v is not None and v == v), default=0)
        fig.add_trace(findings_trace(findings, unit))
        fig.update_layout(
            yaxis={"range": [0, max(top, 1) * FINDINGS_HEADROOM]},
            yaxis2={
                "overlaying": "y",
                "range": [0, 1],
                "visible": False,
                "fixedrange": True,
                "showgrid": False,
            },
        )
    if selected_turn is not None and selected_turn in x:
        fig.add_vrect(
            x0=selected_turn - 0.4, x1=selected_turn + 0.4, fillcolor="#ffd54f", opacity=0.25, line_width=0
        )
    fig.update_layout(
        title=escape(title) if title else None, height=480, hovermode="x unified",
        xaxis={"title": unit.capitalize(), "dtick": 1 if len(x) <= 40 else None}, yaxis={"title": "Tokens", "rangemode": "tozero"},
        legend={"orientation": "h", "y": -0.2}, margin={"t": 70, "r": 10, "l": 10, "b": 10},
        clickmode="event+select", dragmode="select",
    )  # fmt: skip
    return fig
