"""Headless reports of stored sessions, and diffs of two contexts, for people and for CI.

``build_report(store, session_ids)`` reads sessions (never writes) into a :class:`Report`; the
JSON form is versioned (``report_version``) and its JSON Schema is ``docs/report.schema.json``
(``python -m engine.report --schema``). ``diff_contexts`` compares two sessions or snapshots
message by message. ``run_report`` / ``run_diff`` are what the CLI calls.

One small module per job: ``models`` (the report's pydantic contract), ``lookup`` (which
sessions: id or prefix, threads, ``DB[:SESSION]``, transcripts), ``notes`` (routine-event filter
and the one-line note of an event, shared with ``ctxdesk inspect``), ``build`` (store -> Report,
CI gates), ``text`` / ``html`` (renderers; ``html`` alone imports plotly), ``diff`` (two contexts),
``run`` (the CLI's entry points). Roll-ups over many sessions (per project, per model, cost)
go in their own module here (e.g. ``engine/report/projects.py``) built from :class:`SessionReport`s,
and are re-exported below.
"""

from engine.report.build import (
    UNKNOWN_MODEL,
    build_report,
    gate_failure,
    messages_sent,
    request_point,
    sent_counts,
    session_report,
)
from engine.report.costs import cost_line, project_cost_report, project_cost_text, session_cost_report
from engine.report.diff import PREVIEW_CHARS, diff_contexts, load_side, parse_side, snapshot_pair
from engine.report.lookup import find_session, open_target, read_store, split_target, threads_of
from engine.report.notes import FLOAT_FORMAT, event_note, is_routine
from engine.report.run import EXIT_GATE_FAILED, FORMATS, render, run_diff, run_report, write_output
from engine.report.shapes import (
    REPORT_VERSION,
    ChangeStatus,
    Components,
    DiffReport,
    DiffSide,
    Limit,
    MessageChange,
    Report,
    ReportEvent,
    RequestPoint,
    SessionReport,
    TurnPoint,
    Usage,
    UsedSource,
    report_json_schema,
    schema_text,
)
from engine.report.text import money_text, render_diff_text, render_table, render_text


def render_html(report: Report) -> str:
    """The whole report as one self-contained HTML document (imports plotly on first use)."""
    from engine.report.html import render_html as render

    return render(report)


__all__ = [
    "EXIT_GATE_FAILED",
    "FLOAT_FORMAT",
    "FORMATS",
    "PREVIEW_CHARS",
    "REPORT_VERSION",
    "UNKNOWN_MODEL",
    "ChangeStatus",
    "Components",
    "DiffReport",
    "DiffSide",
    "Limit",
    "MessageChange",
    "Report",
    "ReportEvent",
    "RequestPoint",
    "SessionReport",
    "TurnPoint",
    "Usage",
    "UsedSource",
    "build_report",
    "cost_line",
    "diff_contexts",
    "event_note",
    "find_session",
    "gate_failure",
    "is_routine",
    "load_side",
    "messages_sent",
    "money_text",
    "open_target",
    "parse_side",
    "project_cost_report",
    "project_cost_text",
    "read_store",
    "render",
    "render_diff_text",
    "render_html",
    "render_table",
    "render_text",
    "report_json_schema",
    "request_point",
    "run_diff",
    "run_report",
    "schema_text",
    "sent_counts",
    "session_cost_report",
    "session_report",
    "snapshot_pair",
    "split_target",
    "threads_of",
    "write_output",
]
