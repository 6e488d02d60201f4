"""The what-if's per-call chart (Model settings page): every replayed variant call by call."""

from __future__ import annotations

import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from dashboard.display import escape

#: The per-call chart's panels: (frame column, axis title).
WHATIF_PANELS = (
    ("prompt_tokens", "Prompt tokens"),
    ("cache_read_tokens", "Cache reads"),
    ("cost_so_far_usd", "Cost so far (USD)"),
)


def whatif_figure(frame: pd.DataFrame) -> go.Figure:
    """Per call, one line per variant: the prompt sent, what the cache gave back, the cost so far;
    a marker where the variant edited or compacted (hover names the edit)."""
    figure = make_subplots(
        rows=len(WHATIF_PANELS), cols=1, shared_xaxes=True, vertical_spacing=0.06,
        subplot_titles=[title for _, title in WHATIF_PANELS],
    )  # fmt: skip
    for n, (label, calls) in enumerate(frame.groupby("variant", sort=False)):
        edited = calls["edits"].ne("")
        for row, (column, title) in enumerate(WHATIF_PANELS, start=1):
            figure.add_trace(
                go.Scatter(
                    x=calls["call"], y=calls[column], name=escape(str(label)), legendgroup=str(n),
                    showlegend=row == 1, mode="lines+markers",
                    marker={"size": [9 if e else 4 for e in edited], "symbol": ["x" if e else "circle" for e in edited]},
                    customdata=[escape(e) or "no edit" for e in calls["edits"]],
                    hovertemplate=f"call %{{x}}<br>{title}: %{{y:,}}<br>%{{customdata}}<extra>{escape(str(label))}</extra>",
                ),
                row=row, col=1,
            )  # fmt: skip
    figure.update_xaxes(title_text="Model call", row=len(WHATIF_PANELS), col=1)
    figure.update_layout(height=640, legend={"orientation": "h", "y": -0.12}, margin={"t": 40})
    return figure
