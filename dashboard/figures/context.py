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
    "capped": ("Beyond the context budget", "#f4e1d2"),
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
    compact_at: int | None,
) -> go.Figure:
    """One horizontal bar for one model call, as Claude Code's ``/context`` draws it: each
    component, the free space up to the auto-compact point ``compact_at`` (dashboard.analysis.
    compaction_point; None: there is none), the headroom from there to ``limit``
    (the call's limit by engine.limit's rule, as every page shows it), and, where the window is
    recorded, what a context budget leaves out, the safety buffer and the output reserve: together
    they fill the window. Its title is the share of the limit, the number every page shows.
    """
    fig = go.Figure()
    used = sum(int(v or 0) for v in components.values())
    parts: list[tuple[str, int, str]] = [
        (COMPONENT_LABELS[name], int(components.get(name) or 0), COMPONENT_COLORS[name])
        for name in COMPONENT_LABELS
        if int(components.get(name) or 0)
    ]
    total = max(used, 1)
    if limit:
        point = min(compact_at, limit) if compact_at is not None else limit
        room = {"free": max(point - used, 0), "headroom": max(limit - max(used, point), 0)}
        total = max(limit, used)
        if context_window:
            reserve, buffer = int(max_output_tokens or 0), int(buffer_tokens or 0)
            room |= {
                "capped": max(int(context_window) - reserve - buffer - limit, 0),
                "buffer": buffer,
                "output": reserve,
            }
            total = max(int(context_window), used)
        parts += [(NOW_BAR_PARTS[k][0], v, NOW_BAR_PARTS[k][1]) for k, v in room.items() if v]
    whole = "window" if limit and context_window else "limit" if limit else "sent"
    for label, tokens, colour in parts:
        fig.add_trace(
            go.Bar(
                y=["now"], x=[tokens], name=label, orientation="h", marker={"color": colour},
                hovertemplate=f"{label}: %{{x:,}} tokens ({100 * tokens / total:.1f}% of the {whole})<extra></extra>",
            )
        )  # fmt: skip
    if limit:
        title = f"{used:,} of the {limit:,}-token limit ({100 * used / limit:.1f}%)"
        if context_window and int(context_window) != limit:
            title += f" · window {int(context_window):,}"
    else:
        title = f"{used:,} tokens sent (no limit recorded for this call)"
    fig.update_layout(
        barmode="stack", height=170, title={"text": title, "font": {"size": 13}},
        xaxis={"title": None, "range": [0, total], "showgrid": False}, yaxis={"visible": False},
        legend={"orientation": "h", "y": -0.35}, margin={"t": 36, "r": 10, "l": 10, "b": 10},
    )  # fmt: skip
    return fig
