"""Which context events a reader shows by default, and the one-line note each gets in a table.

Shared by the text and HTML reports and by ``ctxdesk inspect``: a stored event and a report
event both have the fields read here.
"""

from __future__ import annotations

from typing import Any, Protocol

from engine.textfmt import format_cell

#: Floats in report tables (percentages) get one decimal.
FLOAT_FORMAT = ",.1f"


class EventLike(Protocol):
    kind: str
    outcome: str | None
    reason: str | None
    projected_tokens: int | None
    limit_tokens: int | None
    details: dict[str, Any]


def cell(value: Any) -> str:
    """A table cell as the reports write it (thousands separators, one decimal, None as '-')."""
    return format_cell(value, float_format=FLOAT_FORMAT)


def is_routine(event: EventLike) -> bool:
    """A guard check that passed: recorded for every turn and tool call, shown only on request."""
    return event.kind == "guard" and event.outcome == "ok"


def event_note(event: EventLike) -> str:
    """What a table's "details" cell says about an event: tokens saved, bytes stored, hits found."""
    d = event.details or {}
    if event.kind == "compaction" and "before_tokens" in d:
        note = f"{cell(d.get('before_tokens'))} -> {cell(d.get('after_tokens'))} tokens"
        if d.get("strategies_run"):
            note += f" via {','.join(map(str, d['strategies_run']))}"
        return note
    if event.kind == "offload" and "ref_id" in d:
        return f"{d.get('tool_name', '')}: {cell(d.get('size_bytes', 0))} bytes stored as {d['ref_id']}"
    if event.kind == "tool_search" and "query" in d:
        hits = [h.get("name", h) if isinstance(h, dict) else h for h in d.get("hits", [])]
        return f"{d['query']!r}: {', '.join(map(str, hits)) or 'no match'}"
    if event.kind == "guard" and d.get("tool_name"):
        return f"{event.reason or ''} ({d['tool_name']}, {cell(d.get('tool_tokens', 0))} tokens)".strip()
    if event.projected_tokens is not None:
        return f"projected {event.projected_tokens:,} of {cell(event.limit_tokens)}"
    return event.reason or ""
