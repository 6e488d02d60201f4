"""The ``compact_context`` tool a model can call: its schema, the call (a ``force_compact`` of
the session) and the one-line report it returns.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from engine.compaction.config import STRATEGY_NAMES
from engine.compaction.operations import CompactionReport, force_compact
from engine.compaction.summarizers import Summarizer
from engine.errors import ValidationError
from engine.store import SessionStore

COMPACT_CONTEXT_TOOL: dict[str, Any] = {
    "name": "compact_context",
    "description": (
        "Compact the conversation history to free context space: older tool results are cleared "
        "and older turns are summarized (decisions, facts, user requirements, open tasks are kept; "
        "the full transcript stays stored). Use it before starting a large new subtask or when told "
        "the context is nearly full. Returns what was compacted."
    ),
    "input_schema": {
        "type": "object",
        "properties": {
            "instructions": {
                "type": "string",
                "description": 'What the summary should focus on, e.g. "focus on the API changes".',
            },
            "strategy": {
                "type": "string",
                "enum": [s for s in STRATEGY_NAMES if s != "emergency"],
                "description": "How to compact (default chain: clear_tool_results, then summarize, then truncate).",
            },
        },
        "additionalProperties": False,
    },
}


def run_compact_context_tool(
    store: SessionStore,
    session_id: str,
    tool_input: Mapping[str, Any],
    *,
    summarizer: Summarizer | None = None,
    target_tokens: int | None = None,
    event_fields: Mapping[str, Any] | None = None,
) -> str:
    """Handle a ``compact_context`` call: compact the session and say what changed, in one line.

    ``event_fields`` are passed to :func:`force_compact` for its ``compaction`` event."""
    if not isinstance(tool_input, Mapping):
        raise ValidationError("compact_context input must be an object", field="input", value=tool_input)
    unknown = set(tool_input) - set(COMPACT_CONTEXT_TOOL["input_schema"]["properties"])
    if unknown:
        raise ValidationError(f"compact_context got unknown fields {sorted(unknown)}", field="input")
    instructions = tool_input.get("instructions")
    strategy = tool_input.get("strategy") or "chain"
    if instructions is not None and not isinstance(instructions, str):
        raise ValidationError("instructions must be a string", field="instructions", value=instructions)
    if strategy not in COMPACT_CONTEXT_TOOL["input_schema"]["properties"]["strategy"]["enum"]:
        raise ValidationError(f"unknown strategy {strategy!r}", field="strategy", value=strategy)
    report = force_compact(
        store,
        session_id,
        strategy=strategy,
        instructions=instructions or None,
        summarizer=summarizer,
        target_tokens=target_tokens,
        trigger="tool",
        event_fields=event_fields,
    )
    return describe_report(report)


def describe_report(report: CompactionReport) -> str:
    """``Compacted 48 → 12 messages, 91,204 → 18,330 tokens (clear_tool_results, summarize).``"""
    if report.noop:
        return (
            f"Nothing compacted ({report.before_count} messages, {report.before_tokens:,} tokens): "
            f"{report.reason}."
        )
    return (
        f"Compacted {report.before_count} → {report.after_count} messages, "
        f"{report.before_tokens:,} → {report.after_tokens:,} tokens ({', '.join(report.strategies_run)})."
    )
