"""What one call's context holds: its components as bars (before / after a compaction, two
sessions side by side) and the whole window as one bar, as Claude Code's ``/context`` draws it."""

from __future__ import annotations

import plotly.graph_objects as go

from dashboard.display import escape
from engine.events import COMPONENT_COLORS, COMPONENT_LABELS


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
