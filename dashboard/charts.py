"""Plotly figures for the dashboard (no streamlit here): built from the frames dashboard.data returns.

Every string that came from a session (titles, tool names, previews) is HTML-escaped before it
reaches hover text or annotations, because plotly renders a subset of HTML there.
"""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd
import plotly.graph_objects as go

from dashboard.analysis import Projection
from dashboard.hover import escape
from dashboard.timeline_marks import FINDINGS_HEADROOM, findings_trace, marker_label, reasons_trace
from engine.events import COMPONENT_COLORS, COMPONENT_LABELS

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
#: Pixels per tool in the tools bar chart (and its least height).
TOOLS_BAR_ROW_HEIGHT = 20
TOOLS_BAR_MIN_HEIGHT = 240


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
    for name, label in COMPONENT_LABELS.items():
        if not turns[name].any():
            continue  # a component the session never had: no legend entry for it
        fig.add_trace(
            go.Scatter(
                x=x, y=turns[name].tolist(), name=label, stackgroup="components", mode="lines",
                line={"width": 0.5, "color": COMPONENT_COLORS[name]},
                hovertemplate=f"{label}: %{{y:,}} tokens<extra></extra>",
            )
        )  # fmt: skip
    totals = turns[list(COMPONENT_LABELS)].sum(axis=1)
    limit = turns["limit_tokens"].ffill().bfill()
    pct = [
        f"{100 * t / lim:.1f}%" if lim and lim == lim else "n/a" for t, lim in zip(totals, limit, strict=True)
    ]
    fig.add_trace(
        go.Scatter(
            x=x, y=totals.tolist(), name=f"{unit.capitalize()} (click to inspect)", mode="markers",
            marker={"size": 9, "color": "#222", "symbol": "circle-open"},
            customdata=list(zip(pct, turns["requests"].astype(int).tolist(), strict=True)),
            hovertemplate=f"{unit.capitalize()} %{{x}}: %{{y:,}} tokens (%{{customdata[0]}} of limit), "
            "%{customdata[1]} call(s)<extra></extra>",
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


def components_bar(rows: dict[str, dict[str, int]], *, title: str | None = None) -> go.Figure:
    """Grouped bars of tokens per component, one group per state (e.g. before / after); components
    that are 0 in every state are left out (a compaction records only what it can change)."""
    fig = go.Figure()
    names = [n for n in COMPONENT_LABELS if any(int(v.get(n, 0) or 0) for v in rows.values())] or list(
        COMPONENT_LABELS
    )
    for state, values in rows.items():
        fig.add_trace(
            go.Bar(
                x=[COMPONENT_LABELS[n] for n in names], y=[int(values.get(n, 0) or 0) for n in names],
                name=escape(state), hovertemplate="%{x}: %{y:,}<extra>" + escape(state) + "</extra>",
            )
        )  # fmt: skip
    fig.update_layout(
        barmode="group", height=340, title=escape(title) if title else None, yaxis={"title": "Tokens"}
    )
    return fig


def tools_bar(tools: pd.DataFrame) -> go.Figure:
    """Tokens of each tool definition as horizontal bars (largest on top, so long names and many
    tools stay readable), coloured by category, with calls in the hover."""
    fig = go.Figure()
    for category, part in tools.groupby("category", sort=True):
        fig.add_trace(
            go.Bar(
                y=[escape(n) for n in part["name"]], x=part["tokens"].tolist(), name=escape(category), orientation="h",
                customdata=list(zip(part["calls"].tolist(), [escape(s or "") for s in part["server"]], strict=True)),
                hovertemplate="%{y}: %{x:,} tokens, %{customdata[0]} call(s) %{customdata[1]}<extra></extra>",
            )
        )  # fmt: skip
    fig.update_layout(
        height=max(TOOLS_BAR_MIN_HEIGHT, TOOLS_BAR_ROW_HEIGHT * len(tools) + 90),
        xaxis={"title": "Definition tokens (sent with each request)"},
        yaxis={"categoryorder": "total ascending", "automargin": True},
        legend={"orientation": "h", "y": 1.02, "yanchor": "bottom"},
        margin={"t": 30, "r": 10, "l": 10, "b": 10},
    )
    return fig


def deferral_heatmap(matrix: pd.DataFrame) -> go.Figure:
    """Tools (rows) x turns (columns): loaded (1) or deferred (0)."""
    fig = go.Figure()
    if matrix.empty:
        fig.add_annotation(text="No deferral events", showarrow=False)
        return fig
    pivot = matrix.assign(v=(matrix["state"] == "loaded").astype(int)).pivot(
        index="tool", columns="turn", values="v"
    )
    fig.add_trace(
        go.Heatmap(
            z=pivot.values, x=[int(c) for c in pivot.columns], y=[escape(t) for t in pivot.index],
            colorscale=[[0, "#f2f2f2"], [1, "#54a24b"]], zmin=0, zmax=1, showscale=False, xgap=2, ygap=2,
            hovertemplate="%{y} at turn %{x}: %{z}<extra>1 = loaded, 0 = deferred</extra>",
        )
    )  # fmt: skip
    fig.update_layout(
        height=max(220, 28 * len(pivot.index) + 80),
        xaxis={"title": "Turn", "dtick": 1 if len(pivot.columns) <= 40 else None},
        yaxis={"automargin": True},
        margin={"t": 20, "r": 10, "l": 10, "b": 10},
    )
    return fig


def sessions_scatter(sessions: pd.DataFrame) -> go.Figure:
    """Peak usage against turns, one dot per session (hover: escaped title)."""
    fig = go.Figure()
    if sessions.empty:
        return fig
    fig.add_trace(
        go.Scattergl(
            x=sessions["turns"], y=sessions["peak_usage_pct"], mode="markers",
            text=[escape(t) for t in sessions["title"].fillna(sessions["session_id"])],
            marker={"size": 7, "color": (sessions["forced_final"] > 0).map({True: "#d62728", False: "#4c78a8"})},
            hovertemplate="%{text}<br>%{x} turns, peak %{y:.1f}%<extra></extra>",
        )
    )  # fmt: skip
    fig.update_layout(height=300, xaxis={"title": "Turns"}, yaxis={"title": "Peak usage (% of limit)"})
    return fig


#: The parts of the window besides the components, in the "now" bar (Claude Code's /context).
NOW_BAR_PARTS = {
    "free": ("Free space", "#e8e8e8"),
    "headroom": ("Auto-compact headroom", "#c9b8e0"),
    "buffer": ("Safety buffer", "#9e9e9e"),
    "output": ("Output reserve", "#616161"),
}


def context_now_bar(
    components: dict[str, int],
    *,
    context_window: int | None,
    max_output_tokens: int | None,
    buffer_tokens: int | None,
    limit: int | None,
    compact_threshold: float,
) -> go.Figure:
    """One horizontal bar for one model call, as Claude Code's ``/context`` draws it: each
    component, the free space up to the auto-compact point, the headroom from there to the limit,
    the safety buffer and the output reserve; together they fill the context window.

    Without a recorded window only the components are drawn (and the title says so).
    """
    fig = go.Figure()
    used = sum(int(v or 0) for v in components.values())
    parts: list[tuple[str, int, str]] = [
        (COMPONENT_LABELS[name], int(components.get(name) or 0), COMPONENT_COLORS[name])
        for name in COMPONENT_LABELS
        if int(components.get(name) or 0)
    ]
    window_known = all(v is not None for v in (context_window, max_output_tokens, buffer_tokens, limit))
    if window_known:
        compact_at = int(limit * compact_threshold)
        room = {
            "free": max(compact_at - used, 0),
            "headroom": max(limit - max(used, compact_at), 0),
            "buffer": int(buffer_tokens),
            "output": int(max_output_tokens),
        }
        # A context_budget below the window leaves the rest unused: it is part of the free space.
        room["free"] += max(int(context_window) - int(max_output_tokens) - int(buffer_tokens) - int(limit), 0)
        parts += [(NOW_BAR_PARTS[k][0], v, NOW_BAR_PARTS[k][1]) for k, v in room.items() if v]
    total = int(context_window) if window_known else max(used, 1)
    for label, tokens, colour in parts:
        fig.add_trace(
            go.Bar(
                y=["now"], x=[tokens], name=label, orientation="h", marker={"color": colour},
                hovertemplate=f"{label}: %{{x:,}} tokens ({100 * tokens / total:.1f}% of the window)<extra></extra>",
            )
        )  # fmt: skip
    title = (
        f"{used:,} of {int(context_window):,} tokens ({100 * used / int(context_window):.1f}%)"
        if window_known
        else f"{used:,} tokens (no window recorded for this call)"
    )
    fig.update_layout(
        barmode="stack", height=170, title={"text": title, "font": {"size": 13}},
        xaxis={"title": None, "range": [0, total], "showgrid": False}, yaxis={"visible": False},
        legend={"orientation": "h", "y": -0.35}, margin={"t": 36, "r": 10, "l": 10, "b": 10},
    )  # fmt: skip
    return fig
