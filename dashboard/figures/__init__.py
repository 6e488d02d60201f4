"""Plotly figures for the pages (no streamlit here), built from the frames dashboard.data returns:
the context ``timeline`` (with its symbols), a call's ``context`` (components, the window as one
bar), the ``tools`` a session offered, every loaded ``sessions`` at a glance, and the ``whatif``
replay call by call."""

from dashboard.figures.context import NOW_BAR_PARTS, components_bar, context_now_bar
from dashboard.figures.sessions import sessions_scatter
from dashboard.figures.timeline import (
    DEFAULT_THRESHOLDS,
    FINDINGS_STYLE,
    POLICY_EDIT,
    PROVIDER_PARTS_LABEL,
    PROVIDER_PROMPT_LABEL,
    USAGE_LABELS,
    timeline_figure,
)
from dashboard.figures.tools import deferral_heatmap, tools_bar
from dashboard.figures.whatif import WHATIF_PANELS, whatif_figure

__all__ = [
    "DEFAULT_THRESHOLDS",
    "FINDINGS_STYLE",
    "NOW_BAR_PARTS",
    "POLICY_EDIT",
    "PROVIDER_PARTS_LABEL",
    "PROVIDER_PROMPT_LABEL",
    "USAGE_LABELS",
    "WHATIF_PANELS",
    "components_bar",
    "context_now_bar",
    "deferral_heatmap",
    "sessions_scatter",
    "timeline_figure",
    "tools_bar",
    "whatif_figure",
]
