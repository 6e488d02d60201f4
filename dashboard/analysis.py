"""Pure explanations for the dashboard (no streamlit, no I/O): the names the pages use, re-exported
from ``analysis_stops`` (why a session stopped, and the settings that would have avoided it),
``analysis_timeline`` (the timeline re-projected under edited settings, beside what was recorded)
and ``analysis_findings`` (findings as frames and markers).

Inputs are plain dicts/frames from dashboard.data; outputs are frozen values the pages render.
"""

from dashboard.analysis_findings import (
    FINDING_COLUMNS,
    FINDING_LABELS,
    findings_frame,
    findings_markers,
    findings_per_call,
    money_text,
    savings_text,
)
from dashboard.analysis_stops import (
    BYTES_PER_TOKEN_ESTIMATE,
    LIMIT_FIELDS,
    OFFLOAD_STUB_TOKENS,
    THRESHOLD_SETTINGS,
    Growth,
    LimitLine,
    StopExplanation,
    components_of,
    explain_stop,
    min_limit_for,
    settings_for_model,
    stop_events,
    suggest_settings,
    suggestion_edit,
)
from dashboard.analysis_timeline import (
    FIRST_CALL,
    OTHER_TRIGGERS,
    THRESHOLD_TRIGGERS,
    Projection,
    RecordedStops,
    components_list,
    per_call,
    project_timeline,
    recorded_budget,
    recorded_stops,
    step_demand,
)

__all__ = [
    "BYTES_PER_TOKEN_ESTIMATE",
    "FINDING_COLUMNS",
    "FINDING_LABELS",
    "FIRST_CALL",
    "LIMIT_FIELDS",
    "OFFLOAD_STUB_TOKENS",
    "OTHER_TRIGGERS",
    "THRESHOLD_SETTINGS",
    "THRESHOLD_TRIGGERS",
    "Growth",
    "LimitLine",
    "Projection",
    "RecordedStops",
    "StopExplanation",
    "components_list",
    "components_of",
    "explain_stop",
    "findings_frame",
    "findings_markers",
    "findings_per_call",
    "min_limit_for",
    "money_text",
    "per_call",
    "project_timeline",
    "recorded_budget",
    "recorded_stops",
    "savings_text",
    "settings_for_model",
    "step_demand",
    "stop_events",
    "suggest_settings",
    "suggestion_edit",
]
