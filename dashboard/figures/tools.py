"""The tools a session offered: each definition's tokens, and which were loaded or deferred per turn."""

from __future__ import annotations

import pandas as pd
import plotly.graph_objects as go

from dashboard.display import escape

#: Pixels per tool in the tools bar chart (and its least height).
TOOLS_BAR_ROW_HEIGHT = 20
TOOLS_BAR_MIN_HEIGHT = 240


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
