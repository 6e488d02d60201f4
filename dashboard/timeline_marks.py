"""The symbols drawn over the timeline: findings at the top (their titles in the hover), and a
symbol on each step a compaction or a policy edit changed (its reason in the hover)."""

from __future__ import annotations

import pandas as pd
import plotly.graph_objects as go

from dashboard.hover import clipped, escape, wrapped
from engine.events import OUTCOME_MARKERS

__all__ = [
    "FINDINGS_HEADROOM", "FINDINGS_STYLE", "POLICY_EDIT", "findings_trace", "marker_label", "reasons_trace",
]  # fmt: skip

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
