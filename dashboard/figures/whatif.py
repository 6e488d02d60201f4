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


#: Line styles by the frame's ``role``: the provider's own usage dashed, the history as sent grey,
#: each variant a colour of its own (the same in every panel).
ROLE_LINES = {"recorded": {"color": "#222222", "dash": "dash"}, "as_sent": {"color": "#9e9e9e"}}
VARIANT_COLORS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2")


def whatif_figure(frame: pd.DataFrame) -> go.Figure:
    """Per call, one line per variant: the prompt sent, what the cache gave back, the cost so far;
    a cross where the variant edited or compacted (hover names the edit)."""
    figure = make_subplots(
        rows=len(WHATIF_PANELS), cols=1, shared_xaxes=True, vertical_spacing=0.06,
        subplot_titles=[title for _, title in WHATIF_PANELS],
    )  # fmt: skip
    colors = iter(VARIANT_COLORS * len(frame))
    for n, (label, calls) in enumerate(frame.groupby("variant", sort=False)):
        role = calls["role"].iloc[0]
        line = ROLE_LINES.get(role) or {"color": next(colors)}
        edited = calls["edits"].ne("")
        name = escape(str(label))
        for row, (column, title) in enumerate(WHATIF_PANELS, start=1):
            money = column.endswith("_usd")
            figure.add_trace(
                go.Scatter(
                    x=calls["call"], y=calls[column], name=name, legendgroup=str(n), showlegend=row == 1,
                    mode="lines+markers", line=line,
                    marker={"size": [10 if e else 5 for e in edited], "symbol": ["x" if e else "circle" for e in edited]},
                    customdata=[escape(e) or "no edit" for e in calls["edits"]],
                    hovertemplate=(
                        f"call %{{x}}<br>{title}: {'$%{y:,.4f}' if money else '%{y:,}'}<br>%{{customdata}}"
                        f"<extra>{name}</extra>"
                    ),
                ),
                row=row, col=1,
            )  # fmt: skip
    calls = int(frame["call"].max()) if not frame.empty else 0
    # Calls are whole numbers: one tick each while they fit, else plotly's own spacing without fractions.
    figure.update_xaxes(dtick=1 if calls <= 30 else None, tickformat="d")
    figure.update_xaxes(title_text="Model call", row=len(WHATIF_PANELS), col=1)
    figure.update_layout(height=680, legend={"orientation": "h", "y": -0.12}, margin={"t": 40})
    return figure
