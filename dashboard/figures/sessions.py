"""Every loaded session at a glance: peak usage against turns."""

from __future__ import annotations

import pandas as pd
import plotly.graph_objects as go

from dashboard.display import escape


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
