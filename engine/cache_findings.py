"""The ``cache_rebuild`` finding: prompt-cache rebuilds that cost money, one finding per cause.

Pure over a findings :class:`~engine.findings.SessionView`: the session's request events go
through :mod:`engine.cache_analysis`; every avoidable cause (not a cold start, not a compaction)
becomes a finding whose ``tokens`` are the tokens written again, ``money`` what that cost over
cache reads, and ``fix`` the cause's fix. The title names the first occurrence by call number.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from engine.cache_analysis import CallCache, analyze_cache, call_records, event_time_is_call_time

if TYPE_CHECKING:
    from engine.findings.view import Finding, SessionView

#: Rebuilds of a cause together below this many tokens are noise, not a finding.
MIN_FINDING_REBUILT = 2_000

_WHAT = {
    "model_switch": "model switched",
    "ttl_expired": "cache expired before the next call",
    "system_changed": "system prompt changed",
    "tools_changed": "tool definitions changed",
    "tools_reordered": "tool list reordered",
    "history_edited": "an earlier message was edited",
    "tool_results_cleared": "earlier tool results cleared",
    "prefix_changed": "prompt prefix changed",
    "breakpoint": "cache breakpoint left part of the prompt uncached",
    "uncached_prefix": "previous prompt re-sent uncached",
}


def find_cache_rebuilds(view: SessionView) -> list[Finding]:
    """One finding per avoidable cache-rebuild cause in the session, largest loss first."""
    from engine.findings.view import Finding

    times = {
        m.seq: m.message.meta["timestamp"]
        for m in view.messages
        if isinstance(m.message.meta.get("timestamp"), str)
    }
    calls = call_records(
        view.events, message_times=times, default_model=view.session.model,
        event_time_is_call_time=event_time_is_call_time(view.session.source),
    )  # fmt: skip
    if not any(c.usage.cache_read_input_tokens for c in calls) or not any(
        c.usage.cache_creation_input_tokens for c in calls
    ):
        return []  # never cached (the uncached_prefix detector reports that), or no writes to reason about
    by_cause: dict[str, list[CallCache]] = {}
    for c in analyze_cache(calls).calls:
        if c.is_loss:
            by_cause.setdefault(str(c.cause), []).append(c)
    findings = []
    for cause, items in by_cause.items():
        rebuilt = sum(c.rebuilt_tokens for c in items)
        if rebuilt < MIN_FINDING_REBUILT:
            continue
        first = items[0]
        more = f" (and {len(items) - 1} more)" if len(items) > 1 else ""
        lost = sum(c.lost_usd for c in items)
        priced = any(calls[c.index].prices is not None for c in items)
        findings.append(
            Finding(
                kind="cache_rebuild",
                session_id=view.session_id,
                title=f"{_WHAT.get(cause, cause)} between calls {first.index} and {first.index + 1}{more}: "
                f"{rebuilt:,} cached tokens written again",
                detail="; ".join(c.explanation for c in items[:3]) + ("; ..." if len(items) > 3 else ""),
                message_seqs=tuple(sorted({c.message_seq for c in items if c.message_seq is not None})),
                turn_index=first.turn_index or 0,
                tokens=rebuilt,
                context_tokens=max(c.rebuilt_tokens for c in items),
                requests=len(items),
                money=round(lost, 6) if priced else None,
                fix=first.fix or "",
                exact=True,
                tokenizer="provider",
            )
        )
    return sorted(findings, key=lambda f: (-(f.money or 0), -f.tokens))
