"""Why a session stopped and why it compacted, for every source (session manager, proxy, every
importer): pure functions over a session's stored rows returning frozen explanations.

``explain_session(session, messages, events)`` -> :class:`SessionExplanation` (how it ended, each
compaction with what it kept and dropped, each failed call); ``explain_store(store, ids)`` ->
:class:`WhyReport`, whose ``to_json()`` is ``ctxdesk why --format json`` (docs/why.schema.json).
Modules: ``model`` (results and their words), ``calls`` (calls numbered from 1), ``ending``,
``compactions`` (+ ``agents``: each agent's own threshold; ``kept``: what survived), ``failures``,
``sentences``, ``session``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from engine.lazy import lazy_exports

#: Public name -> its module; names load on first use, so a reader of the result models alone
#: (the dashboard's Sessions page) does not import every explainer and the importers' registry.
_OWNERS: dict[str, str] = {
    "AGENT_LABELS": "engine.explain.agents",
    "AgentThreshold": "engine.explain.agents",
    "agent_label": "engine.explain.agents",
    "agent_of": "engine.explain.agents",
    "agent_of_source": "engine.explain.agents",
    "agent_threshold": "engine.explain.agents",
    "Call": "engine.explain.calls",
    "Calls": "engine.explain.calls",
    "is_failed_request": "engine.explain.calls",
    "explain_compactions": "engine.explain.compactions",
    "FINAL_TOOLS": "engine.explain.ending",
    "STOP_REASONS": "engine.explain.ending",
    "explain_ending": "engine.explain.ending",
    "COMPACTION_BY": "engine.explain.explanations",
    "COMPACTION_TRIGGERS": "engine.explain.explanations",
    "END_CAUSES": "engine.explain.explanations",
    "ENDED_HOW": "engine.explain.explanations",
    "ENDED_HOW_WORDS": "engine.explain.explanations",
    "ITEM_KINDS": "engine.explain.explanations",
    "CompactionExplanation": "engine.explain.explanations",
    "ContextItem": "engine.explain.explanations",
    "Ending": "engine.explain.explanations",
    "FailedCall": "engine.explain.explanations",
    "SessionExplanation": "engine.explain.explanations",
    "WhyReport": "engine.explain.explanations",
    "ended_how": "engine.explain.explanations",
    "explain_failures": "engine.explain.failures",
    "failure_summaries": "engine.explain.failures",
    "WhyJson": "engine.explain.json_shape",
    "schema_text": "engine.explain.json_shape",
    "checked_json": "engine.explain.json_shape:checked",
    "kept_and_dropped": "engine.explain.kept",
    "explain_session": "engine.explain.session",
    "explain_store": "engine.explain.session",
}

__getattr__, __dir__ = lazy_exports(__name__, _OWNERS, globals())

if TYPE_CHECKING:
    from engine.explain.agents import (
        AGENT_LABELS,
        AgentThreshold,
        agent_label,
        agent_of,
        agent_of_source,
        agent_threshold,
    )
    from engine.explain.calls import Call, Calls, is_failed_request
    from engine.explain.compactions import explain_compactions
    from engine.explain.ending import FINAL_TOOLS, STOP_REASONS, explain_ending
    from engine.explain.explanations import (
        COMPACTION_BY,
        COMPACTION_TRIGGERS,
        END_CAUSES,
        ENDED_HOW,
        ENDED_HOW_WORDS,
        ITEM_KINDS,
        CompactionExplanation,
        ContextItem,
        Ending,
        FailedCall,
        SessionExplanation,
        WhyReport,
        ended_how,
    )
    from engine.explain.failures import explain_failures, failure_summaries
    from engine.explain.json_shape import WhyJson, schema_text
    from engine.explain.json_shape import checked as checked_json
    from engine.explain.kept import kept_and_dropped
    from engine.explain.session import explain_session, explain_store

__all__ = [
    "AGENT_LABELS",
    "COMPACTION_BY",
    "COMPACTION_TRIGGERS",
    "ENDED_HOW",
    "ENDED_HOW_WORDS",
    "END_CAUSES",
    "FINAL_TOOLS",
    "ITEM_KINDS",
    "STOP_REASONS",
    "AgentThreshold",
    "Call",
    "Calls",
    "CompactionExplanation",
    "ContextItem",
    "Ending",
    "FailedCall",
    "SessionExplanation",
    "WhyJson",
    "WhyReport",
    "agent_label",
    "agent_of",
    "agent_of_source",
    "agent_threshold",
    "checked_json",
    "ended_how",
    "explain_compactions",
    "explain_ending",
    "explain_failures",
    "explain_session",
    "explain_store",
    "failure_summaries",
    "is_failed_request",
    "kept_and_dropped",
    "schema_text",
]
