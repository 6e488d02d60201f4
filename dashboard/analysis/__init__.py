"""Pure explanations for the dashboard (no streamlit, no I/O): the names the pages use, from
``stops`` (why a session stopped, and the settings that would have avoided it), ``projection``
(the timeline re-projected under edited settings, beside what was recorded), ``findings``
(findings as frames and markers), ``comparison`` (two sessions or two calls side by side),
``edits`` (what a proxy policy changed in a call), ``compaction_point`` (where a call's context is compacted), ``downsample`` (a long timeline's drawn steps)
and ``rows`` (numbers read from a recorded row).

Inputs are plain dicts/frames from dashboard.data; outputs are frozen values the pages render.
"""

from dashboard.analysis.compaction_point import CompactionPoint, compaction_point
from dashboard.analysis.comparison import (
    CALL_METRICS,
    SESSION_METRICS,
    Comparison,
    call_figures,
    call_label,
    compare,
    compare_components,
    peak_request,
    session_figures,
)
from dashboard.analysis.downsample import MAX_STEPS, hides_a_larger_call, peak_steps
from dashboard.analysis.edits import edit_diff, edit_savings, part_text
from dashboard.analysis.findings import (
    FINDING_COLUMNS,
    FINDING_LABELS,
    findings_frame,
    findings_markers,
    findings_per_call,
    money_text,
    savings_text,
)
from dashboard.analysis.projection import (
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
from dashboard.analysis.rows import components_of, recorded_int
from dashboard.analysis.stops import (
    BYTES_PER_TOKEN_ESTIMATE,
    LIMIT_FIELDS,
    OFFLOAD_STUB_TOKENS,
    THRESHOLD_SETTINGS,
    Growth,
    LimitLine,
    StopExplanation,
    explain_stop,
    min_limit_for,
    settings_for_model,
    stop_events,
    suggest_settings,
    suggestion_edit,
)

__all__ = [
    "BYTES_PER_TOKEN_ESTIMATE",
    "CALL_METRICS",
    "FINDING_COLUMNS",
    "FINDING_LABELS",
    "FIRST_CALL",
    "LIMIT_FIELDS",
    "MAX_STEPS",
    "OFFLOAD_STUB_TOKENS",
    "OTHER_TRIGGERS",
    "SESSION_METRICS",
    "THRESHOLD_SETTINGS",
    "THRESHOLD_TRIGGERS",
    "CompactionPoint",
    "Comparison",
    "Growth",
    "LimitLine",
    "Projection",
    "RecordedStops",
    "StopExplanation",
    "call_figures",
    "call_label",
    "compaction_point",
    "compare",
    "compare_components",
    "components_list",
    "components_of",
    "edit_diff",
    "edit_savings",
    "explain_stop",
    "findings_frame",
    "findings_markers",
    "findings_per_call",
    "hides_a_larger_call",
    "min_limit_for",
    "money_text",
    "part_text",
    "peak_request",
    "peak_steps",
    "per_call",
    "project_timeline",
    "recorded_budget",
    "recorded_int",
    "recorded_stops",
    "savings_text",
    "session_figures",
    "settings_for_model",
    "step_demand",
    "stop_events",
    "suggest_settings",
    "suggestion_edit",
]
