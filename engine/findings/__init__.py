"""Findings: where a stored session wasted its context window, each with what a fix would save.

``find_waste(store, session_id)`` reads one session into a :class:`SessionView` and runs every
detector; each detector is a pure function of the view returning frozen :class:`Finding`s.
A finding's ``tokens`` are input tokens the fix would not have sent, summed over the requests
that carried the waste (``context_tokens`` is how much smaller one request would have been);
``money`` prices them at each request's blended input rate (what its prompt cost per token,
cache reads and writes included), or is None when the model's prices are unknown.

One module per part: ``model`` (Finding, SessionView, request views, prices), ``calls`` (tool
calls and what they read), ``terms`` (identifiers in text), ``tool_waste`` and ``context_waste``
(the detectors). A new detector is a pure function of the view in one of those two modules,
added to :func:`analyze`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from engine.lazy import lazy_exports

#: Public name -> its module; names load on first use, so a reader of the results alone (the dashboard
#: unpickling the findings its worker process found: Finding lives in engine.findings.view) does not
#: import every detector and, through them, the compaction package.
_OWNERS: dict[str, str] = {
    "constraint_sentences": "engine.compaction.constraints",
    "key_terms": "engine.compaction.constraints",
    "ENGINE_TOOL_NAMES": "engine.findings.calls",
    "MUTATING_TOOLS": "engine.findings.calls",
    "ToolCall": "engine.findings.calls",
    "call_target": "engine.findings.calls",
    "tool_calls": "engine.findings.calls",
    "find_ineffective_compactions": "engine.findings.context_waste",
    "find_lost_constraints": "engine.findings.context_waste",
    "find_stale_thinking": "engine.findings.context_waste",
    "find_uncached_prefix": "engine.findings.context_waste",
    "message_terms": "engine.findings.terms",
    "text_terms": "engine.findings.terms",
    "find_repeated_reads": "engine.findings.tool_waste",
    "find_stale_results": "engine.findings.tool_waste",
    "find_unused_results": "engine.findings.tool_waste",
    "find_unused_tools": "engine.findings.tool_waste",
    "ANTHROPIC_CACHE_READ": "engine.findings.view",
    "ANTHROPIC_CACHE_WRITE_1H": "engine.findings.view",
    "ANTHROPIC_CACHE_WRITE_5M": "engine.findings.view",
    "CONSTRAINT_KEPT_SHARE": "engine.findings.view",
    "FINDING_KINDS": "engine.findings.view",
    "INEFFECTIVE_COMPACTION_RATIO": "engine.findings.view",
    "MIN_CACHE_REQUESTS": "engine.findings.view",
    "MIN_CACHEABLE_PREFIX": "engine.findings.view",
    "MIN_DISTINCTIVE_TERMS": "engine.findings.view",
    "MIN_FINDING_TOKENS": "engine.findings.view",
    "Finding": "engine.findings.view",
    "FindingKind": "engine.findings.view",
    "RequestView": "engine.findings.view",
    "SessionView": "engine.findings.view",
    "TokenPrices": "engine.findings.view",
    "load_session_view": "engine.findings.view",
    "request_views": "engine.findings.view",
}

__getattr__, __dir__ = lazy_exports(__name__, _OWNERS, globals())

if TYPE_CHECKING:
    from engine.compaction.constraints import constraint_sentences, key_terms
    from engine.findings.calls import (
        ENGINE_TOOL_NAMES,
        MUTATING_TOOLS,
        ToolCall,
        call_target,
        tool_calls,
    )
    from engine.findings.context_waste import (
        find_ineffective_compactions,
        find_lost_constraints,
        find_stale_thinking,
        find_uncached_prefix,
    )
    from engine.findings.terms import (
        message_terms,
        text_terms,
    )
    from engine.findings.tool_waste import (
        find_repeated_reads,
        find_stale_results,
        find_unused_results,
        find_unused_tools,
    )
    from engine.findings.view import (
        ANTHROPIC_CACHE_READ,
        ANTHROPIC_CACHE_WRITE_1H,
        ANTHROPIC_CACHE_WRITE_5M,
        CONSTRAINT_KEPT_SHARE,
        FINDING_KINDS,
        INEFFECTIVE_COMPACTION_RATIO,
        MIN_CACHE_REQUESTS,
        MIN_CACHEABLE_PREFIX,
        MIN_DISTINCTIVE_TERMS,
        MIN_FINDING_TOKENS,
        Finding,
        FindingKind,
        RequestView,
        SessionView,
        TokenPrices,
        load_session_view,
        request_views,
    )
    from engine.model_table import ModelTable
    from engine.settings import Settings
    from engine.store import SessionStore

__all__ = [
    "ANTHROPIC_CACHE_READ",
    "ANTHROPIC_CACHE_WRITE_1H",
    "ANTHROPIC_CACHE_WRITE_5M",
    "CONSTRAINT_KEPT_SHARE",
    "ENGINE_TOOL_NAMES",
    "FINDING_KINDS",
    "INEFFECTIVE_COMPACTION_RATIO",
    "MIN_CACHEABLE_PREFIX",
    "MIN_CACHE_REQUESTS",
    "MIN_DISTINCTIVE_TERMS",
    "MIN_FINDING_TOKENS",
    "MUTATING_TOOLS",
    "Finding",
    "FindingKind",
    "RequestView",
    "SessionView",
    "TokenPrices",
    "ToolCall",
    "analyze",
    "call_target",
    "constraint_sentences",
    "find_ineffective_compactions",
    "find_lost_constraints",
    "find_repeated_reads",
    "find_stale_results",
    "find_stale_thinking",
    "find_uncached_prefix",
    "find_unused_results",
    "find_unused_tools",
    "find_waste",
    "key_terms",
    "load_session_view",
    "message_terms",
    "request_views",
    "text_terms",
    "tool_calls",
]


# -- entry point -------------------------------------------------------------------------------------


def analyze(view: SessionView) -> list[Finding]:
    """Every detector over one session view, largest savings first."""
    from engine.cache_findings import find_cache_rebuilds  # it builds on engine.findings.view
    from engine.findings.calls import tool_calls
    from engine.findings.context_waste import (
        find_ineffective_compactions,
        find_lost_constraints,
        find_stale_thinking,
        find_uncached_prefix,
    )
    from engine.findings.tool_waste import (
        find_repeated_reads,
        find_stale_results,
        find_unused_results,
        find_unused_tools,
    )

    calls = tool_calls(view)
    findings = [
        *find_repeated_reads(view, calls),
        *find_stale_results(view, calls),
        *find_unused_results(view, calls),
        *find_unused_tools(view),
        *find_uncached_prefix(view),
        *find_stale_thinking(view),
        *find_ineffective_compactions(view),
        *find_lost_constraints(view),
        *find_cache_rebuilds(view),
    ]
    return sorted(findings, key=lambda f: (-f.tokens, f.turn_index, f.kind, f.message_seqs))


def find_waste(
    store: SessionStore,
    session_id: str,
    *,
    settings: Settings | None = None,
    table: ModelTable | None = None,
) -> list[Finding]:
    """Findings of one stored session (a sub-agent thread is a session of its own); reads only."""
    from engine.findings.view import load_session_view

    return analyze(load_session_view(store, session_id, settings=settings, table=table))
